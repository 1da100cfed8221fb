"""Names the what-if task, so services enqueue it without importing ``tasks`` (no circle)."""

from scheduling.enqueue import on_commit

RUN_PREVIEW = "whatif.tasks.run_preview"


def run_preview(preview_id: int) -> None:
    on_commit(RUN_PREVIEW, preview_id)

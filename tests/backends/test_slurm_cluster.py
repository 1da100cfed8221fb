"""The Slurm backend against the real slurmctld of scripts/slurm-up.sh (2 nodes × 8 fake GPUs).

Each test tags its jobs with its own cluster name, cancels them at the end, and leaves the
controller up and every node resumed, so the suite can run in any order and the cluster stays
idle for whoever comes next.
"""

import fcntl
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from scheduling.backends.base import BackendUnavailable, LaunchSpec, RemoteState
from scheduling.backends.slurm import SlurmBackend
from tests.conftest import service_missing

pytestmark = pytest.mark.slurm

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
_ids = itertools.count(1)
_NO_CONTROLLER: list[bool] = []
LOCK = Path(tempfile.gettempdir()) / "allot-slurm-tests.lock"
FINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}


def controller_answers() -> bool:
    if not shutil.which("scontrol"):
        return False
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return "is UP" in out.stdout


def harness(*args: str) -> None:
    """Run scripts/slurm-up.sh or slurm-down.sh (the tests run as root, like CI)."""
    subprocess.run(
        ["bash", str(SCRIPTS / args[0]), *args[1:]], check=True, timeout=120, capture_output=True
    )


def _backend(exclusive: bool):
    """A backend with its own cluster tag, holding the test lock: shared for tests that only
    use a GPU or two, exclusive for those that stop the controller, drain a node or need every
    GPU (pytest-xdist may run these tests in parallel processes)."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if _NO_CONTROLLER or not controller_answers():
            _NO_CONTROLLER.append(True)  # ask once per process: a dead ping costs seconds
            service_missing("no Slurm controller answers `scontrol ping` (run scripts/slurm-up.sh)")
        backend = SlurmBackend(f"test-{uuid.uuid4().hex[:8]}", {"command_timeout": "20"})
        try:
            yield backend
        finally:
            if not controller_answers():
                harness("slurm-up.sh")
            # Every job of this test, held ones (requeue mode) included; scancel of a finished
            # job is harmless.
            for job in backend.sync():
                backend.cancel(job.job_id, job.external_id)
            wait_for(lambda: all(j.extra["slurm_state"] in FINAL for j in backend.sync()))


@pytest.fixture
def slurm():
    yield from _backend(exclusive=False)


@pytest.fixture
def slurm_alone():
    yield from _backend(exclusive=True)


def launch(nodes=("node2",), gpus_per_node=1, command="sleep 60", **kw) -> LaunchSpec:
    job_id = kw.pop("job_id", None) or 900_000 + os.getpid() % 1000 * 100 + next(_ids)
    return LaunchSpec(
        job_id=job_id,
        attempt_key=kw.pop("attempt_key", f"{job_id}-{uuid.uuid4().hex[:6]}"),
        name="slurm test",
        user="alice",
        project="nlp/olmo",
        gpus=gpus_per_node * len(nodes),
        nodes=tuple(nodes),
        gpus_per_node=gpus_per_node,
        command=command,
        **kw,
    )


def wait_for(predicate, timeout=20.0, every=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def remote(backend, external_id):
    return next((j for j in backend.sync() if j.external_id == external_id), None)


def wait_state(backend, external_id, state, timeout=20.0):
    job = wait_for(lambda: (j := remote(backend, external_id)) and j.state is state and j, timeout)
    assert job, f"job {external_id} never reached {state}: {remote(backend, external_id)}"
    return job


def test_discovery_finds_at_least_two_nodes_with_eight_gpus_each(slurm):
    nodes = slurm.discover_nodes()
    assert len(nodes) >= 2
    assert {n.name for n in nodes} >= {"node1", "node2"}
    assert all(n.gpus == 8 and not n.drained for n in nodes)


def test_a_job_pinned_to_the_second_node_runs_there_and_nowhere_else(slurm):
    # Left alone Slurm would pick node1 first; only the pin puts the job on node2.
    submitted = slurm.submit(launch(nodes=("node2",), gpus_per_node=2))
    running = wait_state(slurm, submitted.external_id, RemoteState.RUNNING)
    assert running.nodes == ("node2",)
    assert running.job_id == submitted.job_id
    assert running.attempt_key == submitted.attempt_key


def test_a_two_node_job_gets_every_gpu_of_both_pinned_nodes(slurm_alone):
    submitted = slurm_alone.submit(launch(nodes=("node1", "node2"), gpus_per_node=8))
    running = wait_state(slurm_alone, submitted.external_id, RemoteState.RUNNING)
    assert running.nodes == ("node1", "node2")
    used = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "gpu", "-O", "NodeList,GresUsed:30"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all("gpu:8" in line for line in used.splitlines())


def test_preempting_a_running_job_stops_it_and_sync_says_preempted(slurm):
    submitted = slurm.submit(launch())
    wait_state(slurm, submitted.external_id, RemoteState.RUNNING)
    slurm.preempt(submitted.job_id, submitted.external_id)
    stopped = wait_state(slurm, submitted.external_id, RemoteState.PREEMPTED)
    assert stopped.extra["slurm_state"] == "CANCELLED"


def test_in_requeue_mode_a_preempted_job_waits_held_and_the_next_start_moves_it(slurm):
    slurm.options["preempt_mode"] = "requeue"
    first = slurm.submit(launch(nodes=("node1",)))
    wait_state(slurm, first.external_id, RemoteState.RUNNING)
    slurm.preempt(first.job_id, first.external_id)
    held = wait_state(slurm, first.external_id, RemoteState.PREEMPTED)
    assert held.extra["slurm_state"] == "PENDING"
    time.sleep(3)  # held means held: Slurm does not start it again on its own
    assert remote(slurm, first.external_id).state is RemoteState.PREEMPTED
    again = slurm.submit(launch(nodes=("node2",), job_id=first.job_id))
    assert again.external_id == first.external_id
    # A requeued job waits cred_expire + 1 s (the harness sets 5) before Slurm may start it.
    moved = wait_state(slurm, first.external_id, RemoteState.RUNNING, timeout=30)
    assert moved.nodes == ("node2",)
    assert moved.attempt_key == again.attempt_key


def test_cancel_stops_a_job_for_good_and_unknown_ids_are_not_an_error(slurm):
    submitted = slurm.submit(launch())
    wait_state(slurm, submitted.external_id, RemoteState.RUNNING)
    slurm.cancel(submitted.job_id, submitted.external_id)
    wait_state(slurm, submitted.external_id, RemoteState.CANCELLED)
    slurm.cancel(submitted.job_id, "99999999")
    slurm.cancel(123456789, "")


def test_finished_jobs_report_completed_or_failed_with_their_exit_code(slurm):
    ok = slurm.submit(launch(command="true", gpus_per_node=1))
    bad = slurm.submit(launch(command="exit 3", gpus_per_node=1))
    assert wait_state(slurm, ok.external_id, RemoteState.COMPLETED).exit_code == 0
    assert wait_state(slurm, bad.external_id, RemoteState.FAILED).exit_code == 3


def test_a_drained_node_shows_in_discovery_until_it_is_resumed(slurm_alone):
    try:
        slurm_alone.drain_node("node2", "allot: test maintenance")
        node2 = next(n for n in slurm_alone.discover_nodes() if n.name == "node2")
        assert node2.drained
        assert node2.reason == "allot: test maintenance"
    finally:
        slurm_alone.undrain_node("node2")
    node2 = next(n for n in slurm_alone.discover_nodes() if n.name == "node2")
    assert not node2.drained


def test_submitting_twice_with_the_same_attempt_key_launches_one_slurm_job(slurm):
    spec = launch()
    first = slurm.submit(spec)
    second = slurm.submit(spec)
    assert second.external_id == first.external_id
    assert [j.external_id for j in slurm.sync() if j.attempt_key == spec.attempt_key] == [
        first.external_id
    ]


def test_a_retry_that_launched_beside_an_earlier_attempt_cancels_its_own_copy(slurm, monkeypatch):
    spec = launch()
    first = slurm.submit(spec)
    # The retry's first look misses the earlier job (as when both looked before either
    # launched), so it launches a copy; its second look must find both and keep the first.
    real_jobs = slurm._jobs
    looks = []

    def stale_first_look():
        looks.append(1)
        return [] if len(looks) == 1 else real_jobs()

    monkeypatch.setattr(slurm, "_jobs", stale_first_look)
    second = slurm.submit(spec)
    assert second.external_id == first.external_id
    copies = [j for j in real_jobs() if j.attempt_key == spec.attempt_key]
    assert len(copies) == 2
    copy = next(j for j in copies if j.external_id != first.external_id)
    # squeue's own view: sync reports only the job submit kept for an attempt key
    assert wait_for(
        lambda: (
            next(j.state for j in real_jobs() if j.external_id == copy.external_id)
            is RemoteState.CANCELLED
        ),
        20.0,
    )
    assert [j.external_id for j in slurm.sync() if j.attempt_key == spec.attempt_key] == [
        first.external_id
    ]
    assert remote(slurm, first.external_id).state in {RemoteState.PENDING, RemoteState.RUNNING}


def test_concurrent_retries_of_one_attempt_converge_on_a_single_running_job(slurm):
    spec = launch()
    results = []
    workers = [
        threading.Thread(
            target=lambda: results.append(
                SlurmBackend(slurm.cluster_name, {"command_timeout": "20"}).submit(spec)
            )
        )
        for _ in range(3)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len({r.external_id for r in results}) == 1

    # A copy that was already running shows COMPLETING (still running) for a moment after scancel.
    def alive():
        return [
            j.external_id
            for j in slurm.sync()
            if j.attempt_key == spec.attempt_key and j.state is not RemoteState.CANCELLED
        ]

    assert wait_for(lambda: alive() == [results[0].external_id])


def test_a_job_survives_a_controller_restart_and_sync_reports_it_again(slurm_alone):
    submitted = slurm_alone.submit(launch(nodes=("node1",)))
    wait_state(slurm_alone, submitted.external_id, RemoteState.RUNNING)
    impatient = SlurmBackend(slurm_alone.cluster_name, {"command_timeout": "1"})
    harness("slurm-down.sh", "--controller")
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Failed while looking for jobs"):
            slurm_alone.sync()  # squeue exits 0 here: only its JSON says the controller is gone
        with pytest.raises(BackendUnavailable, match="did not answer within 1 s"):
            impatient.submit(launch())
        assert time.monotonic() - started < 15
    finally:
        harness("slurm-up.sh")
    back = wait_state(slurm_alone, submitted.external_id, RemoteState.RUNNING)
    assert back.nodes == ("node1",)
    assert back.attempt_key == submitted.attempt_key


def test_running_the_harness_again_is_quick_and_keeps_running_jobs(slurm):
    submitted = slurm.submit(launch())
    wait_state(slurm, submitted.external_id, RemoteState.RUNNING)
    started = time.monotonic()
    harness("slurm-up.sh")
    assert time.monotonic() - started < 5
    assert remote(slurm, submitted.external_id).state is RemoteState.RUNNING

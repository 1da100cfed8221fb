"""Operations: /metrics, /healthz, GPU telemetry. A simulated cluster driven through the live
loop's own tasks, so what the metrics show was written by the real path."""

import pytest

from portal import metrics
from tests.scheduling.conftest import make_cluster


@pytest.fixture(autouse=True)
def fresh_metrics(settings, eager_celery):
    """No answer cached from another test; tasks run in-process."""
    metrics._cache.update(at=0.0, body=b"")
    yield
    metrics._cache.update(at=0.0, body=b"")


@pytest.fixture
def cluster(db, tmp_path):
    return make_cluster(tmp_path)


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """{(name, labels): value} from Prometheus text format, through the client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out

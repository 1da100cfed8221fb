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


PROMETHEUS = "/usr/bin/prometheus"


@pytest.fixture
def prometheus(tmp_path):
    """Start Debian's Prometheus scraping the given targets every second:
    ``prometheus({"allot": ("127.0.0.1:8000", "/metrics")})`` returns its base URL."""
    import shutil
    import subprocess

    import yaml

    from tests.conftest import service_missing
    from tests.faults.services import free_port

    if not shutil.which(PROMETHEUS):
        service_missing(f"Prometheus is not installed at {PROMETHEUS} (Debian package prometheus)")
    started = []

    def start(targets: dict[str, tuple[str, str]]) -> str:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": name,
                    "metrics_path": path,
                    "static_configs": [{"targets": [address]}],
                }
                for name, (address, path) in targets.items()
            ],
        }
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={path}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "prometheus.log", "w"),  # noqa: SIM115
        )
        started.append(process)
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=30)


def wait_for(predicate, timeout: float = 60, step: float = 0.5, what: str = "nothing"):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(step)
    raise AssertionError(f"{what} after {timeout} s")


def targets(base: str) -> list[dict]:
    """Prometheus's view of its targets (health, last error): what a failed wait shows."""
    import httpx

    try:
        return httpx.get(f"{base}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
    except (httpx.TransportError, ValueError, KeyError):
        return []


def prom_query(base: str, query: str) -> list[dict]:
    import httpx

    try:
        response = httpx.get(f"{base}/api/v1/query", params={"query": query}, timeout=5)
    except httpx.TransportError:
        return []
    if response.status_code != 200:
        return []
    return response.json()["data"]["result"]

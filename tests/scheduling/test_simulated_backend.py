import pytest

from scheduling.backends.base import BackendError, LaunchSpec, RemoteState, get_backend
from scheduling.backends.simulated import SimulatedBackend


class FakeClock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def backend(tmp_path, clock):
    return SimulatedBackend(
        "sim",
        {"nodes": "2", "gpus_per_node": "8", "speed": "60", "state_dir": str(tmp_path)},
        clock=clock,
    )


def spec(job_id=1, attempt="1-a", nodes=("sim-00",), duration=600, name="train"):
    return LaunchSpec(
        job_id=job_id,
        attempt_key=attempt,
        name=name,
        user="ada",
        project="nlp/olmo",
        gpus=8,
        nodes=nodes,
        gpus_per_node=8,
        command="train.sh",
        sim_duration_s=duration,
    )


def test_discovers_the_configured_nodes(backend):
    nodes = backend.discover_nodes()
    assert [n.name for n in nodes] == ["sim-00", "sim-01"]
    assert all(n.gpus == 8 and n.gpu_type == "H100" and not n.drained for n in nodes)


def test_a_job_runs_for_its_simulated_duration_in_accelerated_time(backend, clock):
    backend.submit(spec(duration=600))
    clock.now += 9  # 540 simulated seconds
    assert backend.sync()[0].state == RemoteState.RUNNING
    clock.now += 2  # 660 simulated seconds
    job = backend.sync()[0]
    assert job.state == RemoteState.COMPLETED
    assert job.exit_code == 0


def test_submitting_the_same_attempt_twice_launches_once(backend):
    first = backend.submit(spec())
    second = backend.submit(spec())
    assert first.external_id == second.external_id
    assert len(backend.sync()) == 1


def test_preemption_stops_the_job(backend, clock):
    job = backend.submit(spec())
    backend.preempt(1, job.external_id)
    clock.now += 100
    assert backend.sync()[0].state == RemoteState.PREEMPTED


def test_state_is_shared_between_instances(tmp_path, clock, backend):
    backend.submit(spec())
    other = SimulatedBackend("sim", {"nodes": "2", "state_dir": str(tmp_path)}, clock=clock)
    assert [j.job_id for j in other.sync()] == [1]


def test_unknown_nodes_are_refused_naming_the_field(backend):
    with pytest.raises(BackendError, match="nodes"):
        backend.submit(spec(nodes=("elsewhere-01",)))


def test_drain_is_reported_by_discovery(backend):
    backend.drain_node("sim-01", "repair fan")
    drained = {n.name: n.drained for n in backend.discover_nodes()}
    assert drained == {"sim-00": False, "sim-01": True}
    backend.undrain_node("sim-01")
    assert not any(n.drained for n in backend.discover_nodes())


def test_idle_jobs_report_low_utilisation(backend):
    backend.submit(spec(name="idle-notebook"))
    assert backend.sync()[0].gpu_utilization < 0.1


def test_registry_builds_the_simulated_backend(tmp_path):
    assert isinstance(get_backend("simulated", "x", {"state_dir": str(tmp_path)}), SimulatedBackend)
    with pytest.raises(BackendError, match="unknown backend"):
        get_backend("mesos", "x")

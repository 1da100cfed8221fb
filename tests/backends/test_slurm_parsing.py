"""The Slurm parsers, round-trip on output captured from the real harness
(tests/backends/fixtures/slurm/capture.sh regenerates it). No Slurm needed."""

import json
from pathlib import Path

import pytest

from scheduling.backends.base import BackendError, BackendUnavailable, LaunchSpec, RemoteState
from scheduling.backends.slurm import (
    exit_code_from_status,
    expand_hostlist,
    format_comment,
    parse_comment,
    parse_gres_gpus,
    parse_sacct_exit_codes,
    parse_sacct_json,
    parse_sbatch_parsable,
    parse_scontrol_nodes,
    parse_sinfo_json,
    parse_squeue_json,
    sacct_exit_code,
    sbatch_args,
    slurm_duration,
)

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def spec(**overrides) -> LaunchSpec:
    values = dict(
        job_id=7,
        attempt_key="7:2",
        name="train llama",
        user="alice",
        project="nlp/olmo",
        gpus=16,
        nodes=("node1", "node2"),
        gpus_per_node=8,
        command="python train.py --lr 3e-4",
    )
    values.update(overrides)
    return LaunchSpec(**values)


def jobs_by_allot_id():
    return {job.job_id: job for job in parse_squeue_json(fixture("squeue.json"))}


def test_squeue_json_yields_only_allot_tagged_jobs():
    assert sorted(jobs_by_allot_id()) == [101, 102, 103, 104, 105, 106]


def test_squeue_json_maps_each_slurm_state_to_the_allot_state():
    jobs = jobs_by_allot_id()
    assert jobs[101].state is RemoteState.RUNNING
    assert jobs[102].state is RemoteState.PREEMPTED  # cancelled by Allot: tagged preempted=1
    assert jobs[103].state is RemoteState.PENDING
    assert jobs[104].state is RemoteState.COMPLETED
    assert jobs[105].state is RemoteState.FAILED
    assert jobs[106].state is RemoteState.RUNNING


def test_squeue_json_recovers_ids_nodes_and_exit_codes():
    jobs = jobs_by_allot_id()
    assert (jobs[101].external_id, jobs[101].attempt_key, jobs[101].nodes) == (
        "1",
        "101-1",
        ("node1",),
    )
    assert jobs[104].attempt_key == "104:2"  # percent-encoded in the comment
    assert jobs[106].nodes == ("node1", "node2")
    assert jobs[103].nodes == ()
    assert jobs[104].exit_code == 0
    assert jobs[105].exit_code == 3
    assert jobs[101].exit_code is None  # still running
    assert jobs[103].extra["slurm_state"] == "PENDING"
    assert jobs[101].extra["partition"] == "gpu"


def test_squeue_json_filters_by_cluster_so_two_allot_clusters_can_share_one_slurm():
    assert parse_squeue_json(fixture("squeue.json"), cluster="other") == []
    assert len(parse_squeue_json(fixture("squeue.json"), cluster="allot-test")) == 6


def test_squeue_json_of_a_controller_that_is_down_is_unavailable_not_an_empty_queue():
    with pytest.raises(BackendUnavailable, match="looking for jobs"):
        parse_squeue_json(fixture("squeue_controller_down.json"))


def test_output_that_is_not_json_is_a_backend_error():
    with pytest.raises(BackendError, match="did not print JSON"):
        parse_squeue_json("squeue: unrecognized option '--json'")


def test_sinfo_json_gives_nodes_gpus_and_drain_flags():
    nodes = parse_sinfo_json(fixture("sinfo.json"), default_gpu_type="H100")
    assert [(n.name, n.gpus, n.gpu_type, n.drained) for n in nodes] == [
        ("node1", 8, "H100", False),
        ("node2", 8, "H100", True),
    ]
    assert nodes[1].reason == "allot: maintenance"


def test_sinfo_json_keeps_only_the_configured_partition():
    assert len(parse_sinfo_json(fixture("sinfo.json"), partition="gpu")) == 2
    assert parse_sinfo_json(fixture("sinfo.json"), partition="cpu-only") == []


def test_scontrol_show_node_says_the_same_as_sinfo_json():
    from_scontrol = parse_scontrol_nodes(fixture("scontrol_show_node.txt"), default_gpu_type="H100")
    assert from_scontrol == parse_sinfo_json(fixture("sinfo.json"), default_gpu_type="H100")


def test_down_nodes_are_reported_drained_with_a_reason():
    line = "NodeName=gpu07 Gres=gpu:a100:4(S:0-1) State=DOWN+NOT_RESPONDING Partitions=gpu"
    (node,) = parse_scontrol_nodes(line)
    assert (node.gpus, node.gpu_type, node.drained) == (4, "a100", True)
    assert "down" in node.reason


@pytest.mark.parametrize(
    "gres, expected",
    [
        ("gpu:8", (8, "")),
        ("gpu:h100:8(S:0-1)", (8, "h100")),
        ("gpu:a100:4,gpu:v100:2", (6, "a100")),
        ("(null)", (0, "")),
        ("mps:100,gpu:2", (2, "")),
        (None, (0, "")),
    ],
)
def test_gres_strings_give_gpu_count_and_type(gres, expected):
    assert parse_gres_gpus(gres) == expected


@pytest.mark.parametrize(
    "expr, names",
    [
        ("node1", ("node1",)),
        ("node[1-3]", ("node1", "node2", "node3")),
        ("gpu[08-10,12],login1", ("gpu08", "gpu09", "gpu10", "gpu12", "login1")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("", ()),
    ],
)
def test_host_lists_expand_like_scontrol_show_hostnames(expr, names):
    assert expand_hostlist(expr) == names


def test_a_comment_round_trips_even_with_separators_inside_values():
    s = spec(attempt_key="7:2=x", project="nlp/olmo", user="a:b")
    fields = parse_comment(format_comment("allot", "jupiter", s))
    assert fields == {
        "cluster": "jupiter",
        "job": "7",
        "attempt": "7:2=x",
        "project": "nlp/olmo",
        "user": "a:b",
    }


def test_comments_of_other_tools_or_other_tags_are_not_allot_jobs():
    assert parse_comment("someone else's job") is None
    assert parse_comment("allot:job=x:attempt=1") is None
    assert parse_comment(format_comment("allot-staging", "c", spec())) is None
    assert parse_comment(format_comment("allot-staging", "c", spec()), "allot-staging")


def test_sbatch_arguments_pin_the_placement_and_carry_the_tag():
    args = sbatch_args(spec(), "allot:job=7", {"partition": "gpu", "account": "nlp"})
    assert args[:2] == ["sbatch", "--parsable"]
    assert "--nodelist=node1,node2" in args
    assert "--nodes=2" in args
    assert "--gres=gpu:8" in args
    assert "--ntasks-per-node=1" in args
    assert "--job-name=allot-7-train-llama" in args
    assert "--comment=allot:job=7" in args
    assert "--partition=gpu" in args
    assert "--account=nlp" in args
    assert "--no-requeue" in args
    assert "--export=NONE" in args
    # The command travels in the script on standard input, not in an argument anyone on the
    # submit host can read in ps (see batch_script).
    assert not any("train.py" in a for a in args)
    assert not any(a.startswith("--time") for a in args)


def test_sbatch_arguments_add_a_time_limit_and_requeue_when_asked():
    args = sbatch_args(spec(time_limit_s=90061), "c", {"preempt_mode": "requeue"})
    assert "--time=1-01:01:01" in args
    assert "--requeue" in args
    assert not any(a.startswith("--partition") for a in args)


def test_a_job_without_placement_is_refused_before_any_command_runs():
    with pytest.raises(BackendError, match="no placement"):
        sbatch_args(spec(nodes=()), "c", {})


def test_durations_and_exit_statuses_read_like_slurm_writes_them():
    assert slurm_duration(3600) == "0-01:00:00"
    assert slurm_duration(0) == "0-00:00:01"
    assert exit_code_from_status(768) == 3
    assert exit_code_from_status(15) == 143
    assert exit_code_from_status(0) == 0
    assert exit_code_from_status(None) is None


def test_sbatch_parsable_output_gives_the_job_id():
    assert parse_sbatch_parsable("42\n") == "42"
    assert parse_sbatch_parsable("42;jupiter\n") == "42"
    with pytest.raises(BackendError):
        parse_sbatch_parsable(fixture("sbatch_bad_node.txt"))


def test_finished_jobs_carry_their_end_time_so_they_are_charged_to_it():
    jobs = jobs_by_allot_id()
    assert jobs[104].ended_at == 1795954526.0
    assert jobs[101].ended_at is None  # a running job's end_time is only Slurm's time limit


def test_running_and_finished_jobs_carry_the_start_slurm_reports():
    jobs = jobs_by_allot_id()
    for job in jobs.values():
        if job.state is RemoteState.PENDING:
            assert job.started_at is None  # only a forecast
        else:
            assert job.started_at == float(job.extra["start_time"])


# --- sacct --json (captured with accounting on: capture.sh accounting) -----------------------


def sacct_by_attempt(cluster="allot-test"):
    return {
        job.attempt_key: job for job in parse_sacct_json(fixture("sacct.json"), cluster=cluster)
    }


def test_sacct_json_yields_the_finished_allot_jobs_of_this_cluster_with_their_states():
    jobs = sacct_by_attempt()
    # 201-1 was still running: 22.05 stores the comment (the tag) only when a job ends.
    # 1-1 is a job 1 from before a cold restart of slurmctld, which handed id 1 out again.
    assert sorted(jobs) == ["1-1", "202:1", "203-1", "204-1", "205-1"]
    assert jobs["202:1"].state is RemoteState.COMPLETED
    assert jobs["203-1"].state is RemoteState.FAILED
    assert jobs["204-1"].state is RemoteState.CANCELLED  # a user's scancel
    assert jobs["205-1"].state is RemoteState.PREEMPTED  # Allot's, marked preempted=1
    assert jobs["202:1"].job_id == 202 and jobs["202:1"].external_id == "2"
    assert jobs["203-1"].nodes == ("node2",)
    assert jobs["202:1"].extra["source"] == "sacct"


def test_sacct_json_gives_end_times_and_the_exit_codes_its_json_can_tell():
    jobs = sacct_by_attempt()
    assert jobs["202:1"].ended_at == 1795957277.0
    assert jobs["204-1"].ended_at == 1795957276.0
    assert jobs["202:1"].exit_code == 0
    assert jobs["203-1"].exit_code is None  # exited 3, but 22.05's JSON prints SUCCESS/0


def test_sacct_json_filters_by_cluster_and_tag():
    assert sorted(sacct_by_attempt("other")) == ["206-1"]
    every = {job.attempt_key for job in parse_sacct_json(fixture("sacct.json"))}
    assert every == {"1-1", "202:1", "203-1", "204-1", "205-1", "206-1"}
    assert parse_sacct_json(fixture("sacct.json"), tag="allot-staging") == []


def test_sacct_json_keeps_the_latest_record_of_a_requeued_slurm_job():
    record = {
        "job_id": 8,
        "comment": {"job": "allot:cluster=c:job=8:attempt=8-1"},
        "state": {"current": "PREEMPTED"},
        "time": {"submission": 100, "end": 150},
        "nodes": "node1",
        "exit_code": {"status": "SIGNALED", "signal": {"signal_id": 15}},
    }
    again = {
        **record,
        "state": {"current": "COMPLETED"},
        "time": {"submission": 200, "end": 300},
        "exit_code": {"status": "SUCCESS", "return_code": 0},
    }
    text = json.dumps({"errors": [], "jobs": [record, again]})
    (job,) = parse_sacct_json(text)
    assert (job.state, job.ended_at, job.exit_code) == (RemoteState.COMPLETED, 300.0, 0)


@pytest.mark.parametrize(
    "state, raw, code",
    [
        ("COMPLETED", {"status": "SUCCESS", "return_code": 0}, 0),
        ("FAILED", {"status": "SUCCESS", "return_code": 0}, None),  # 22.05 lost the code
        ("CANCELLED", {"status": "SIGNALED", "signal": {"signal_id": 9}}, 137),
        # the shape of later Slurm versions (v0.0.39+)
        ("FAILED", {"status": ["EXITED"], "return_code": {"set": True, "number": 3}}, 3),
        ("FAILED", {"status": ["EXITED"], "return_code": {"set": False, "number": 0}}, None),
        ("FAILED", None, None),
    ],
)
def test_sacct_exit_codes_read_every_shape_and_never_invent_a_zero(state, raw, code):
    assert sacct_exit_code(state, raw) == code


def test_sacct_text_gives_the_exit_codes_the_json_lost():
    codes = parse_sacct_exit_codes(fixture("sacct_exit_codes.txt"))
    assert codes["3"] == 3 and codes["2"] == 0
    assert parse_sacct_exit_codes("12|0:15\nnot a line\n") == {"12": 143}


def test_sacct_with_accounting_disabled_is_a_refusal_not_json():
    assert fixture("sacct_disabled.txt").strip() == "Slurm accounting storage is disabled"
    with pytest.raises(BackendError, match="did not print JSON"):
        parse_sacct_json(fixture("sacct_disabled.txt"))


def test_only_tags_signed_for_the_jobs_own_slurm_user_are_trusted():
    from scheduling.backends.base import RemoteJob
    from scheduling.backends.slurm import SlurmBackend

    slurm = SlurmBackend("jupiter", {})
    slurm.secret = b"k"

    def job(sig: str, user: str) -> RemoteJob:
        extra = {"sig": sig, "slurm_user": user}
        return RemoteJob(7, "42", "7-1-abc", RemoteState.RUNNING, extra=extra)

    good = slurm._signature(7, "7-1-abc", "alice")
    kept = slurm._trusted(
        [job(good, "alice"), job(good, "mallory"), job("", "alice"), job("é" * 32, "alice")]
    )
    assert [(j.extra["sig"], j.extra["slurm_user"]) for j in kept] == [(good, "alice")]

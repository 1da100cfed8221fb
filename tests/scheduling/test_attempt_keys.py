"""Attempt keys are how a backend finds Allot's own job again; they must not be guessable, or
anyone could plant a job under the next attempt's key before Allot submits it."""

import re

from scheduling.models import Job
from scheduling.services import JobRequest, submit_job


def test_an_attempt_key_carries_an_unguessable_part(researcher, cluster, run_pass):
    keys = set()
    for index in range(2):
        job = submit_job(
            researcher,
            JobRequest(
                name=f"k{index}", project="nlp/olmo", cluster="jupiter", gpus=1, min_runtime_s=60
            ),
        )
        run_pass(cluster)
        job.refresh_from_db()
        assert job.state == Job.State.RUNNING
        assert re.fullmatch(rf"{job.pk}-1-[0-9a-f]{{16}}", job.attempt_key), job.attempt_key
        keys.add(job.attempt_key.rsplit("-", 1)[1])
    assert len(keys) == 2

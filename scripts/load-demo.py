#!/usr/bin/env python3
"""Load and fuzz a running Allot: `make demo`, or gunicorn + PostgreSQL.

    scripts/load-demo.py --url http://127.0.0.1:8000 [--submitters 20] [--seconds 60]
                         [--fuzz-examples 30] [--json out.json]

1. Fuzz: schemathesis (if installed) runs the OpenAPI schema at /api/schema/ as `researcher`
   and as `leader`, checking only `not_a_server_error`: any 5xx is a failure.
2. Load: N submitters (the demo's researchers, one token each) for S seconds. Each loop submits
   a job on a simulated cluster, now and then a malformed one (must be a 4xx, never a 5xx),
   reads its job, the job list, and one of the pages (/jobs/, /queue/<cluster>/, /budgets/).
3. Afterwards: /healthz answers 200, and the queue still moves — every job submitted under
   load (a sample of 50), and one more submitted after it, is picked up by a scheduling pass
   (given a pending reason and a position, or started) within --settle seconds, which only a
   worker and beat still alive after the load can do.

Exit 0 when there was no 5xx, no transport error, and the queue moved; 1 otherwise. Prints
(and with --json writes) the numbers. Only ever point it at 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import requests

FIRST = ("ada", "ben", "chen", "dara", "eli", "farah", "gus", "hana", "ivo", "jun")
RESEARCHERS = [f"{f}.{last}" for last in ("okafor", "lindqvist", "moreau") for f in FIRST]
CLUSTERS = ["jupiter", "saturn", "neptune"]
BAD_SUBMISSIONS = [
    {"gpus": -1},
    {"gpus": "many"},
    {"project": "no/such/project"},
    {"cluster": "nowhere"},
    {"min_runtime_s": 10**12},
    {"kind": "batchy"},
    {"name": "x" * 10_000},
    {"sim_duration_s": -5},
]


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.status: Counter = Counter()
        self.server_errors: list[str] = []
        self.transport_errors: list[str] = []
        self.submitted: list[int] = []
        self.latencies: list[float] = []

    def record(self, method: str, path: str, response=None, error=None, elapsed=0.0) -> None:
        with self.lock:
            if error is not None:
                self.transport_errors.append(f"{method} {path}: {error}")
                return
            self.status[response.status_code] += 1
            self.latencies.append(elapsed)
            if response.status_code >= 500:
                self.server_errors.append(f"{method} {path} -> {response.status_code}")


def login(base: str, username: str, password: str) -> requests.Session:
    """A session holding both a token (API) and a Django session cookie (pages)."""
    session = requests.Session()
    token = session.post(
        f"{base}/api/v1/auth/token/", json={"username": username, "password": password}, timeout=30
    )
    token.raise_for_status()
    session.headers["Authorization"] = f"Token {token.json()['token']}"
    form = session.get(f"{base}/login/", timeout=30)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    session.post(
        f"{base}/login/",
        data={"username": username, "password": password,
              "csrfmiddlewaretoken": csrf[1] if csrf else ""},
        headers={"Referer": f"{base}/login/"}, timeout=30,
    )  # fmt: skip
    return session


def call(stats: Stats, session, method: str, base: str, path: str, **kwargs):
    started = time.monotonic()
    try:
        response = session.request(method, base + path, timeout=60, **kwargs)
    except requests.RequestException as exc:
        stats.record(method, path, error=exc)
        return None
    stats.record(method, path, response, elapsed=time.monotonic() - started)
    return response


def submitter(session, username, base, projects, deadline, stats: Stats, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        job = {
            "name": f"load-{rng.randint(1000, 9999)}",
            "project": rng.choice(projects.get(username) or [""]),
            "cluster": rng.choice(CLUSTERS),
            "gpus": rng.choice([1, 1, 2, 4, 8]),
            "min_runtime_s": rng.choice([300, 600]),
            "resumable": rng.random() < 0.7,
            "kind": "batch",
            "command": "python train.py",
            "sim_duration_s": rng.randint(120, 900),
        }
        if rng.random() < 0.15:
            job |= rng.choice(BAD_SUBMISSIONS)  # must be refused with a 4xx
        response = call(stats, session, "POST", base, "/api/v1/jobs/", json=job)
        if response is not None and response.status_code == 201:
            job_id = response.json()["id"]
            with stats.lock:
                stats.submitted.append(job_id)
            call(stats, session, "GET", base, f"/api/v1/jobs/{job_id}/")
        call(stats, session, "GET", base, "/api/v1/jobs/?limit=20")
        page = rng.choice(["/jobs/", f"/queue/{rng.choice(CLUSTERS)}/", "/budgets/", "/"])
        call(stats, session, "GET", base, page)


def fuzz(base: str, username: str, password: str, examples: int) -> dict:
    """schemathesis over the whole schema as one persona; returns its outcome."""
    here = str(Path(sys.executable).parent)  # the venv's bin, when run as .venv/bin/python
    cli = shutil.which("schemathesis", path=here) or shutil.which("schemathesis")
    if cli is None:
        return {"user": username, "skipped": "schemathesis is not installed"}
    token = requests.post(
        f"{base}/api/v1/auth/token/", json={"username": username, "password": password}, timeout=30
    ).json()["token"]
    started = time.monotonic()
    run = subprocess.run(
        [cli, "run", f"{base}/api/schema/", "--url", base,
         "--header", f"Authorization: Token {token}",
         "--checks", "not_a_server_error", "--max-examples", str(examples),
         "--phases", "examples,fuzzing", "--workers", "2", "--no-color",
         "--max-time", "120", "--request-timeout", "60"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    tail = run.stdout.strip().splitlines()[-12:]
    Path(f"fuzz-{username}.log").write_text(run.stdout)  # the failures in full, to reproduce
    calls = re.search(r"(\d+) (?:test cases|generated)", run.stdout)
    return {
        "user": username,
        "exit_code": run.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "cases": int(calls[1]) if calls else None,
        "summary": tail,
    }


def probe_after(session, base: str, projects: list[str]) -> int:
    """One valid job submitted once the load is over: a pass picking it up shows the worker
    and beat alive after the load, not merely during it."""
    job = {"name": "after-load", "project": projects[0], "cluster": CLUSTERS[0], "gpus": 1,
           "min_runtime_s": 300, "resumable": True, "kind": "batch", "command": "true",
           "sim_duration_s": 120}  # fmt: skip
    response = session.post(f"{base}/api/v1/jobs/", json=job, timeout=60)
    response.raise_for_status()
    return response.json()["id"]


def queue_moves(base, session, job_ids: list[int], settle: float, probe: int) -> dict:
    """Every job submitted under load was seen by a pass: it has a pending reason or has left
    `pending`. Samples up to 50 of them, and ``probe``, the job submitted after the load."""
    sample = random.Random(1).sample(job_ids, min(50, len(job_ids)))
    deadline = time.monotonic() + settle
    waiting = {*sample, probe}
    while waiting and time.monotonic() < deadline:
        for job_id in list(waiting):
            job = session.get(f"{base}/api/v1/jobs/{job_id}/", timeout=30).json()
            reason = (job.get("pending_reason") or {}).get("code")
            if job["state"] != "pending" or reason:
                waiting.discard(job_id)
        if waiting:
            time.sleep(2)
    return {
        "sampled": len(sample),
        "picked_up": len(sample) - len(waiting - {probe}),
        "probe_picked_up": probe not in waiting,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--submitters", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--fuzz-examples", type=int, default=0, help="0: no fuzzing")
    parser.add_argument("--settle", type=float, default=90)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    base = args.url.rstrip("/")
    if urlparse(base).hostname not in {"127.0.0.1", "localhost"}:
        parser.error("load and fuzz traffic only to 127.0.0.1")
    report: dict = {"url": base}
    if args.fuzz_examples:
        report["fuzz"] = [fuzz(base, u, args.password, args.fuzz_examples)
                          for u in ("researcher", "leader")]  # fmt: skip
    stats = Stats()
    # Log in first, one at a time: a login hashes a password (deliberately slow), and 20 at
    # once would measure PBKDF2, not Allot. Each researcher's projects, read through the API.
    projects, sessions = {}, {}
    for username in RESEARCHERS[: args.submitters]:
        session = sessions[username] = login(base, username, args.password)
        nodes = session.get(f"{base}/api/v1/budgets/?limit=200", timeout=30).json()
        rows = nodes["results"] if isinstance(nodes, dict) else nodes
        projects[username] = [n["path"] for n in rows if n["path"].count("/") == 1] or [""]
    started = time.monotonic()
    deadline = started + args.seconds
    threads = [
        threading.Thread(
            target=submitter, args=(sessions[name], name, base, projects, deadline, stats, i)
        )
        for i, name in enumerate(RESEARCHERS[: args.submitters])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    health = requests.get(f"{base}/healthz", timeout=30)
    first = RESEARCHERS[0]
    probe = probe_after(sessions[first], base, projects[first])
    checker = login(base, "admin", args.password)
    moved = queue_moves(base, checker, stats.submitted, args.settle, probe)
    latencies = sorted(stats.latencies) or [0.0]
    report["load"] = {
        "submitters": args.submitters,
        "seconds": round(elapsed, 1),
        "requests": sum(stats.status.values()),
        "by_status": dict(sorted(stats.status.items())),
        "server_errors": len(stats.server_errors),
        "server_error_samples": stats.server_errors[:10],
        "transport_errors": len(stats.transport_errors),
        "transport_error_samples": stats.transport_errors[:5],
        "submitted": len(stats.submitted),
        "p50_s": round(latencies[len(latencies) // 2], 3),
        "p95_s": round(latencies[int(len(latencies) * 0.95)], 3),
    }
    report["after"] = {"healthz": health.status_code, **moved}
    fuzz_ok = all(f.get("exit_code", 0) == 0 for f in report.get("fuzz", []))
    ok = (
        fuzz_ok
        and not stats.server_errors
        and not stats.transport_errors
        and health.status_code == 200
        and moved["picked_up"] == moved["sampled"]
        and moved["probe_picked_up"]
    )
    report["ok"] = ok
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

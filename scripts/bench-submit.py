#!/usr/bin/env python3
"""Submissions a second through the API: N clients, each with its own token,
post valid jobs to /api/v1/jobs/ as fast as the server answers, for S seconds.

    scripts/bench-submit.py --url http://127.0.0.1:8000 [--clients 20] [--seconds 20]
                            [--rounds 3] [--json out.json]

Point it at a seeded Allot (`manage.py seed_demo`), served the way it runs for real: gunicorn
on PostgreSQL (docs/benchmarks.md shows the command). Each round prints one JSON line: jobs
accepted a second, errors (anything but 201), and latency percentiles; the last line is the
median round. Only ever point it at 127.0.0.1: it writes thousands of jobs.

The clients run on the server's own machine, so their CPU is taken from it. `--client http`
(the default) posts with the standard library's `http.client`, one connection per client,
reopened when the server closes it: ~1 ms of the client's Python a submission where
`--client requests` (the library the CLI uses, and the earlier rounds' client) takes ~3.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import requests


def _load_demo():
    """scripts/load-demo.py, for its researchers and their login (a file name with a dash is
    not importable by name)."""
    path = Path(__file__).resolve().parent / "load-demo.py"
    spec = importlib.util.spec_from_file_location("load_demo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def a_project(session: requests.Session, base: str) -> str:
    """One project the user may charge (the first their roles reach)."""
    nodes = session.get(f"{base}/api/v1/budgets/?limit=200", timeout=30).json()
    rows = nodes["results"] if isinstance(nodes, dict) else nodes
    return next((row["path"] for row in rows if row["path"].count("/") == 1), "")


def client(session, base, job, deadline, out: list, errors: list) -> None:
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            answer = session.post(f"{base}/api/v1/jobs/", json=job, timeout=60)
        except requests.RequestException as exc:
            errors.append(str(exc))
            continue
        if answer.status_code == 201:
            out.append(time.monotonic() - began)
        else:
            errors.append(f"{answer.status_code} {answer.text[:200]}")


def light_client(session, base, job, deadline, out: list, errors: list) -> None:
    """The same loop over ``http.client``: the token and the body made once."""
    where = urlsplit(base)
    connection = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=60)
    body = json.dumps(job).encode()
    headers = {
        "Authorization": session.headers["Authorization"],
        "Content-Type": "application/json",
    }
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            connection.request("POST", "/api/v1/jobs/", body=body, headers=headers)
            answer = connection.getresponse()
            text = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            errors.append(str(exc))
            connection.close()
            continue
        if answer.will_close:
            connection.close()
        if answer.status == 201:
            out.append(time.monotonic() - began)
        else:
            errors.append(f"{answer.status} {text[:200]!r}")
    connection.close()


CLIENTS = {"http": light_client, "requests": client}


def one_round(sessions, base: str, seconds: float, kind: str = "http") -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    threads = [
        threading.Thread(target=CLIENTS[kind], args=(s, base, job, deadline, latencies, errors))
        for s, job in sessions
    ]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    latencies.sort()

    def pct(p):
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 1)

    return {
        "jobs_per_s": round(len(latencies) / elapsed, 1),
        "accepted": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "p50_ms": pct(0.50) if latencies else None,
        "p95_ms": pct(0.95) if latencies else None,
        "clients": len(sessions),
        "client": kind,
        "seconds": round(elapsed, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cluster", default="jupiter")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="http")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    base = args.url.rstrip("/")
    load_demo = _load_demo()
    sessions = []
    for i in range(args.clients):
        username = load_demo.RESEARCHERS[i % len(load_demo.RESEARCHERS)]
        session = load_demo.login(base, username, args.password)
        job = {
            "name": f"bench-{i}", "project": a_project(session, base), "cluster": args.cluster,
            "gpus": 1, "min_runtime_s": 600, "resumable": True, "kind": "batch",
            "command": "python train.py", "sim_duration_s": 600,
        }  # fmt: skip
        sessions.append((session, job))
    rounds = []
    for _ in range(args.rounds):
        rounds.append(one_round(sessions, base, args.seconds, args.client))
        print(json.dumps(rounds[-1]), flush=True)
    median = statistics.median(r["jobs_per_s"] for r in rounds)
    summary = {"median_jobs_per_s": median, "errors": sum(r["errors"] for r in rounds)}
    summary["rounds"] = rounds
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=2)
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Fault points for the fault-injection suite (tests/faults/): a process kills itself with
SIGKILL at a named point in the live loop, so a crash lands exactly where it hurts most —
between commit and dispatch, between a backend call and the row that records it, mid-reconcile.

Inert unless ``ALLOT_FAULT_POINTS`` names points (comma-separated; ``*`` for all). Only the
suite sets it, on the workers it starts. ``ALLOT_FAULT_CHANCE`` (0..1, default 1) is the
probability of dying at each hit, so a point inside a loop fires at a random iteration.
``ALLOT_FAULT_LOG`` names a file where the point is appended before the kill, for the counts.
"""

from __future__ import annotations

import os
import random
import signal
import time


def fault_point(name: str) -> None:
    points = os.environ.get("ALLOT_FAULT_POINTS", "")
    if not points or (points != "*" and name not in points.split(",")):
        return
    if random.random() >= float(os.environ.get("ALLOT_FAULT_CHANCE", "1")):
        return
    log = os.environ.get("ALLOT_FAULT_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{time.time():.3f} {os.getpid()} {name}\n")
    os.kill(os.getpid(), signal.SIGKILL)

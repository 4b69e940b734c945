"""How much slower than the development machine this one runs Python now, for tests with time bounds.

A bound measured on the 2-core development machine fails on a slower machine (the CI machine took
0.88 s for a schedule this one does in 0.50) or beside other work (the suite runs its tests in two
processes beside the OpInfo sweeps): such a test multiplies its bound by `machine_slowness()`, the
best of five runs of a fixed piece of pure Python of the compiler's kind (small frozen objects,
dicts by name, hashing) over that piece's time here. Never below 1: a faster machine keeps the bound.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable


@dataclasses.dataclass(frozen=True)
class _Node:
    name: str
    args: tuple


def _reference_work() -> int:
    nodes, previous = {}, ()
    for i in range(60000):
        node = _Node(f"n{i}", previous)
        nodes[node.name] = node
        previous = (node.name,) if i % 3 else ()
    users: dict[str, list[str]] = {}
    for node in nodes.values():
        for arg in node.args:
            users.setdefault(arg, []).append(node.name)
    return len(users) + len({hash((node.name, node.args)) for node in nodes.values()})


# The reference work's best time on the 2-core development machine, idle: 0.097-0.100 s of CPU time and
# of wall time (2026-12-06), where the thousand-node schedule of tests/test_compile_time.py takes 0.50-0.52 s.
REFERENCE_SECONDS_HERE = 0.10


def machine_slowness(clock: Callable[[], float] = time.process_time) -> float:
    """The slowness by `clock`: CPU time (process_time) for bounds on CPU time, which other processes do
    not lengthen; wall time (perf_counter) for bounds on wall time, which they do."""
    return _slowness(clock)


@functools.lru_cache(maxsize=None)
def _slowness(clock: Callable[[], float]) -> float:
    best = float("inf")
    for _ in range(5):
        start = clock()
        _reference_work()
        best = min(best, clock() - start)
    return max(1.0, best / REFERENCE_SECONDS_HERE)

"""Room on Python's stack for a compile, whatever the depth it is called from.

Value trees are walked recursively (inlining, rebuilding, simplifying, printing): a tree as deep as
the chain of pointwise nodes fused into one kernel needs a few frames per level, and inlining a
producer chain about nine. The scheduler refuses chains past kernel_plan's inlining limit (120
levels: "producer chain too long"), which needs about 1,100 frames, more than Python's default limit
of 1,000 in all, and a compile starts below Dynamo's, AOTAutograd's and the user's frames (150-400 of
them). Before this, a 40-step recurrence of pointwise ops hit RecursionError inside a candidate plan and
the whole graph ran in eager; now the limit is checked with room to spare and the chain splits.

The room is taken above the caller's own depth and given back after (only where nothing else changed
the limit meanwhile). Each Python level of these walks costs a C frame a third of the time (a
generator inside `tuple()`): ROOM frames stay well inside a thread's default 8 MiB C stack.
"""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)

ROOM = 4000  # frames above the caller: 3.5x what the deepest accepted inlining needs


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


@contextmanager
def stack_room() -> Iterator[None]:
    """At least ROOM frames of recursion above this point inside the block."""
    before = sys.getrecursionlimit()
    wanted = max(before, _depth() + ROOM)
    if wanted != before:
        sys.setrecursionlimit(wanted)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == wanted != before:  # a nested or concurrent raise keeps its own
            sys.setrecursionlimit(before)


def with_stack_room(fn: F) -> F:
    @functools.wraps(fn)
    def roomy(*args, **kwargs):
        with stack_room():
            return fn(*args, **kwargs)

    return roomy  # type: ignore[return-value]

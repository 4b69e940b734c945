"""An artifact's `pretty()` text, printed once: the Stepper prints every stage's artifact, and the Graph,
Autograd and Fusion tabs show some of the same ones (a 12-layer GPT-2 training step printed its primitive
graphs, loop graphs and joint graph twice: 0.08 s).

    text = printed(record.prims)   # the same string as record.prims.pretty(), made once
"""

from __future__ import annotations

import weakref
from typing import Protocol


class Printable(Protocol):
    def pretty(self) -> str: ...


def printed(artifact: Printable) -> str:
    kept = _PRINTED.get(id(artifact))
    if kept is not None and kept[0]() is artifact:
        return kept[1]
    text = artifact.pretty()
    if len(_PRINTED) >= 64:
        _PRINTED.clear()
    try:
        _PRINTED[id(artifact)] = (weakref.ref(artifact), text)
    except TypeError:  # an object without weak references: printed each time
        pass
    return text


# id(artifact) -> (a weak reference to it, its text). Weak: the cache never keeps a session's graphs alive;
# the reference also tells a reused id from the artifact it was printed for (a dead one answers None).
# Keyed by id because not every artifact is hashable (they hold dicts and graphs).
_PRINTED: dict[int, tuple[weakref.ref, str]] = {}

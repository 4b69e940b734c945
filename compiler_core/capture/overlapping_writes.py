"""In-place writes into a view whose elements share memory, found in Dynamo's graph before AOT tracing.

`v.expand(2, 3, -1).zero_()` writes each element of `v` six times. Eager accepts that for a few ops
(fill_, zero_) and refuses the rest ("more than one element of the written-to tensor refers to a
single memory location"). Functionalization gets it wrong: it replays the write into `v` as a sum of
the view's copies, so eager's zeros became `-5 * v` under aot_eager, Inductor and our compiler alike
(torch 2.13, found by tests/fuzz_programs.py). No kernel of ours can repair a graph that AOT traced
wrong, so such a graph runs in eager PyTorch, which gives eager's answer (or eager's error), and the
session says why.
"""

from __future__ import annotations

import operator
from typing import Any, Optional

import torch

from compiler_core import _compat

# Writes into their first argument that are not spelled with a trailing underscore.
_WRITING_FUNCTIONS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                      operator.ilshift, operator.irshift}
# Above this many elements a view the simple stride test cannot clear is not enumerated: assumed to overlap.
_ENUMERATED = 1 << 20


def overlapping_write(gm: torch.fx.GraphModule) -> Optional[str]:
    """A sentence naming the first in-place op of `gm` whose target's elements overlap, or None."""
    for node in gm.graph.nodes:
        if not _writes_first_argument(node) or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        target = _compat.fake_value(node.args[0])
        if isinstance(target, torch.Tensor) and _elements_overlap(target):
            name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
            return (f"`{name}` writes into `{node.args[0].name}` (sizes {tuple(target.shape)}, strides "
                    f"{tuple(target.stride())}), whose elements share memory: AOTAutograd's functionalization "
                    "replays such a write as a sum of copies (a wrong answer in torch.compile too)")
    return None


def _writes_first_argument(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op != "call_function":
        return False
    if node.target in _WRITING_FUNCTIONS or node.kwargs.get("inplace") is True:
        return True
    name = getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def _elements_overlap(t: torch.Tensor) -> bool:
    """Whether two positions of `t` address one element: a stride 0 along a dimension of two or more,
    or (sizes as in this call) strides that cannot keep the elements apart."""
    sizes, strides = [_hint(s) for s in t.shape], [_hint(s) for s in t.stride()]
    if any(size is not None and size > 1 and stride == 0 for size, stride in zip(sizes, strides)):
        return True
    if any(v is None for v in (*sizes, *strides)):
        return False  # symbolic without a hint: only the stride-0 case is known
    dims = sorted((abs(st), sz) for sz, st in zip(sizes, strides) if sz > 1)
    if 0 in sizes:
        return False
    reach = 0  # the largest offset the smaller-stride dimensions reach
    for stride, size in dims:
        if stride <= reach:
            break
        reach += stride * (size - 1)
    else:
        return False  # each stride steps past everything below it: no two positions meet
    numel = 1
    for size in sizes:
        numel *= size
    if numel > _ENUMERATED:
        return True
    offsets = torch.zeros((), dtype=torch.int64)
    for size, stride in zip(sizes, strides):
        offsets = (offsets.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride)
    return offsets.unique().numel() < numel


def _hint(value: Any) -> Optional[int]:
    if isinstance(value, int):
        return value
    try:
        return int(value.node.hint)
    except Exception:  # noqa: BLE001 - an unbacked or hintless symbol
        return None

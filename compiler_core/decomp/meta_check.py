"""Our decompositions held to the op's own shapes and dtypes while AOTAutograd traces them.

A decomposition replaces an ATen op inside the traced graph; whatever it returns is taken as the
op's result. If it returns another shape or dtype than the op does, the program silently computes
something else: inference batch norm returned empty saved statistics on CUDA, where eager (and the
op's meta function) return the running mean and 1/sqrt(var + eps) (OpInfo on an H100 found it). Each
decomposition of ours is therefore wrapped: after it runs, the op's meta function runs on the same
fake inputs, outside the trace, and a difference in the number of results, a shape, a dtype or a
device raises DecompositionMismatch, which names both. AOT tracing then fails and the graph runs in
eager PyTorch, saying why: a loud fallback instead of a wrong answer.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils._pytree import tree_flatten, tree_unflatten

# Results whose shapes the op's meta function gets wrong, where our decomposition follows eager instead
# (tests/test_segments.py compares with eager): an embedding bag's offset2bag, bag_size and
# max_indices. Measured on the CPU (torch 2.13): offset2bag is empty on the bf16 sum path (meta: one
# per index); with include_last_offset=True, max_indices of a sum has len(offsets) entries (meta one
# fewer) and bag_size of a mean or max len(offsets) - 1 (meta len(offsets)). Their count, dtype and
# device are still checked.
META_SHAPES_DIFFER_FROM_EAGER = {
    torch.ops.aten._embedding_bag.default: {1, 2, 3},
    torch.ops.aten._embedding_bag_forward_only.default: {1, 2, 3},
}


class DecompositionMismatch(Exception):
    """A decomposition of ours returned other shapes or dtypes than the op it replaces."""


def checked_against_meta(op: Any, decomposition: Callable) -> Callable:
    unchecked = META_SHAPES_DIFFER_FROM_EAGER.get(op, set())

    @functools.wraps(decomposition)
    def checked(*args: Any, **kwargs: Any) -> Any:
        result = decomposition(*args, **kwargs)
        if result is NotImplemented:  # the decomposition declined: the op itself stays in the graph
            return result
        if not any(_is_fake(a) for a in tree_flatten((args, kwargs))[0]):
            return result  # called on real tensors (an eager path): nothing traced to protect
        # The meta's sizes and strides are symbols the trace does not track: every comparison with
        # them happens outside it too (a traced one fails: "... is not tracked with proxy").
        with disable_proxy_modes_tracing():
            try:
                expected = op(*args, **kwargs)
            except Exception:  # noqa: BLE001 - the op has no meta for these inputs: nothing to hold it to
                return result
            problem = _difference(result, expected, unchecked)
            layouts = _layouts_to_copy_into(result, expected, unchecked)
        if problem:
            raise DecompositionMismatch(f"our decomposition of {op} returns {problem} (a bug of ours: please "
                                        "report it)")
        return _laid_out(result, layouts) if any(layouts) else result

    return checked


def _layouts_to_copy_into(result: Any, expected: Any, unchecked: set) -> list:
    """Per tensor of `result`: None where its strides are the meta's, else the meta's strides to copy
    it into. Only plain-int strides can be passed into the trace (the meta's symbolic ones are not
    tracked by it), so a result with symbolic sizes keeps its own layout; so does one whose meta
    layout shares memory (zero strides)."""
    got = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
    wanted = [t for t in tree_flatten(expected)[0] if isinstance(t, torch.Tensor)]
    plans: list = []
    for k, (value, want) in enumerate(zip(got, wanted)):
        concrete = all(isinstance(x, int) for x in (*want.stride(), *want.shape))
        plans.append(tuple(want.stride()) if concrete and k not in unchecked and _strides_differ(value, want)
                     else None)
    return plans


def _laid_out(result: Any, layouts: list) -> Any:
    """`result` with its tensors copied into the layouts `_layouts_to_copy_into` chose (in the trace).

    Values do not depend on strides, but what reads the storage does: `sort(1).values.as_strided(...)`
    read our decomposition's transposed layout where eager's is contiguous (a wrong answer; aot_eager
    and Inductor were right). A copy into the op's layout is a pointwise node the scheduler fuses with
    its producer, so it costs little where it happens and nothing elsewhere."""
    flat, spec = tree_flatten(result)
    out, k = [], 0
    for value in flat:
        if isinstance(value, torch.Tensor):
            strides = layouts[k] if k < len(layouts) else None
            if strides is not None:
                layout = torch.empty_strided(value.shape, strides, dtype=value.dtype, device=value.device)
                value = torch.ops.aten.copy.default(layout, value)  # functional: AOT has functionalized already
            k += 1
        out.append(value)
    return tree_unflatten(out, spec)


def _strides_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Another stride along some dimension of two or more elements (a guard-free comparison). A meta
    layout with a zero stride there (elements sharing memory) is never copied into."""
    wide = [statically_known_true(size > 1) for size in b.shape]
    if any(w and statically_known_true(s == 0) for w, s in zip(wide, b.stride())):
        return False
    return any(w and not statically_known_true(x == y) for w, x, y in zip(wide, a.stride(), b.stride()))


def _is_fake(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and type(value).__name__ in ("FakeTensor", "FunctionalTensor")


def _difference(result: Any, expected: Any, shapes_unchecked: set) -> str:
    got, _ = tree_flatten(result)
    want, _ = tree_flatten(expected)
    got = [t for t in got if isinstance(t, torch.Tensor)]
    want = [t for t in want if isinstance(t, torch.Tensor)]
    if len(got) != len(want):
        return f"{len(got)} tensors where the op returns {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        shape_differs = i not in shapes_unchecked and not _same_shape(g.shape, w.shape)
        if g.dtype != w.dtype or g.device.type != w.device.type or shape_differs:
            return (f"result {i} as {tuple(g.shape)} {g.dtype} on {g.device.type}, where the op returns "
                    f"{tuple(w.shape)} {w.dtype} on {w.device.type}")
    return ""


def _same_shape(a: torch.Size, b: torch.Size) -> bool:
    """Equal sizes where that is known without a guard (an unknown symbolic comparison passes)."""
    return len(a) == len(b) and not any(statically_known_true(x != y) for x, y in zip(a, b))

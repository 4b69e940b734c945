"""slice_scatter (and so slice_backward) as a select between the input and the placed source.

A slice's backward writes the gradient into a zero tensor at the slice's positions; rotary
embeddings do it twice per attention layer (each half of the head). torch's reference reads the
source through `_unsafe_masked_index`, which we do not lower, so the op ran in PyTorch. Here:

- step 1: the source padded with zeros to the input's extent along `dim` (a constant pad, which
  is index arithmetic inside the kernel), then `where(start <= i < end, padded, input)`;
- other steps: the source read at position clamp((i - start) // step) — always inside it, so the
  read needs no bounds check — then the same `where` with `(i - start) % step == 0` as well.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true

from compiler_core import _compat

aten = torch.ops.aten


def slice_scatter(input: torch.Tensor, src: torch.Tensor, dim: int = 0, start: Optional[int] = None,
                  end: Optional[int] = None, step: int = 1) -> torch.Tensor:
    dim = dim % max(input.dim(), 1)
    size = input.shape[dim]
    if all(isinstance(v, (int, type(None))) for v in (size, start, end)):
        start, end, _ = slice(start, end, step).indices(size)  # Python's rule, as ATen normalizes them
        end = max(end, start)
    else:  # symbolic sizes: normalized only where that holds for every size (a guard would fix the size)
        bounds = _symbolic_bounds(size, start, end)
        if bounds is None:
            return NotImplemented  # kept as one slice_scatter op, computed by PyTorch
        start, end = bounds
    count = (end - start + step - 1) // step
    src_shape = list(input.shape)
    src_shape[dim] = count
    src = src.expand(src_shape).to(input.dtype)
    if statically_known_true(count == 0):
        return input.clone()
    if statically_known_true(start == 0) and statically_known_true(end == size) and step == 1:
        return src.clone()
    shape = [1] * input.dim()
    shape[dim] = size
    positions = torch.arange(size, device=input.device).view(shape)
    inside = (positions >= start) & (positions < end)
    if step == 1:
        pad = [0, 0] * (input.dim() - 1 - dim) + [start, size - end]
        placed = F.pad(src, pad)
    else:
        inside = inside & ((positions - start) % step == 0)
        at = torch.clamp((positions - start) // step, 0, count - 1).view(-1)
        placed = src.index_select(dim, at)
    return torch.where(inside, placed, input)


# The ops functionalization writes an in-place op on a view back into its base with. It then replays the
# view chain on what they return, so they must return the base's strides, as ATen's do (a clone of the
# input in its own layout, then the copy): with other strides a `view` in that chain can fail (Funnel
# Transformer's `positional_attn *= cls_mask` after a reshape of a permuted einsum sent its whole graph
# to eager PyTorch), and an `as_strided` in it would read the wrong elements.
WRITE_BACK_SCATTERS = (aten.slice_scatter.default, aten.select_scatter.default, aten.diagonal_scatter.default,
                       aten.as_strided_scatter.default)


def keeping_input_layout(decomposition: Callable[..., Any]) -> Callable[..., Any]:
    """A scatter's decomposition whose result has its input's strides (WRITE_BACK_SCATTERS)."""

    @functools.wraps(decomposition)
    def scatter(input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        result = decomposition(input, *args, **kwargs)
        return result if result is NotImplemented else _in_layout_of(input, result)

    return scatter


def _in_layout_of(input: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if tuple(result.stride()) == tuple(input.stride()) or not _compat.is_non_overlapping_and_dense(input):
        return result  # (ATen's clone of an overlapping or gapped input is contiguous, as where's result)
    # functional copy: decompositions run after functionalization, which would not take a copy_ here
    return aten.copy.default(torch.empty_like(input), result)


def _symbolic_bounds(size: Any, start: Any, end: Any) -> Optional[tuple[Any, Any]]:
    """(start, end) within [0, size] with start <= end, as Python's slice rule gives them, where that
    is known for every size without a guard; None otherwise."""
    start = 0 if start is None else start
    if end is None or (isinstance(end, int) and end >= 2**62):  # slice(None) reaches ATen as int64 max
        end = size
    for value in (start, end):
        if not (statically_known_true(value >= 0) and statically_known_true(value <= size)):
            return None
    return (start, end) if statically_known_true(start <= end) else None


SCATTERS = {aten.slice_scatter.default: slice_scatter}

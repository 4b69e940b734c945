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

from typing import Optional

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def slice_scatter(input: torch.Tensor, src: torch.Tensor, dim: int = 0, start: Optional[int] = None,
                  end: Optional[int] = None, step: int = 1) -> torch.Tensor:
    dim = dim % max(input.dim(), 1)
    size = input.shape[dim]
    start, end, _ = slice(start, end, step).indices(size)  # Python's rule, as ATen normalizes them
    end = max(end, start)
    count = (end - start + step - 1) // step
    src_shape = list(input.shape)
    src_shape[dim] = count
    src = src.expand(src_shape).to(input.dtype)
    if count == 0:
        return input.clone()
    if start == 0 and end == size and step == 1:
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


SCATTERS = {aten.slice_scatter.default: slice_scatter}

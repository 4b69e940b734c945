"""Replication padding's backward: each edge element of the input collects the gradients of the copies
the pad made of it.

The forward reads position clamp(i - left, 0, size - 1) along each padded dimension, so along one
dimension the input's gradient is the output gradient's interior [left, left + size), plus, at position
0, the sum over the `left` copies before it and, at position size - 1, the sum over the `right` copies
after it. Dimensions are independent: the gradient is folded one padded dimension at a time. Sums and
selects only, so it fuses; ATen's kernel adds the copies one by one (on CUDA atomically, in a
different order each run). Reflection padding's backward is torch's reference (decomp/table.py).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _fold(grad: torch.Tensor, dim: int, size: int, left: int, right: int) -> torch.Tensor:
    """The gradient along `dim` folded back onto `size` positions."""
    total = grad.narrow(dim, left, size)
    position = torch.arange(size, device=grad.device).view([-1] + [1] * (grad.dim() - dim - 1))
    if left:
        total = total + torch.where(position == 0, grad.narrow(dim, 0, left).sum(dim, keepdim=True), 0.0)
    if right:
        copies = grad.narrow(dim, left + size, right).sum(dim, keepdim=True)
        total = total + torch.where(position == size - 1, copies, 0.0)
    return total


def _replication_pad_backward(dims: int):
    def backward(grad_output: torch.Tensor, x: torch.Tensor, padding) -> torch.Tensor:
        pads = [int(p) for p in padding]
        if not x.dtype.is_floating_point or min(pads) < 0 or x.dim() not in (dims + 1, dims + 2):
            return NotImplemented
        compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        grad = grad_output.to(compute)
        for k in range(dims):  # padding lists the last dimension first
            dim = x.dim() - 1 - k
            grad = _fold(grad, dim, x.shape[dim], pads[2 * k], pads[2 * k + 1])
        return grad.to(x.dtype)

    return backward


PADDING = {aten.replication_pad1d_backward.default: _replication_pad_backward(1),
           aten.replication_pad2d_backward.default: _replication_pad_backward(2),
           aten.replication_pad3d_backward.default: _replication_pad_backward(3)}

"""Antialiased bilinear resizing (`interpolate(..., mode="bilinear", antialias=True)`) as our kernels.

Separable, one dimension at a time (width, then height), as ATen's CPU kernel computes it: output i
of a dimension averages the inputs under a triangle filter stretched by the scale when shrinking,

    center = scale * (i + 0.5),  support = max(scale, 1)        (the filter's half-width, in inputs)
    first  = max(trunc(center - support + 0.5), 0),  count = min(trunc(center + support + 0.5), size) - first
    w_t    = max(0, 1 - |(first + t - center + 0.5) / max(scale, 1)|)  for t < count, normalised to sum 1

with scale = in / out (or 1 / scales_x when given, (in - 1) / (out - 1) with align_corners). The
weights depend on the sizes only and are computed in the same kernel; the inputs under them are a
gather at first + t, the positions past count weighted 0.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

aten = torch.ops.aten


def _scale(size: int, out: int, align_corners: bool, given: Optional[float]) -> float:
    if align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / given if given is not None and given > 0 else size / out


def _resize_last(x: torch.Tensor, out: int, align_corners: bool, given: Optional[float]) -> torch.Tensor:
    """x resized along its last dim to `out` elements."""
    size = x.shape[-1]
    scale = _scale(size, out, align_corners, given)
    support = scale if scale >= 1.0 else 1.0
    stretch = support  # the filter is widened by the scale when shrinking, not when enlarging
    width = math.ceil(support) * 2 + 1
    dtype = x.dtype
    center = scale * (torch.arange(out, device=x.device, dtype=dtype) + 0.5)
    first = (center - support + 0.5).to(torch.int64).clamp(min=0)
    count = (torch.minimum((center + support + 0.5).to(torch.int64), torch.full_like(first, size)) - first)
    count = count.clamp(0, width)
    t = torch.arange(width, device=x.device)
    position = first.unsqueeze(-1) + t  # [out, width]
    distance = (position.to(dtype) - center.unsqueeze(-1) + 0.5) / stretch
    weight = torch.where(t < count.unsqueeze(-1), (1.0 - distance.abs()).clamp(min=0.0), 0.0)
    total = weight.sum(-1, keepdim=True)
    weight = torch.where(total != 0.0, weight / total, weight)
    taken = x[..., position.clamp(max=size - 1)]  # [..., out, width]
    return (taken * weight).sum(-1)


def upsample_bilinear2d_aa(x: torch.Tensor, output_size, align_corners: bool, scales_h: Optional[float] = None,
                           scales_w: Optional[float] = None) -> Any:
    if x.dim() != 4 or x.dtype not in (torch.float32, torch.float64) or any(s <= 0 for s in x.shape[-2:]):
        return NotImplemented
    out_h, out_w = output_size
    if out_h <= 0 or out_w <= 0 or x.numel() == 0:
        return NotImplemented
    wide = _resize_last(x, out_w, align_corners, scales_w)
    return _resize_last(wide.transpose(-1, -2), out_h, align_corners, scales_h).transpose(-1, -2).contiguous()


UPSAMPLE_AA = {aten._upsample_bilinear2d_aa.default: upsample_bilinear2d_aa}

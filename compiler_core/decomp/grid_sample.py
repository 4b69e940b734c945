"""grid_sampler_3d (grid_sample on a volume) as our kernels: trilinear or nearest reads at the grid's
points, with zero, border or reflection padding.

Each output point reads the input where the grid says: its coordinates in [-1, 1] (x along W, y along
H, z along D) are scaled to input positions, then clamped or reflected by the padding mode, as ATen's
CPU kernel computes them. Trilinear sums the 8 surrounding inputs, each weighted by the product of its
per-axis fractions (x, then y, then z), in ATen's order (z outermost, x innermost); a corner outside
the volume adds nothing (its read is clamped inside and its term dropped, so a NaN there cannot leak
in). Nearest rounds half to even. Bicubic exists only in 2-D (torch's own decomposition).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

aten = torch.ops.aten


def _reflect(coords: torch.Tensor, twice_low: int, twice_high: int) -> torch.Tensor:
    """Reflect into [low, high] by folding the line at both ends (bounds passed doubled, so half
    integers stay exact)."""
    if twice_low == twice_high:
        return torch.zeros_like(coords)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = (coords - low).abs()
    extra = torch.fmod(distance, span)
    even = torch.floor(distance / span) % 2 == 0
    return torch.where(even, extra + low, span - extra + low)


def _clip(coords: torch.Tensor, size: int) -> torch.Tensor:
    """Into [0, size - 1]; a NaN coordinate lands on size - 1, as ATen's std::min(size - 1, max(x, 0))."""
    return torch.where(torch.isnan(coords), float(size - 1), coords.clamp(0, size - 1))


def _source(coords: torch.Tensor, size: int, padding_mode: int, align_corners: bool) -> torch.Tensor:
    scale = (size - 1) / 2 if align_corners else size / 2
    position = (coords + 1) * scale - (0.0 if align_corners else 0.5)
    if padding_mode == 1:
        return _clip(position, size)
    if padding_mode == 2:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(position, *twice), size)
    return position


def grid_sampler_3d(a: torch.Tensor, grid: torch.Tensor, interpolation_mode: int = 0, padding_mode: int = 0,
                    align_corners: bool = False) -> Any:
    if (a.dim() != 5 or grid.dim() != 5 or grid.shape[-1] != 3 or interpolation_mode not in (0, 1)
            or padding_mode not in (0, 1, 2) or a.dtype not in (torch.float32, torch.float64)
            or grid.dtype != a.dtype or a.numel() == 0 or grid.numel() == 0):
        return NotImplemented
    n, c, depth, height, width = a.shape
    sizes = (width, height, depth)
    point = [_source(grid[..., k], sizes[k], padding_mode, align_corners) for k in range(3)]  # [N, oD, oH, oW]
    batch = torch.arange(n, device=a.device).view(n, 1, 1, 1, 1)
    channel = torch.arange(c, device=a.device).view(1, c, 1, 1, 1)

    def read(at: list[torch.Tensor], weight: Any) -> torch.Tensor:
        inside = None
        for position, size in zip(at, sizes):
            ok = (position >= 0) & (position < size)
            inside = ok if inside is None else inside & ok
        x, y, z = (torch.where(inside, p, 0).to(torch.int64).unsqueeze(1) for p in at)
        value = a[batch, channel, z, y, x]
        return torch.where(inside.unsqueeze(1), value * weight, 0.0) if weight is not None else \
            torch.where(inside.unsqueeze(1), value, 0.0)

    if interpolation_mode == 1:
        return read([torch.round(p) for p in point], None)
    low = [torch.floor(p) for p in point]
    total = None
    for dz, dy, dx in itertools.product((0, 1), repeat=3):  # z outermost, x innermost: ATen's corner order
        offsets = (dx, dy, dz)
        weight = None
        for k in range(3):  # x, then y, then z
            part = point[k] - low[k] if offsets[k] else low[k] + 1 - point[k]
            weight = part if weight is None else weight * part
        term = read([low[k] + offsets[k] for k in range(3)], weight.unsqueeze(1))
        total = term if total is None else total + term
    return total


GRID_SAMPLE = {aten.grid_sampler_3d.default: grid_sampler_3d}

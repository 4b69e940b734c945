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


def grid_sampler_2d_backward(grad_output: torch.Tensor, a: torch.Tensor, grid: torch.Tensor, interpolation_mode: int,
                             padding_mode: int, align_corners: bool, output_mask) -> Any:
    """Bilinear sampling with zero padding (spatial transformers, deformable attention, flow warping);
    other modes stay PyTorch's call. The input's gradient adds each output gradient, times its corner's
    weight, into the four corners inside the image (a scatter-add: our atomic scatter); the grid's is the
    weights' derivatives times the corner values and the output gradient, summed over channels, scaled
    from pixels back to [-1, 1]."""
    if (a.dim() != 4 or grid.dim() != 4 or interpolation_mode != 0 or padding_mode != 0
            or a.dtype not in (torch.float32, torch.float64) or grid.dtype != a.dtype
            or a.numel() == 0 or grid.numel() == 0):
        return NotImplemented
    n, c, height, width = a.shape
    points = grid.shape[1] * grid.shape[2]
    x = _source(grid[..., 0], width, 0, align_corners).reshape(n, 1, points)
    y = _source(grid[..., 1], height, 0, align_corners).reshape(n, 1, points)
    left, top = torch.floor(x), torch.floor(y)
    right, bottom = left + 1, top + 1
    grad = grad_output.reshape(n, c, points)
    flat = a.reshape(n, c, height * width)
    # (corner x, corner y, its weight, d weight / d x, d weight / d y), in ATen's order nw, ne, sw, se
    corners = ((left, top, (right - x) * (bottom - y), -(bottom - y), -(right - x)),
               (right, top, (x - left) * (bottom - y), bottom - y, -(x - left)),
               (left, bottom, (right - x) * (y - top), -(y - top), right - x),
               (right, bottom, (x - left) * (y - top), y - top, x - left))
    grad_input = torch.zeros_like(flat) if output_mask[0] else None
    grad_x = grad_y = None
    for cx, cy, weight, by_x, by_y in corners:
        inside = (cx >= 0) & (cx < width) & (cy >= 0) & (cy < height)
        index = torch.where(inside, cy * width + cx, 0).to(torch.int64).expand(n, c, points)
        if grad_input is not None:
            grad_input = grad_input.scatter_add(2, index, torch.where(inside, grad * weight, 0.0))
        if output_mask[1]:
            value = torch.where(inside, flat.gather(2, index), 0.0) * grad
            part_x, part_y = (value * by_x).sum(1), (value * by_y).sum(1)
            grad_x = part_x if grad_x is None else grad_x + part_x
            grad_y = part_y if grad_y is None else grad_y + part_y
    grad_grid = None
    if output_mask[1]:
        scale_x = (width - 1) / 2 if align_corners else width / 2
        scale_y = (height - 1) / 2 if align_corners else height / 2
        grad_grid = torch.stack([grad_x * scale_x, grad_y * scale_y], -1).reshape(grid.shape)
    return (grad_input.reshape(a.shape) if grad_input is not None else None, grad_grid)


GRID_SAMPLE = {aten.grid_sampler_3d.default: grid_sampler_3d,
               aten.grid_sampler_2d_backward.default: grid_sampler_2d_backward}

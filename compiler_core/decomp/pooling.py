"""Max pooling as ops we lower: the forward as a -inf pad and eager's loop over each window written out;
the backward as a gather over the few windows that can hold each input position.

torch's own references for max_pool2d/3d_with_indices exist only in recent versions (2.13 has them,
the 2.11 of our GPU image does not), so the ops would stay PyTorch's calls there. Eager's kernels (CPU
and CUDA alike) walk each window in order from -inf and its first position inside the input, and
take a value when it is larger than the best so far or NaN: the last NaN wins, of equal values the
first (-0.0 before 0.0), and a window of -inf values names its first position inside the input,
never the padding. For windows of up to UNROLLED_MAX_WINDOW positions that loop is written out over
the window's offsets, each a strided slice of the padded input (_unrolled_max): one pointwise kernel
gives values and positions, no reshape's index arithmetic, and no positions when nothing reads them.
Larger windows are a view of the padded input (`unfold`), flattened to (..., kh*kw) and reduced by
arg_reductions.max_dim, whose first-NaN position and reduced zero are then corrected to eager's
(_eager_position). Indices are positions in the unpadded input's H*W (or D*H*W) plane, as eager
returns them; windows never hold only padding (eager requires pad <= kernel/2).

The backward. torch's reference scatter-adds each window's gradient at its index: on CUDA that is an
atomic add, so where windows overlap (ResNet's 3x3 stride-2 pool) the sums come out in a different
order on every run. Read the other way round it is a gather: input position h can only have been
picked by a window that covers it, and those are the output positions

    (h + pad) // stride - j,   j = 0 .. (dilation * (kernel - 1)) // stride

(two per dimension for ResNet's pool, one where stride >= span). Each input position sums, over
those candidates, the gradient of every candidate window whose index names it: pure index
arithmetic and gathers, one pointwise kernel, deterministic. The candidates are visited in
ascending output order and summed in fp32, as eager's CPU and CUDA kernels accumulate them, so each
value rounds as eager's does.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from compiler_core.decomp.arg_reductions import max_dim

aten = torch.ops.aten
UNROLLED_MAX_WINDOW = 49  # windows up to 7x7 take the maximum over their offsets (_unrolled_max)


def _output_size(size: int, kernel: int, pad: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    span = dilation * (kernel - 1) + 1
    out = -(-(size + 2 * pad - span) // stride) + 1 if ceil_mode else (size + 2 * pad - span) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:  # the last window must start inside the input or left pad
        out -= 1
    return out


def _spatial(value, dims: int, default=None) -> tuple[int, ...]:
    value = [value] if isinstance(value, int) else list(value) or list(default)
    return tuple(value) * dims if len(value) == 1 else tuple(value)


def _windows(x: torch.Tensor, spans, strides, pads, out_sizes, fill: float) -> torch.Tensor:
    """The pooling windows of x's last len(spans) dims as a view of x padded with `fill`:
    shape (..., *out_sizes, *spans). The far side is padded so that the last window fits (ceil_mode
    may reach past the symmetric pad)."""
    dims, lead = len(spans), x.dim() - len(spans)
    windows = _padded(x, spans, strides, pads, out_sizes, fill)
    for d in range(dims):
        windows = windows.unfold(lead + d, spans[d], strides[d]).narrow(lead + d, 0, out_sizes[d])
    return windows


def _padded(x: torch.Tensor, spans, strides, pads, out_sizes, fill: float) -> torch.Tensor:
    """x's last len(spans) dims padded with `fill`: the pad on the near side, and on the far side as much
    as the last window needs (ceil_mode may reach past the symmetric pad)."""
    dims, lead = len(spans), x.dim() - len(spans)
    spec = []  # F.pad lists the last dimension first
    for d in reversed(range(dims)):
        spec += [pads[d], max(0, (out_sizes[d] - 1) * strides[d] + spans[d] - x.shape[lead + d] - pads[d])]
    return F.pad(x, spec, value=fill)


def _max_pool(dims: int):
    def forward(x: torch.Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False):
        if not x.dtype.is_floating_point or x.dim() not in (dims + 1, dims + 2):
            return NotImplemented  # integer pooling (no -inf to pad with): PyTorch's kernel
        kernel = _spatial(kernel_size, dims)
        strides, pads = _spatial(stride, dims, default=kernel), _spatial(padding, dims)
        dilations = _spatial(dilation, dims)
        lead, in_sizes = x.dim() - dims, x.shape[-dims:]
        out_sizes = [_output_size(in_sizes[d], kernel[d], pads[d], strides[d], dilations[d], ceil_mode)
                     for d in range(dims)]
        spans = [dilations[d] * (kernel[d] - 1) + 1 for d in range(dims)]
        starts = [_along(d, dims, torch.arange(out_sizes[d], device=x.device) * strides[d] - pads[d])
                  for d in range(dims)]
        first_valid = _first_inside(kernel, dilations, starts)
        if math.prod(kernel) <= UNROLLED_MAX_WINDOW:
            values, first = _unrolled_max(x, kernel, strides, pads, dilations, out_sizes, spans, first_valid)
        else:
            windows = _windows(x, spans, strides, pads, out_sizes, float("-inf"))
            windows = windows[(Ellipsis, *(slice(None, None, dil) for dil in dilations))]
            windows = windows.reshape(*windows.shape[:lead + dims], math.prod(kernel))
            values, first = _eager_position(windows, *max_dim(windows, -1), first_valid)
        indices = None
        for d in range(dims):
            offset = (first // math.prod(kernel[d + 1:])) % kernel[d]
            term = (starts[d] + offset * dilations[d]) * math.prod(in_sizes[d + 1:])
            indices = term if indices is None else indices + term
        return values, indices

    return forward


def _unrolled_max(x: torch.Tensor, kernel, strides, pads, dilations, out_sizes, spans, first_valid
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the pooled maxima, each one's offset in its flattened window), eager's loop written out over the
    window's offsets: each a strided slice of the -inf padded input, so every load of the fused kernel
    is at (out * stride + offset), no division or modulo. Through the windows' view, flattened to
    (..., kh*kw) for a reduction, each load's index went through that reshape: on a 2-core CPU,
    ResNet's first pool (with its batch norm and ReLU recomputed inside) took 168 us for 9,216 window
    elements. One pointwise kernel gives both outputs; the offsets are not computed when nothing reads
    them (max_pool2d without indices)."""
    dims = len(kernel)
    plane = _padded(x, spans, strides, pads, out_sizes, float("-inf"))
    values, first = None, first_valid
    lead = x.dim() - dims
    for k, offsets in enumerate(itertools.product(*(range(k) for k in kernel))):
        index = [slice(None)] * lead
        for d in range(dims):
            start = offsets[d] * dilations[d]
            index.append(slice(start, start + (out_sizes[d] - 1) * strides[d] + 1, strides[d]))
        piece = plane[tuple(index)]
        # Eager's rule, in eager's order: a value replaces the best so far when it is larger or NaN
        # (so the last NaN wins, and of equal values the first: -0.0 before 0.0). From -inf, the
        # first piece is taken unless it is -inf itself (padding, or a real -inf at first_valid).
        take = (piece > float("-inf")) | piece.isnan() if values is None else (piece > values) | piece.isnan()
        values = piece if values is None else torch.where(take, piece, values)
        first = torch.where(take, k, first)
    return values, first


def _first_inside(kernel, dilations, starts) -> torch.Tensor:
    """Each window's first offset (flattened) inside the unpadded input: eager's position for a window
    whose values are all -inf, where a padded -inf must not be named (it is outside the input)."""
    first = None
    for d in range(len(kernel)):
        # The first j with start + j * dilation >= 0.
        j = (-starts[d]).clamp(min=0).add(dilations[d] - 1).div(dilations[d], rounding_mode="floor")
        term = j * math.prod(kernel[d + 1:])
        first = term if first is None else first + term
    return first


def _eager_position(windows: torch.Tensor, values: torch.Tensor, first: torch.Tensor,
                    first_valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """max_dim's (values, first position) corrected to eager max pooling's: the position is the last NaN
    of a window holding NaN (max_dim, as max.dim, gives the first), and for a window of -inf values
    the first position inside the input (`first_valid`; None: every position is); the value is the
    one at that position (of 0.0 and -0.0, the maximum's sign was the reduction's, not the first's)."""
    positions = torch.arange(windows.shape[-1], device=windows.device)
    last_nan = torch.where(windows.isnan(), positions, -1).amax(-1)
    if first_valid is not None:
        first = torch.where(values == float("-inf"), first_valid, first)
    first = torch.where(last_nan >= 0, last_nan, first)
    at_first = torch.where(positions == first.unsqueeze(-1), windows, float("-inf")).amax(-1)
    return at_first, first


def _along(d: int, dims: int, t: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor laid along spatial dim `d` of a `dims`-dimensional plane."""
    shape = [1] * dims
    shape[d] = -1
    return t.view(shape)


def _windows_holding(in_sizes, out_sizes, kernel, strides, pads, dilations, device):
    """For every input position (flattened plane), the output windows that can hold it: yields
    (where, valid), the flat output position of one candidate window per input position and whether
    that window exists and covers it, one candidate at a time in ascending output order."""
    dims = len(in_sizes)
    per_dim = []
    for d in range(dims):
        position = torch.arange(in_sizes[d], device=device)
        last = (position + pads[d]) // strides[d]  # the last window starting at or before this position
        span = dilations[d] * (kernel[d] - 1) + 1
        candidates = []
        for j in reversed(range((span - 1) // strides[d] + 1)):
            start = last - j
            covers = (start >= 0) & (start < out_sizes[d]) & (position < start * strides[d] - pads[d] + span)
            candidates.append((start.clamp(0, out_sizes[d] - 1), covers))
        per_dim.append(candidates)
    yield from _candidate_windows(per_dim, in_sizes, out_sizes)


def _candidate_windows(per_dim, in_sizes, out_sizes):
    """Every combination of one candidate window per dimension, as (flat output position, whether it
    holds the input position) over the flattened input plane."""
    dims, in_plane = len(in_sizes), math.prod(in_sizes)
    for combo in itertools.product(*per_dim):
        where, valid = None, None
        for d, (window, covers) in enumerate(combo):
            term = _along(d, dims, window) * math.prod(out_sizes[d + 1:])
            inside = _along(d, dims, covers)
            where = term if where is None else where + term
            valid = inside if valid is None else valid & inside
        yield where.reshape(in_plane), valid.reshape(in_plane)


def _gathered(grads: torch.Tensor, lead, in_plane: int, holding, picked: torch.Tensor | None = None,
              position: torch.Tensor | None = None) -> torch.Tensor:
    """The sum, per input position, of the gradients (lead + flat output plane) of the windows holding
    it, candidate by candidate in a fixed order; with `picked` (max pooling's indices), only of those
    windows whose maximum was that `position`."""
    total = None
    for where, valid in holding:
        where = where.reshape(*([1] * len(lead)), in_plane).expand(*lead, in_plane)
        if picked is not None:
            valid = valid & (picked.gather(-1, where) == position)
        part = torch.where(valid, grads.gather(-1, where), 0.0)
        total = part if total is None else total + part
    return total


def _plane_positions(in_sizes, device) -> torch.Tensor:
    """Each input position's flat index in its plane."""
    dims = len(in_sizes)
    return sum(_along(d, dims, torch.arange(in_sizes[d], device=device)) * math.prod(in_sizes[d + 1:])
               for d in range(dims)).reshape(math.prod(in_sizes))


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _max_pool_backward(dims: int):
    def backward(grad_output: torch.Tensor, x: torch.Tensor, kernel_size, stride, padding, dilation,
                 ceil_mode: bool, indices: torch.Tensor) -> torch.Tensor:
        if not x.dtype.is_floating_point or x.dim() not in (dims + 1, dims + 2):
            return NotImplemented
        kernel = _spatial(kernel_size, dims)
        lead, in_sizes, out_sizes = x.shape[:-dims], x.shape[-dims:], grad_output.shape[-dims:]
        in_plane, out_plane = math.prod(in_sizes), math.prod(out_sizes)
        grads = grad_output.reshape(*lead, out_plane).to(_opmath(x.dtype))
        holding = _windows_holding(in_sizes, out_sizes, kernel, _spatial(stride, dims, default=kernel),
                                   _spatial(padding, dims), _spatial(dilation, dims), x.device)
        total = _gathered(grads, lead, in_plane, holding, indices.reshape(*lead, out_plane),
                          _plane_positions(in_sizes, x.device))
        return total.to(x.dtype).reshape(x.shape)

    return backward


def _avg_pool_divisors(in_sizes, out_sizes, kernel, strides, pads, count_include_pad: bool, device):
    """Each window's divisor, as eager computes it: the window clipped to the padded input (with the
    padding counted) or to the input itself (without)."""
    dims, count = len(in_sizes), None
    for d in range(dims):
        start = torch.arange(out_sizes[d], device=device) * strides[d] - pads[d]
        end = torch.clamp(start + kernel[d], max=in_sizes[d] + pads[d])
        size = end - start if count_include_pad else end.clamp(max=in_sizes[d]) - start.clamp(min=0)
        count = _along(d, dims, size) if count is None else count * _along(d, dims, size)
    return count


def _avg_pool(dims: int):
    def forward(x: torch.Tensor, kernel_size, stride=(), padding=0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override=None) -> torch.Tensor:
        if not x.dtype.is_floating_point or x.dim() not in (dims + 1, dims + 2):
            return NotImplemented
        kernel = _spatial(kernel_size, dims)
        strides, pads = _spatial(stride, dims, default=kernel), _spatial(padding, dims)
        in_sizes = x.shape[-dims:]
        out_sizes = [_output_size(in_sizes[d], kernel[d], pads[d], strides[d], 1, ceil_mode) for d in range(dims)]
        windows = _windows(x.to(_opmath(x.dtype)), kernel, strides, pads, out_sizes, 0.0)
        total = windows.sum(dim=tuple(range(-dims, 0)))
        if divisor_override:
            return (total / divisor_override).to(x.dtype)
        divisor = _avg_pool_divisors(in_sizes, out_sizes, kernel, strides, pads, count_include_pad, x.device)
        return (total / divisor).to(x.dtype)

    return forward


def _avg_pool_backward(dims: int):
    def backward(grad_output: torch.Tensor, x: torch.Tensor, kernel_size, stride, padding, ceil_mode: bool,
                 count_include_pad: bool, divisor_override) -> torch.Tensor:
        if not x.dtype.is_floating_point or x.dim() not in (dims + 1, dims + 2):
            return NotImplemented
        kernel = _spatial(kernel_size, dims)
        strides, pads = _spatial(stride, dims, default=kernel), _spatial(padding, dims)
        lead, in_sizes, out_sizes = x.shape[:-dims], x.shape[-dims:], grad_output.shape[-dims:]
        in_plane, out_plane = math.prod(in_sizes), math.prod(out_sizes)
        grads = grad_output.to(_opmath(x.dtype))
        if divisor_override:
            grads = grads / divisor_override
        else:
            grads = grads / _avg_pool_divisors(in_sizes, out_sizes, kernel, strides, pads, count_include_pad,
                                               x.device)
        holding = _windows_holding(in_sizes, out_sizes, kernel, strides, pads, (1,) * dims, x.device)
        total = _gathered(grads.reshape(*lead, out_plane), lead, in_plane, holding)
        return total.to(x.dtype).reshape(x.shape)

    return backward


def _adaptive_windows(x: torch.Tensor, dims: int, out_sizes: tuple[int, ...]):
    """Adaptive pooling's windows: output i of a dimension of size `size` pools [floor(i*size/out),
    ceil((i+1)*size/out)), windows of unequal length. Each dimension's windows are gathered at their
    longest length (a tensor-indexed read of the input, positions clamped). Returns the windows as
    lead + outs + (one flattened window), whether each position lies inside its window, and per
    dimension the windows' starts (tensors), lengths (tensors) and longest length."""
    lead, in_sizes = x.dim() - dims, x.shape[-dims:]
    windows, valid, starts, lengths, longest = x, None, [], [], []
    for d in range(dims):
        size, out = in_sizes[d], out_sizes[d]
        length = max(-((-(i + 1) * size) // out) - (i * size) // out for i in range(out))
        i = torch.arange(out, device=x.device).view(out, 1)
        start_t, end_t = (i * size) // out, -((-(i + 1) * size) // out)  # as listed above, as tensors
        offsets = torch.arange(length, device=x.device).view(1, length)
        inside = offsets < end_t - start_t
        where = (start_t + offsets).clamp(max=size - 1)
        # read dim d at (out, length) positions: that dim becomes two, (out, length)
        index = [slice(None)] * (lead + 2 * d) + [where]
        windows = windows[tuple(index)]
        mask_shape = [1] * (2 * dims)
        mask_shape[2 * d], mask_shape[2 * d + 1] = out, length
        inside = inside.view(mask_shape)
        valid = inside if valid is None else valid & inside
        starts.append(start_t.view(out))
        lengths.append((end_t - start_t).view(out))
        longest.append(length)
    # lead + (out0, len0, out1, len1, ...) -> lead + outs + lens, the lens flattened
    order = list(range(lead)) + [lead + 2 * d for d in range(dims)] + [lead + 2 * d + 1 for d in range(dims)]
    flat = lead + dims
    windows = windows.permute(order)
    valid = valid.permute([2 * d for d in range(dims)] + [2 * d + 1 for d in range(dims)])
    windows = windows.reshape(*windows.shape[:flat], math.prod(longest))
    return windows, valid.reshape(*valid.shape[:dims], math.prod(longest)), starts, lengths, longest


def _adaptive_arguments(x: torch.Tensor, dims: int, output_size) -> tuple[int, ...] | None:
    """The output sizes, or None for what stays PyTorch's (integers, an empty input or output)."""
    if not x.dtype.is_floating_point or x.dim() not in (dims + 1, dims + 2):
        return None
    out_sizes = _spatial(output_size, dims)
    if any(o <= 0 for o in out_sizes) or any(s <= 0 for s in x.shape[-dims:]):
        return None  # empty: eager's error or empty result
    return out_sizes


def _adaptive_max_pool(dims: int):
    """Adaptive max pooling: the windows (positions past a window's end masked with -inf), then the
    max and its first position as in _max_pool."""

    def forward(x: torch.Tensor, output_size):
        out_sizes = _adaptive_arguments(x, dims, output_size)
        if out_sizes is None:
            return NotImplemented
        windows, valid, starts, _, longest = _adaptive_windows(x, dims, out_sizes)
        windows = torch.where(valid, windows, float("-inf"))  # offset 0 is always inside: no first_valid
        values, first = _eager_position(windows, *max_dim(windows, -1), None)
        in_sizes, indices = x.shape[-dims:], None
        for d in range(dims):
            offset = (first // math.prod(longest[d + 1:])) % longest[d]
            term = (_along(d, dims, starts[d]) + offset) * math.prod(in_sizes[d + 1:])
            indices = term if indices is None else indices + term
        return values, indices

    return forward


def _adaptive_avg_pool(dims: int):
    """Adaptive average pooling: the windows' sum (positions past a window's end as 0) over the window's
    element count, accumulated in float32 for half precision."""

    def forward(x: torch.Tensor, output_size):
        out_sizes = _adaptive_arguments(x, dims, output_size)
        if out_sizes is None:
            return NotImplemented
        windows, valid, _, lengths, _ = _adaptive_windows(x, dims, out_sizes)
        total = torch.where(valid, windows.to(_opmath(x.dtype)), 0.0).sum(-1)
        count = math.prod(_along(d, dims, lengths[d]) for d in range(dims))
        return (total / count).to(x.dtype)

    return forward


def _adaptive_windows_holding(in_sizes, out_sizes, device):
    """_windows_holding for adaptive pooling: output i of a dimension covers [floor(i*size/out),
    ceil((i+1)*size/out)), so input position p lies in the windows floor(p*out/size) up to
    ceil((p+1)*out/size) - 1, a run of at most ceil(out/size) + 1 (one for a global pool). Yields
    (where, valid) per candidate, as _windows_holding does."""
    dims = len(in_sizes)
    per_dim = []
    for d in range(dims):
        size, out = in_sizes[d], out_sizes[d]
        runs = [-(-(p + 1) * out // size) - (p * out) // size for p in range(size)]  # windows holding p
        position = torch.arange(size, device=device)
        first, last = (position * out) // size, -((-(position + 1) * out) // size) - 1
        per_dim.append([((first + k).clamp(max=out - 1), first + k <= last) for k in range(max(runs))])
    yield from _candidate_windows(per_dim, in_sizes, out_sizes)


def _adaptive_avg_pool_backward(dims: int):
    """Each input position's gradient: the gradients of the windows holding it, each over its window's
    element count, summed in a fixed order (a global pool: one window, a broadcast)."""

    def backward(grad_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out_sizes = tuple(grad_output.shape[-dims:])
        if _adaptive_arguments(x, dims, out_sizes) is None:
            return NotImplemented
        lead, in_sizes = x.shape[:-dims], x.shape[-dims:]
        count = None
        for d in range(dims):
            i = torch.arange(out_sizes[d], device=x.device)
            length = -((-(i + 1) * in_sizes[d]) // out_sizes[d]) - (i * in_sizes[d]) // out_sizes[d]
            count = _along(d, dims, length) if count is None else count * _along(d, dims, length)
        grads = (grad_output.to(_opmath(x.dtype)) / count).reshape(*lead, math.prod(out_sizes))
        total = _gathered(grads, lead, math.prod(in_sizes), _adaptive_windows_holding(in_sizes, out_sizes, x.device))
        return total.to(x.dtype).reshape(x.shape)

    return backward


def _adaptive_max_pool_backward(dims: int):
    """As _max_pool_backward: each input position takes the gradients of the windows holding it whose
    recorded maximum is that position."""

    def backward(grad_output: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        out_sizes = tuple(grad_output.shape[-dims:])
        if _adaptive_arguments(x, dims, out_sizes) is None:
            return NotImplemented
        lead, in_sizes = x.shape[:-dims], x.shape[-dims:]
        in_plane, out_plane = math.prod(in_sizes), math.prod(out_sizes)
        grads = grad_output.reshape(*lead, out_plane).to(_opmath(x.dtype))
        total = _gathered(grads, lead, in_plane, _adaptive_windows_holding(in_sizes, out_sizes, x.device),
                          indices.reshape(*lead, out_plane), _plane_positions(in_sizes, x.device))
        return total.to(x.dtype).reshape(x.shape)

    return backward


POOLING = {
    aten.max_pool2d_with_indices.default: _max_pool(2),
    aten.max_pool3d_with_indices.default: _max_pool(3),
    aten.max_pool2d_with_indices_backward.default: _max_pool_backward(2),
    aten.max_pool3d_with_indices_backward.default: _max_pool_backward(3),
    aten.avg_pool2d.default: _avg_pool(2),
    aten.avg_pool3d.default: _avg_pool(3),
    aten.avg_pool2d_backward.default: _avg_pool_backward(2),
    aten.avg_pool3d_backward.default: _avg_pool_backward(3),
    aten.adaptive_max_pool2d.default: _adaptive_max_pool(2),
    aten.adaptive_max_pool3d.default: _adaptive_max_pool(3),
    aten._adaptive_avg_pool3d.default: _adaptive_avg_pool(3),
    aten._adaptive_avg_pool2d_backward.default: _adaptive_avg_pool_backward(2),
    aten._adaptive_avg_pool3d_backward.default: _adaptive_avg_pool_backward(3),
    aten.adaptive_max_pool2d_backward.default: _adaptive_max_pool_backward(2),
    aten.adaptive_max_pool3d_backward.default: _adaptive_max_pool_backward(3),
}

"""2-D max pooling as ops we lower: a -inf pad, the windows as a view, a max and its first position.

torch's own reference for max_pool2d_with_indices exists only in recent versions (2.13 has it, the
2.11 of our GPU image does not), so the op would stay PyTorch's call there. This one needs nothing
new: `unfold` makes the windows a strided view of the padded input (N, C, OH, OW, kh, kw), the
reshape to (..., kh*kw) is placed by index arithmetic inside the fused kernel, and the max with its
first position comes from arg_reductions.max_dim. Indices are positions in the unpadded input's
H*W plane, as eager returns them; windows never hold only padding (eager requires pad <= kernel/2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compiler_core.decomp.arg_reductions import max_dim

aten = torch.ops.aten


def _pair(value, default=None) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    value = list(value) or list(default)
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def _output_size(size: int, kernel: int, pad: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    span = dilation * (kernel - 1) + 1
    out = -(-(size + 2 * pad - span) // stride) + 1 if ceil_mode else (size + 2 * pad - span) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:  # the last window must start inside the input or left pad
        out -= 1
    return out


def max_pool2d_with_indices(x: torch.Tensor, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode: bool = False):
    if not x.dtype.is_floating_point or x.dim() not in (3, 4):
        return NotImplemented  # integer pooling (no -inf to pad with): PyTorch's kernel
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel_size), _pair(padding), _pair(dilation)
    sh, sw = _pair(stride, default=(kh, kw))
    batched = x.dim() == 4
    if not batched:
        x = x.unsqueeze(0)
    height, width = x.shape[-2:]
    oh = _output_size(height, kh, ph, sh, dh, ceil_mode)
    ow = _output_size(width, kw, pw, sw, dw, ceil_mode)
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    # Right/bottom padding so the last window fits (ceil_mode may reach past the symmetric pad).
    bottom = max(0, (oh - 1) * sh + span_h - height - ph)
    right = max(0, (ow - 1) * sw + span_w - width - pw)
    padded = F.pad(x, (pw, right, ph, bottom), value=float("-inf"))
    windows = padded.unfold(2, span_h, sh).unfold(3, span_w, sw)[:, :, :oh, :ow, ::dh, ::dw]
    values, first = max_dim(windows.reshape(*windows.shape[:4], kh * kw), -1)
    rows = torch.arange(oh, device=x.device).view(oh, 1) * sh - ph + (first // kw) * dh
    cols = torch.arange(ow, device=x.device).view(1, ow) * sw - pw + (first % kw) * dw
    indices = rows * width + cols
    if not batched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return values, indices


POOLING = {aten.max_pool2d_with_indices.default: max_pool2d_with_indices}

"""Weight normalisation's backward (`nn.utils.parametrizations.weight_norm`: wav2vec2's and HuBERT's
positional convolution) as sums and pointwise math, so it runs in our kernels.

With w = v * g / ||v|| (the norm over every dim but `dim`, kept as `norms`, g's shape):

    grad_g = sum(grad_w * v) / norms                                  (over every dim but `dim`)
    grad_v = (g / norms) * (grad_w - v * grad_g / norms)

which is ATen's own formula (WeightNorm.cpp), computed in float32 for bf16/fp16 as ATen does. The
forward is torch's reference (table.py's list); torch has no reference for this backward.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def weight_norm_interface_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                                   saved_norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not (grad_w.is_floating_point() and saved_v.dim() > 0):
        return NotImplemented
    dim = dim % saved_v.dim()
    reduced = [i for i in range(saved_v.dim()) if i != dim]
    compute = torch.float32 if saved_v.dtype in (torch.bfloat16, torch.float16) else saved_v.dtype
    grad, v, g, norms = (t.to(compute) for t in (grad_w, saved_v, saved_g, saved_norms))
    grad_g = (grad * v).sum(reduced, keepdim=True) / norms
    grad_v = (g / norms) * (grad - v * (grad_g / norms))
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


WEIGHT_NORM = {aten._weight_norm_interface_backward.default: weight_norm_interface_backward}

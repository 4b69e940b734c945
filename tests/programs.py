"""The catalogue of small programs the numerics tests compile with both backends.

Each entry: (id, fn, make_inputs).  Inputs are small (the Triton interpreter runs on the CPU) and
cover the op classes of the foundation: pointwise with broadcasting and type promotion,
single-axis reductions, views (reshape, permute/transpose, slice, expand), and matmul as an
extern call; with non-contiguous, broadcast and odd-sized inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def tiny_chain(x):
    for _ in range(20):
        x = torch.sin(x) * 1.01 + 0.1
    return x


def rmsnorm(x, w):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


PROGRAMS = [
    # pointwise
    ("add_broadcast", lambda x, y: x + y, lambda: (_r(4, 1, 3), _r(5, 1))),
    ("chain5", lambda x: ((x * 2 + 1).exp() - 3).abs().sqrt(), lambda: (_r(37, 11),)),
    ("swiglu_chain", lambda x, y, z: x * torch.sigmoid(x) * y + z, lambda: (_r(1000), _r(1000), _r(1000))),
    ("tiny_chain", tiny_chain, lambda: (_r(1024),)),
    ("int_float_promotion", lambda i, x: i * x + i, lambda: (torch.arange(12).reshape(3, 4), _r(3, 4))),
    ("int_true_div", lambda a, b: a / b, lambda: (torch.arange(-6, 6), torch.tensor([3, -3] * 6))),
    ("int_floor_div_mod", lambda a, b: (torch.div(a, b, rounding_mode="floor"), a % b,
                                         torch.div(a, b, rounding_mode="trunc")),
     lambda: (torch.arange(-9, 9), torch.tensor([4, -4, 3] * 6))),
    ("compare_where", lambda x, y: torch.where(x > y, x, y * 2), lambda: (_r(6, 7), _r(7))),
    ("clamp_relu", lambda x: torch.relu(x).clamp(max=0.5) + torch.clamp(x, -0.2, 0.3), lambda: (_r(9, 9),)),
    ("unary_mix", lambda x: torch.tanh(x) + torch.erf(x) + torch.log1p(x.abs()) + torch.expm1(x * 0.1)
     + torch.floor(x) + torch.ceil(x) + torch.round(x * 3) + torch.sign(x), lambda: (_r(33),)),
    ("pow_rsqrt", lambda x: x.pow(2) + x.abs().pow(0.5) + x.pow(3) + torch.rsqrt(x.abs() + 1), lambda: (_r(17),)),
    ("bool_logic", lambda x, y: ((x > 0) & (y < 0)) | ~(x > 1), lambda: (_r(5, 5), _r(5, 5))),
    ("bf16_cast", lambda x: (x.to(torch.bfloat16) * 2).float() + 1, lambda: (_r(10),)),
    ("scalar_0d", lambda x, s: x * s + s, lambda: (_r(3, 3), torch.tensor(2.5))),
    ("double", lambda x: torch.exp(x) * 3 - x, lambda: (_r(8, dtype=torch.float64),)),
    ("round_decimals", lambda x: (torch.round(x, decimals=2), torch.round(x, decimals=-1)), lambda: (_r(40) * 50,)),
    # views
    ("transpose_add", lambda x: x.t() + 1, lambda: (_r(5, 7),)),
    ("permute_mul", lambda x, y: x.permute(2, 0, 1) * y, lambda: (_r(3, 4, 5), _r(3, 1))),
    ("slice_sum", lambda x: x[:, 1:3].sum(0), lambda: (_r(6, 5),)),
    ("reshape_expand", lambda x: x.reshape(2, 3, 4).expand(5, 2, 3, 4) * 2, lambda: (_r(24),)),
    ("noncontiguous_input", lambda x: torch.sigmoid(x) * x, lambda: (_r(8, 6).t(),)),
    ("offset_input", lambda x: x * 3 + 1, lambda: (_r(10, 10)[2:7, 3:9],)),
    ("strided_step", lambda x: x[::2, ::3] + x[1::2, ::3], lambda: (_r(8, 9),)),
    ("broadcast_input", lambda x: x.exp() + 1, lambda: (_r(1, 7).expand(4, 7),)),
    ("split_unbind", lambda x: (x.split(2)[1] * 2, torch.unbind(x, 1)[0].sin()), lambda: (_r(6, 3),)),
    # reductions
    ("softmax", lambda x: torch.softmax(x, -1), lambda: (_r(33, 100),)),
    ("softmax_dim0", lambda x: torch.softmax(x, 0), lambda: (_r(7, 9),)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), lambda: (_r(6, 50),)),
    ("layernorm_gelu", lambda x, w, b: F.gelu(F.layer_norm(x, (x.shape[-1],), w, b)),
     lambda: (_r(16, 64), _r(64), _r(64))),
    ("layernorm_3d", lambda x: F.layer_norm(x, (31,)), lambda: (_r(2, 3, 31),)),
    ("rmsnorm", rmsnorm, lambda: (_r(8, 64), _r(64))),
    ("sum_mean", lambda x: (x.sum(-1), x.mean(0, keepdim=True)), lambda: (_r(13, 17),)),
    ("amax_amin", lambda x: x.amax(1) - x.amin(1), lambda: (_r(9, 10),)),
    ("var_std", lambda x: (x.var(-1), x.std(0)), lambda: (_r(4, 10),)),
    ("full_sum", lambda x: x.sum() * 2, lambda: (_r(7, 5),)),
    ("zero_dim_reductions", lambda x: (x.mean(), torch.logsumexp(x, 0), x.amax()), lambda: (torch.tensor(1.5),)),
    ("int_sum", lambda x: x.sum(-1), lambda: (torch.arange(20).reshape(4, 5),)),
    ("reduce_middle", lambda x: x.sum(1) + 1, lambda: (_r(3, 4, 5),)),
    ("prod", lambda x: x.prod(-1), lambda: (_r(4, 6) * 0.5 + 1,)),
    # extern
    ("relu_mm_bias", lambda a, b, c: torch.relu(a @ b + c), lambda: (_r(32, 16), _r(16, 8), _r(8))),
    ("linear_gelu", lambda x, w, b: F.gelu(F.linear(x, w, b)), lambda: (_r(4, 8), _r(6, 8), _r(6))),
    ("bmm_softmax", lambda q, k: torch.softmax(q @ k.transpose(-1, -2) / 4, -1), lambda: (_r(2, 5, 8), _r(2, 5, 8))),
]

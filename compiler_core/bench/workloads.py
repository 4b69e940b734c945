"""The standard workloads of TARGETS.md: each a program, its inputs by device and size, and its ideal bytes.

    w = WORKLOADS["softmax"]
    args = w.make_inputs("cpu", "full")     # (x,) with x of 2048 x 1024 fp32
    y = w.fn(*args)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

SIZES = ("full", "small")  # "small": tiny shapes for smoke tests; ratios at this size mean nothing


def relu_mm_bias(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return torch.relu(a @ b + c)


def layernorm_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def swiglu_chain(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) * y + z


def tiny_chain(x: torch.Tensor) -> torch.Tensor:
    for _ in range(20):
        x = torch.sin(x) * 1.01 + 0.1
    return x


@dataclass(frozen=True)
class Workload:
    name: str
    fn: Callable[..., torch.Tensor]
    # device -> size -> (shape parameters, dtype); shapes are filled in by `make`.
    shapes: dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]]
    make: Callable[[tuple[int, ...], torch.dtype, str], tuple[torch.Tensor, ...]]
    memory_bound: bool
    flops: Callable[[tuple[int, ...]], int] = lambda dims: 0  # for compute-bound rows (TFLOP/s)
    launch_bound: bool = False  # also timed with mode="reduce-overhead" (CUDA graphs) on CUDA

    def make_inputs(self, device: str, size: str = "full", seed: int = 0) -> tuple[torch.Tensor, ...]:
        dims, dtype = self.shape(device, size)
        torch.manual_seed(seed)
        return self.make(dims, dtype, device)

    def shape(self, device: str, size: str = "full") -> tuple[tuple[int, ...], torch.dtype]:
        return self.shapes["cuda" if device == "cuda" else "cpu"][size]


def _rand(*shape: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, device=device)


def _mm_inputs(dims, dtype, device):
    m, k, n = dims
    # Scale so relu(a @ b + c) stays O(1) whatever k is.
    a = _rand(m, k, dtype=dtype, device=device)
    b = _rand(k, n, dtype=dtype, device=device) / k**0.5
    return a, b, _rand(n, dtype=dtype, device=device)


def _row_affine_inputs(dims, dtype, device):
    rows, cols = dims
    return _rand(rows, cols, dtype=dtype, device=device), _rand(cols, dtype=dtype, device=device), \
        _rand(cols, dtype=dtype, device=device)


def _rows_inputs(dims, dtype, device):
    return (_rand(*dims, dtype=dtype, device=device),)


def _rmsnorm_inputs(dims, dtype, device):
    rows, cols = dims
    return _rand(rows, cols, dtype=dtype, device=device), _rand(cols, dtype=dtype, device=device)


def _three_flat_inputs(dims, dtype, device):
    return tuple(_rand(*dims, dtype=dtype, device=device) for _ in range(3))


f32, bf16 = torch.float32, torch.bfloat16

# GPU and CPU sizes from TARGETS.md ("full"), plus "small" for smoke tests.
WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("relu_mm_bias", relu_mm_bias,
             {"cuda": {"full": ((4096, 4096, 4096), bf16), "small": ((64, 64, 64), bf16)},
              "cpu": {"full": ((512, 512, 512), f32), "small": ((32, 32, 32), f32)}},
             _mm_inputs, memory_bound=False, flops=lambda d: 2 * d[0] * d[1] * d[2]),
    Workload("layernorm_gelu", layernorm_gelu,
             {"cuda": {"full": ((16384, 4096), bf16), "small": ((64, 256), bf16)},
              "cpu": {"full": ((2048, 1024), f32), "small": ((32, 64), f32)}},
             _row_affine_inputs, memory_bound=True),
    Workload("softmax", softmax,
             {"cuda": {"full": ((16384, 4096), f32), "small": ((64, 256), f32)},
              "cpu": {"full": ((2048, 1024), f32), "small": ((32, 64), f32)}},
             _rows_inputs, memory_bound=True),
    Workload("rmsnorm", rmsnorm,
             {"cuda": {"full": ((16384, 4096), bf16), "small": ((64, 256), bf16)},
              "cpu": {"full": ((2048, 1024), f32), "small": ((32, 64), f32)}},
             _rmsnorm_inputs, memory_bound=True),
    Workload("swiglu_chain", swiglu_chain,
             {"cuda": {"full": ((2**26,), f32), "small": ((2**14,), f32)},
              "cpu": {"full": ((2**22,), f32), "small": ((2**10,), f32)}},
             _three_flat_inputs, memory_bound=True),
    Workload("tiny_chain", tiny_chain,
             {"cuda": {"full": ((1024,), f32), "small": ((1024,), f32)},
              "cpu": {"full": ((1024,), f32), "small": ((1024,), f32)}},
             _rows_inputs, memory_bound=False, launch_bound=True),
]}

# In TARGETS.md but not benchmarked yet: they need training support in the bench loop.
NOT_SUPPORTED_YET = {
    "mlp_train_step": "training workload (forward + backward); the bench runs inference workloads only for now",
    "gpt_block": "training workload (forward + backward); the bench runs inference workloads only for now",
}

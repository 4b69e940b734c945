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


# Training workloads: the function returns the loss; the bench times loss + backward and checks the
# loss and every gradient (the inputs that require grad are the parameters).

def mlp_train_step(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                   ln_w: torch.Tensor, ln_b: torch.Tensor) -> torch.Tensor:
    h = F.gelu(F.linear(x, w1, b1))
    y = F.layer_norm(F.linear(h, w2, b2), (x.shape[-1],), ln_w, ln_b)
    return y.float().square().mean()


def gpt_block(x: torch.Tensor, ln1_w: torch.Tensor, ln1_b: torch.Tensor, w_qkv: torch.Tensor, b_qkv: torch.Tensor,
              w_proj: torch.Tensor, b_proj: torch.Tensor, ln2_w: torch.Tensor, ln2_b: torch.Tensor,
              w_fc: torch.Tensor, b_fc: torch.Tensor, w_out: torch.Tensor, b_out: torch.Tensor) -> torch.Tensor:
    """One pre-LN GPT block (causal attention + GELU MLP); the head count is w_qkv's rows / 3 / 64."""
    batch, seq, d = x.shape
    heads = d // 64
    q, k, v = F.linear(F.layer_norm(x, (d,), ln1_w, ln1_b), w_qkv, b_qkv).split(d, dim=-1)
    q, k, v = (t.view(batch, seq, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, d)
    x = x + F.linear(attn, w_proj, b_proj)
    x = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (d,), ln2_w, ln2_b), w_fc, b_fc)), w_out, b_out)
    return x.float().square().mean()


# The GPT-2 of the model zoo's realistic size, built once per (dims, dtype, device) by its inputs.
_GPT2: dict = {}


def gpt2_train_step(ids: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
    """transformers' GPT2LMHeadModel, random init, language-model loss on `ids`. `params` are the
    model's own parameters, passed so that the bench times their gradients like any workload's."""
    model = _GPT2[(tuple(ids.shape), params[0].dtype, ids.device.type)]
    return model(input_ids=ids, labels=ids).loss


def _gpt2_inputs(dims, dtype, device):
    from transformers import GPT2Config, GPT2LMHeadModel  # an optional dependency: only this row needs it

    batch, seq, hidden, layers = dims
    config = GPT2Config(n_embd=hidden, n_layer=layers, n_head=hidden // 64, n_positions=seq, vocab_size=50257,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout: contenders must agree
    model = GPT2LMHeadModel(config).to(device=device, dtype=dtype).train()
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    _GPT2[(tuple(ids.shape), dtype, torch.device(device).type)] = model
    return (ids, *model.parameters())


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
    train: bool = False  # fn returns a loss: timed as loss + backward, checked on loss and gradients
    default_devices: tuple[str, ...] = ("cpu", "cuda")  # run without --only on these devices

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


def _param(*shape: int, dtype: torch.dtype, device: str, scale: float = 1.0, fill: float | None = None) -> torch.Tensor:
    t = torch.full(shape, fill, dtype=dtype, device=device) if fill is not None else \
        _rand(*shape, dtype=dtype, device=device) * scale
    return t.requires_grad_(True)


def _linear_params(n_in: int, n_out: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    return _param(n_out, n_in, dtype=dtype, device=device, scale=n_in**-0.5), \
        _param(n_out, dtype=dtype, device=device, scale=0.02)


def _layer_norm_params(d: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    return _param(d, dtype=dtype, device=device, fill=1.0), _param(d, dtype=dtype, device=device, fill=0.0)


def _mlp_train_inputs(dims, dtype, device):
    batch, d = dims
    return (_rand(batch, d, dtype=dtype, device=device), *_linear_params(d, 4 * d, dtype, device),
            *_linear_params(4 * d, d, dtype, device), *_layer_norm_params(d, dtype, device))


def _gpt_block_inputs(dims, dtype, device):
    batch, seq, d = dims
    return (_rand(batch, seq, d, dtype=dtype, device=device).requires_grad_(True),
            *_layer_norm_params(d, dtype, device), *_linear_params(d, 3 * d, dtype, device),
            *_linear_params(d, d, dtype, device), *_layer_norm_params(d, dtype, device),
            *_linear_params(d, 4 * d, dtype, device), *_linear_params(4 * d, d, dtype, device))


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
    Workload("mlp_train_step", mlp_train_step,
             {"cuda": {"full": ((8192, 4096), f32), "small": ((64, 64), f32)},
              "cpu": {"full": ((1024, 512), f32), "small": ((32, 32), f32)}},
             # forward 2 matmuls, backward 4, of batch x d x 4d each
             _mlp_train_inputs, memory_bound=False, train=True, flops=lambda d: 6 * 2 * d[0] * d[1] * 4 * d[1]),
    Workload("gpt_block", gpt_block,
             {"cuda": {"full": ((8, 1024, 1024), bf16), "small": ((2, 64, 128), bf16)},
              "cpu": {"full": ((4, 128, 256), f32), "small": ((2, 16, 64), f32)}},
             _gpt_block_inputs, memory_bound=False, train=True),
    # TARGETS.md's zoo size (hidden 768, sequence 512, batch 8, 2 layers); on CPU only when named.
    Workload("gpt2_train_step", gpt2_train_step,
             {"cuda": {"full": ((8, 512, 768, 2), f32), "small": ((2, 32, 128, 1), f32)},
              "cpu": {"full": ((2, 128, 256, 2), f32), "small": ((2, 16, 64, 1), f32)}},
             _gpt2_inputs, memory_bound=False, train=True, default_devices=("cuda",)),
]}

# In TARGETS.md but not benchmarked yet (none today; the runner still reports any listed here).
NOT_SUPPORTED_YET: dict[str, str] = {}

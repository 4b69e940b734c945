"""Column reductions' tile on the GPU: each (columns, rows per step, rows per program, warps) timed.

    PYTHONPATH=. python scripts/tune_columns.py

A column reduction (a bias's or a layer norm weight's gradient: a sum over the rows of a row-major
tensor) runs COLUMN_XBLOCK adjacent columns per Triton program, COLUMN_RBLOCK rows per loop step,
split into chunks of at least COLUMN_MIN_CHUNK rows (schedule/plan_passes.py,
codegen/triton/kernel.py). This compiles three kernels of gpt_block's backward shape (bf16, 8,192
rows) under each setting and prints their times and bandwidth, to choose those constants from.
"""

from __future__ import annotations

import itertools

import torch
from torch.profiler import ProfilerActivity, profile

import compiler_core as cc
from compiler_core.codegen.triton import kernel
from compiler_core.schedule import plan_passes


def weight_grads(x, dy, mean, rstd):  # layer norm's weight and bias gradients
    return (((x.float() - mean) * rstd) * dy.float()).sum(0), dy.float().sum(0)


def input_grad_and_bias(x, dy, mean, rstd, s1, s2, res, w):  # layer norm's dx, the residual, a bias gradient
    xhat = (x.float() - mean) * rstd
    dx = (rstd / x.shape[1]) * (x.shape[1] * dy.float() * w - s1 - xhat * s2) + res.float()
    return dx.to(x.dtype), dx.sum(0)


def gelu_grad_and_bias(x, g):
    dx = torch.ops.aten.gelu_backward(g.float(), x.float()).to(x.dtype)
    return dx, dx.float().sum(0)


def cases(device="cuda"):
    bf = torch.bfloat16
    rows, d, wide = 8192, 1024, 4096

    def r(*shape, dtype=bf):
        return torch.randn(*shape, device=device, dtype=dtype)
    yield "weight_grads 8192x1024", weight_grads, (r(rows, d), r(rows, d), r(rows, 1, dtype=torch.float32),
                                                    r(rows, 1, dtype=torch.float32).abs()), 2 * rows * d * 2
    yield "dx+bias 8192x1024", input_grad_and_bias, (
        r(rows, d), r(rows, d), r(rows, 1, dtype=torch.float32), r(rows, 1, dtype=torch.float32).abs(),
        r(rows, 1, dtype=torch.float32), r(rows, 1, dtype=torch.float32), r(rows, d), r(d, dtype=torch.float32)), \
        4 * rows * d * 2
    yield "gelu dx+bias 8192x4096", gelu_grad_and_bias, (r(rows, wide), r(rows, wide)), 3 * rows * wide * 2


def time_ms(fn, args, repeats=20):
    """Device time of one call: the kernels' own time under torch.profiler (host overhead left out,
    which at these sizes would otherwise be most of a call)."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn(*args)
        torch.cuda.synchronize()
    device_us = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return device_us / repeats / 1e3


def main() -> None:
    settings = list(itertools.product((64, 128), (32, 64, 128), (64, 256), (4, 8)))
    all_cases = list(cases())
    print(f"{'xblock':>6} {'rblock':>6} {'chunk':>5} {'warps':>5}  " + "  ".join(f"{c[0]:>24}" for c in all_cases))
    for xblock, rblock, chunk, warps in settings:
        plan_passes.COLUMN_XBLOCK, kernel.COLUMN_RBLOCK = xblock, rblock
        plan_passes.COLUMN_MIN_CHUNK, kernel.COLUMN_NUM_WARPS = chunk, warps
        cells = []
        for _name, fn, args, nbytes in all_cases:
            torch._dynamo.reset()
            compiled = cc.compile(fn)
            got, want = compiled(*args), fn(*args)
            ok = all(torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-1) for a, b in zip(got, want))
            ms = time_ms(compiled, args)
            cells.append(f"{ms * 1e3:8.1f} us {nbytes / ms / 1e6:6.0f} GB/s{'' if ok else ' BAD'}")
        print(f"{xblock:6d} {rblock:6d} {chunk:5d} {warps:5d}  " + "  ".join(f"{c:>24}" for c in cells), flush=True)


if __name__ == "__main__":
    main()

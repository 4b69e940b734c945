"""Where one benchmark workload spends its device time: ours, Inductor and eager, kernel by kernel.

    PYTHONPATH=. python scripts/profile_workload.py gpt_block --device cuda
    PYTHONPATH=. python scripts/profile_workload.py mlp_train_step --device cpu --steps 3

Each contender is compiled and warmed up as the bench does (compiler_core/bench), then a few steps run
under torch.profiler. Per contender: device time per step, split into matmul/attention library calls,
generated kernels and the rest, then the kernels that take the most time. The bench's ratio says which
workload is slow; this says which kernel makes it so.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import compiler_core as cc
from compiler_core.bench.runner import _step
from compiler_core.bench.workloads import WORKLOADS
from compiler_core.compare import inductor

# Vendor libraries: cuBLAS/CUTLASS GEMMs and fused attention on the GPU, ATen's matmuls on the CPU.
_LIBRARY = re.compile(r"gemm|cutlass|sm90_|sm80_|nvjet|cublas|flash|fmha|cudnn|attention|aten::(mm|addmm|bmm)$",
                      re.I)


def _category(name: str, device_kernel: bool) -> str:
    if _LIBRARY.search(name):
        return "library"
    # ATen's own device kernels are C++ templates ("void at::native::...<...>"); a Triton kernel
    # (Inductor's "triton_poi_...", ours "fused_add_exp_3") is a bare identifier.
    if device_kernel and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return "generated"
    return "other"


def _profile(step, device: str, steps: int) -> tuple[dict[str, float], dict[str, int]]:
    """Device microseconds and call counts per kernel name, summed over `steps` steps."""
    activities = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    for _ in range(3):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    times: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in prof.events():
        on_device = event.device_type == torch.autograd.DeviceType.CUDA
        if device == "cuda" and not on_device:
            continue
        # CPU: each op's self time, so nested calls are not counted twice
        us = event.device_time if on_device else event.self_cpu_time_total
        times[event.name] += us
        calls[event.name] += 1
    return times, calls


def report(name: str, device: str, steps: int, top: int) -> None:
    w = WORKLOADS[name]
    args = w.make_inputs(device, "full")
    contenders = {"eager": w.fn, "inductor": inductor.compile_with_inductor(w.fn),
                  "ours": cc.compile(inductor.private_copy(w.fn))}
    dims, dtype = w.shape(device)
    print(f"{name} {tuple(dims)} {str(dtype).replace('torch.', '')} on {device}, {steps} profiled steps")
    for label, fn in contenders.items():
        times, calls = _profile(_step(w, fn, args), device, steps)
        total = sum(times.values()) / steps
        by_category: dict[str, float] = defaultdict(float)
        on_device = device == "cuda"
        for kernel, us in times.items():
            by_category[_category(kernel, on_device)] += us / steps
        split = "  ".join(f"{c} {by_category[c]:9.1f}" for c in ("library", "generated", "other"))
        print(f"\n== {label}: {total:9.1f} us per step   ({split})")
        for kernel, us in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
            kind = _category(kernel, on_device)
            print(f"  {us / steps:9.1f} us  x{calls[kernel] // steps:<3d} {kind:9s} {kernel[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    opts = parser.parse_args()
    report(opts.workload, opts.device, opts.steps, opts.top)


if __name__ == "__main__":
    main()

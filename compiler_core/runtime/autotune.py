"""Autotuning of launch configs: time each kernel's candidate configs on the GPU, keep the fastest.

Kernels receive FakeTensors at compile time (PITFALLS.md), so tuning makes its own random inputs
with each buffer's sizes, strides and dtype.  The runtime owns the timing loop (CUDA events;
Triton's autotuner and do_bench are not used).  Results are cached on disk as JSON, keyed by kernel
source, GPU name and versions (runtime/cache.py), so a warm compile does not tune again.  Without a
GPU (the interpreter) the first, heuristic config is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from compiler_core import _compat
from compiler_core.codegen.artifacts import KernelSource
from compiler_core.codegen.triton.kernel import ASSERT_OPTIONS, launch_grid, launch_sites
from compiler_core.ir.graph import Buffer, LoopGraph
from compiler_core.ir.symbolic import example_values, hint
from compiler_core.runtime import cache
from compiler_core.runtime.build import LoadedKernels
from compiler_core.runtime.parallel_compile import WarmLaunch, compile_ahead

REPEATS = 20
# The heuristic config (the first candidate) stays unless another is faster by more than this share:
# timings on a busy GPU jitter by a few percent, and every other pick of a reduction's config is also
# another summation order, so a coin-flip choice would change results from run to run for nothing.
KEEP_HEURISTIC_WITHIN = 0.05


def choose_configs(kernels: tuple[KernelSource, ...], loaded: LoadedKernels,
                   graph: LoopGraph) -> tuple[dict[str, dict], tuple[str, ...]]:
    """(kernel name -> chosen config, a readable tuning log)."""
    chosen: dict[str, dict] = {}
    log: list[str] = []
    to_tune: list[KernelSource] = []
    for kernel in kernels:
        if not kernel.config_space:
            continue
        if len(kernel.config_space) == 1 or graph.device != "cuda":
            chosen[kernel.name] = dict(kernel.config_space[0])
            log.append(f"{kernel.name}: heuristic config {kernel.config_space[0]}")
            continue
        cached = _read_cache(kernel)
        if cached is not None:
            chosen[kernel.name] = cached
            log.append(f"{kernel.name}: cached tuning result {cached}")
            continue
        to_tune.append(kernel)
    if graph.device == "cuda":
        # Every candidate the timing loop launches and every launch of a kernel whose config is known,
        # compiled at once; the tuned kernels' own launches (compile options of their own) after them.
        known = [k for k in kernels if k.name in chosen]
        log.append(_compile_ahead(loaded, lambda: _timing_launches(to_tune, loaded, graph)
                                  + _host_launches(known, chosen, loaded, graph)))
    for kernel in to_tune:
        try:
            with _compat.real_tensors():
                timings = _time_configs(kernel, loaded.functions[kernel.name], _buffers(graph))
        except Exception as exc:  # noqa: BLE001 - tuning is an optimisation: keep the heuristic config
            chosen[kernel.name] = dict(kernel.config_space[0])
            log.append(f"{kernel.name}: tuning failed ({type(exc).__name__}: {exc}); heuristic config kept")
            continue
        best = pick_config(timings, dict(kernel.config_space[0]))
        chosen[kernel.name] = best
        _write_cache(kernel, best)
        log.append(f"{kernel.name}: " + ", ".join(f"{_short(c)} {ms * 1000:.1f}us" for c, ms in timings)
                   + f" -> {_short(best)}")
    if to_tune:
        log.append(_compile_ahead(loaded, lambda: _host_launches(to_tune, chosen, loaded, graph)))
    return chosen, tuple(line for line in log if line)


def _compile_ahead(loaded: LoadedKernels, launches: Callable[[], list[WarmLaunch]]) -> str:
    try:
        return compile_ahead(launches(), loaded.triton_module)
    except Exception as exc:  # noqa: BLE001 - compiling ahead saves time only: the launches compile in line
        return f"compiling ahead skipped ({type(exc).__name__}: {exc}); each launch compiles in line"


def pick_config(timings: list[tuple[dict, float]], heuristic: dict) -> dict:
    """The fastest config, unless the heuristic one is within KEEP_HEURISTIC_WITHIN of it."""
    best, best_ms = min(timings, key=lambda t: t[1])
    heuristic_ms = next((ms for c, ms in timings if c == heuristic), None)
    if heuristic_ms is not None and heuristic_ms <= best_ms * (1 + KEEP_HEURISTIC_WITHIN):
        return heuristic
    return best


def _short(config: dict) -> str:
    return "/".join(f"{k[0] if k != 'num_warps' else 'w'}{v}" for k, v in config.items())


def _buffers(graph: LoopGraph) -> dict[str, Buffer]:
    out = {b.name: b for b in graph.inputs}
    for n in graph.nodes:
        for b in (n.output, *n.extra_outputs):
            out[b.name] = b
    return out


def _random_tensor(buf: Buffer) -> torch.Tensor:
    # Symbolic sizes: timed at the example call's sizes.
    size, stride = tuple(hint(s) for s in buf.layout.size), tuple(hint(s) for s in buf.layout.stride)
    t = torch.empty_strided(size, stride, dtype=buf.dtype, device="cuda")
    if buf.dtype.is_floating_point:
        return t.normal_()
    if buf.dtype == torch.bool:
        return t.random_(0, 2)
    return t.random_(0, 8)


def _grid(kernel: KernelSource, config: dict) -> tuple:
    # A literal tuple such as (4096,), or one over the size symbols: ((s0*s1 + 1023) // 1024,)
    return eval(launch_grid(kernel.xnumel, config, kernel.segments), {}, dict(example_values()))


def _timed(config: dict) -> dict:
    # Timed with its device asserts compiled out: the random index tensors here may point outside
    # the tables they index, which the kernel clamps in range but an assert would stop the GPU on.
    return {k: v for k, v in config.items() if k not in ASSERT_OPTIONS}


def _launch_args(kernel: KernelSource, buffers: dict[str, Buffer], sizes: dict) -> tuple:
    """A launch's arguments for compiling ahead: tensors given by dtype, then the size values."""
    return tuple(buffers[n].dtype for n in kernel.signature) + tuple(sizes[s] for s in kernel.size_args)


def _timing_launches(kernels: list[KernelSource], loaded: LoadedKernels, graph: LoopGraph) -> list[WarmLaunch]:
    """The launches `_time_configs` makes."""
    buffers, sizes = _buffers(graph), example_values()
    out = []
    for kernel in kernels:
        args = _launch_args(kernel, buffers, sizes)
        for config in kernel.config_space:
            timed = _timed(config)
            out.append(WarmLaunch(loaded.functions[kernel.name], kernel.name, _grid(kernel, config), args,
                                  tuple(timed.items())))
    return out


def _host_launches(kernels: list[KernelSource], chosen: dict[str, dict], loaded: LoadedKernels,
                   graph: LoopGraph) -> list[WarmLaunch]:
    """The launches the host program makes (codegen/triton/kernel.py's `launch_sites`, which it prints),
    a split reduction's workspaces after the kernel's arguments."""
    buffers, sizes = _buffers(graph), example_values()
    out = []
    for kernel in kernels:
        args = _launch_args(kernel, buffers, sizes)
        spaces = tuple(dtype for _, dtype in kernel.split.workspaces) if kernel.split else ()
        for site in launch_sites(kernel, chosen[kernel.name]):
            try:
                grid = eval(site.grid, {}, dict(sizes))
            except Exception:  # noqa: BLE001 - a grid this cannot evaluate: that launch compiles at its launch
                continue
            out.append(WarmLaunch(loaded.functions[site.function], site.function, grid,
                                  args + (spaces if site.workspaces else ()), site.meta))
    return out


def _time_configs(kernel: KernelSource, fn: Any, buffers: dict[str, Buffer]) -> list[tuple[dict, float]]:
    sizes = example_values()
    args = [_random_tensor(buffers[name]) for name in kernel.signature] + [sizes[s] for s in kernel.size_args]
    results = []
    for config in kernel.config_space:
        grid = _grid(kernel, config)
        timed = _timed(config)
        try:
            fn[grid](*args, **timed)  # compile and warm up
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a config the compiler rejects (e.g. out of resources) is skipped
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPEATS):
            fn[grid](*args, **timed)
        end.record()
        torch.cuda.synchronize()
        results.append((dict(config), start.elapsed_time(end) / REPEATS))
    if not results:
        raise RuntimeError(f"no launch config of {kernel.name} compiled")
    return results


def _cache_path(kernel: KernelSource) -> Path:
    key = cache.digest(kernel.source, json.dumps(kernel.config_space, sort_keys=True), cache.runtime_identity("cuda"))
    return cache.cache_subdir("autotune") / f"{key}.json"


def _read_cache(kernel: KernelSource) -> dict | None:
    """The cached choice, if it is one of this kernel's candidates: a config is spliced into the host
    program's source, so anything else read from disk (a planted or stale file) is ignored."""
    try:
        config = json.loads(_cache_path(kernel).read_text())
    except (OSError, ValueError):
        return None
    # Return our own candidate, not the parsed one: JSON's 1.0 or true compare equal to 1 but print apart.
    return next((dict(c) for c in kernel.config_space if dict(c) == config), None)


def _write_cache(kernel: KernelSource, config: dict) -> None:
    cache.write_atomic(_cache_path(kernel), json.dumps(config).encode())

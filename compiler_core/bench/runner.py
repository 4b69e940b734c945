"""Run the standard workloads through eager PyTorch, Inductor and compiler_core in one process.

    report = run(BenchOptions(device="cpu", only=("softmax",)))
    print(format_table(report))

A row records what happened, good or bad: a contender that raises gets `*_error` and null times, a
result that differs from eager gets `matches_eager: false` and is flagged in the table.
"""

from __future__ import annotations

import atexit
import datetime
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

import compiler_core as cc
from compiler_core.analysis.traffic import tensor_bytes
from compiler_core.bench import noise, timing
from compiler_core.bench.workloads import NOT_SUPPORTED_YET, WORKLOADS, Workload
from compiler_core.compare import inductor

TOLERANCES = {  # (rtol, atol) for ours/Inductor vs eager
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


@dataclass(frozen=True)
class BenchOptions:
    device: str = "cpu"
    size: str = "full"  # "full" (TARGETS.md sizes) or "small" (smoke tests)
    only: tuple[str, ...] = ()  # workload names; () = all supported
    repeats: Optional[int] = None  # samples per contender; None = 15 on CPU, 50 on CUDA
    inductor: bool = True  # False skips Inductor (its fields are null)

    @property
    def samples(self) -> int:
        return self.repeats or (50 if self.device == "cuda" else 15)


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def machine_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def _error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


def _matches(out: Any, expected: Any, dtype: torch.dtype) -> tuple[bool, Optional[str]]:
    rtol, atol = TOLERANCES.get(dtype, (1e-4, 1e-4))
    try:
        torch.testing.assert_close(out, expected, rtol=rtol, atol=atol)
        return True, None
    except AssertionError as exc:
        return False, " ".join(str(exc).split())[:300]



def _matches_training(out: Any, expected: Any, dtype: torch.dtype) -> tuple[bool, Optional[str]]:
    """Loss and gradients: each tensor within rtol of its own largest magnitude (+ a floor), since
    gradients are small numbers whose absolute tolerance would pass anything."""
    rtol, _ = TOLERANCES.get(dtype, (1e-4, 1e-4))
    names = ["loss", *(f"grad {i}" for i in range(len(expected) - 1))]
    for name, o, e in zip(names, out, expected):
        o, e = o.detach().double(), e.detach().double()
        err, scale = (o - e).abs().max().item(), e.abs().max().item()
        if not err <= rtol * scale + 1e-6:  # also catches NaN
            return False, f"{name}: max error {err:.3g}, max |eager| {scale:.3g} (allowed {rtol:g} of it)"
    return True, None


def _step(w: Workload, fn: Callable, args: tuple) -> Callable[[], Any]:
    """What one call of a contender runs: fn(*args), or for training fn's loss and its backward,
    returning (loss, gradient of each input that requires grad)."""
    if not w.train:
        return lambda: fn(*args)
    params = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]

    def train_step() -> tuple:
        for p in params:
            p.grad = None
        loss = fn(*args)
        loss.backward()
        return (loss.detach(), *(p.grad for p in params))
    return train_step


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _planned_peak_bytes(session: Any) -> Optional[int]:
    peaks = [g.memory.peak_bytes_planned for g in session.all_records() if g.memory is not None]
    return max(peaks) if peaks else None


def _cache_hits(session: Any) -> str:
    """"hits/artifacts" over the session's compiled graphs (forward and backward)."""
    artifacts = [g.artifact for g in session.all_records() if getattr(g, "artifact", None) is not None]
    return f"{sum(bool(getattr(a, 'cache_hit', False)) for a in artifacts)}/{len(artifacts)}"


def _compile_ours(w: Workload, args: tuple, device: str, row: dict) -> Optional[Callable]:
    """Cold and warm compile of ours; returns the warm compiled function (None if ours raised)."""
    fn = inductor.private_copy(w.fn)  # our own code object: Inductor's compilations stay apart
    try:
        cold = cc.compile(fn)
        out, row["ours_compile_cold_s"] = timing.timed_call(_step(w, cold, args), device)
        session = cold.session
        # Warm: an identical program compiled again in the same process, so the kernel cache is hot.
        warm = cc.compile(fn)
        _, row["ours_compile_warm_s"] = timing.timed_call(_step(w, warm, args), device)
    except Exception as exc:  # noqa: BLE001 - a failing row is recorded, the bench goes on
        row["ours_error"] = _error_text(exc)
        log(f"{w.name}: ours raised {row['ours_error']}\n{traceback.format_exc()}")
        return None
    stats = session.stats
    row["ours_kernels"] = stats.get("kernel_count")
    row["ours_fallback_graphs"] = stats.get("fallback_graphs")
    row["ours_fallback_ops"] = list(stats.get("fallback_ops", []))
    row["ours_notes"] = [m[:300] for m in session.messages]
    row["ours_compile_stages_s"] = {stage: round(t, 4) for stage, t in session.timings.items()}
    row["ours_warm_compile_stages_s"] = {stage: round(t, 4) for stage, t in warm.session.timings.items()}
    # Cold must be cold (a private kernel cache) and warm must hit the cache: record both so a broken
    # cache shows in the row instead of silently skewing the compile times.
    row["ours_cold_cache_hits"] = _cache_hits(session)
    row["ours_warm_cache_hits"] = _cache_hits(warm.session)
    row["ours_planned_peak_bytes"] = _planned_peak_bytes(session)
    row["_first_out"] = out
    return warm


def _compile_inductor(w: Workload, args: tuple, device: str, row: dict) -> Optional[Callable]:
    try:
        cold = inductor.compile_with_inductor(w.fn)
        out, row["inductor_compile_cold_s"] = timing.timed_call(_step(w, cold, args), device)
        warm = inductor.compile_with_inductor(w.fn)  # a second copy: Inductor's own caches are hot
        out, row["inductor_compile_warm_s"] = timing.timed_call(_step(w, warm, args), device)
    except Exception as exc:  # noqa: BLE001 - e.g. no C++ compiler: record null and continue
        row["inductor_error"] = _error_text(exc)
        log(f"{w.name}: Inductor failed: {row['inductor_error']}")
        return None
    row["_inductor_out"] = out
    return warm


def _reduce_overhead_contenders(w: Workload, args: tuple, expected: object, dtype: torch.dtype,
                                opts: BenchOptions, row: dict) -> dict[str, Callable[[], object]]:
    """Launch-bound rows are also timed with CUDA graphs, ours and (if enabled) Inductor's."""
    out: dict[str, Callable[[], object]] = {}
    makers = {"ours_reduce_overhead": lambda: cc.compile(inductor.private_copy(w.fn), mode="reduce-overhead")}
    if opts.inductor:
        makers["inductor_reduce_overhead"] = lambda: inductor.compile_with_inductor(w.fn, mode="reduce-overhead")
    for name, make in makers.items():
        try:
            compiled = make()
            for _ in range(3):  # capture happens on an early call
                result = compiled(*args)
            row[f"{name}_matches_eager"], _ = _matches(result, expected, dtype)
            out[name] = (lambda c: lambda: c(*args))(compiled)
        except Exception as exc:  # noqa: BLE001 - recorded, the bench goes on
            row[f"{name}_error"] = _error_text(exc)
            log(f"{w.name}: {name} failed: {row[f'{name}_error']}")
    return out


def run_workload(w: Workload, opts: BenchOptions, copy_GBps: float) -> dict:
    device = opts.device
    args = w.make_inputs(device, opts.size)
    dims, dtype = w.shape(device, opts.size)
    row: dict[str, Any] = {
        "workload": w.name, "shape": list(dims), "dtype": str(dtype).replace("torch.", ""), "train": w.train,
        "eager_ms": None, "inductor_ms": None, "ours_ms": None,
        "ideal_bytes": None, "memory_bound": w.memory_bound, "ours_GBps": None,
        "ours_compile_cold_s": None, "ours_compile_warm_s": None, "inductor_compile_cold_s": None,
        "ours_kernels": None, "ours_peak_bytes": None, "inductor_peak_bytes": None,
        "peak_bytes_source": "cuda allocator, one call" if device == "cuda" else
        "CPU allocator as torch.profiler reports it, one call",
    }
    matches = _matches_training if w.train else _matches
    expected = _step(w, w.fn, args)()
    timing.synchronize(device)
    row["ideal_bytes"] = tensor_bytes(args) + tensor_bytes(expected)

    log(f"{w.name}: compiling ours")
    ours = _compile_ours(w, args, device, row)
    if ours is not None:
        row["matches_eager"], row["mismatch"] = matches(row.pop("_first_out"), expected, dtype)
        if not row["matches_eager"]:
            log(f"{w.name}: ours DOES NOT MATCH eager: {row['mismatch']}")
    fast = None
    if opts.inductor:
        log(f"{w.name}: compiling Inductor")
        fast = _compile_inductor(w, args, device, row)
        if fast is not None:
            row["inductor_matches_eager"], _ = matches(row.pop("_inductor_out"), expected, dtype)

    contenders: dict[str, Callable[[], object]] = {"eager": _step(w, w.fn, args)}
    if fast is not None:
        contenders["inductor"] = _step(w, fast, args)
    if ours is not None:
        contenders["ours"] = _step(w, ours, args)
    if device == "cuda" and w.launch_bound:
        contenders.update(_reduce_overhead_contenders(w, args, expected, dtype, opts, row))
    log(f"{w.name}: timing {', '.join(contenders)} ({opts.samples} samples each)")
    try:
        load_before = noise.load_average()
        samples = timing.sample_interleaved(contenders, device, opts.samples)
        load_after = noise.load_average()
        for name, ms in samples.items():
            row[f"{name}_ms"] = statistics.median(ms)
            row[f"{name}_iqr_ms"] = list(noise.quartiles(ms))
        # The explorer's rules (bench/noise.py): a ratio they cannot support is flagged, not quoted.
        # The CPU's load counts (other processes took cores); a GPU timing waits on the device, not on them.
        busiest = max((x for x in (load_before, load_after) if x is not None), default=None)
        row["noise"] = list(noise.noise_reasons(samples, busiest if device == "cpu" else None))
    except Exception as exc:  # noqa: BLE001
        row["timing_error"] = _error_text(exc)
        log(f"{w.name}: timing failed: {row['timing_error']}")

    for name in contenders:
        if device == "cuda":
            row[f"{name}_peak_bytes"] = timing.peak_cuda_bytes(contenders[name])
        else:
            row[f"{name}_peak_bytes"] = timing.peak_cpu_bytes(contenders[name])
    if device != "cuda" and row.get("ours_peak_bytes") is None and row.get("ours_planned_peak_bytes") is not None:
        # This torch's profiler gave no allocation sizes: our plan is the figure we can show.
        row["ours_peak_bytes"] = row["ours_planned_peak_bytes"]
        row["peak_bytes_source"] = ("planned by our memory plan (CPU): the largest graph's planned peak, extern "
                                    "calls' outputs included; eager and Inductor not measured")

    _derived_fields(row, w, dims, copy_GBps)
    return row


def _derived_fields(row: dict, w: Workload, dims: tuple, copy_GBps: float) -> None:
    for name in ("eager", "inductor", "ours"):
        ms = row.get(f"{name}_ms")
        row[f"{name}_GBps"] = row["ideal_bytes"] / (ms * 1e-3) / 1e9 if ms else None
    row["ours_pct_copy"] = 100 * row["ours_GBps"] / copy_GBps if row["ours_GBps"] and copy_GBps else None
    row["ours_vs_eager"] = _ratio(row["ours_ms"], row["eager_ms"])
    row["ours_vs_inductor"] = _ratio(row["ours_ms"], row["inductor_ms"])
    row["inductor_vs_eager"] = _ratio(row["inductor_ms"], row["eager_ms"])
    flops = w.flops(dims)
    if flops:
        for name in ("eager", "inductor", "ours"):
            ms = row.get(f"{name}_ms")
            row[f"{name}_TFLOPs"] = flops / (ms * 1e-3) / 1e12 if ms else None


def geomean(values: list[Optional[float]]) -> Optional[float]:
    xs = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in xs) / len(xs)) if xs else None


def _median(values: list[Optional[float]]) -> Optional[float]:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def _load_average() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _use_private_caches(with_inductor: bool) -> None:
    """Empty on-disk kernel caches for this process, so cold compile times are cold."""
    ours = tempfile.mkdtemp(prefix="fcompile-bench-")
    os.environ["FCOMPILE_CACHE_DIR"] = ours  # read by compiler_core.runtime.build.cache_dir()
    atexit.register(shutil.rmtree, ours, ignore_errors=True)
    # Triton's own binaries (~/.triton/cache by default) too: a second run on one machine would load
    # every kernel from disk and read as a cold compile. Inductor puts its binaries there as well.
    os.environ["TRITON_CACHE_DIR"] = os.path.join(ours, "triton")
    if with_inductor:
        atexit.register(shutil.rmtree, inductor.use_private_cache_dir(), ignore_errors=True)


def _warm_up_dynamo(device: str) -> None:
    """Pay Dynamo's one-time start-up outside every contender's compile time."""
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(4, device=device))


def run(opts: BenchOptions) -> dict:
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    names = list(opts.only) or [n for n, w in WORKLOADS.items() if opts.device in w.default_devices]
    for name in names:
        if name not in WORKLOADS and name not in NOT_SUPPORTED_YET:
            raise SystemExit(f"unknown workload {name!r}; known: {', '.join([*WORKLOADS, *NOT_SUPPORTED_YET])}")
    skipped = [n for n in (names if opts.only else NOT_SUPPORTED_YET) if n in NOT_SUPPORTED_YET]
    for name in skipped:
        log(f"{name}: not supported yet ({NOT_SUPPORTED_YET[name]})")
    load = _load_average()
    if opts.device == "cpu" and load is not None and load > 0.5:
        log(f"warning: 1-minute load average is {load:.2f}: other processes share the cores, CPU times will be noisy")
    _use_private_caches(opts.inductor)
    _warm_up_dynamo(opts.device)
    log("measuring copy bandwidth")
    copy_GBps = timing.copy_bandwidth_GBps(opts.device)
    rows = [run_workload(WORKLOADS[n], opts, copy_GBps) for n in names if n in WORKLOADS]
    # Measured again at the end, the better of the two kept: a ceiling only ever reads low on a
    # shared machine (another process on the cores during the first measurement).
    copy_end = timing.copy_bandwidth_GBps(opts.device)
    if copy_end > copy_GBps:
        copy_GBps = copy_end
        for row in rows:
            row["ours_pct_copy"] = 100 * row["ours_GBps"] / copy_GBps if row["ours_GBps"] else None
    return {
        "device": opts.device,
        "machine": machine_name(opts.device),
        "date": datetime.date.today().isoformat(),
        **inductor.inductor_versions(),
        "copy_GBps": copy_GBps,
        "size": opts.size,
        "threads": torch.get_num_threads(),
        "load_average_at_start": load,
        "samples": opts.samples,
        "not_supported_yet": skipped,
        "geomean_ours_vs_inductor": geomean([r["ours_vs_inductor"] for r in rows]),
        "geomean_ours_vs_eager": geomean([r["ours_vs_eager"] for r in rows]),
        "geomean_inductor_vs_eager": geomean([r["inductor_vs_eager"] for r in rows]),
        "median_ours_compile_cold_s": _median([r["ours_compile_cold_s"] for r in rows]),
        "median_inductor_compile_cold_s": _median([r["inductor_compile_cold_s"] for r in rows]),
        "noisy_rows": [r["workload"] for r in rows if r.get("noise")],
        "rows": rows,
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return "-"


def format_table(report: dict) -> str:
    head = (f"{report['device']}: {report['machine']}; torch {report['torch']}, triton {report['triton']}; "
            f"{report['threads']} threads; {report['date']}; measured copy {report['copy_GBps']:.1f} GB/s; "
            f"sizes {report['size']}; median of {report['samples']} samples, taken round-robin")
    if report.get("load_average_at_start") is not None:
        head += f"; load average at start {report['load_average_at_start']:.2f}"
    cols = ["workload", "eager ms", "ind ms", "ours ms", "ours/eager", "ours/ind", "ours GB/s", "%copy",
            "cold s", "warm s", "ind cold s", "kernels", "peak", "ind peak", "check"]
    lines = [cols]
    for r in report["rows"]:
        check = "ok" if r.get("matches_eager") else ("ERROR" if r.get("ours_error") else "MISMATCH")
        if r.get("ours_fallback_graphs"):
            check += " (eager fallback)"
        if r.get("noise"):
            check += "; noisy: rerun"
        lines.append([
            r["workload"], _fmt(r["eager_ms"], ".3f"), _fmt(r["inductor_ms"], ".3f"), _fmt(r["ours_ms"], ".3f"),
            _fmt(r["ours_vs_eager"], ".2f"), _fmt(r["ours_vs_inductor"], ".2f"),
            _fmt(r["ours_GBps"], ".1f"), _fmt(r["ours_pct_copy"] if r["memory_bound"] else None, ".0f"),
            _fmt(r["ours_compile_cold_s"], ".2f"), _fmt(r["ours_compile_warm_s"], ".3f"),
            _fmt(r["inductor_compile_cold_s"], ".2f"), _fmt(r["ours_kernels"], "d"),
            _fmt_bytes(r["ours_peak_bytes"]), _fmt_bytes(r["inductor_peak_bytes"]), check,
        ])
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    text = [head, ""]
    for i, line in enumerate(lines):
        text.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths))))
        if i == 0:
            text.append("  ".join("-" * w for w in widths))
    text.append("")
    text.append("ratios are time ratios (< 1: ours is faster); %copy only for memory-bound rows; "
                "peak = the allocator's peak during one call (CPU: as torch.profiler reports it)")
    text.append(f"geomean ours/inductor {_fmt(report['geomean_ours_vs_inductor'], '.3f')}, "
                f"ours/eager {_fmt(report['geomean_ours_vs_eager'], '.3f')}, "
                f"inductor/eager {_fmt(report['geomean_inductor_vs_eager'], '.3f')}; "
                f"median cold compile ours {_fmt(report['median_ours_compile_cold_s'], '.2f')} s, "
                f"inductor {_fmt(report['median_inductor_compile_cold_s'], '.2f')} s")
    noisy = [r["workload"] for r in report["rows"] if r.get("noise")]
    if noisy:
        text.append(f"NOT FIGURES: {len(noisy)} of {len(report['rows'])} rows timed noisy ({', '.join(noisy)}); "
                    "their ratios and the geomeans above need a rerun on a quiet machine")
    for r in report["rows"]:
        modes = [f"{who} {_fmt(r.get(f'{who}_reduce_overhead_ms'), '.3f')} ms"
                 for who in ("ours", "inductor") if f"{who}_reduce_overhead_ms" in r]
        if modes:
            text.append(f"{r['workload']} with mode=reduce-overhead (CUDA graphs): {', '.join(modes)}")
        if r.get("noise"):
            text.append(f"{r['workload']}: noisy: rerun ({'; '.join(r['noise'])})")
        for key in ("ours_error", "mismatch", "inductor_error", "timing_error", "ours_reduce_overhead_error",
                    "inductor_reduce_overhead_error"):
            if r.get(key):
                text.append(f"{r['workload']}: {key}: {r[key]}")
    if report["not_supported_yet"]:
        text.append(f"not supported yet: {', '.join(report['not_supported_yet'])}")
    return "\n".join(text)

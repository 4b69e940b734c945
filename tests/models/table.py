"""One row of the zoo table: correctness against fp64 eager, compiler statistics, time vs eager and Inductor.

    rows = [zoo_row(ZOO["llama"], "large", "cuda", torch.bfloat16, mask=True, mode="training", repeats=10)]
    print(format_table(rows))

Timing uses the bench's round-robin loop (CUDA events on GPU): eager, Inductor and ours alternate,
so a slow spell of the machine hits all three; ratios are of medians. A row never raises: an error
(ours or Inductor's) is recorded in the row and the next model runs.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import gc
import os
import statistics
from typing import Any, Callable, Optional

import torch

import compiler_core as cc
from compiler_core.bench import noise
from compiler_core.bench.timing import sample_interleaved
from compiler_core.runtime.check import KernelCheckError

from .check import EAGER_SLACK, EagerRaised, ZooRun, run_inference, run_training
from .zoo import ZooCase, ZooEntry

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _step(call: Callable, model: torch.nn.Module, case: ZooCase, mode: str) -> Callable[[], Any]:
    """What one timed sample runs: a no-grad forward, or forward + loss + backward."""
    if mode == "inference":
        def infer():
            with torch.no_grad():
                return call(**case.inputs)
        return infer

    def train():
        model.zero_grad(set_to_none=True)
        case.loss(call(**case.inputs)).backward()
    return train


@contextlib.contextmanager
def _without_debug_checks():
    """The correctness run compiles with the memory checking mode on; times are of the program a user
    runs, so the timed copy is compiled without it (FCOMPILE_DEBUG is read when a graph compiles)."""
    saved = os.environ.pop("FCOMPILE_DEBUG", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["FCOMPILE_DEBUG"] = saved


def _timings(run: ZooRun, device: str, mode: str, repeats: int, inductor: bool) -> tuple[dict, dict, Optional[str]]:
    """(median ms per contender, their samples, a note): the samples let the row be judged for noise."""
    case = run.case
    model = case.model.train(mode == "training")
    with _without_debug_checks():
        ours = cc.compile(copy.deepcopy(model))
        _step(ours, ours, case, mode)()  # compile outside the timed loop
    fns = {"eager": _step(model, model, case, mode), "ours": _step(ours, ours, case, mode)}
    note = None
    if inductor:
        # Inductor gets its own copy of the weights, so its compiled graphs and ours never share state.
        inductor_model = copy.deepcopy(model)
        compiled = torch.compile(inductor_model)
        try:
            _step(compiled, inductor_model, case, mode)()  # compile outside the timed loop
            fns["inductor"] = _step(compiled, inductor_model, case, mode)
        except Exception as exc:  # noqa: BLE001 - Inductor failing is a fact for the table, not our failure
            note = f"Inductor failed: {type(exc).__name__}: {_first_line(exc)}"
    samples = sample_interleaved(fns, device, repeats)
    return {name: statistics.median(ms) for name, ms in samples.items()}, samples, note


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def zoo_row(entry: ZooEntry, size: str, device: str, dtype: torch.dtype, mask: Optional[bool], mode: str,
            repeats: int, inductor: bool = True, options: Optional[dict] = None) -> dict:
    """Everything the table and the JSON say about one model in one configuration. `options`: keyword
    arguments of `cc.compile` (`check=True` compares every kernel with eager as it runs)."""
    dtype_name = next(k for k, v in DTYPES.items() if v == dtype)
    row: dict[str, Any] = {"model": entry.name, "device": device, "dtype": dtype_name, "size": size,
                           "mask": "-" if mask is None else ("mask" if mask else "no mask"), "mode": mode}
    torch._dynamo.reset()
    try:
        run = (run_inference if mode == "inference" else run_training)(entry, size, device, dtype, bool(mask), options)
    except ImportError as exc:
        return {**row, "status": "skipped", "note": f"not importable: {exc}"}
    except EagerRaised as exc:
        return {**row, "status": "skipped", "note": f"eager raises {exc}"}
    except KernelCheckError as exc:  # --check: a kernel disagreed with eager on its own inputs
        return {**row, "status": "mismatch", "note": f"KernelCheckError: {exc}"}
    except Exception as exc:  # noqa: BLE001
        return {**row, "status": "error", "note": f"{type(exc).__name__}: {_first_line(exc)}"}
    stats = run.session.stats
    row.update(status="ok" if run.ok and not run.fallbacks else ("mismatch" if not run.ok else "fallback"),
               max_err=run.match.max_err, worst=run.match.worst,
               eager_err=run.eager_match.max_err,
               kernels=stats["kernel_count"], extern_calls=stats["extern_calls"],
               fallback_ops=len(stats["fallback_ops"]), fallback_op_names=_counted(stats["fallback_ops"]),
               graph_breaks=stats["graph_breaks"],
               fallback_graphs=stats["fallback_graphs"], note="; ".join(run.fallbacks))
    if run.match.by_rmse:
        judged = f"worst tensor judged by RMSE (check.py): {run.match.describe()}"
        row["note"] = "; ".join(filter(None, [row["note"], judged]))
    if run.aot_eager_match is not None:  # judged on the second look (check.py): say so in the row
        row["aot_eager_err"] = run.aot_eager_match.max_err
        verdict = "within" if run.ok else "beyond"
        row["note"] = "; ".join(filter(None, [row["note"], f"{verdict} {EAGER_SLACK:g}x of the error of eager, "
                                              f"aot_eager or {run.nudged_runs} eager runs with weights nudged within "
                                              f"one epsilon (aot_eager: {run.aot_eager_match.describe()})"]))
    load_before = noise.load_average()
    try:
        ms, samples, inductor_note = _timings(run, device, mode, repeats, inductor) if repeats > 0 else ({}, {}, None)
    except Exception as exc:  # noqa: BLE001 - ours may compile and then fail when called again
        ms, samples, inductor_note = {}, {}, f"timing failed: {type(exc).__name__}: {_first_line(exc)}"
    row.update({f"{k}_ms": v for k, v in ms.items()})
    row.update({f"{k}_iqr_ms": list(noise.quartiles(v)) for k, v in samples.items()})
    if samples:
        # The bench's rules (compiler_core/bench/noise.py): on the shared 2-core CPU machine another
        # job's load stalls both sides' OpenMP regions for milliseconds, and 10 samples of HF ResNet
        # gave ours/Inductor anywhere from 0.42 to 1.51 at load 4 (2026-12-02). Such a ratio is
        # flagged "noisy: rerun" in the table, not quoted.
        busiest = max((x for x in (load_before, noise.load_average()) if x is not None), default=None)
        row["noise"] = list(noise.noise_reasons(samples, busiest if device == "cpu" else None))
    if "ours" in ms:
        row["vs_eager"] = ms["ours"] / ms["eager"]
        row["vs_inductor"] = ms["ours"] / ms["inductor"] if "inductor" in ms else None
        row["timed_uninstrumented"] = True
    if inductor_note:
        row["note"] = "; ".join(filter(None, [row["note"], inductor_note]))
    del run
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def _counted(names: list[str]) -> str:
    """"aten.embedding_dense_backward.default x2, aten.cumsum.default": which ops ran in PyTorch (the
    JSON keeps them; the table shows the count)."""
    counts = collections.Counter(names)
    return ", ".join(name + (f" x{n}" if n > 1 else "") for name, n in sorted(counts.items()))


COLUMNS = [  # (header, row key, format)
    ("model", "model", "{}"), ("device", "device", "{}"), ("dtype", "dtype", "{}"), ("mask", "mask", "{}"),
    ("mode", "mode", "{}"), ("match", "status", "{}"), ("max err", "max_err", "{:.2e}"),
    ("eager err", "eager_err", "{:.2e}"), ("kernels", "kernels", "{}"), ("externs", "extern_calls", "{}"),
    ("fallback ops", "fallback_ops", "{}"), ("breaks", "graph_breaks", "{}"),
    ("fallback graphs", "fallback_graphs", "{}"), ("vs eager", "vs_eager", "{:.2f}x"),
    ("vs Inductor", "vs_inductor", "{:.2f}x"), ("timing", "timing_verdict", "{}"),
]


def format_table(rows: list[dict]) -> str:
    """A fixed-width table, one line per row; a blank cell is a value the row does not have."""
    cells = [[h for h, _, _ in COLUMNS]]
    for row in rows:
        if "noise" in row:
            row = {**row, "timing_verdict": "noisy: rerun" if row["noise"] else "ok"}
        cells.append([fmt.format(row[key]) if row.get(key) is not None else "" for _, key, fmt in COLUMNS])
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_notes(rows: list[dict]) -> str:
    """Errors, skips, fallback reasons, the worst tensor of each mismatch and why a timing is noisy, one
    line per row."""
    lines = []
    for row in rows:
        what = row.get("note") or ""
        if row.get("status") == "mismatch" and "worst" in row:  # a --check mismatch names its kernel instead
            what = f"worst: {row['worst']}" + (f"; {what}" if what else "")
        if row.get("noise"):
            what = "; ".join(filter(None, [what, "timing noisy: " + ", ".join(row["noise"])]))
        if what:
            lines.append(f"{row['model']} {row['dtype']} {row['mask']} {row['mode']}: {what}")
    return "\n".join(lines)

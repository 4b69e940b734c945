"""OpInfo sweep: every PyTorch op with an fp32 OpInfo (int64 for ops without fp32), compiled by us (C++ on CPU,
Triton on CUDA), vs eager.

Run as a script (it imports torch's test internals, which parse sys.argv and must stay out of the
pytest process; PITFALLS.md):

    python tests/opinfo_sweep.py            # summary, then one JSON object on the last line
    python tests/opinfo_sweep.py --table    # also one row per op: samples run, matched, mismatched
    python tests/opinfo_sweep.py --all      # every sample of every compiled op (slow: ~2800 samples x 2)
    python tests/opinfo_sweep.py --device cuda --ops-from tests/opinfo_native.json --workers 12
                                            # the CPU's native set, on the GPU with the Triton backend
    python tests/opinfo_sweep.py --dtype complex64 --table
                                            # every op with complex64 samples, in complex64
    python tests/opinfo_sweep.py --dynamic  # compiled with dynamic=True: every size a symbol

What runs:
- every op's first sample. If our compiled program computed it (our kernels, views and the library
  calls we make on purpose such as matmul; no graph or op ran in eager PyTorch), the op is "compiled"
  and its other samples run too; otherwise the op "ran partly in eager" and stops there, and the ATen
  ops that ran in PyTorch are its "blockers" (--table ranks them by how many ops each blocks).
- for compiled ops, up to --max-samples samples (default 8, evenly spread over the op's list, first
  included; --all lifts the cap, which is printed in the summary), each also in its `noncontiguous()`
  form (same values, strided storage with NaN in the gaps) when that changes any layout.
- every sample is compiled afresh (Dynamo reset, new compiled function): the session a call creates is
  the one that ran, so a sample can never silently run a stale graph, or eager code after Dynamo's
  recompile limit. A call that compiles nothing ran in eager and is counted as not compiled.

Every result that differs from eager is a mismatch, whether our kernels, extern calls or eager
fallbacks produced it; a compiled call that raises where eager did not is one too.  The one thing
not compared is eager's own nondeterminism, counted under "eager_nondeterministic": a sample whose
eager result differs between two seeded calls (some random ops), the empty* ops (UNINITIALIZED), and
a sample whose compiled result differs from eager's only where eager's own changes with the seed
(dropout inside attention: the same shapes and dtypes, values drawn in another order).
Work is split over --workers processes (default 2) by op.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

ARGV, sys.argv = sys.argv[1:], sys.argv[:1]  # torch's test internals parse sys.argv on import
# Sweep the checkout this file lives in: run as a script, sys.path holds tests/, and `import
# compiler_core` would find whichever checkout is installed in the environment instead.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import compiler_core as cc  # noqa: E402
from compiler_core import _compat  # noqa: E402

# Dynamo times each new graph's guards once, after flushing the CPU cache (a metric only, logged and
# never acted on): 22 ms of every compile on the 2-core CPU machine, and the sweep compiles every
# sample afresh (thousands of times). The sweep does not read that metric.
if hasattr(torch._dynamo.guards, "profile_guard_manager"):
    torch._dynamo.guards.profile_guard_manager = lambda *args, **kwargs: 0.0



def _unseeded(op, *args, **kwargs):
    return op(*args, **kwargs)


# OpInfo calls some ops (scaled_dot_product_attention, multi_head_attention_forward, the random ops)
# through `wrapper_set_seed`, which saves and restores the RNG state: Dynamo cannot trace that and
# skipped the whole call, so these ops were counted "not compiled" without our compiler ever seeing
# them. The sweep seeds before each eager and compiled call itself (run_sample), so the op lambdas
# call the op directly: what a user's code does.
from torch.testing._internal import common_methods_invocations as _cmi  # noqa: E402

_cmi.wrapper_set_seed = _unseeded

DEFAULT_MAX_SAMPLES = 8
# Their result is uninitialized memory: two eager calls can agree by reusing one freed block, and a
# compiled call then "differs" (seen for empty_like). Not compared, like any eager nondeterminism.
UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}


def _same(a, b) -> bool:
    try:
        torch.testing.assert_close(a, b, equal_nan=True, atol=1e-4, rtol=1e-4)
        return True
    except Exception:  # noqa: BLE001 - any difference (values, shapes, types) counts
        return False


def _fresh(value):
    """A copy with the same sizes, strides and storage offset, so no call sees another call's writes."""
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage().clone()
        return value.new_empty(0).set_(storage, value.storage_offset(), value.size(), value.stride())
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _layouts(sample) -> list:
    tensors = [t for t in (sample.input, *sample.args, *sample.kwargs.values()) if isinstance(t, torch.Tensor)]
    return [(t.stride(), t.storage_offset()) for t in tensors]


def _spread(count: int, cap: int | None) -> list[int]:
    """Which samples to run: all, or `cap` of them evenly spread, the first always included."""
    if cap is None or count <= cap:
        return list(range(count))
    if cap == 1:
        return [0]
    return sorted({round(i * (count - 1) / (cap - 1)) for i in range(cap)})


def _native(stats: dict) -> bool:
    """Nothing ran in eager PyTorch: our kernels, views (layouts over a buffer, no code) and the library
    calls we make on purpose (matmul, convolution: extern calls, as Inductor makes them)."""
    return stats["fallback_graphs"] == 0 and not stats["fallback_ops"]


BACKEND = {"cpu": "cpp", "cuda": "triton"}
DEVICE = "cpu"  # set by --device in each worker process
# --reference-inputs: OpInfo's reference inputs (the samples plus edge cases: extremal values, odd
# shapes) instead of its samples, spread the same way
REFERENCE_INPUTS = False
# --dtype: sweep only the ops with OpInfo samples in this dtype, in it (complex64: the complex rewrite,
# compiler_core/decomp/complex_pairs.py); None: float32, or int64 where an op has no float32.
ONLY_DTYPE: torch.dtype | None = None
# --dynamic: compile with dynamic=True (every size a symbol from the first call): the symbolic path's
# index arithmetic, guards and kernels against eager, op by op.
DYNAMIC = False
# --gpu-source: the Triton plans of each op's first compiled sample, compiled for the H200 at the end.
GPU_PLANS: dict[str, list] = {}


def run_sample(op, sample, keep_plans: str | None = None) -> tuple[str, str]:
    """(outcome, detail); outcome is native_match, eager_match, mismatch or eager_nondeterministic."""

    def fn(x, *args, **kwargs):
        return op.op(x, *args, **kwargs)

    if op.name in UNINITIALIZED:
        return "eager_nondeterministic", ""
    torch.manual_seed(0)
    expected = fn(*_fresh((sample.input, *sample.args)), **_fresh(sample.kwargs))
    torch.manual_seed(0)
    if not _same(fn(*_fresh((sample.input, *sample.args)), **_fresh(sample.kwargs)), expected):
        return "eager_nondeterministic", ""
    torch._dynamo.reset()
    compiled = cc.compile(fn, backend=BACKEND[DEVICE], dynamic=True if DYNAMIC else None)
    before = compiled.session
    torch.manual_seed(0)
    try:
        got = compiled(*_fresh((sample.input, *sample.args)), **_fresh(sample.kwargs))
    except Exception as exc:  # noqa: BLE001 - eager did not raise, so this is a failure
        return "mismatch", f"raised {type(exc).__name__}: {str(exc)[:160]}"
    ran_ours = compiled.session is not before and _native(compiled.session.stats)
    if not _same(got, expected):
        if _shapes(got) == _shapes(expected) and _draws_random_values(fn, sample, expected):
            # Its values come from the random stream (attention with dropout_p > 0): ours draws its
            # numbers in another order than eager's fused kernel, so bits cannot be compared.
            return "eager_nondeterministic", "values depend on the random stream"
        return "mismatch", "differs from eager" + ("" if ran_ours else " (graph ran partly in eager)")
    if not ran_ours:
        return "eager_match", _blockers(compiled, before)
    if keep_plans:
        GPU_PLANS[keep_plans] = _triton_plans(compiled.session)
    return "native_match", "" if compiled.session.stats["kernel_count"] else "no kernel"


def _draws_random_values(fn, sample, expected) -> bool:
    """Whether eager's result changes with the seed (same inputs, another torch.manual_seed)."""
    torch.manual_seed(1)
    try:
        other = fn(*_fresh((sample.input, *sample.args)), **_fresh(sample.kwargs))
    except Exception:  # noqa: BLE001 - it ran a moment ago; treat anything odd as "not random"
        return False
    return not _same(other, expected)


def _shapes(value) -> list:
    """(shape, dtype) of every tensor in a result, in order."""
    flat, _ = torch.utils._pytree.tree_flatten(value)
    return [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t) for t in flat]


def _triton_plans(session) -> list:
    """The kernel plans the Triton backend would print for the graphs this CPU session compiled."""
    from compiler_core.codegen.wrapper import kernel_plans_with_passes

    return [plan for rec in session.all_records() if rec.loops is not None and rec.schedule is not None
            for plan, _ in kernel_plans_with_passes(rec.loops, rec.schedule, rec.memory, "triton")]


def check_gpu_source(rows: list[dict]) -> None:
    """Compile the kept plans' GPU Triton source for the H200 (no GPU needed); a rejected kernel is a
    failure of its op, noted in the row."""
    from compiler_core.codegen.triton.ahead import compile_for_gpu

    owners = [(op, plan) for op, plans in GPU_PLANS.items() for plan in plans]
    errors = compile_for_gpu([plan for _, plan in owners]) if owners else []
    by_op: dict[str, list[str]] = {}
    for (op, plan), error in zip(owners, errors):
        if error:
            by_op.setdefault(op, []).append(f"{plan.name}: {error[:300]}")
    for row in rows:
        row["gpu_source_checked"] = row["op"] in GPU_PLANS
        row["gpu_source_errors"] = by_op.get(row["op"], [])


def _blockers(compiled, before) -> str:
    """Why a matching call was not native: the ATen ops that ran in PyTorch, comma-separated."""
    if compiled.session is before:
        return "nothing compiled"
    stats = compiled.session.stats
    if stats["fallback_graphs"]:
        reasons = [g.fallback_reason for g in compiled.session.all_records() if g.fell_back]
        return "graph fell back: " + reasons[0].split(":")[0].split("\n")[0][:60].replace(",", ";")
    return ",".join(sorted(set(stats["fallback_ops"])))


def sweep_dtype(op) -> torch.dtype | None:
    """float32, or for an op with no float32 OpInfo (bitwise ops, gcd, one_hot, bincount...) int64, so
    integer-only ops are swept too; None for the others (complex-only, or no dtype on this device).
    With --dtype, that dtype where the op has it, else None."""
    if ONLY_DTYPE is not None:
        return ONLY_DTYPE if op.supports_dtype(ONLY_DTYPE, DEVICE) else None
    for dtype in (torch.float32, torch.int64):
        if op.supports_dtype(dtype, DEVICE):
            return dtype
    return None


def sweep_op(op, cap: int | None, gpu_source: bool = False) -> dict:
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    dtype = sweep_dtype(op)
    row = {"op": name, "dtype": str(dtype).removeprefix("torch."), "status": "", "available": 0, "run": 0,
           "native": 0, "matched": 0, "mismatched": 0, "eager_nondeterministic": 0, "mismatches": [],
           "blockers": "", "no_kernel": False}
    try:
        make = op.reference_inputs if REFERENCE_INPUTS else op.sample_inputs
        samples = list(make(DEVICE, dtype, requires_grad=False))
        first = run_sample(op, samples[0], keep_plans=name if gpu_source else None)
    except Exception:  # noqa: BLE001 - no usable sample, or eager itself raises
        row["status"] = "skipped"
        return row
    row["available"] = len(samples)
    if first[0] == "eager_nondeterministic":
        row["status"] = "skipped"
        row["eager_nondeterministic"] = 1
        return row
    if first[0] == "eager_match":
        row["blockers"] = first[1]
    row["no_kernel"] = first == ("native_match", "no kernel")
    compiled_op = first[0] == "native_match" or (first[0] == "mismatch" and "partly in eager" not in first[1])
    runs = []
    for index in _spread(len(samples), cap if compiled_op else 1):
        sample = samples[index]
        variants = [("contiguous", sample)]
        if compiled_op:
            strided = sample.noncontiguous()
            if _layouts(strided) != _layouts(sample):
                variants.append(("noncontiguous", strided))
        for variant, s in variants:
            try:
                outcome = first if (index, variant) == (0, "contiguous") else run_sample(op, s)
            except Exception:  # noqa: BLE001 - eager raises on this sample: nothing to compare
                continue
            runs.append((index, variant, *outcome))
    for index, variant, outcome, detail in runs:
        if outcome == "eager_nondeterministic":
            row["eager_nondeterministic"] += 1
            continue
        row["run"] += 1
        row["native"] += outcome == "native_match"
        row["matched"] += outcome in ("native_match", "eager_match")
        if outcome == "mismatch":
            row["mismatched"] += 1
            row["mismatches"].append([index, variant, detail])
    row["status"] = "compiled" if compiled_op else "partly_eager"
    return row


def sweep(shard: int, shards: int, cap: int | None, names: set[str] | None, gpu_source: bool = False
          ) -> list[dict]:
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.filterwarnings("ignore")
    # Every sample compiles afresh, so the limit is never the reason a call runs eager; should it be
    # reached anyway, fail loudly rather than let Dynamo run the frame in eager without a word.
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    ops = [op for op in op_db if sweep_dtype(op) is not None
           and (names is None or op.name + (f".{op.variant_test_name}" if op.variant_test_name else "") in names)]
    rows = [sweep_op(op, cap, gpu_source) for op in ops[shard::shards]]
    if gpu_source:
        check_gpu_source(rows)
    return rows


def summarize(rows: list[dict], cap: int | None, seconds: float) -> dict:
    compiled = [r for r in rows if r["status"] == "compiled"]
    return {
        "compiled_match": sorted(r["op"] for r in compiled if r["mismatched"] == 0),
        # compiled without a kernel of ours: only views and library calls (counted in compiled_match)
        "views_or_library_only": sorted(r["op"] for r in compiled if r["mismatched"] == 0 and r["no_kernel"]),
        "partly_eager": sorted(r["op"] for r in rows if r["status"] == "partly_eager" and r["mismatched"] == 0),
        "silent_mismatch": sorted([r["op"], *m] for r in rows for m in r["mismatches"]),
        "skipped": sorted(r["op"] for r in rows if r["status"] == "skipped"),
        # --gpu-source: ops whose first sample's Triton kernels the GPU compiler rejects
        "gpu_source_rejected": sorted([r["op"], e] for r in rows for e in r.get("gpu_source_errors", ())),
        "gpu_source_checked": sum(bool(r.get("gpu_source_checked")) for r in rows),
        "blockers": _rank_blockers(rows),
        "samples": {key: sum(r[key] for r in rows) for key in ("run", "native", "matched", "mismatched",
                                                              "eager_nondeterministic")},
        "max_samples_per_op": cap,
        "seconds": round(seconds, 1),
        "rows": rows,
    }


def _rank_blockers(rows: list[dict]) -> list[list]:
    """[blocking ATen op (or reason), number of partly-eager ops it blocks], most first."""
    counts: dict[str, int] = {}
    for r in rows:
        if r["status"] == "partly_eager":
            for b in filter(None, r["blockers"].split(",")):
                counts[b] = counts.get(b, 0) + 1
    return sorted(([b, n] for b, n in counts.items()), key=lambda t: (-t[1], t[0]))


def print_report(result: dict, table: bool) -> None:
    if table:
        print(f"{'op':44} {'status':12} {'avail':>5} {'run':>4} {'native':>6} {'match':>5} {'mismatch':>8}")
        for r in sorted(result["rows"], key=lambda r: (r["status"], r["op"])):
            print(f"{r['op']:44} {r['status']:12} {r['available']:5} {r['run']:4} {r['native']:6} "
                  f"{r['matched']:5} {r['mismatched']:8}  {r['blockers']}")
        print()
        print("blocking ops (ATen op that ran in PyTorch -> partly-eager ops it blocks):")
        for blocker, count in result["blockers"]:
            print(f"  {count:4}  {blocker}")
        print()
    cap = result["max_samples_per_op"]
    s = result["samples"]
    print(f"{DEVICE} ({BACKEND[DEVICE]} backend) ops: {len(result['compiled_match'])} compiled and matched "
          f"({len(result['views_or_library_only'])} of "
          f"them views or library calls only), {len(result['partly_eager'])} ran partly "
          f"in eager and matched, {len({m[0] for m in result['silent_mismatch']})} with mismatches, "
          f"{len(result['skipped'])} skipped")
    print(f"samples: {s['run']} run ({s['native']} compiled by us), {s['matched']} matched, {s['mismatched']} "
          f"mismatched, {s['eager_nondeterministic']} not compared (eager nondeterministic); "
          + ("all samples of compiled ops" if cap is None
             else f"at most {cap} samples per compiled op (--all lifts this)")
          + f", each also non-contiguous; {result['seconds']} s")
    for m in result["silent_mismatch"]:
        print(f"MISMATCH {m[0]} sample {m[1]} ({m[2]}): {m[3]}")
    if result["gpu_source_checked"]:
        print(f"GPU source: the Triton kernels of {result['gpu_source_checked']} ops' first samples compiled for "
              f"sm_90; {len({r[0] for r in result['gpu_source_rejected']})} ops rejected")
    for op, error in result["gpu_source_rejected"]:
        print(f"GPU SOURCE REJECTED {op}: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print one row per op")
    parser.add_argument("--all", action="store_true", help="run every sample of compiled ops (no cap)")
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ops", help="comma-separated op names: sweep only these (for debugging)")
    parser.add_argument("--ops-from", help="sweep only the ops listed under 'native' in this JSON file "
                        "(written by --native-json), e.g. to check the CPU's native set on CUDA")
    parser.add_argument("--device", choices=sorted(BACKEND), default="cpu",
                        help="cpu: C++ backend (default); cuda: Triton backend on the GPU")
    parser.add_argument("--json-out", help="also write the result JSON to this file")
    parser.add_argument("--reference-inputs", action="store_true",
                        help="OpInfo's reference inputs (samples plus edge cases) instead of its samples")
    parser.add_argument("--gpu-source", action="store_true",
                        help="also compile the Triton GPU source of each compiled op's first sample for an H200 "
                             "(sm_90), without a GPU (compiler_core/codegen/triton/ahead.py)")
    parser.add_argument("--dynamic", action="store_true",
                        help="compile with dynamic=True: sizes as symbols from the first call")
    parser.add_argument("--native-json", help="write the ops compiled and matched to this file (the set "
                        "tests/test_opinfo.py expects; only from a sweep of all ops)")
    parser.add_argument("--dtype", choices=("complex64", "complex128", "float64", "bfloat16"),
                        help="sweep only the ops with samples in this dtype, in it (default: float32, or int64 "
                             "for ops without float32)")
    parser.add_argument("--shard", help=argparse.SUPPRESS)  # "i/n": internal, one worker's share
    args = parser.parse_args(ARGV)
    cap = None if args.all else args.max_samples
    global DEVICE, REFERENCE_INPUTS, ONLY_DTYPE, DYNAMIC
    DEVICE = args.device
    REFERENCE_INPUTS = args.reference_inputs
    DYNAMIC = args.dynamic
    ONLY_DTYPE = getattr(torch, args.dtype) if args.dtype else None
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda needs a CUDA GPU; none is visible to torch")
    if args.ops_from:
        listed = json.loads(Path(args.ops_from).read_text())["native"]
        args.ops = ",".join(sorted(set(listed) | set(args.ops.split(",") if args.ops else ())))
    if args.shard:
        shard, shards = map(int, args.shard.split("/"))
        names = set(args.ops.split(",")) if args.ops else None
        print(json.dumps(sweep(shard, shards, cap, names, args.gpu_source)))
        return
    start = time.perf_counter()
    flags = ((["--all"] if args.all else ["--max-samples", str(cap)]) + (["--ops", args.ops] if args.ops else [])
             + ["--device", DEVICE] + (["--gpu-source"] if args.gpu_source else [])
             + (["--reference-inputs"] if args.reference_inputs else [])
             + (["--dtype", args.dtype] if args.dtype else []) + (["--dynamic"] if args.dynamic else []))
    # The shards are already one process per core: compile worker processes of their own on the GPU
    # (runtime/parallel_compile.py) would start a dozen more in each.
    env = {**os.environ, "FCOMPILE_COMPILE_WORKERS": os.environ.get("FCOMPILE_COMPILE_WORKERS", "0")}
    workers = [subprocess.Popen([sys.executable, __file__, "--shard", f"{i}/{args.workers}", *flags],
                                stdout=subprocess.PIPE, text=True, env=env, preexec_fn=_compat.die_with_parent)
               for i in range(args.workers)]
    rows = []
    for w in workers:
        out, _ = w.communicate()
        if w.returncode != 0:
            sys.exit(f"sweep worker failed with exit code {w.returncode}")
        rows += json.loads(out.strip().splitlines()[-1])
    result = summarize(rows, cap, time.perf_counter() - start)
    print_report(result, args.table)
    if args.native_json:
        if args.ops or args.dtype or args.dynamic:
            sys.exit("--native-json needs a sweep of all ops in the default dtypes (no --ops, no --dtype)")
        Path(args.native_json).write_text(json.dumps({
            "about": "ops compiled by us and matching eager on every sample run; tests/test_opinfo.py",
            "native": result["compiled_match"]}, indent=0) + "\n")
    print(json.dumps(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"device": DEVICE, "backend": BACKEND[DEVICE], **result}) + "\n")


if __name__ == "__main__":
    main()

"""OpInfo sweep: every PyTorch op with an fp32 CPU OpInfo, first sample, compiled with the C++ backend.

Run as a script (it imports torch's test internals, which parse sys.argv and must stay out of the
pytest process; PITFALLS.md).  Prints one JSON object: ops that matched eager with our kernels,
ops that ran (partly) in eager PyTorch, and silent mismatches - results that differ from eager
although our kernels produced them.  Ops whose eager result differs between two calls (empty*,
random ops) are skipped: there is nothing to compare against.
"""

from __future__ import annotations

import json
import sys
import warnings

sys.argv = sys.argv[:1]

import torch  # noqa: E402

import compiler_core as cc  # noqa: E402


def _same(a, b) -> bool:
    try:
        torch.testing.assert_close(a, b, equal_nan=True, atol=1e-4, rtol=1e-4)
        return True
    except Exception:  # noqa: BLE001 - any difference (values, shapes, types) counts
        return False


def main() -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.filterwarnings("ignore")
    torch._dynamo.config.cache_size_limit = 64
    out = {"compiled_match": [], "fell_back": [], "silent_mismatch": [], "skipped": []}
    for op in op_db:
        if not op.supports_dtype(torch.float32, "cpu"):
            continue
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        try:
            sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=False)))
            args = (sample.input, *sample.args)

            def fn(*a, _op=op, _kw=sample.kwargs):
                return _op.op(*a, **_kw)

            torch.manual_seed(0)
            expected = fn(*args)
            torch.manual_seed(0)
            if not _same(fn(*args), expected):
                out["skipped"].append(name)
                continue
        except Exception:  # noqa: BLE001 - no usable sample or eager itself raises
            out["skipped"].append(name)
            continue
        torch._dynamo.reset()
        compiled = cc.compile(fn, backend="cpp")
        torch.manual_seed(0)
        try:
            got = compiled(*args)
        except Exception as exc:  # noqa: BLE001 - recorded as a mismatch: eager did not raise
            out["silent_mismatch"].append([name, f"raised {type(exc).__name__}: {str(exc)[:100]}"])
            continue
        stats = compiled.session.stats
        ours = stats["fallback_graphs"] == 0 and stats["kernel_count"] > 0 and not stats["fallback_ops"]
        if not _same(got, expected):
            if ours:
                out["silent_mismatch"].append([name, "differs from eager"])
            else:
                out["fell_back"].append(name)  # eager pieces in the graph; a mismatch there is torch's
        elif ours:
            out["compiled_match"].append(name)
        else:
            out["fell_back"].append(name)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

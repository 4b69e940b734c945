"""OpInfo's complex64 samples of the ops the complex rewrite has rules for (compiler_core/decomp/
complex_pairs.py): each compiles with nothing run in eager PyTorch and matches eager on every sample
run, non-contiguous layouts included. `python tests/opinfo_sweep.py --dtype complex64 --table` sweeps
every op with complex64 samples (2026-12-05: 288 compiled and matched, 94 partly PyTorch's calls on
pairs, 0 mismatched of 3,439 samples)."""

import json

import pytest

# One or more ops per rule: arithmetic, views, reductions, comparisons, factories, matmul, FFT.
RULED_OPS = ("mul", "div.no_rounding_mode", "add", "sub", "rsub", "neg", "conj", "conj_physical", "resolve_conj",
             "abs", "angle", "exp", "view_as_real", "real", "imag", "sum", "mean", "var", "cat", "where", "mm",
             "bmm", "matmul", "transpose", "permute", "flip", "roll", "index_select", "gather",
             "constant_pad_nd", "split", "unbind", "eq", "ne", "isnan", "logical_not", "zeros", "ones", "fill",
             "reciprocal", "expand", "squeeze", "unsqueeze", "narrow", "diagonal", "fft.fft", "fft.ifft", "log",
             "log10", "sqrt", "rsqrt", "isinf", "logical_and", "sin", "cos", "sinh",
             "cosh", "tan", "tanh", "pow", "float_power", "__rpow__", "exp2", "sigmoid", "log1p", "expm1", "atan",
             "atanh")


@pytest.mark.slow
# gpu_source: the Triton kernels also compile for the H200 (no GPU needed); libdevice's overloads caught
# float32 literals beside float64 values in complex tan, tanh and float_power on the H100 (2026-12-05).
@pytest.mark.sweep("--dtype", "complex64", "--ops", ",".join(RULED_OPS), "--max-samples", "3", "--workers", "1",
                   gpu_source=True)
def test_complex_samples_of_ruled_ops_compile_and_match(opinfo_sweep):
    pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")
    run = opinfo_sweep.wait()  # started beside the other tests in a full suite (tests/conftest.py)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    swept = {r["op"] for r in result["rows"]}
    assert swept == set(RULED_OPS), f"not OpInfo names with complex64 samples: {sorted(set(RULED_OPS) - swept)}"
    assert result["silent_mismatch"] == [], result["silent_mismatch"]
    assert sorted(result["compiled_match"]) == sorted(RULED_OPS), [
        (r["op"], r["status"], r["blockers"]) for r in result["rows"] if r["op"] not in result["compiled_match"]]
    if opinfo_sweep.gpu_source:
        assert result["gpu_source_rejected"] == [], result["gpu_source_rejected"]
        assert result["gpu_source_checked"] == len(RULED_OPS), result["gpu_source_checked"]

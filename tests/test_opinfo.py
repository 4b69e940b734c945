"""The OpInfo sweep (tests/opinfo_sweep.py) finds no silent mismatch, and what compiles keeps compiling."""

import json
from pathlib import Path

import pytest

# The ops compiled by us (nothing ran in eager PyTorch) that matched eager on every sample run, as
# measured (torch 2.13 CPU, fp32, or int64 for ops without fp32; at most 8 samples per op, each also
# non-contiguous). Every other eligible op is expected not to be native. The set must match exactly:
# an op that drops out regressed into a fallback; an op that became native must be added (deliberately,
# after its samples all matched) with
#     python tests/opinfo_sweep.py --native-json tests/opinfo_native.json
NATIVE_JSON = Path(__file__).with_name("opinfo_native.json")
NATIVE_SAMPLES_FLOOR = 6400  # measured 6641 (2026-12-01: polynomials, Bessel, histograms, segments...)
# Ops known to mismatch eager on some sample, each with the reason. An entry that stops mismatching
# fails the test too, so the list only shrinks.
EXPECTED_MISMATCHES: dict[str, str] = {}


@pytest.mark.slow
@pytest.mark.sweep(gpu_source=True)
def test_opinfo_sweep_has_no_silent_mismatch(opinfo_sweep):
    pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")
    # tests/conftest.py starts the sweep when a full suite starts (it runs beside the other tests);
    # here its result is read.
    run = opinfo_sweep.wait()
    gpu_source = opinfo_sweep.gpu_source
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    unexpected = [m for m in result["silent_mismatch"] if m[0] not in EXPECTED_MISMATCHES]
    assert unexpected == [], unexpected
    now_passing = set(EXPECTED_MISMATCHES) - {m[0] for m in result["silent_mismatch"]}
    assert not now_passing, f"no longer mismatch, remove from EXPECTED_MISMATCHES: {sorted(now_passing)}"
    expected = set(json.loads(NATIVE_JSON.read_text())["native"])
    native = set(result["compiled_match"])
    assert not expected - native, f"no longer native (a regression): {sorted(expected - native)}"
    assert not native - expected, f"newly native, add to {NATIVE_JSON.name}: {sorted(native - expected)}"
    assert result["samples"]["native"] >= NATIVE_SAMPLES_FLOOR, result["samples"]
    if gpu_source:
        assert result["gpu_source_rejected"] == [], result["gpu_source_rejected"]
        assert result["gpu_source_checked"] >= len(expected), result["gpu_source_checked"]

"""Smoke tests of `python -m compiler_core.bench`: tiny sizes, JSON schema of ARCHITECTURE.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from compiler_core.bench.runner import format_table, geomean

# Every row carries these (ARCHITECTURE.md, "Benchmarks").
ROW_FIELDS = {
    "workload": str, "eager_ms": float, "inductor_ms": (float, type(None)), "ours_ms": (float, type(None)),
    "ideal_bytes": int, "memory_bound": bool, "ours_GBps": (float, type(None)),
    "ours_compile_cold_s": (float, type(None)), "ours_compile_warm_s": (float, type(None)),
    "inductor_compile_cold_s": (float, type(None)), "ours_kernels": (int, type(None)),
    "ours_peak_bytes": (int, type(None)), "inductor_peak_bytes": (int, type(None)),
}
TOP_FIELDS = {"device": str, "machine": str, "date": str, "torch": str, "triton": (str, type(None)),
              "copy_GBps": float, "rows": list}


def run_bench(tmp_path, *args: str, device: str = "cpu") -> dict:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "compiler_core.bench", "--device", device, "--size", "small",
                           "--repeats", "2", "--json", str(out), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "geomean ours/inductor" in proc.stdout  # the table went to stdout
    assert "[bench]" in proc.stderr and "[bench]" not in proc.stdout  # progress went to stderr
    return json.loads(out.read_text())


def check_schema(report: dict, workloads: list[str]) -> None:
    for key, types in TOP_FIELDS.items():
        assert isinstance(report[key], types), key
    assert report["copy_GBps"] > 0
    assert [r["workload"] for r in report["rows"]] == workloads
    for row in report["rows"]:
        for key, types in ROW_FIELDS.items():
            assert key in row, key
            assert isinstance(row[key], types), (row["workload"], key, row[key])
        assert row["eager_ms"] > 0
        # Ours either ran (a time and a correctness verdict) or its error is recorded: never silent.
        assert (row["ours_ms"] is not None and isinstance(row["matches_eager"], bool)) or row["ours_error"]


@pytest.fixture(scope="module")
def without_inductor(tmp_path_factory) -> dict:
    """One run of two memory-bound rows without Inductor, read by the tests below (a run costs ~15 s)."""
    return run_bench(tmp_path_factory.mktemp("bench"), "--only", "softmax,swiglu_chain", "--no-inductor")


def test_bench_smoke_without_inductor(without_inductor):
    report = without_inductor
    check_schema(report, ["softmax", "swiglu_chain"])
    softmax = report["rows"][0]
    assert softmax["ideal_bytes"] == 2 * 32 * 64 * 4  # x read once, y written once (fp32)
    assert softmax["memory_bound"] is True
    assert softmax["inductor_ms"] is None and softmax["inductor_compile_cold_s"] is None


def test_table_says_noisy_rerun_for_a_row_the_rules_flag_and_the_bench_records_the_spread(without_inductor):
    report = without_inductor
    row = report["rows"][0]
    low, high = row["ours_iqr_ms"]
    assert low <= row["ours_ms"] <= high and isinstance(row["noise"], list)
    assert report["noisy_rows"] == [r["workload"] for r in report["rows"] if r["noise"]]
    noisy = {**row, "noise": ["ours's samples spread 80% of its median (IQR)"]}
    table = format_table({**report, "rows": [noisy], "noisy_rows": ["softmax"]})
    assert "noisy: rerun" in table and "NOT FIGURES: 1 of 1 rows timed noisy (softmax)" in table
    assert "spread 80%" in table
    assert "NOT FIGURES" not in format_table({**report, "rows": [{**row, "noise": []}], "noisy_rows": []})


@pytest.mark.slow
def test_bench_smoke_with_inductor(tmp_path):
    report = run_bench(tmp_path, "--only", "tiny_chain")
    check_schema(report, ["tiny_chain"])
    row = report["rows"][0]
    # Inductor needs a C++ compiler on CPU; without one the bench records the error and goes on.
    assert row["inductor_ms"] is not None or row["inductor_error"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bench_smoke_on_gpu(tmp_path):
    report = run_bench(tmp_path, "--only", "softmax,rmsnorm", device="cuda")
    check_schema(report, ["softmax", "rmsnorm"])
    assert all(isinstance(r["ours_peak_bytes"], int) for r in report["rows"] if r["ours_ms"] is not None)


def test_training_workloads_run_and_match(tmp_path):
    # Loss + backward through ours: the row's check covers the loss and every gradient.
    report = run_bench(tmp_path, "--only", "mlp_train_step,gpt_block", "--no-inductor")
    check_schema(report, ["mlp_train_step", "gpt_block"])
    assert report["not_supported_yet"] == []
    for row in report["rows"]:
        assert row["train"] and row["matches_eager"], (row["workload"], row.get("mismatch"), row.get("ours_error"))
        assert row["ours_fallback_graphs"] == 0, row["ours_notes"]


def test_gpt2_training_step_runs_when_named_and_matches(tmp_path):
    # transformers' GPT-2 (random init): loss and every parameter's gradient through ours. A CUDA row by
    # default (TARGETS.md's zoo size); on the CPU only when named, as here at the small size.
    pytest.importorskip("transformers", reason="the GPT-2 row builds transformers' GPT2LMHeadModel")
    report = run_bench(tmp_path, "--only", "gpt2_train_step", "--no-inductor")
    (row,) = report["rows"]
    assert row["matches_eager"], (row.get("mismatch"), row.get("ours_error"))
    assert row["ours_fallback_graphs"] == 0 and row["ours_kernels"] > 0, row["ours_notes"]


def test_training_check_compares_every_gradient():
    from compiler_core.bench.runner import _matches_training

    loss, g1, g2 = torch.tensor(1.0), torch.full((3,), 1e-3), torch.full((2, 2), 5.0)
    assert _matches_training((loss, g1, g2), (loss, g1, g2), torch.float32)[0]
    # A small gradient off by 1e-4 is 10% wrong: an absolute tolerance of 1e-4 would pass it.
    ok, why = _matches_training((loss, g1 + 1e-4, g2), (loss, g1, g2), torch.float32)
    assert not ok and why.startswith("grad 0")
    nan = g2.clone()
    nan[0, 0] = float("nan")
    assert not _matches_training((loss, g1, nan), (loss, g1, g2), torch.float32)[0]


def test_table_flags_mismatches_and_errors():
    row = {"workload": "softmax", "eager_ms": 1.0, "inductor_ms": 0.5, "ours_ms": 0.4, "ours_vs_eager": 0.4,
           "ours_vs_inductor": 0.8, "ours_GBps": 10.0, "memory_bound": True, "ours_pct_copy": 50.0,
           "ours_compile_cold_s": 0.1,
           "ours_compile_warm_s": 0.01, "inductor_compile_cold_s": 1.0, "ours_kernels": 1,
           "ours_peak_bytes": 1024, "inductor_peak_bytes": None, "matches_eager": False,
           "mismatch": "Tensor-likes are not close!"}
    broken = {**{k: None for k in row}, "workload": "rmsnorm", "eager_ms": 1.0,
              "ours_error": "RuntimeError: boom"}
    report = {"device": "cpu", "machine": "test", "torch": "x", "triton": None, "threads": 2, "date": "d",
              "copy_GBps": 20.0, "size": "small", "samples": 2, "rows": [row, broken],
              "geomean_ours_vs_inductor": 0.8, "geomean_ours_vs_eager": 0.4, "geomean_inductor_vs_eager": 0.5,
              "median_ours_compile_cold_s": 0.1, "median_inductor_compile_cold_s": 1.0, "not_supported_yet": []}
    table = format_table(report)
    assert "MISMATCH" in table and "Tensor-likes are not close!" in table
    assert "ERROR" in table and "RuntimeError: boom" in table


def test_geomean_ignores_missing_values():
    assert geomean([2.0, None, 8.0]) == pytest.approx(4.0)
    assert geomean([None]) is None


def test_noise_rules_flag_spread_and_load_but_pass_tight_samples_on_a_quiet_machine():
    from compiler_core.bench.noise import noise_reasons

    tight = {"eager": [1.0, 1.01, 0.99, 1.0], "ours": [0.5, 0.51, 0.5, 0.49]}
    assert noise_reasons(tight, (0.3, 2)) == ()
    spread = noise_reasons({**tight, "ours": [0.5, 0.9, 0.3, 1.2]}, (0.3, 2))
    assert len(spread) == 1 and spread[0].startswith("ours's samples spread")
    assert any("load average 2.5 above the 2 cores" in r for r in noise_reasons(tight, (2.5, 2)))

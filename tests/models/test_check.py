"""The zoo's comparison is only as good as its tolerance: these pin down what it must catch."""

import math

import torch

from .check import compare, envelope_of, named_tensors, nudged


def test_one_logit_off_by_one_fails():
    ref = torch.randn(2, 12, 97)
    ours = ref.clone()
    ours[1, 3, 40] += 1.0
    result = compare({"logits": ours}, {"logits": ref}, torch.float32)
    assert not result.ok
    assert math.isclose(result.max_err, 1.0, rel_tol=1e-5)


def test_reordered_sums_pass():
    # What a fused kernel legitimately changes: the order of a float32 reduction.
    x = torch.randn(64, 512)
    ref = x.sum(-1)
    ours = x.view(64, 8, 64).sum(-1).sum(-1)
    assert compare({"s": ours}, {"s": ref}, torch.float32).ok


def test_worst_gradient_is_named():
    grads = {"a.weight": torch.ones(4), "b.bias": torch.full((3,), 0.01)}
    ours = {"a.weight": torch.ones(4) + 1e-7, "b.bias": torch.tensor([0.01, 0.02, 0.01])}
    result = compare(ours, grads, torch.float32)
    assert not result.ok
    assert result.worst == "b.bias"
    assert math.isclose(result.max_err, 0.01, rel_tol=1e-5)
    assert "b.bias" in result.describe()


def test_nan_missing_and_none_gradients():
    ref = {"w": torch.zeros(3), "unused": None}
    assert compare({"w": torch.zeros(3), "unused": torch.zeros(2)}, ref, torch.float32).ok  # None == zeros
    assert not compare({"w": torch.tensor([0.0, math.nan, 0.0]), "unused": None}, ref, torch.float32).ok
    assert not compare({"w": torch.zeros(3)}, ref, torch.float32).ok  # a tensor went missing


def test_named_tensors_walks_model_outputs():
    out = {"logits": torch.ones(2), "hidden": (torch.zeros(1), torch.arange(3))}
    found = named_tensors(out)
    assert sorted(found) == ["out.hidden.0", "out.logits"]  # integer tensors are not compared
    assert torch.equal(found["out.logits"], torch.ones(2))


def test_eager_error_widens_the_allowance_per_tensor():
    # A deep fp32 backward: eager itself is 3e-4 off the fp64 reference on one gradient.
    ref = {"g": torch.zeros(4, dtype=torch.float64), "h": torch.ones(4, dtype=torch.float64)}
    eager = {"g": torch.tensor([3e-4, 0, 0, 0]), "h": torch.ones(4)}
    near = {"g": torch.tensor([0, 5e-4, 0, 0]), "h": torch.ones(4)}
    assert not compare(near, ref, torch.float32).ok  # beyond the fixed fp32 tolerance
    assert compare(near, ref, torch.float32, eager).ok  # but within 2x of eager's own error
    # Eager's error on one tensor does not excuse an error on another.
    off = {"g": torch.zeros(4), "h": torch.tensor([1, 1, 1, 1 + 5e-4])}
    assert not compare(off, ref, torch.float32, eager).ok
    far = {"g": torch.tensor([0, 7e-4, 0, 0]), "h": torch.ones(4)}
    assert not compare(far, ref, torch.float32, eager).ok  # more than 2x eager's error


def test_a_spiky_max_error_passes_when_the_rmse_is_as_good_as_eagers():
    # What tv_resnet50's fp32 backward does on the GPU: ours' largest element error is 3x eager's,
    # while over the whole tensor ours is closer to fp64 than eager is.
    ref = {"g": torch.zeros(1000, dtype=torch.float64)}
    eager = {"g": torch.full((1000,), 1e-5)}
    eager["g"][0] = 2e-5
    spiky = {"g": torch.zeros(1000)}
    spiky["g"][7] = 6e-5
    result = compare(spiky, ref, torch.float32, eager)
    assert result.ok and result.by_rmse and "by RMSE" in result.describe()
    # Beyond OUTLIER_SLACK times eager's max error, a good RMSE does not excuse the element.
    wrong = {"g": torch.zeros(1000)}
    wrong["g"][7] = 1e-4
    assert not compare(wrong, ref, torch.float32, eager).ok
    # Nor does a max error within the cap excuse an RMSE beyond twice eager's.
    one_off = {"g": torch.zeros(1000)}
    one_off["g"][0] = 2e-5
    broad = {"g": torch.full((1000,), 5e-5)}
    assert not compare(broad, ref, torch.float32, one_off).ok


def test_nudged_weights_move_within_one_machine_epsilon_and_repeat():
    model = torch.nn.Linear(64, 32)
    a, b, other = nudged(model, 0), nudged(model, 0), nudged(model, 1)
    for p, q, r, s in zip(model.parameters(), a.parameters(), b.parameters(), other.parameters()):
        # 1 + u*eps rounds to within eps of 1, and the product adds half an ulp of its own
        assert ((q - p).abs() <= 1.5 * torch.finfo(p.dtype).eps * p.detach().abs()).all()
        assert torch.equal(q, r)  # the same seed, the same weights: a verdict repeats
        assert not torch.equal(q, s) and not torch.equal(q, p)
    assert all(p.requires_grad for p in a.parameters())


def test_an_envelope_of_eager_runs_widens_the_allowance_like_the_runs_themselves():
    # A ReLU-mask flip: ours takes a step one of the nudged eager runs also takes, eager's own run not.
    ref = {"g": torch.zeros(1000, dtype=torch.float64), "h": torch.ones(8, dtype=torch.float64)}
    eager = {"g": torch.full((1000,), 1e-6), "h": torch.ones(8)}
    flipped = {"g": torch.full((1000,), 1e-6), "h": torch.ones(8)}
    flipped["g"][3] = 2e-5
    runs = [eager, {"g": torch.full((1000,), 2e-6), "h": torch.ones(8)}, flipped]
    envelope = envelope_of(iter(runs), ref)
    assert envelope.runs == 3 and math.isclose(envelope.errors["g"][0], 2e-5, rel_tol=1e-5)
    ours = {"g": torch.full((1000,), 1e-6), "h": torch.ones(8)}
    ours["g"][500] = 2.5e-5
    assert not compare(ours, ref, torch.float32, eager).ok
    assert compare(ours, ref, torch.float32, eager, envelope).ok
    assert compare(ours, ref, torch.float32, *runs).ok == compare(ours, ref, torch.float32, envelope).ok
    # The envelope of one tensor excuses nothing on another, and a wrong value stays wrong.
    wrong_h = {"g": ours["g"], "h": torch.tensor([1.0] * 7 + [1.01])}
    assert not compare(wrong_h, ref, torch.float32, envelope).ok
    far = {"g": ours["g"].clone(), "h": torch.ones(8)}
    far["g"][500] = 1e-3
    assert not compare(far, ref, torch.float32, envelope).ok


def test_a_noisy_timing_is_flagged_not_quoted():
    """The zoo table judges its samples by the bench's rules (compiler_core/bench/noise.py): a row timed
    while other jobs loaded the 2-core machine says "noisy: rerun" beside its ratio, and why."""
    from .table import format_notes, format_table

    base = {"device": "cpu", "dtype": "fp32", "mask": "-", "mode": "inference", "status": "ok",
            "eager_ms": 1.0, "ours_ms": 0.5, "inductor_ms": 0.4, "vs_eager": 0.5, "vs_inductor": 1.25}
    quiet = {**base, "model": "quiet", "noise": []}
    loud = {**base, "model": "loud", "noise": ["load average 4.3 above the 2 cores"]}
    table = format_table([quiet, loud]).splitlines()
    assert table[0].split()[-1] == "timing"
    assert table[2].split()[0] == "quiet" and table[2].split()[-2:] == ["1.25x", "ok"]
    assert table[3].split()[0] == "loud" and table[3].split()[-3:] == ["1.25x", "noisy:", "rerun"]
    assert format_notes([quiet, loud]) == "loud fp32 - inference: timing noisy: load average 4.3 above the 2 cores"
    # Rows without timing (repeats 0) keep the column blank.
    assert format_table([{**base, "model": "untimed"}]).splitlines()[2].endswith("1.25x")


def test_notes_show_a_kernel_check_mismatch_row():
    # A row that --check stopped (KernelCheckError) has no worst tensor; its note names the kernel.
    from .table import format_notes

    row = {"model": "m", "dtype": "fp32", "mask": "-", "mode": "training", "status": "mismatch",
           "note": "KernelCheckError: kernel k1 disagrees"}
    assert "kernel k1 disagrees" in format_notes([row])

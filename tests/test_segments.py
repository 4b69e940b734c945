"""Segment reductions and embedding bags as masked reductions (decomp/segments.py): our kernels, eager's
values (empty segments and bags, padding_idx, NaN, fp16 rounding), eager's errors, all four outputs of
ATen's embedding bag, and PyTorch's call above the size caps."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.decomp import segments

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]
REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def _assert_ours(compiled, kernels: int = 1):
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0 and stats["kernel_count"] >= kernels, stats


def _assert_same(got, expected):
    """Values (NaN where eager has NaN), dtypes and shapes, output by output."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g, e)
        torch.testing.assert_close(g, e, equal_nan=True)


# ---------------------------------------------------------------------------------------------------
# segment_reduce


def _segment_inputs():
    g = torch.Generator().manual_seed(0)
    data = torch.randn(4, 7, 3, generator=g)
    data[1, 5, 2] = float("nan")  # one segment of row 1 is NaN in its last column
    lengths = torch.tensor([[2, 0, 4, 1], [0, 3, 3, 1], [7, 0, 0, 0], [1, 1, 1, 4]])  # along axis 1
    offsets = torch.tensor([0, 1, 1, 4])  # along axis 0: segments [0, 1), [1, 1) (empty), [1, 4)
    return data, lengths, offsets


@pytest.mark.parametrize("backend", BACKENDS)
def test_segment_reduce_is_our_kernels_with_eagers_values(backend):
    def segments_of(data, lengths, offsets):
        return tuple(out for reduce in REDUCTIONS for out in (
            torch.segment_reduce(data, reduce, lengths=lengths, axis=1),
            torch.segment_reduce(data, reduce, offsets=offsets, axis=0, initial=2.5)))

    args = _segment_inputs()
    compiled = cc.compile(segments_of, backend=backend)
    _assert_same(compiled(*args), segments_of(*args))
    _assert_ours(compiled)


def test_empty_segments_take_initial_or_eagers_defaults():
    # eager's defaults for an empty segment: sum 0, prod 1, max -inf, min +inf, mean NaN; `initial` if given
    # (a mean's initial counts as an element's worth of sum: (initial + x) / length)
    data, lengths = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0, 2, 1])

    def segments_of(data, lengths):
        return tuple(out for reduce in REDUCTIONS for out in (
            torch.segment_reduce(data, reduce, lengths=lengths),
            torch.segment_reduce(data, reduce, lengths=lengths, initial=3)))

    compiled = cc.compile(segments_of, backend="cpp")
    got = dict(zip([(r, i) for r in REDUCTIONS for i in (None, 3)], compiled(data, lengths)))
    nan, inf = float("nan"), float("inf")
    expected = {("sum", None): [0, 3, 4], ("sum", 3): [3, 6, 7], ("mean", None): [nan, 1.5, 4],
                ("mean", 3): [3, 3, 7], ("max", None): [-inf, 2, 4], ("max", 3): [3, 3, 4],
                ("min", None): [inf, 1, 4], ("min", 3): [3, 1, 3], ("prod", None): [1, 2, 4], ("prod", 3): [3, 6, 12]}
    for key, values in expected.items():
        torch.testing.assert_close(got[key], torch.tensor(values, dtype=torch.float32), equal_nan=True, msg=str(key))
    _assert_ours(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp16_segment_sums_round_after_every_element_as_eager(backend):
    # 2048 + 1 rounds back to 2048 in fp16: eager's running sum never moves, an fp32 sum would give 2064
    data = torch.tensor([2048.0] + [1.0] * 15, dtype=torch.float16)
    lengths = torch.tensor([16, 0])

    def segments_of(data, lengths):
        return (torch.segment_reduce(data, "sum", lengths=lengths),
                torch.segment_reduce(data, "mean", lengths=lengths, initial=0.1),
                torch.segment_reduce(data.flip(0) / 3, "prod", lengths=lengths, initial=0.1))

    compiled = cc.compile(segments_of, backend=backend)
    got, expected = compiled(data, lengths), segments_of(data, lengths)
    assert got[0][0].item() == 2048.0
    for g, e in zip(got, expected):
        assert torch.equal(g, e), (g, e)
    _assert_ours(compiled)


def test_a_long_fp16_segment_sum_stays_pytorchs_call():
    data = torch.ones(segments.SHORT_STEPWISE + 1, dtype=torch.float16)
    lengths = torch.tensor([data.numel()])
    compiled = cc.compile(lambda d, n: torch.segment_reduce(d, "sum", lengths=n) * 2, backend="cpp")
    assert torch.equal(compiled(data, lengths), torch.segment_reduce(data, "sum", lengths=lengths) * 2)
    assert compiled.session.stats["fallback_ops"] == ["aten.segment_reduce.default"]


def test_segment_reduce_raises_where_eager_does():
    data = torch.randn(5)
    by_lengths = cc.compile(lambda d, n: torch.segment_reduce(d, "sum", lengths=n), backend="cpp")
    for lengths in (torch.tensor([1, 2]), torch.tensor([-1, 6])):  # not summing to 5; a negative length
        with pytest.raises(RuntimeError):
            torch.segment_reduce(data, "sum", lengths=lengths)
        with pytest.raises((RuntimeError, IndexError)):
            by_lengths(data, lengths)
    decreasing = torch.tensor([0, 3, 2, 5])
    with pytest.raises(RuntimeError):
        torch.segment_reduce(data, "sum", offsets=decreasing)
    by_offsets = cc.compile(lambda d, o: torch.segment_reduce(d, "sum", offsets=o), backend="cpp")
    with pytest.raises((RuntimeError, IndexError)):
        by_offsets(data, decreasing)


# ---------------------------------------------------------------------------------------------------
# embedding bags


def _bag_inputs():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(10, 4, generator=g)
    weight[6, 1] = float("nan")
    indices = torch.tensor([5, 1, 6, 3, 3, 2, 9, 3])
    offsets = torch.tensor([0, 0, 3, 6])  # bag 0 is empty
    return weight, indices, offsets, torch.rand(8, generator=g)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_bag_is_our_kernels_with_eagers_values(backend):
    def bags_of(weight, indices, offsets, per_sample_weights):
        return (F.embedding_bag(indices, weight, offsets, mode="sum", per_sample_weights=per_sample_weights),
                F.embedding_bag(indices, weight, offsets, mode="mean", padding_idx=3),  # 3 leaves the divisor
                F.embedding_bag(indices, weight, offsets, mode="max", include_last_offset=True),
                F.embedding_bag(indices.reshape(2, 4), weight, mode="mean"),  # 2-d input: one bag per row
                F.embedding_bag(indices, weight.half(), offsets, mode="mean"))  # sums in fp32, rounds once

    args = _bag_inputs()
    compiled = cc.compile(bags_of, backend=backend)
    _assert_same(compiled(*args), bags_of(*args))
    _assert_ours(compiled)


def _aten_bags(weight, indices, offsets):
    """ATen's four outputs on its paths: sum's fast path (no offset2bag, zero bag sizes), padding_idx
    (the slow path, bag sizes less padding), include_last_offset ending before the last index (the
    fast path stops at the last offset, the others run on), int32 offsets, and the op with a backward."""
    calls = []
    for mode in (0, 1, 2):
        calls += [aten._embedding_bag_forward_only(weight, indices, offsets, False, mode),
                  aten._embedding_bag_forward_only(weight, indices, offsets[:3], False, mode, False, None, True, 3),
                  aten._embedding_bag_forward_only(weight, indices.int(), offsets.int(), False, mode, False, None,
                                                   True, -1),
                  aten._embedding_bag(weight, indices, offsets, False, mode, False, None, True, -1)]
    return tuple(t for outputs in calls for t in outputs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_bag_returns_atens_four_outputs(backend):
    weight, indices, offsets, _ = _bag_inputs()
    compiled = cc.compile(_aten_bags, backend=backend)
    got, expected = compiled(weight, indices, offsets), _aten_bags(weight, indices, offsets)
    _assert_same(got, expected)  # integer outputs (offset2bag, bag_size, max_indices) exactly
    _assert_ours(compiled)


def test_embedding_bag_max_keeps_the_first_nan_only_and_the_first_maximum():
    # ATen replaces a bag's running max only by a greater entry: NaN wins only as the first entry, and a
    # tie (-0.0 then 0.0 too) keeps the earlier index
    nan = float("nan")
    weight = torch.tensor([[nan, 1.0], [2.0, nan], [3.0, 3.0], [-0.0, 0.0], [0.0, -0.0]])
    indices, offsets = torch.tensor([0, 1, 2, 1, 0, 2, 3, 4]), torch.tensor([0, 3, 6])

    def bag_max(weight, indices, offsets):
        return aten._embedding_bag_forward_only(weight, indices, offsets, False, 2)

    compiled = cc.compile(bag_max, backend="cpp")
    output, _, _, max_indices = compiled(weight, indices, offsets)
    torch.testing.assert_close(output, torch.tensor([[nan, 3.0], [3.0, nan], [-0.0, 0.0]]), equal_nan=True)
    assert torch.equal(output[2].signbit(), torch.tensor([True, False]))
    assert torch.equal(max_indices, torch.tensor([[0, 2], [2, 1], [3, 3]]))
    _assert_same(compiled(weight, indices, offsets), bag_max(weight, indices, offsets))
    _assert_ours(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_norm_renormalises_the_table_in_our_kernels(backend):
    # F.embedding_bag(max_norm=...) first scales the rows it reads in place: the table is an output too
    weight, indices, offsets, _ = _bag_inputs()
    weight = weight.nan_to_num() * 2

    def bags_of(weight, indices, offsets):
        return F.embedding_bag(indices, weight, offsets, mode="mean", max_norm=1.5, norm_type=1.0)

    ours, theirs = weight.clone(), weight.clone()
    compiled = cc.compile(bags_of, backend=backend)
    torch.testing.assert_close(compiled(ours, indices, offsets), bags_of(theirs, indices, offsets))
    torch.testing.assert_close(ours, theirs)
    assert not torch.equal(theirs, weight)  # some rows were scaled
    _assert_ours(compiled)


def test_a_training_step_reads_our_forward_outputs():
    # _embedding_bag's backward (ours too) reads offset2bag, bag_size and max_indices from our forward
    weight, indices, offsets, _ = _bag_inputs()
    weight = weight.nan_to_num().requires_grad_()

    def loss_of(weight, indices, offsets):
        return sum((F.embedding_bag(indices, weight, offsets, mode=mode, padding_idx=3) ** 2).sum()
                   for mode in ("sum", "mean", "max"))

    compiled = cc.compile(loss_of, backend="cpp")
    compiled(weight, indices, offsets).backward()
    ours, weight.grad = weight.grad, None
    loss_of(weight, indices, offsets).backward()
    torch.testing.assert_close(ours, weight.grad)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_bag_backward_is_our_kernels_with_eagers_gradients(backend):
    """Every mode and option of the weight's gradient (_embedding_bag_backward, which ran in PyTorch in
    every training step with an EmbeddingBag: recommendation models): sum on ATen's fast path (no
    offset2bag: made from the offsets), per-sample weights, mean with a padding index and an empty bag,
    max (an empty bag adds nothing), include_last_offset, a 2-d input, bf16. (Offsets whose last one
    ends before the indices do, with include_last_offset, are left out: ATen's backward then reads past
    the gradient's rows.)"""
    g = torch.Generator().manual_seed(2)
    indices = torch.tensor([5, 1, 6, 3, 3, 2, 9, 3])
    offsets, with_last = torch.tensor([0, 0, 3, 6]), torch.tensor([0, 0, 3, 6, 8])
    per_sample = torch.rand(8, generator=g)
    calls = [dict(mode="sum"), dict(mode="sum", per_sample_weights=per_sample), dict(mode="mean", padding_idx=3),
             dict(mode="max"), dict(mode="max", padding_idx=9), dict(mode="sum", include_last_offset=True),
             dict(mode="mean", include_last_offset=True, padding_idx=1)]

    def loss_of(weight, probe):
        total = 0
        for c in calls:
            if "per_sample_weights" in c:
                c = {**c, "per_sample_weights": c["per_sample_weights"].to(weight.dtype)}
            bags = F.embedding_bag(indices, weight, with_last if c.get("include_last_offset") else offsets, **c)
            total = total + (bags * probe).sum()
        return total + (F.embedding_bag(indices.reshape(2, 4), weight, mode="mean") * probe[:2]).sum()

    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(10, 4, generator=g).to(dtype)
        probe = torch.randn(4, 4, generator=g).to(dtype)
        ours, eager = weight.clone().requires_grad_(), weight.clone().requires_grad_()
        torch._dynamo.reset()
        compiled = cc.compile(loss_of, backend=backend)
        compiled(ours, probe).backward()
        loss_of(eager, probe).backward()
        tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)  # bf16: ATen rounds after each add
        torch.testing.assert_close(ours.grad, eager.grad, **tol)
        assert compiled.session.stats["fallback_ops"] == [], compiled.session.messages


def test_embedding_bag_scale_grad_by_freq_stays_pytorchs_call():
    """ATen's CPU kernel divides each row's gradient by the count of another index (torch 2.13): ours
    leaves that call to PyTorch rather than copy it or differ from it."""
    indices, offsets = torch.tensor([5, 1, 6, 3, 3, 2, 9, 3]), torch.tensor([0, 0, 3, 6])
    ours, eager = (torch.randn(10, 4, generator=torch.Generator().manual_seed(3)).requires_grad_() for _ in range(2))

    def loss_of(weight):
        return F.embedding_bag(indices, weight, offsets, mode="mean", scale_grad_by_freq=True).square().sum()

    compiled = cc.compile(loss_of)
    compiled(ours).backward()
    loss_of(eager).backward()
    torch.testing.assert_close(ours.grad, eager.grad)
    assert compiled.session.stats["fallback_ops"] == ["aten._embedding_bag_backward.default"]

def test_a_large_bag_stays_pytorchs_call(monkeypatch):
    monkeypatch.setattr(segments, "SHORT_SCATTER", 50)  # 8 indices x 4 bags x 4 wide > 50
    weight, indices, offsets, _ = _bag_inputs()
    compiled = cc.compile(lambda w, i, o: F.embedding_bag(i, w, o) * 2, backend="cpp")
    torch.testing.assert_close(compiled(weight, indices, offsets), F.embedding_bag(indices, weight, offsets) * 2,
                               equal_nan=True)
    assert compiled.session.stats["fallback_ops"] == ["aten._embedding_bag_forward_only.default"]

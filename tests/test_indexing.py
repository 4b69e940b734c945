"""Indirect loads: ops whose index comes from a tensor (gather, index, index_select, embedding,
_unsafe_index, take) run in our kernels on both backends, match eager, and raise eager's error for an
index out of range instead of reading outside the buffer."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


def _run(fn, args, backend):
    compiled = cc.compile(fn, backend=backend)
    actual = compiled(*args)
    torch.testing.assert_close(actual, fn(*args))
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["extern_calls"] == 0, stats
    assert stats["kernel_count"] >= 1
    return compiled


def _noncontiguous(shape):
    return torch.randn(*reversed(shape)).t() if len(shape) == 2 else torch.randn(*shape, 2)[..., 0]


CASES = {
    "gather": (lambda s, i: torch.gather(s, 1, i) * 2,
               lambda dt: (torch.randn(4, 6), torch.randint(0, 6, (4, 3), dtype=torch.int64))),
    "gather_noncontiguous": (lambda s, i: torch.gather(s, 0, i),
                             lambda dt: (_noncontiguous((5, 4)), torch.randint(0, 5, (3, 4)))),
    "take_along_dim": (lambda s, i: torch.take_along_dim(s, i, dim=-1),
                       lambda dt: (torch.randn(3, 7), torch.randint(0, 7, (3, 2)))),
    "index_select": (lambda s, i: torch.index_select(s, 1, i) + 1,
                     lambda dt: (torch.randn(3, 8, 2), torch.tensor([7, 0, 3, 3], dtype=dt))),
    "index_select_noncontiguous": (lambda s, i: torch.index_select(s, 0, i),
                                   lambda dt: (_noncontiguous((6, 5)), torch.tensor([5, 1], dtype=dt))),
    "embedding": (lambda w, i: F.embedding(i, w),
                  lambda dt: (torch.randn(10, 8), torch.randint(0, 10, (2, 5), dtype=dt))),
    "index_negative": (lambda x, i: x[i],
                       lambda dt: (torch.randn(5, 3), torch.tensor([-1, 0, -5, 4], dtype=dt))),
    "index_broadcast": (lambda x, a, b: x[a, b],
                        lambda dt: (torch.randn(4, 6), torch.tensor([[0], [-1], [2]], dtype=dt),
                                    torch.tensor([1, 5, -2], dtype=dt))),
    "index_slice_between": (lambda x, a, b: x[a, :, b],  # non-adjacent: the index dims lead
                            lambda dt: (torch.randn(5, 6, 7), torch.tensor([[0, -1], [2, 3]], dtype=dt),
                                        torch.tensor([1, 6], dtype=dt))),
    "index_after_slice": (lambda x, a, b: x[:, a, b],  # adjacent: the index dims stay in place
                          lambda dt: (_noncontiguous((4, 6, 7))[1:], torch.tensor([[0, 5]], dtype=dt),
                                      torch.tensor([3, -7], dtype=dt))),
    "unsafe_index": (lambda x, i: torch.ops.aten._unsafe_index(x, [None, i]),
                     lambda dt: (torch.randn(3, 4), torch.tensor([3, 3, 0], dtype=dt))),
    "take": (lambda x, i: torch.take(x, i),
             lambda dt: (torch.randn(3, 4), torch.tensor([[0, -1], [11, 5]], dtype=dt))),
    "upsample_nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
                         lambda dt: (torch.randn(1, 2, 3, 4),)),
}
INT64_ONLY = {"gather", "gather_noncontiguous", "take_along_dim", "take", "upsample_nearest"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_eager(case, dtype, backend):
    if dtype == torch.int32 and case in INT64_ONLY:
        pytest.skip("eager takes int64 indices only")
    fn, make = CASES[case]
    torch.manual_seed(0)
    _run(fn, make(dtype), backend)


def test_indirect_load_in_the_ir():
    x, i = torch.randn(5, 3), torch.tensor([-1, 2])
    compiled = _run(lambda x, i: x[i], (x, i), "cpp")
    loops = compiled.session.graphs[0].loops.pretty()
    assert "wrapped(" in loops, loops
    source = compiled.session.kernels[0].source
    assert "fc::checked_position" in source, source


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,args,error", [
    (lambda s, i: torch.gather(s, 0, i), (torch.randn(3, 2), torch.tensor([[3, 0]])), RuntimeError),
    (lambda s, i: torch.gather(s, 0, i), (torch.randn(3, 2), torch.tensor([[-1, 0]])), RuntimeError),
    (lambda w, i: F.embedding(i, w), (torch.randn(4, 2), torch.tensor([1, 4])), IndexError),
    (lambda x, i: x[i], (torch.randn(4, 2), torch.tensor([0, -5])), IndexError),
    (lambda x, i: torch.index_select(x, 0, i), (torch.randn(4, 2), torch.tensor([7])), IndexError),
    (lambda x, t: F.cross_entropy(x, t), (torch.randn(3, 4), torch.tensor([0, 4, 1])), IndexError),
    (lambda x, t: F.nll_loss(x, t), (torch.randn(2, 4, 3), torch.tensor([[0, -2, 1], [3, 3, 3]])), IndexError),
], ids=["gather_high", "gather_negative", "embedding", "index", "index_select", "cross_entropy", "nll_loss2d"])
def test_out_of_range_raises_like_eager(fn, args, error, backend):
    with pytest.raises(error):
        fn(*args)
    compiled = cc.compile(fn, backend=backend)
    with pytest.raises(error):
        compiled(*args)
    assert compiled.session.stats["extern_calls"] == 0
    # the flag is cleared: a good call afterwards runs normally
    good = (args[0], torch.zeros_like(args[1]))
    torch.testing.assert_close(compiled(*good), fn(*good))


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_add_layer_norm_is_one_kernel(backend):
    emb, pos = torch.randn(50, 16), torch.randn(8, 16)
    ln = torch.nn.LayerNorm(16)

    def fn(ids):
        return ln(F.embedding(ids, emb) + pos)

    ids = torch.randint(0, 50, (2, 8))
    compiled = _run(fn, (ids,), backend)
    assert compiled.session.stats["kernel_count"] == 1, compiled.session.graphs[0].schedule.pretty()
    # the kernel reads the ids itself (the planner sees the index buffer as an input)
    ids_buffers = {b.name for b in compiled.session.graphs[0].loops.inputs if b.dtype == torch.int64}
    assert ids_buffers and ids_buffers <= set(compiled.session.kernels[0].signature)


def test_index_buffer_is_a_read_of_the_node():
    x, i = torch.randn(5, 3), torch.tensor([1, 2])
    compiled = _run(lambda x, i: x[i] + 1, (x, i), "cpp")
    graph = compiled.session.graphs[0].loops
    inputs = {b.name for b in graph.inputs}
    read = {b for n in graph.nodes for b in n.input_buffers}
    assert inputs <= read, (inputs, read)


def test_producer_read_indirectly_is_computed_at_the_positions_or_stored_first():
    # The gathered tensor is computed in the graph. Where a position walks one of its dimensions, the
    # gather computes it there from its inputs (schedule/gather_inline.py): one kernel. `take` reads
    # the flattened tensor (a position spans both dimensions): it is stored first, two kernels.
    x, i = torch.randn(6, 4), torch.tensor([5, 0, 2])
    compiled = _run(lambda x, i: (x.exp() * 2)[i], (x, i), "cpp")
    assert compiled.session.stats["kernel_count"] == 1
    compiled = _run(lambda x, i: torch.take(x.exp() * 2, i), (x, i), "cpp")
    assert compiled.session.stats["kernel_count"] == 2


def test_bool_mask_index_stays_extern():
    x, m = torch.randn(4), torch.tensor([True, False, True, True])
    compiled = cc.compile(lambda x, m: x[m], backend="cpp")
    torch.testing.assert_close(compiled(x, m), x[m])


COMPUTED_POSITIONS = {
    "bilinear": lambda x: F.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False) * 2,
    "bilinear_aligned": lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True) + 1,
    "nearest": lambda x: F.interpolate(x, scale_factor=2, mode="nearest") - 1,
    "bicubic": lambda x: F.interpolate(x, scale_factor=3, mode="bicubic", align_corners=False).relu(),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(COMPUTED_POSITIONS))
def test_clamped_positions_are_used_unchecked(case, backend):
    # An upsample's positions come from the output coordinates, clamped to the input: their value
    # range shows they cannot leave it, so the kernel has no range check (on the GPU, a kernel with
    # one is built in Triton's debug mode, ~25x slower on SegFormer's loss) and still matches eager.
    torch.manual_seed(0)
    compiled = _run(COMPUTED_POSITIONS[case], (torch.randn(2, 3, 5, 6),), backend)
    sources = "\n".join(k.source for k in compiled.session.kernels)
    assert "bounds: " in sources, sources
    for check in ("checked_position", "_check_position", "tl.device_assert"):
        assert check not in sources, sources
    assert any("proven(" in k.plan.pretty() for k in compiled.session.kernels)


@pytest.mark.parametrize("backend", BACKENDS)
def test_positions_read_from_memory_keep_their_check(backend):
    # An embedding's ids come from memory: nothing is known about them, so the check stays and an id
    # out of range still raises eager's error (test_out_of_range_raises_like_eager); the proven and the
    # checked position can sit in one kernel.
    def fn(w, ids, x):
        return F.embedding(ids, w) + F.interpolate(x, size=(4,), mode="linear")[0]
    w, ids, x = torch.randn(10, 4), torch.tensor([[1, 9], [0, 3], [2, 2]]), torch.randn(1, 2, 3)
    compiled = _run(fn, (w, ids, x), backend)
    sources = "\n".join(k.source for k in compiled.session.kernels)
    assert ("checked_position" if backend == "cpp" else "_check_position") in sources, sources
    with pytest.raises(IndexError):
        compiled(w, torch.tensor([[1, 10], [0, 3], [2, 2]]), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_upsample_and_loss_fuse_into_one_pass_over_the_logits(backend):
    # The upsample's coordinates are computed from loop indices: recomputed by every reader
    # (schedule/index_inline.py), never stored, so the gathers, the interpolation and the loss's
    # log-softmax share one kernel, and cross entropy's pick at the labels reads the logits at the
    # labels' positions (gather_inline.py through the ~10 steps between them). Only the labels, read
    # from memory, keep a range check: a label out of range still raises eager's error.
    def loss(x, labels):
        up = F.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False)
        return F.cross_entropy(up, labels)
    torch.manual_seed(0)
    x, labels = torch.randn(2, 5, 6, 7), torch.randint(0, 5, (2, 24, 28))
    compiled = _run(loss, (x, labels), backend)
    kernels = compiled.session.kernels
    assert len(kernels) == 2, [k.name for k in kernels]  # per pixel over the classes; the mean
    decisions = [d.reason for d in compiled.session.graphs[0].schedule.decisions]
    assert any(r.startswith("index arithmetic:") and "never stored" in r for r in decisions), decisions
    check = "checked_position(" if backend == "cpp" else "_check_position("
    checks = [line for k in kernels for line in k.source.splitlines() if check in line]
    assert len(checks) == 1 and "5" in checks[0], checks  # the labels' position, against 5 classes
    bad = labels.clone()
    bad[1, 3, 4] = 5
    with pytest.raises(IndexError):  # eager names the target, not the gather it decomposes into
        loss(x, bad)
    with pytest.raises(IndexError, match="Target"):
        compiled(x, bad)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_gather_in_a_cat_checks_only_the_positions_it_reads(backend):
    """A gather fused into one piece of a cat is computed with the rest of the cat's loop masked off;
    its positions there come from other indices (here a square root of a negative number: NaN). The
    C++ kernels checked them anyway and raised IndexError on a valid program (DLRM's interactions,
    `dots[:, li, lj]` after `tril_indices`, inside a cat); only the positions read are checked."""

    def fn(a, b):
        k = torch.arange(15, dtype=torch.float64)
        rows = torch.floor(torch.sqrt(2 * k + 0.25) - 0.5).long()  # 0, 1, 1, 2, 2, 2, ...: all inside b
        return torch.cat([a, b[rows]], dim=0)

    a, b = torch.randn(8, 4), torch.randn(5, 4)
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(a, b), fn(a, b))
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats

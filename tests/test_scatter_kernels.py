"""The atomic scatter (decomp/atomic_scatter.py, ir/lowering/scatter.py): sums into positions read
from memory as one loop over the source elements with atomic adds, so embedding's backward, index_add,
scatter_add and index_put(accumulate=True) are our kernels at sizes far above the dense form's cap.
Values against eager on both backends (collisions, padding_idx, bf16, integers exact), eager's error
for a position out of range, the artifacts (loop node, plan, schedule, memory plan) and a training step."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.decomp.scatter_family import SHORT_SCATTER

BACKENDS = ["cpp", "triton"]
aten = torch.ops.aten


def records(compiled):
    return [r for r in compiled.session.all_records() if r.loops is not None]


def scatter_nodes(compiled):
    return [n for r in records(compiled) for n in r.loops.nodes if n.kind == "scatter"]


def assert_scatter_kernel(compiled):
    """The sum is a scatter kernel (atomic adds), not the dense masked reduction over positions."""
    assert scatter_nodes(compiled), [n.kind for r in records(compiled) for n in r.loops.nodes]
    kinds = [k.kind for k in compiled.session.kernels]
    assert "scatter" in kinds and "reduction" not in kinds, kinds
    source = next(k.source for k in compiled.session.kernels if k.kind == "scatter")
    assert "tl.atomic_add(" in source or "+=" in source, source


def embedding_backward(num_weights, padding_idx):
    def fn(grad, ids):
        return aten.embedding_dense_backward(grad, ids, num_weights, padding_idx, False)
    return fn


def tokens(count, num_weights, seed=0):
    ids = torch.randint(0, num_weights, (count,), generator=torch.Generator().manual_seed(seed))
    ids[: count // 8] = 7  # collisions: an eighth of the tokens add into one row
    ids[count // 8: count // 8 + 40] = 3  # the padding row, hit many times
    return ids


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_backward_far_above_the_old_cap_is_one_scatter_kernel(backend):
    num_weights, width, count = 5000, 64, 2048
    assert count * width * num_weights > SHORT_SCATTER  # the dense form would have been PyTorch's call
    g = torch.Generator().manual_seed(1)
    grad, ids = torch.randn(count, width, generator=g), tokens(count, num_weights)
    fn = embedding_backward(num_weights, padding_idx=3)
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(grad, ids), fn(grad, ids)
    torch.testing.assert_close(got, expected)
    assert torch.equal(got[3], torch.zeros(width))  # padding_idx's row gets nothing
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    assert_scatter_kernel(compiled)
    # the padding `where` is computed inside the scatter's kernel: two kernels, the zeros and the adds
    assert compiled.session.stats["kernel_count"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_backward_in_bf16_sums_in_fp32_and_rounds_once(backend):
    num_weights, width, count = 600, 16, 512
    g = torch.Generator().manual_seed(2)
    grad = torch.randn(count, width, generator=g).to(torch.bfloat16)
    ids = tokens(count, num_weights)
    fn = embedding_backward(num_weights, padding_idx=-1)
    compiled = cc.compile(fn, backend=backend)
    got = compiled(grad, ids)
    exact = fn(grad.double(), ids)  # the sums of the bf16 gradients, without rounding
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, exact.to(torch.bfloat16), rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(got.float(), fn(grad, ids).float(), rtol=5e-2, atol=5e-2)  # eager rounds per add
    assert compiled.session.stats["fallback_ops"] == []
    assert_scatter_kernel(compiled)


SUMS = {
    "scatter_add": lambda x, index, src, rows: torch.scatter_add(x, 0, index, src),
    "scatter_add_dim1": lambda x, index, src, rows: torch.scatter_add(x.t().contiguous(), 1, index.t(), src.t()),
    "index_add": lambda x, index, src, rows: x.index_add(0, rows, src, alpha=3),
    "index_put_accumulate": lambda x, index, src, rows: x.index_put((rows,), src, accumulate=True),
    "scatter_reduce_sum": lambda x, index, src, rows: torch.scatter_reduce(x, 0, index, src, "sum"),
    "index_put_accumulate_negative": lambda x, index, src, rows: x.index_put((rows - 3000,), src, accumulate=True),
}


def sum_inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    positions, tokens_, width = 3000, 1500, 8  # 1500 x 8 elements into 3000 rows: 36M dense compares
    x = torch.randn(positions, width, generator=g)
    src = torch.randn(tokens_, width, generator=g)
    if not dtype.is_floating_point:
        x, src = (x * 100).to(dtype), (src * 100).to(dtype)
    rows = torch.randint(0, positions, (tokens_,), generator=g)
    rows[:100] = 11  # collisions
    index = rows.unsqueeze(1).expand(tokens_, width).clone()
    return x, index, src, rows


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SUMS))
def test_sums_onto_an_input_above_the_cap_are_scatter_kernels(name, backend):
    fn, args = SUMS[name], sum_inputs()
    before = args[0].clone()
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args))
    assert torch.equal(args[0], before)  # the scatter adds into its own copy of self
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    assert_scatter_kernel(compiled)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_sums_are_exact(backend, dtype):
    fn, args = SUMS["scatter_add"], sum_inputs(dtype)
    compiled = cc.compile(fn, backend=backend)
    got = compiled(*args)
    assert got.dtype == dtype and torch.equal(got, fn(*args))
    assert_scatter_kernel(compiled)


ERRORS = {"scatter_add": RuntimeError, "index_add": IndexError,  # index_add with an alpha: eager's IndexError
          "index_add_alpha_1": RuntimeError}
SUMS["index_add_alpha_1"] = lambda x, index, src, rows: x.index_add(0, rows, src)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ERRORS))
def test_a_position_out_of_range_raises_as_in_eager(name, backend):
    fn, error = SUMS[name], ERRORS[name]
    x, index, src, rows = sum_inputs()
    index[700, 3], rows[700] = 3000, 3000
    with pytest.raises(error):
        fn(x, index, src, rows)
    compiled = cc.compile(fn, backend=backend)
    with pytest.raises(error) as raised:
        compiled(x, index, src, rows)
    assert type(raised.value) is error
    index[700, 3], rows[700] = 5, 5  # the next call is fine again: the error flag was cleared
    torch.testing.assert_close(compiled(x, index, src, rows), fn(x, index, src, rows))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reader_of_the_scatter_runs_in_the_next_kernel(backend):
    fn = lambda x, index, src, rows: torch.scatter_add(x, 0, index, src).exp() * 2  # noqa: E731
    args = sum_inputs()
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args))
    (record,) = records(compiled)
    reasons = [d.reason for d in record.schedule.decisions if not d.legal]
    assert any(r.startswith("scatter: ") and "complete only when its kernel ends" in r for r in reasons), reasons
    assert any(r.startswith("scatter: ") and "must be complete before the first add" in r for r in reasons), reasons
    assert [g.kind for g in record.schedule.groups] == ["pointwise", "scatter", "pointwise"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producer_of_another_shape_runs_in_the_scatters_own_loop(backend):
    # the source is a transposed product: same elements as the scatter's loop, other dims. The scatter's
    # loop runs over its source's shape, never placed by its output's layout (which has other sizes).
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(8, 3000, generator=g), torch.randn(1500, 8, generator=g)
    index = torch.randint(0, 3000, (8, 1500), generator=g)
    fn = lambda x, y, index: torch.scatter_add(x, 1, index, (y * 2).t())  # noqa: E731
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(x, y, index), fn(x, y, index))
    assert_scatter_kernel(compiled)
    (record,) = records(compiled)
    assert [(g.kind, g.x_ranges) for g in record.schedule.groups] == [("pointwise", (8, 3000)),
                                                                       ("scatter", (8, 1500))]


def test_every_artifact_prints_the_scatter():
    fn, args = SUMS["index_add"], sum_inputs()
    compiled = cc.compile(fn, backend="cpp")
    compiled(*args)
    (record,) = records(compiled)
    (node,) = scatter_nodes(compiled)
    loops = record.loops.pretty()
    assert f"{node.name} = {node.destination}  (same storage, updated in place)" in loops
    assert f"{node.name}[x1 + 8*checked(" in loops and "(atomic)" in loops, loops
    assert "(scatter, x=[1500, 8])" in record.schedule.pretty()
    plan = next(k.plan for k in record.kernels if k.kind == "scatter")
    assert "+= " in plan.pretty() and "(atomic add)" in plan.pretty(), plan.pretty()
    assert any(n.startswith("scatter: ") and "may differ between runs" in n for n in plan.notes), plan.notes
    assert "omp atomic" not in next(k.source for k in record.kernels if k.kind == "scatter")  # 12,000 adds: serial
    assert "scatter (add)" in record.loops.to_dot()
    assert "# the next kernel adds into" in record.wrapper.source


def test_the_memory_plan_keeps_the_scatter_in_its_destinations_storage():
    fn = embedding_backward(5000, padding_idx=-1)
    g = torch.Generator().manual_seed(4)
    grad, ids = torch.randn(2048, 64, generator=g), tokens(2048, 5000)
    compiled = cc.compile(fn, backend="cpp")
    torch.testing.assert_close(compiled(grad, ids), fn(grad, ids))
    (record,) = records(compiled)
    (node,) = scatter_nodes(compiled)
    storage = record.loops.storage_of()
    assert storage[node.output.name] == storage[node.destination]
    assert node.output.name not in dict(record.memory.reuse)
    assert node.output.name not in dict(record.memory.written_over)
    assert f"(in the storage of {storage[node.destination]})" in record.memory.pretty()
    source = next(k.source for k in record.kernels if k.kind == "scatter")
    assert "#pragma omp atomic" in source and "#pragma omp simd" not in source, source  # 131,072 adds: threads


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_kernel_check_mode_accepts_the_scatter(backend):
    fn, args = SUMS["scatter_add"], sum_inputs()
    compiled = cc.compile(fn, backend=backend, check=True)
    torch.testing.assert_close(compiled(*args), fn(*args))
    checks = [c for r in records(compiled) for c in r.checks]
    assert checks and all(c.ok for c in checks), checks


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_embedding_and_linear_training_step_has_eagers_gradients_and_no_fallback(backend):
    torch.manual_seed(5)
    vocab, width, classes = 3000, 32, 10

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, width, padding_idx=0)
            self.head = torch.nn.Linear(width, classes)

        def forward(self, ids, target):
            return F.cross_entropy(self.head(self.embed(ids)).flatten(0, 1), target.flatten())

    model = Model()
    ids = torch.randint(0, vocab, (4, 512))
    ids[:, :64] = 0  # padding
    ids[:, 64:128] = 17  # a frequent token
    target = torch.randint(0, classes, (4, 512))
    compiled = cc.compile(model, backend=backend)
    compiled(ids, target).backward()
    ours = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model(ids, target).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, msg=name)
    assert "aten.embedding_dense_backward.default" not in compiled.session.stats["fallback_ops"]
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    assert scatter_nodes(compiled)


def test_the_explorer_shows_a_scatter_kernel(tmp_path):
    from explorer import explore

    fn, args = SUMS["index_put_accumulate"], sum_inputs()
    view = explore(fn, *args, repeats=0, kernels_for=("cpp",))
    view.to_html(str(tmp_path / "scatter.html"))
    assert "atomic" in (tmp_path / "scatter.html").read_text()


def test_the_gpu_source_of_scatter_kernels_compiles_for_the_h200():
    from compiler_core.codegen.triton.ahead import compile_for_gpu, nvidia_target_available

    if not nvidia_target_available():
        pytest.skip("this Triton has no NVIDIA backend to compile with")
    programs = [(embedding_backward(5000, 3), (torch.randn(2048, 64), tokens(2048, 5000))),
                (embedding_backward(600, -1), (torch.randn(512, 16).bfloat16(), tokens(512, 600))),
                (SUMS["scatter_add"], sum_inputs(torch.int64)), (SUMS["index_add"], sum_inputs())]
    plans = []
    for fn, args in programs:
        session = cc.explain(fn, *args, backend="triton")
        plans += [k.plan for k in session.kernels if k.kind == "scatter"]
    assert len(plans) == len(programs)
    assert compile_for_gpu(plans) == [None] * len(plans)  # tl.atomic_add with its masks, as the H200 compiles it


def test_a_scatter_kernels_traffic_counts_the_rows_it_reaches_not_its_whole_destination():
    """Embedding's backward into a 5000 x 64 table from 2048 tokens: the scatter reads the gradient and
    the ids and updates at most 2048 rows in place; the 1.3 MB table is counted once, where the zeros
    kernel writes it (the explorer's roofline and the session's bytes moved read this rule)."""
    from compiler_core.analysis.traffic import bytes_moved, group_bytes

    num_weights, width, count = 5000, 64, 2048
    fn = embedding_backward(num_weights, padding_idx=-1)
    g = torch.Generator().manual_seed(5)
    grad, ids = torch.randn(count, width, generator=g), tokens(count, num_weights)
    compiled = cc.compile(fn, backend="cpp")
    torch.testing.assert_close(compiled(grad, ids), fn(grad, ids))
    (record,) = records(compiled)
    table = num_weights * width * 4
    by_kind = {group.kind: group_bytes(record.loops, group) for group in record.schedule.groups}
    assert by_kind["pointwise"] == table  # the zeros: one write of the table
    reached = count * width * 4  # one read-modify-write of a row element per add
    assert by_kind["scatter"] == grad.nbytes + ids.nbytes + 2 * reached, by_kind
    assert bytes_moved(compiled.session)["fused_bytes"] == sum(by_kind.values())


def reduce_inputs(dtype=torch.float32, tokens_=20000, positions=1200, width=4):
    """scatter_reduce above the dense form's cap: tokens x positions > SHORT_SCATTER; some positions
    are never hit (the last hundred), one is hit a hundred times more."""
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(positions, width, generator=g) * 10).to(dtype)
    src = (torch.randn(tokens_, width, generator=g) * 10).to(dtype)
    rows = torch.randint(0, positions - 100, (tokens_,), generator=g)
    rows[:100] = 11
    assert tokens_ * positions > SHORT_SCATTER
    return x, rows.unsqueeze(1).expand(tokens_, width).clone(), src


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["mean", "sum"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_sum_and_mean_above_the_cap_are_scatter_kernels(backend, dtype, reduce, include_self):
    """A mean is the atomic sums of the values and of the hits, divided (floor division for integers, as
    ATen); positions nothing lands on keep self's value."""
    x, index, src = reduce_inputs(dtype)

    def fn(x, index, src):
        return x.scatter_reduce(0, index, src, reduce, include_self=include_self)

    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(x, index, src), fn(x, index, src)
    if dtype == torch.int64:
        assert torch.equal(got, expected)
    else:
        tol = {"rtol": 2e-2, "atol": 0.5} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-4}
        torch.testing.assert_close(got, expected, **tol)
    assert torch.equal(got[-100:], x[-100:])
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    assert scatter_nodes(compiled)


def test_scatter_reduce_max_above_the_cap_stays_pytorchs_call_and_says_so():
    x, index, src = reduce_inputs()

    def fn(x, index, src):
        return x.scatter_reduce(0, index, src, "amax")

    compiled = cc.compile(fn, backend="cpp")
    torch.testing.assert_close(compiled(x, index, src), fn(x, index, src))
    assert any("scatter_reduce" in op for op in compiled.session.stats["fallback_ops"]), compiled.session.stats

"""Large tensors and large reductions (schedule/plan_passes.py).

Index width: a kernel whose offsets fit int32 indexes in int32; one whose largest offset (or loop
counter) can pass 2**31 - 1 indexes in int64 throughout.  The sources of >2**31-element kernels are
generated from fake tensors (no memory allocated) through the stages after AOT tracing.

Reduction split: a reduction with few, long rows runs as partials over many programs per row, then a
second kernel.  Tests lower the thresholds so the Triton interpreter runs a split on small tensors, and
compare every value with eager PyTorch.
"""

import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import compiler_core as cc
from compiler_core.codegen.wrapper import generate_program
from compiler_core.decomp.table import decomposition_table, to_prim_graph
from compiler_core.ir.lowering import lower
from compiler_core.schedule import plan_passes
from compiler_core.schedule.epilogues import schedule_with_epilogues
from compiler_core.schedule.memory import plan_memory

BIG = 2**31 + 2**20  # elements: more than int32 can count


def _generated(fn, *specs, backend):
    """Kernels and host program for `fn` on fake tensors of the given (shape, dtype): the stages after
    AOT tracing, with sizes no test machine could allocate."""
    with FakeTensorMode():
        args = [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
        gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    loops, sched = schedule_with_epilogues(lower(to_prim_graph(gm)))
    return generate_program(loops, sched, plan_memory(loops, sched), backend)


def _int64_index_lines(source):
    return [ln for ln in source.splitlines() if "program_id" in ln and ".to(tl.int64)" in ln]


# ---- index width ------------------------------------------------------------------------------
@pytest.mark.parametrize("elements,width", [(BIG, "int64"), (4096, "int32")])
def test_index_width_follows_the_number_of_elements(elements, width):
    triton, _ = _generated(lambda x: x * 2 + 1, ((elements,), torch.int8), backend="triton")
    cpp, _ = _generated(lambda x: x * 2 + 1, ((elements,), torch.int8), backend="cpp")
    (t,), (c,) = triton, cpp
    assert t.index_dtype == width
    assert f"# index: {width} (largest offset" in t.source
    if width == "int64":
        # the program id is widened before it is multiplied: xindex, and every offset, are int64
        assert "xindex = tl.program_id(0).to(tl.int64) * XBLOCK" in t.source
    else:
        assert _int64_index_lines(t.source) == [] and "xindex = tl.program_id(0) * XBLOCK" in t.source
    # C++ counts in int64_t in every kernel; the plan's decision is in its header as well
    assert f"// index: {width} (largest offset" in c.source
    counters = re.findall(r"for \((\w+) \w+ = ", c.source)
    assert counters and set(counters) == {"int64_t"}, c.source


@pytest.mark.parametrize("rows,width", [(2**22 + 1, "int64"), (64, "int32")])
def test_cpp_compares_positions_in_int32_only_where_every_index_fits(rows, width):
    # A cat's `x1 < 512` in int32 saves AVX2 the shuffles of 64-bit masks; cast down only where the
    # plan found every index value below 2**31 (4 Gi elements here: every offset needs int64).
    (c,), _ = _generated(lambda a, b: torch.cat((a, b), -1) + 1, ((rows, 512), torch.int8),
                         ((rows, 512), torch.int8), backend="cpp")
    assert f"// index: {width}" in c.source
    narrowed = "(static_cast<int32_t>(x1) < 512)" in c.source
    assert narrowed == (width == "int32"), c.source
    assert ("static_cast<int64_t>(512LL)" in c.source) == (width == "int64"), c.source


def test_a_small_view_far_into_a_big_tensor_indexes_in_int64():
    # 1000 elements, but at an offset past 2**31: the offset, not the element count, decides
    (t,), _ = _generated(lambda x: x[2**31:2**31 + 1000] * 2, ((BIG,), torch.int8), backend="triton")
    assert t.xnumel == 1000 and t.index_dtype == "int64", t.source
    assert "2147483648" in t.source and _int64_index_lines(t.source)


def test_a_strided_reduction_counts_row_positions_in_int64():
    # 21475 elements 100000 apart: r0 * 100000 passes 2**31 with no program id in the product
    (t,), _ = _generated(lambda x: x[::100000].sum(), ((BIG,), torch.int8), backend="triton")
    assert t.index_dtype == "int64" and t.split is None
    assert "rindex = roffset + tl.arange(0, RBLOCK)[None, :].to(tl.int64)" in t.source, t.source


def test_a_big_reduction_is_split_and_indexes_in_int64():
    kernels, wrapper = _generated(lambda x: x.float().sum(), ((BIG,), torch.bfloat16), backend="triton")
    (t,) = kernels
    assert t.index_dtype == "int64" and t.split is not None and t.split.programs == plan_passes.SPLIT_TARGET_PROGRAMS
    assert "rstart = tl.program_id(1).to(tl.int64) *" in t.source
    # the host program allocates the partials, launches both kernels, and drops the partials
    launches = [ln.strip() for ln in wrapper.source.splitlines() if ln.strip().startswith("k.")]
    assert [ln.split("[")[0] for ln in launches] == [f"k.{t.name}_partials", f"k.{t.name}_finish"]
    assert f"del w_{t.name}_0" in wrapper.source
    cpp, _ = _generated(lambda x: x.float().sum(), ((BIG,), torch.bfloat16), backend="cpp")
    assert cpp[0].split is None and "// index: int64" in cpp[0].source


def test_a_reduction_with_many_rows_is_not_split():
    (t,), _ = _generated(lambda x: x.sum(1), ((4096, 4096), torch.float32), backend="triton")
    assert t.split is None and t.index_dtype == "int32"
    assert "reduction not split" not in t.source  # not a candidate: many rows fill the GPU already


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_int64_index_arithmetic_matches_eager(backend, monkeypatch):
    # Lower the limit so that small kernels take the int64 path, and check its values.
    monkeypatch.setattr(plan_passes, "INT32_MAX", 100)
    monkeypatch.setattr(plan_passes, "COUNTER_HEADROOM", 0)
    x = torch.randn(37, 300)
    y = torch.randn(300)

    def fn(x, y):
        return torch.softmax(x[:, 5:] * 2, -1), (x + y).t().contiguous().flip(0), x.sum(0)

    compiled = cc.compile(fn, backend=backend)
    for actual, expected in zip(compiled(x, y), fn(x, y)):
        torch.testing.assert_close(actual, expected)
    kernels = compiled.session.kernels
    assert kernels and all(k.index_dtype == "int64" for k in kernels)
    if backend == "triton":
        assert all(_int64_index_lines(k.source) for k in kernels)
        reductions = [k for k in kernels if k.kind == "reduction"]
        assert reductions and all("tl.arange(0, RBLOCK)[None, :].to(tl.int64)" in k.source for k in reductions)


# ---- reduction split ----------------------------------------------------------------------------
@pytest.fixture
def small_split(monkeypatch):
    """Split reductions of 2000+ elements into programs of 256+: a few programs in the interpreter."""
    monkeypatch.setattr(plan_passes, "SPLIT_MIN_ELEMENTS", 2000)
    monkeypatch.setattr(plan_passes, "SPLIT_MIN_CHUNK", 256)


SPLIT_CASES = {
    "sum": lambda x: x.sum(),
    "mean": lambda x: x.mean(),
    "abs_max": lambda x: x.abs().max(),
    "min": lambda x: x.min(),
    "amax_rows": lambda x: x.view(3, -1).amax(1),
    "mean_rows_keepdim": lambda x: x.view(3, -1).mean(1, keepdim=True),
    "sum_columns": lambda x: x.view(-1, 3).sum(0),  # rows 3 elements apart in memory
    "prod": lambda x: (1 + x * 1e-3).prod(),
    "sum_and_max": lambda x: (x.sum(), x.max(), (x * x).mean()),
    # two or three passes over the row: a later pass reads what the earlier ones reduced
    "var": lambda x: x.var(),
    "std_rows": lambda x: x.view(3, -1).std(1, correction=0),
    "normalized": lambda x: (x - x.mean()) / x.std(),
    "softmax_flat": lambda x: torch.softmax(x, 0),
    # the pass stores elements as well as reducing them
    "stored_and_summed": lambda x: (x * 2, (x * 2).sum()),
}


def _run_split(fn, x, backend="triton"):
    compiled = cc.compile(fn, backend=backend)
    actual = compiled(x)
    s = compiled.session
    assert not [g.fallback_reason for g in s.graphs if g.fell_back]
    assert s.stats["fallback_ops"] == [], s.stats
    return actual, s.kernels


@pytest.mark.parametrize("name", list(SPLIT_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_reductions_match_eager(name, dtype, small_split):
    fn = SPLIT_CASES[name]
    torch.manual_seed(0)
    x = torch.randn(6000).to(dtype)
    actual, kernels = _run_split(fn, x)
    assert any(k.split is not None for k in kernels), [k.source for k in kernels]
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(actual, fn(x), **tol)


@pytest.mark.parametrize("special", ["nan", "inf", "-inf", "inf_and_-inf"])
@pytest.mark.parametrize("name", ["sum", "abs_max", "min", "amax_rows"])
def test_split_reductions_propagate_nan_and_inf_as_eager(name, special, small_split):
    fn = SPLIT_CASES[name]
    x = torch.randn(6000)
    # in the middle of one program's chunk, and in the last (partly masked) chunk
    for i in (1234, 5999):
        x[i] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"),
                "inf_and_-inf": float("inf") if i == 1234 else float("-inf")}[special]
    actual, kernels = _run_split(fn, x)
    assert any(k.split is not None for k in kernels)
    torch.testing.assert_close(actual, fn(x), equal_nan=True)


def test_split_integer_sum_and_max_are_exact(small_split):
    x = torch.randint(-2**30, 2**30, (6000,), dtype=torch.int32)

    def fn(x):
        # the sum passes int32: eager sums int32 into int64; int16 reduces in int16
        return x.sum(), x.max(), x.min(), x.to(torch.int16).amax()

    actual, kernels = _run_split(fn, x)
    assert any(k.split is not None for k in kernels)
    for a, e in zip(actual, fn(x)):
        assert a.dtype == e.dtype and torch.equal(a, e)


def test_a_second_pass_reads_the_first_passes_results(small_split):
    # var: pass 1 sums, its finishing kernel keeps the sum for pass 2 (squares around the mean)
    x = torch.randn(6000) + 3
    actual, (kernel,) = _run_split(lambda x: x.var(), x)
    assert [kind for _, kind in kernel.split.stages] == ["chunks", "rows", "chunks", "rows"]
    assert "2 passes over the row" in kernel.source
    torch.testing.assert_close(actual, x.var())


def test_a_reduction_that_cannot_be_split_says_why(small_split):
    x = torch.randn(6000)
    actual, (kernel,) = _run_split(lambda x: (x > 1).amax(), x)
    assert kernel.split is None
    assert "reduction not split: " in kernel.source and "torch.bool values" in kernel.source, kernel.source
    assert torch.equal(actual, (x > 1).amax())


def test_split_reductions_are_deterministic(small_split):
    x = torch.randn(6000)
    compiled = cc.compile(lambda x: x.sum(), backend="triton")
    first = compiled(x)
    assert compiled.session.kernels[0].split is not None
    assert all(torch.equal(compiled(x), first) for _ in range(3))


@pytest.mark.parametrize("name", ["sum", "abs_max", "mean_rows_keepdim", "sum_and_max"])
def test_cpp_backend_reductions_are_unchanged(name, small_split):
    # The split is a Triton decision: the C++ backend keeps one kernel per reduction, and its values.
    fn = SPLIT_CASES[name]
    x = torch.randn(6000)
    x[17] = float("nan")
    actual, kernels = _run_split(fn, x, backend="cpp")
    assert all(k.split is None for k in kernels)
    torch.testing.assert_close(actual, fn(x), equal_nan=True)


# ---- column reductions --------------------------------------------------------------------------
# A sum over a tensor's outer dimension (bias gradients) reads memory along x: plan_passes gives such
# reductions the column layout (many adjacent columns per program, looping over rows) and splits them
# when few column blocks would run. At these sizes the defaults already split (columns of 512+ rows).
COLUMN_CASES = {
    "sum0": lambda x: x.sum(0),
    "bias_grad_3d": lambda x: x.view(4, -1, x.shape[-1]).sum((0, 1)),
    "mean0_keepdim": lambda x: x.mean(0, keepdim=True),
    "amax0": lambda x: x.amax(0),
    "amin0": lambda x: x.amin(0),
    "var0": lambda x: x.var(0),  # two passes: the mean, then the squares around it
    "normalized_columns": lambda x: (x - x.mean(0)) / x.std(0),
    "stored_and_summed": lambda x: (torch.nn.functional.gelu(x), torch.nn.functional.gelu(x).sum(0)),
    "two_sums": lambda x: (x.sum(0), (x * x).sum(0)),
}


@pytest.mark.parametrize("name", list(COLUMN_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_column_reductions_match_eager(name, dtype, backend):
    fn = COLUMN_CASES[name]
    torch.manual_seed(0)
    x = torch.randn(1000, 96).to(dtype)  # 96 columns: one full block of 64 and one masked
    actual, kernels = _run_split(fn, x, backend)
    column = [k for k in kernels if k.plan is not None and k.plan.columns]
    assert column, [k.source for k in kernels]
    # Triton splits the columns into chunks of rows; C++ keeps the columns innermost in one work item
    assert all((k.split is not None) == (backend == "triton") for k in column)
    assert "reduction layout: columns" in column[0].source
    if backend == "cpp":
        assert "for (int64_t j = 0; j < xn; j++)" in column[0].source
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(actual, fn(x), **tol)


@pytest.mark.parametrize("special", ["nan", "inf", "-inf", "inf_and_-inf"])
@pytest.mark.parametrize("name", ["sum0", "amax0", "amin0", "var0"])
@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_column_reductions_propagate_nan_and_inf_as_eager(name, special, backend):
    fn = COLUMN_CASES[name]
    x = torch.randn(1000, 96, generator=torch.Generator().manual_seed(7))
    value = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "inf_and_-inf": float("inf")}[special]
    x[123, 5] = x[999, 70] = value  # inside a chunk of the first block, the last row of the masked block
    if special == "inf_and_-inf":
        x[500, 5] = float("-inf")
    actual, kernels = _run_split(fn, x, backend)
    assert any(k.plan is not None and k.plan.columns for k in kernels)
    # The point is where NaN and inf land. The finite columns are fp32 sums of 1,000 terms near 30 in
    # size; Triton's chunked partials are off by up to ~1e-5 (unseeded, 4 seeds in 12 exceeded the
    # default atol of 1e-5; eager's column sums are exact to 1e-10 here).
    torch.testing.assert_close(actual, fn(x), equal_nan=True, atol=1e-4, rtol=1.3e-6)


def test_cpp_column_sums_are_as_accurate_as_eagers():
    # One accumulator per column down 65536 rows: compensated, so no worse than eager's cascaded sum.
    torch.manual_seed(0)
    x = torch.randn(65536, 96) + 0.3  # an offset: the running sum grows, and so would its rounding
    reference = x.double().sum(0)
    compiled = cc.compile(lambda x: x.sum(0), backend="cpp")
    ours = (compiled(x).double() - reference).abs().max().item()
    eager = (x.sum(0).double() - reference).abs().max().item()
    assert compiled.session.kernels[0].plan.columns
    assert ours <= eager, (ours, eager)


@pytest.mark.parametrize("fn, shape", [
    (lambda x: (torch.softmax(x, -1) * 2).sum(), (64, 128)),  # 64 row sums of ~2.0 into one total
    (lambda x: (x + 0.3).sum(), (1 << 20,)),  # one long row: blocks of SUM_BLOCK, then compensated
    (lambda x: (x + 0.3).sum((0, 2)), (512, 4, 64)),  # several reduced dims around a kept one
], ids=["softmax-total", "long-row", "two-reduced-dims"])
def test_cpp_row_sums_are_as_accurate_as_eagers(fn, shape):
    # Summed into one running accumulator, the softmax total came out 5 ulps off (tensor(127.9999) in
    # 18% of random inputs, where eager printed tensor(128.0000) every time).
    torch.manual_seed(0)
    worst_ours = worst_eager = 0.0
    compiled = cc.compile(fn, backend="cpp")
    for _ in range(20):
        x = torch.randn(shape)
        reference = fn(x.double())
        worst_ours = max(worst_ours, (compiled(x).double() - reference).abs().max().item())
        worst_eager = max(worst_eager, (fn(x).double() - reference).abs().max().item())
    assert worst_ours <= 2 * worst_eager, (worst_ours, worst_eager)


def test_cpp_blocked_sums_keep_inf_and_nan():
    x = torch.randn(3, 10000)
    x[0, 7000], x[1, 20], x[2, 5] = float("inf"), float("nan"), float("-inf")
    compiled = cc.compile(lambda x: x.sum(-1) + x.sum(), backend="cpp")
    torch.testing.assert_close(compiled(x), x.sum(-1) + x.sum(), equal_nan=True)


def test_short_columns_are_not_split():
    x = torch.randn(300, 96)
    actual, (kernel,) = _run_split(lambda x: x.sum(0), x)
    assert kernel.plan.columns and kernel.split is None
    assert "for roffset in range(0, rnumel, RBLOCK)" in kernel.source  # looped, whatever RBLOCK is tuned to
    torch.testing.assert_close(actual, x.sum(0))


def test_reduction_layout_follows_the_loads():
    # The same [4096, 4096] tensor: a sum over dim 1 reads along its rows, over dim 0 along x.
    (rows,), _ = _generated(lambda x: x.sum(1), ((4096, 4096), torch.float32), backend="triton")
    (cols,), wrapper = _generated(lambda x: x.sum(0), ((4096, 4096), torch.float32), backend="triton")
    assert not rows.plan.columns and cols.plan.columns
    # 64 blocks of 64 columns are too few for a GPU: each column is split into 16 chunks of 256 rows
    assert cols.split is not None and cols.split.programs == 16
    launches = [ln.strip() for ln in wrapper.source.splitlines() if ln.strip().startswith("k.")]
    assert launches[0].startswith(f"k.{cols.name}_partials[(64, 16)]"), launches
    assert launches[1].startswith(f"k.{cols.name}_finish[(64,)]"), launches
    # a per-row vector broadcast over the columns does not decide the layout
    (t,), _ = _generated(lambda x, s: (x * s).sum(0), ((4096, 4096), torch.float32), ((4096, 1), torch.float32),
                         backend="triton")
    assert t.plan.columns


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_a_training_step_with_bias_gradients_matches_eager(backend):
    # What the column layout is for: a Linear's bias gradient on a 3-D input, LayerNorm's weight and
    # bias gradients, through the backward graph's kernels.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.LayerNorm(96))
    x = torch.randn(4, 200, 48)
    compiled = cc.compile(model, backend=backend)
    compiled(x).square().mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(x).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=1e-6, rtol=1e-5)
    backward = [k for g in compiled.session.graphs if g.backward for k in g.backward.kernels]
    assert any(k.plan is not None and k.plan.columns for k in backward), [k.name for k in backward]


@pytest.mark.parametrize("width", [19, 3000])  # a whole row in one block; a row looped over in blocks
def test_row_max_and_min_keep_nan_in_one_reduction_tree(width):
    # The combine function keeps a NaN (tl.max and tl.min drop it), so no second reduction looks
    # for one; rows of -inf, a NaN beside +inf, and a NaN in the last (masked) block all as eager.
    x = torch.randn(12, width)
    x[3, 7] = x[9, 0] = x[11, width - 1] = float("nan")
    x[5, :] = float("-inf")
    x[9, 1] = float("inf")
    for fn in (lambda t: t.amax(1), lambda t: t.amin(1), lambda t: torch.softmax(t, 1)):
        compiled = cc.compile(fn, backend="triton")
        torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)
        sources = "\n".join(k.source for g in compiled.session.graphs for k in g.kernels)
        assert "_combine)" in sources and "!=" not in sources, sources

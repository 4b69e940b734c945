"""Our decompositions are held to the op's own shapes and dtypes (decomp/meta_check.py). Inference
batch norm's saved statistics were empty on CUDA, where the op returns the running mean and
1/sqrt(var + eps) (OpInfo native_batch_norm, eval mode, on an H100): checked here with fake CUDA
tensors, which need no GPU."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from compiler_core.decomp.meta_check import DecompositionMismatch, checked_against_meta
from compiler_core.decomp.table import decomposition_table

BATCH_NORM = torch.ops.aten._native_batch_norm_legit_no_training.default


def _traced_result_shapes(table: dict, device: str, dtype: torch.dtype = torch.float32) -> list:
    with FakeTensorMode():
        x = torch.empty(3, 2, 4, device=device, dtype=dtype)
        stats = torch.empty(2, device=device)
        graph = make_fx(lambda *a: BATCH_NORM(*a, 0.1, 1e-5), decomposition_table=table)(x, stats, stats, stats, stats)
    (output,) = [n for n in graph.graph.nodes if n.op == "output"]
    return [(tuple(n.meta["val"].shape), n.meta["val"].dtype) for n in output.args[0]]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_batch_norm_returns_the_ops_saved_statistics_on_each_device(device, dtype):
    with FakeTensorMode():
        x = torch.empty(3, 2, 4, device=device, dtype=dtype)
        stats = torch.empty(2, device=device)
        expected = [(tuple(t.shape), t.dtype) for t in BATCH_NORM(x, stats, stats, stats, stats, 0.1, 1e-5)]
    assert _traced_result_shapes(decomposition_table(), device, dtype) == expected
    assert expected[1][0] == ((0,) if device == "cpu" else (2,))


def test_a_decomposition_returning_other_shapes_than_the_op_is_refused():
    def empty_statistics_everywhere(x, weight, bias, running_mean, running_var, momentum, eps):
        return x * 1, x.new_zeros((0,)), x.new_zeros((0,))  # the old decomposition's saved statistics

    table = {BATCH_NORM: checked_against_meta(BATCH_NORM, empty_statistics_everywhere)}
    assert _traced_result_shapes(table, "cpu")[1] == ((0,), torch.float32)  # right on the CPU
    with pytest.raises(DecompositionMismatch, match=r"result 1 as \(0,\).*where the op returns \(2,\)"):
        _traced_result_shapes(table, "cuda")


def test_called_on_real_tensors_it_is_the_decomposition_alone():
    calls = []
    checked = checked_against_meta(BATCH_NORM, lambda *a: calls.append(a) or (a[0], a[3], a[4]))
    x, stats = torch.randn(3, 2, 4), torch.randn(2)
    assert checked(x, stats, stats, stats, stats, 0.1, 1e-5)[0] is x and len(calls) == 1


@pytest.mark.parametrize("value", [1, torch.tensor(1.0)])
def test_scatter_of_a_value_keeps_the_tensors_dtype(value):
    """Found by the check on its first run: scatter(dim, index, 1) of a bool tensor (cumprod's backward
    makes one) came out int64; a 0-d tensor value (index_fill) is converted without reading it."""
    import compiler_core as cc

    def fn(mask, index, x):
        filled = x.index_fill(1, index[0], value)
        return mask.scatter(1, index, 1), filled

    torch._dynamo.reset()
    mask, index, x = torch.zeros(3, 4, dtype=torch.bool), torch.tensor([[0, 2], [1, 1], [3, 0]]), torch.randn(3, 4)
    compiled = cc.compile(fn)
    got, expected = compiled(mask, index, x), fn(mask, index, x)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_decomposition_result_read_through_as_strided_has_eagers_layout(backend):
    """Our sort decomposition returned a transposed layout where eager's is contiguous, and
    `as_strided` reads the storage: the values came out wrong (aot_eager and Inductor were right).
    Each decomposition's results now take the strides of the op's meta (a fused copy where they differ).
    Found by random program 3088 (a `.view(-1)` of a sort's values failed to trace)."""
    import compiler_core as cc

    def fn(x):
        values = x.sort(1).values
        return values.as_strided((6,), (1,)) * 1, values.view(-1) + 0

    torch._dynamo.reset()
    x = torch.randn(2, 3, 4)
    compiled = cc.compile(fn, backend=backend)
    for got, expected in zip(compiled(x), fn(x)):
        assert torch.equal(got, expected)
    assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages


def test_symbolic_sizes_of_the_meta_are_compared_outside_the_trace():
    """The meta's sizes and strides are symbols the trace does not track (4*s0**2 ...); comparing them
    inside it failed ("... is not tracked with proxy"), so GPT-2's attention softmax with dynamic=True
    fell back to compiling per size. They are compared outside the trace now."""
    import compiler_core as cc

    def attention(q, k):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1)

    torch._dynamo.reset()
    compiled = cc.compile(attention, dynamic=True)
    for batch, seq in [(2, 6), (3, 9)]:
        q, k = torch.randn(batch, 4, seq, 8), torch.randn(batch, 4, seq, 8)
        torch.testing.assert_close(compiled(q, k), attention(q, k))
    assert all(g.symbolic for g in compiled.session.graphs), compiled.session.messages

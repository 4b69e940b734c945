"""Training memory: recomputation placed just in time, kernels ordered for a lower peak, fusions that
would raise the peak refused (issue 7's peak-memory target). Every test checks the values too."""

import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.bench import timing
from compiler_core.bench.workloads import WORKLOADS
from compiler_core.compare import inductor


def _train_step(fn, args):
    params = [a for a in args if a.requires_grad]

    def step():
        for p in params:
            p.grad = None
        loss = fn(*args)
        loss.backward()
        return (loss.detach(), *(p.grad for p in params))
    return step


def _assert_close(ours, expected):
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gpt_block_training_peak_is_below_inductors_and_gradients_match():
    """gpt_block (TARGETS.md) at a CPU size where activations outweigh weights as on the H200: the
    CPU allocator's peak over one training step, ours against Inductor's and eager's. Before this
    change ours was 41.1 MiB here, Inductor's 35.1, eager's 41.1: the backward recomputed the GELU
    output next to the incoming gradient and the saved pre-activation (three 8 MiB tensors)."""
    w = WORKLOADS["gpt_block"]
    torch.manual_seed(0)
    args = w.make((8, 256, 256), torch.float32, "cpu")
    expected = _train_step(w.fn, args)()
    ours = cc.compile(inductor.private_copy(w.fn))
    ours_step = _train_step(ours, args)
    _assert_close(ours_step(), expected)
    theirs_step = _train_step(inductor.compile_with_inductor(w.fn), args)
    theirs_step()
    eager_step = _train_step(w.fn, args)
    peaks = {name: timing.peak_cpu_bytes(step) for name, step in
             (("eager", eager_step), ("inductor", theirs_step), ("ours", ours_step))}
    assert all(isinstance(p, int) and p > 0 for p in peaks.values()), peaks
    assert peaks["ours"] <= peaks["inductor"] < peaks["eager"], peaks
    _assert_close(ours_step(), expected)  # still right after the measured calls

    # The backward's plan: 23.0 MiB before this change, the saved activations and three 8 MiB tensors.
    backward = ours.session.graphs[0].backward
    assert backward.memory.peak_bytes_planned < 20 * 2**20, backward.memory.peak_bytes_planned


def _layer_norm_mlp(x, w1, b1, w2, ln_w, ln_b):
    h = F.gelu(F.linear(F.layer_norm(x, (x.shape[-1],), ln_w, ln_b), w1, b1))
    return F.linear(h, w2).square().mean()


def test_recomputed_values_are_placed_just_before_their_first_use():
    torch.manual_seed(0)
    d = 32
    args = [torch.randn(64, d, requires_grad=True), torch.randn(4 * d, d, requires_grad=True),
            torch.randn(4 * d, requires_grad=True), torch.randn(d, 4 * d, requires_grad=True),
            torch.randn(d, requires_grad=True), torch.randn(d, requires_grad=True)]
    expected = _train_step(_layer_norm_mlp, args)()
    compiled = cc.compile(_layer_norm_mlp)
    _assert_close(_train_step(compiled, args)(), expected)

    record = compiled.session.graphs[0]
    recomputed = set(record.partition.recomputed)
    assert recomputed, "this program recomputes the layer norm's output and the GELU in the backward"
    nodes = [n for n in record.partition.backward_graph.graph.nodes if n.op == "call_function"]
    position = {n: i for i, n in enumerate(nodes)}
    for node in nodes:
        if node.name not in recomputed:
            continue
        first_use = min(position[u] for u in node.users if u in position)
        between = nodes[position[node] + 1:first_use]
        # Only other recomputations (the rest of the same chain) stand between a value and its use.
        assert all(n.name in recomputed for n in between), (node.name, [n.name for n in between])


def test_gradient_formulas_get_their_own_copies_and_fusing_them_back_is_refused_for_memory():
    """GELU's gradient and the recomputed GELU output share `erf` after the joint graph's duplicates
    are merged; the backward gives the gradient its own copy (named in the partition's notes; the
    recomputed list keeps naming the joint graph's nodes), values unchanged.
    Without a bias (whose gradient's column sum would take the GELU's gradient into a reduction
    kernel) the two are siblings of one space, and fusing them is refused: the fused kernel would
    make the recomputed output (4 MiB) while the incoming gradient (4 MiB) and the saved
    pre-activation (4 MiB) are alive, where apart the recomputation and the weight-gradient matmul
    reading it run first."""
    torch.manual_seed(0)
    x = torch.randn(1024, 256, requires_grad=True)
    w = torch.randn(1024, 256, requires_grad=True)
    v = torch.randn(256, 1024, requires_grad=True)

    def mlp(x, w, v):
        return F.linear(F.gelu(F.linear(x, w)), v).square().mean()

    expected = _train_step(mlp, [x, w, v])()
    compiled = cc.compile(mlp)
    _assert_close(_train_step(compiled, [x, w, v])(), expected)
    partition = compiled.session.graphs[0].partition
    erfs = [n for n in partition.backward_graph.graph.nodes if n.target is torch.ops.aten.erf.default]
    assert len(erfs) == 2 and sum(n.name in partition.recomputed for n in erfs) == 1
    copy = next(n.name for n in erfs if n.name not in partition.recomputed)
    assert any("own copies" in note and copy in note for note in partition.notes), partition.notes

    backward = compiled.session.graphs[0].backward
    refusals = [d.reason for d in backward.schedule.decisions if d.reason.startswith("memory:")]
    assert refusals and "would raise the memory peak" in refusals[0]
    three = 3 * 1024 * 1024 * 4
    assert backward.memory.peak_bytes_planned < three, backward.memory.peak_bytes_planned

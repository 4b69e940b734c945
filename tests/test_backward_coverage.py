"""Every op whose forward we decompose has its backward covered too.

A forward in the decomposition table runs as our kernels, but when ATen differentiates it with an op of
its own (`elu_backward`, `hardtanh_backward`, `reflection_pad2d_backward`...), that op reaches our
backward graph and ran in PyTorch unless it was decomposed as well: 14 such ops did, found by a sweep of
user snippets in training (2026-12-04). This test finds the class: for every forward in the table, the
ATen op named `<forward>_backward` (or `_backward_data`) must be in the table or a library call, or be
listed below with the reason; a listed op that becomes covered must leave the list."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.decomp.table import LIBRARY_OPS, decomposition_table

aten = torch.ops.aten

# Autograd differentiates these forwards' decompositions (or other ops), so the named backward op never
# reaches our graphs: each is trained below to show it.
NEVER_IN_OUR_GRAPHS = {
    "trace_backward": lambda x: torch.trace(x[:, :6]),
    "dist_backward": lambda x: torch.dist(x, x.flip(0), 3),
    "affine_grid_generator_backward": lambda x: F.affine_grid(x[:2, :6].reshape(2, 2, 3), (2, 1, 4, 4),
                                                                align_corners=False).square().sum(),
    "index_select_backward": lambda x: torch.index_select(x, 0, torch.tensor([0, 2, 2, 5])).square().sum(),
    "cumprod_backward": lambda x: x.cumprod(1).square().sum(),
}
# Backward ops that stay PyTorch's call, with why.
LEFT_TO_PYTORCH = {
    "grid_sampler_3d_backward": "a scatter of trilinear weights into the input: not lowered",
    "masked_scatter_backward": "a gather by the mask's running count, a scan longer than our scans take",
    "_upsample_bilinear2d_aa_backward": "the antialiased upsample's backward: not lowered",
}


def _uncovered_backwards() -> set[str]:
    table = decomposition_table()
    forwards = {op.overloadpacket.__name__.split(".")[-1] for op in table if hasattr(op, "overloadpacket")}
    uncovered = set()
    for name in forwards - {n for n in forwards if n.endswith("_backward")}:
        for suffix in ("_backward", "_backward_data"):
            packet = getattr(aten, name + suffix, None)
            if packet is None or packet in LIBRARY_OPS:
                continue
            if not any(getattr(packet, overload) in table for overload in packet.overloads()):
                uncovered.add(name + suffix)
    return uncovered


def test_every_decomposed_forward_has_its_backward_decomposed_or_listed():
    uncovered = _uncovered_backwards()
    listed = set(NEVER_IN_OUR_GRAPHS) | set(LEFT_TO_PYTORCH)
    unlisted = sorted(uncovered - listed)
    assert not unlisted, f"backward ops of decomposed forwards that run in PyTorch: {unlisted}"
    assert not listed - uncovered, f"covered now, remove from the lists: {sorted(listed - uncovered)}"


@pytest.mark.parametrize("name", sorted(NEVER_IN_OUR_GRAPHS))
def test_the_backwards_said_never_to_reach_our_graphs_do_not(name):
    torch._dynamo.reset()
    fn = NEVER_IN_OUR_GRAPHS[name]
    ours, eager = (torch.randn(6, 8, generator=torch.Generator().manual_seed(0)).requires_grad_() for _ in range(2))
    compiled = cc.compile(fn)
    compiled(ours).backward()
    fn(eager).backward()
    torch.testing.assert_close(ours.grad, eager.grad, rtol=1e-4, atol=1e-5)
    assert compiled.session.stats["fallback_ops"] == []  # nothing else of their training step either

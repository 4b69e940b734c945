"""Training through cc.compile: a step that calls loss.backward() is compiled, the compiler itself is
never traced by Dynamo, gradients match eager, and a backward graph that falls back says which of its
own ops ran in eager PyTorch."""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings

import pytest
import torch

import compiler_core as cc
import compiler_core.api


class LayerNormSoftmax(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(12, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.norm(self.proj(x)), -1) * x.mean()


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def dynamo_complaints():
    """Warnings and torch WARNING logs (recompile limit, untraceable builtins) raised inside the block."""
    handler = _Collect()
    # torch's log setup stops propagation at "torch" and at some of its children (torch._dynamo...).
    loggers = [logging.getLogger(name) for name, logger in list(logging.root.manager.loggerDict.items())
               if name.split(".")[0] == "torch" and isinstance(logger, logging.Logger) and not logger.propagate]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler.messages, caught
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def ours(filename: str) -> bool:
    return "compiler_core" in filename or "<fcompile" in filename


@pytest.mark.parametrize("make_model", [mlp, LayerNormSoftmax], ids=["mlp", "layernorm_softmax"])
def test_training_step_is_the_users_only_graph_break(make_model):
    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)

    def step(x):
        loss = model(x).sum()
        loss.backward()
        return loss

    compiled = cc.compile(step, backend="cpp")
    x = torch.randn(6, 12)
    with dynamo_complaints() as (logs, caught):
        for _ in range(3):  # gradients accumulate over the steps, in both
            loss = compiled(x)
            expected = reference(x).sum()
            expected.backward()
            torch.testing.assert_close(loss, expected)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    session = compiled.session
    assert [b.filename for b in session.breaks] == [__file__]  # the user's loss.backward()
    assert "backward" in session.breaks[0].reason
    assert not [b for b in session.breaks if ours(b.filename)]
    assert session.recompiles == []
    assert session.stats["graphs"] == 1  # none of our own code was captured as a graph
    backward = session.graphs[0].backward
    assert backward is not None and not backward.fell_back and backward.kernels
    assert not [m for m in logs if "recompile" in m or "compiler_core" in m], logs
    assert not [w for w in caught if "Dynamo" in str(w.message)], [str(w.message) for w in caught]


def test_a_backward_that_falls_back_lists_its_own_ops(monkeypatch):
    real_lower = compiler_core.api.lower

    def lower_forwards_only(prims, *args):
        if any(n.name.startswith("tangents") for n in prims.graph_module.graph.find_nodes(op="placeholder")):
            raise NotImplementedError("test: no backward lowering")
        return real_lower(prims, *args)

    monkeypatch.setattr(compiler_core.api, "lower", lower_forwards_only)

    def fn(x, w):
        return torch.tanh(x @ w).sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    compiled = cc.compile(fn, backend="cpp")
    compiled(x, w).backward()
    fn(x, w2).backward()
    torch.testing.assert_close(w.grad, w2.grad)

    s = compiled.session
    forward, backward = s.graphs[0], s.graphs[0].backward
    assert not forward.fell_back and backward.fell_back and "no backward lowering" in backward.fallback_reason
    assert s.stats["fallback_graphs"] == 1
    ops = s.stats["fallback_ops"]
    # tanh's derivative, 1 - y^2, and the matmul giving w's gradient: the backward's ATen ops...
    assert "aten.mm.default" in ops and any(op.startswith(("aten.tanh_backward", "aten.mul")) for op in ops), ops
    # ...not the forward's (its own torch-level or ATen tanh and matmul)
    assert not [op for op in ops if "tanh.default" in op or op == "aten.sum.default" or "matmul" in op], ops
    expected = [str(n.target) for n in backward.aten_graph.graph.nodes if n.op == "call_function"]
    assert ops == expected


def test_dynamic_training_with_a_float_argument():
    """With dynamic=True, Dynamo (torch 2.6+) would trace a float argument as a 0-d tensor read back
    with .item() and, where AOTAutograd cannot (the exponent of pow), restart with the float
    specialized (TensorifyScalarRestartAnalysis, which our backend lets through). compile() keeps
    floats specialized under dynamic shapes (_compat.floats_specialized), so the graph compiles in one
    go, once per size; the float is part of its guards."""
    torch.manual_seed(0)
    w1, w2 = torch.randn(12, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    r1, r2 = (w.detach().clone().requires_grad_() for w in (w1, w2))

    def mlp_step(x, w1, w2, power):
        return (torch.nn.functional.gelu(x @ w1).abs() + 1).pow(power) @ w2

    x = torch.randn(8, 12)
    compiled = cc.compile(mlp_step, backend="cpp", dynamic=True)
    compiled(x, w1, w2, 1.5).square().mean().backward()
    mlp_step(x, r1, r2, 1.5).square().mean().backward()
    torch.testing.assert_close(w1.grad, r1.grad)
    torch.testing.assert_close(w2.grad, r2.grad)

    s = compiled.session
    assert len(s.graphs) == 1 and s.graphs[0].backward is not None  # the abandoned attempt left no record
    reasons = [r.fallback_reason or "" for r in s.all_records()]
    assert not [m for m in s.messages + reasons if "AOT tracing failed" in m or "RestartAnalysis" in m], s.messages
    assert s.graphs[0].joint is not None and s.graphs[0].partition is not None


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("reduction,weighted", [("mean", False), ("mean", True), ("sum", False), ("none", True)])
def test_cross_entropy_backward_is_ours_and_matches(backend, reduction, weighted):
    # decomp/losses.py: nll_loss's backward as a one-hot comparison, fused into log_softmax's backward:
    # no op runs in PyTorch, no logits-sized loss gradient is stored, the gradients equal eager's.
    torch.manual_seed(0)
    logits = torch.randn(9, 13, requires_grad=True)
    target = torch.tensor([1, -100, 3, 12, 0, 5, 5, -100, 7])
    weight = torch.rand(13) if weighted else None

    def step(x):
        loss = torch.nn.functional.cross_entropy(x * 2, target, weight=weight, reduction=reduction)
        return loss.sum()

    compiled = cc.compile(step, backend=backend)
    loss = compiled(logits)
    loss.backward()
    got, logits.grad = logits.grad, None
    expected = step(logits)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(got, logits.grad)
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, stats
    # One backward kernel: the one-hot loss gradient is computed inside log_softmax's backward
    # reduction (its comparison and the row sum in one kernel), never stored.
    (kernel,) = compiled.session.graphs[0].backward.kernels
    assert kernel.kind == "reduction" and "eq" in kernel.origins, kernel.origins

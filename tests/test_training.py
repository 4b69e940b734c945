"""Training through cc.compile: a step that calls loss.backward() is compiled, the compiler itself is
never traced by Dynamo, and gradients match eager."""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings

import pytest
import torch

import compiler_core as cc


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
    logger = logging.getLogger("torch")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler.messages, caught
    finally:
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


"""Dynamic shapes: a graph Dynamo captures with symbolic sizes runs our kernels, never eager PyTorch;
values always checked against eager. Symbolic kernels (one compilation for every size) are tested in
tests/test_symbolic.py; here also the path they fall back to, one compilation per concrete size
(compiler_core/per_size.py), which training graphs take."""

from __future__ import annotations

import pytest
import torch

import compiler_core as cc
from compiler_core import per_size
from compiler_core.ir import symbolic
from explorer.exploration import gather
from explorer.views import capture
from tests.models.zoo import ZOO


def _ran_ours(session) -> None:
    assert session.stats["fallback_graphs"] == 0, session.messages
    assert session.kernels, "nothing was compiled"
    assert all(g.sizes for g in session.graphs), [g.sizes for g in session.graphs]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_one_dynamo_graph_serves_every_size_with_our_kernels(backend, monkeypatch):
    monkeypatch.setattr(symbolic, "ENABLED", False)  # the per-size path (tests/test_symbolic.py: the symbolic one)
    def fn(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1) * x.shape[0]

    compiled = cc.compile(fn, backend=backend, dynamic=True)
    w = torch.randn(16, 24)
    sessions = []
    for rows in (3, 7, 5, 7):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(compiled(x, w), fn(x, w))
        s = compiled.session
        _ran_ours(s)
        assert s.recompiles == [], "Dynamo's one symbolic graph covers every size"
        sessions.append(s)
    assert f"={7}" in sessions[1].graphs[0].sizes and "x" not in sessions[1].graphs[0].sizes
    assert "compiled for each new size" in sessions[1].messages[-1]
    assert sessions[3] is sessions[2], "a size seen before reuses its compilation: no new session"
    assert any(str(s).startswith("s") for s in compiled.session.graphs[0].captured.graph_module.graph.nodes)


def test_a_symbolic_int_argument_is_bound_per_value():
    # dynamic=True makes the int argument a SymInt input of the graph; each value compiles once.
    def fn(x, n):
        return torch.relu(x) * n + x.sum(-1, keepdim=True)

    compiled = cc.compile(fn, backend="cpp", dynamic=True)
    x = torch.randn(4, 8)
    for n in (3, 5, 3):
        torch.testing.assert_close(compiled(x, n), fn(x, n))
        _ran_ours(compiled.session)


def test_sizes_beyond_the_limit_run_in_eager_and_say_so(monkeypatch):
    monkeypatch.setattr(per_size, "MAX_SIZES", 2)
    monkeypatch.setattr(symbolic, "ENABLED", False)  # the per-size path (symbolic kernels serve this graph)
    compiled = cc.compile(lambda x: torch.tanh(x) + 1, backend="cpp", dynamic=True)
    for rows in (2, 3, 4):
        x = torch.randn(rows, 5)
        torch.testing.assert_close(compiled(x), torch.tanh(x) + 1)
    assert any("compiled for 2 sizes already" in m for m in compiled.session.messages), compiled.session.messages


def test_the_capture_view_names_the_symbols_and_the_sizes_compiled():
    compiled = cc.compile(lambda x: torch.sigmoid(x) * 2, backend="cpp", dynamic=True)
    compiled(torch.randn(6, 4))
    _ran_ours(compiled.session)
    section = capture.render(gather(compiled.session, "sigmoid", None))
    sizes = compiled.session.graphs[0].sizes
    assert "Symbolic sizes" in section and sizes in section and "=6" in sizes and "=4" in sizes
    symbols = [pair.split("=")[0] for pair in sizes.split(", ")]
    assert any(f"l_x_: float32[{a}, {b}]" in section for a in symbols for b in symbols), \
        "the graph's inputs are shown with their symbols"


@pytest.mark.slow
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_gpt2_at_four_sizes_compiles_in_dynamo_at_most_twice_and_never_falls_back(train):
    case = ZOO["gpt2"].build("small", "cpu", torch.float32, mask=True)
    model = case.model.train(train)
    compiled = cc.compile(model, dynamic=True)
    vocab = model.config.vocab_size
    sessions = []
    gen = torch.Generator().manual_seed(0)
    for batch, seq in ((2, 6), (3, 12), (2, 9), (4, 7)):
        ids = torch.randint(1, vocab, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[0, : seq // 3] = 0
        kwargs = {"input_ids": ids, "attention_mask": mask, "labels": ids}
        with torch.set_grad_enabled(train):
            ours = compiled(**kwargs)
            if train:
                ours.loss.backward()
                grads = [p.grad.clone() for p in model.parameters()]
                model.zero_grad()
            eager = model(**kwargs)
        torch.testing.assert_close(ours.logits, eager.logits, rtol=1e-4, atol=1e-5)
        if train:
            eager.loss.backward()
            for got, p in zip(grads, model.parameters()):
                torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-5)
            model.zero_grad()
        s = compiled.session
        _ran_ours(s)
        if s not in sessions:  # a session per Dynamo compilation of ours
            sessions.append(s)
        # one symbolic compilation of ours serves every size, the backward too when training
        assert all(g.symbolic and (g.backward is None or g.backward.symbolic) for g in s.graphs), s.messages
        assert not train or all(g.backward is not None for g in s.graphs)
    # (a recompile for another reason, grad mode after an inference test of the same model code, is
    # Dynamo's and leaves the session as it is)
    assert len(sessions) <= 2, [x.recompiles for x in sessions]

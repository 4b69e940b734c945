"""Data-dependent assertions (`aten._assert_async`): `F.one_hot`'s class-range checks and
`torch._assert_async` in user code. The whole graph used to run in eager PyTorch ("extern _assert_async
returns no tensor"); now our kernels compute the condition and the host program calls eager's check
(compiler_core/decomp/asserts.py). Checked: no fallback, values as eager's, and a bad input raises
eager's RuntimeError instead of giving an answer, in inference and in a training step."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _ran_ours(session) -> None:
    stats = session.stats
    assert stats["fallback_graphs"] == 0, session.messages
    assert stats["fallback_ops"] == [], stats["fallback_ops"]
    assert stats["kernel_count"] >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_compiles_matches_and_raises_eager_errors_on_bad_classes(backend):
    def fn(labels, logits):
        target = F.one_hot(labels, logits.shape[-1]).to(logits.dtype)
        return -(target * logits.log_softmax(-1)).sum(-1).mean()

    compiled = cc.compile(fn, backend=backend)
    logits, labels = torch.randn(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])
    torch.testing.assert_close(compiled(labels, logits), fn(labels, logits))
    _ran_ours(compiled.session)
    names = [n.extern.target for g in compiled.session.all_records() for n in g.loops.nodes if n.kind == "extern"]
    assert names.count("fcompile.assert_async.default") == 2, names  # non-negative, below num_classes

    for bad, message in ((torch.tensor([0, 5, 1, 1, 1, 1]), "smaller than num_classes"),
                         (torch.tensor([0, -1, 1, 1, 1, 1]), "non-negative")):
        with pytest.raises(RuntimeError, match=message):
            fn(bad, logits)  # eager's error...
        with pytest.raises(RuntimeError, match=message):
            compiled(bad, logits)  # ...is ours, where eager's answer would otherwise be a wrong one


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_users_assert_async_is_kept_although_nothing_reads_it(backend):
    def fn(x):
        torch._assert_async((x > 0).all(), "inputs must be positive")
        return x.log() * 2

    compiled = cc.compile(fn, backend=backend)
    x = torch.rand(7, 3) + 0.5
    torch.testing.assert_close(compiled(x), fn(x))
    _ran_ours(compiled.session)
    with pytest.raises(RuntimeError, match="inputs must be positive"):
        compiled(-x)


def test_one_hot_in_a_training_step_keeps_its_check_and_matches_eager_gradients():
    def loss_fn(labels, x, w):
        logits = x @ w
        target = F.one_hot(labels, w.shape[-1]).float() * 0.9 + 0.02
        return -(target * logits.log_softmax(-1)).sum(-1).mean()

    torch.manual_seed(0)
    x, labels = torch.randn(8, 16), torch.randint(0, 5, (8,))
    w_eager = torch.randn(16, 5, requires_grad=True)
    w_ours = w_eager.detach().clone().requires_grad_()
    expected = loss_fn(labels, x, w_eager)
    expected.backward()
    compiled = cc.compile(loss_fn)
    got = compiled(labels, x, w_ours)
    got.backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(w_ours.grad, w_eager.grad)
    _ran_ours(compiled.session)
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        compiled(torch.full((8,), 5), x, w_ours)

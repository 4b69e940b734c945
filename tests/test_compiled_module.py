"""cc.compile(module) is an nn.Module: it trains like the original, shares its parameters and names,
switches train/eval, and forwards attribute reads to the module it wraps."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import compiler_core as cc


class Block(torch.nn.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.config = {"hidden": 32}
        self.up = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.drop = torch.nn.Dropout(dropout)
        self.lm_head = torch.nn.Linear(32, 8)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.drop(torch.nn.functional.gelu(self.norm(self.up(x))))) * self.scale


def block(dropout: float = 0.0) -> Block:
    torch.manual_seed(0)
    return Block(dropout)


def test_adamw_steps_on_a_compiled_module_end_where_eager_ends():
    eager, model = block(), block()
    compiled = cc.compile(model, backend="cpp")
    x, target = torch.randn(6, 16), torch.randn(6, 8)
    for m in (eager, compiled):
        optimizer = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(3):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), target)
            loss.backward()
            optimizer.step()
    for (name, p), (name2, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        assert name == name2
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
    session = compiled.session
    assert session.graphs[0].backward is not None and not session.graphs[0].backward.fell_back
    assert session.stats["kernel_count"] > 0 and session.stats["fallback_graphs"] == 0


def test_compiled_module_is_the_original_under_its_names():
    model = block()
    compiled = cc.compile(model, backend="cpp")
    assert isinstance(compiled, torch.nn.Module) and isinstance(compiled, cc.CompiledModule)
    assert compiled._orig_mod is model
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in model.parameters()]
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert [n for n, _ in compiled.named_buffers()] == ["scale"]
    assert list(compiled.state_dict()) == list(model.state_dict())
    # Attribute reads reach the original module.
    assert compiled.config == {"hidden": 32} and compiled.lm_head is model.lm_head
    x = torch.randn(3, 16)
    torch.testing.assert_close(compiled(x), model(x))
    assert isinstance(compiled.session, cc.CompileSession) and compiled.session.stats["graphs"] == 1
    compiled(x).sum().backward()
    assert model.up.weight.grad is not None
    compiled.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    # to() converts the original's tensors; Dynamo's guards see the new dtype and recompile.
    assert compiled.to(torch.float64) is compiled and model.up.weight.dtype == torch.float64
    torch.testing.assert_close(compiled(x.double()), model(x.double()))


def test_state_dicts_round_trip_between_original_and_compiled():
    compiled = cc.compile(block(), backend="cpp")
    other = Block()  # different random weights
    x = torch.randn(3, 16)
    other.load_state_dict(compiled.state_dict())
    torch.testing.assert_close(other(x), compiled(x))

    fresh = Block()
    torch.nn.init.constant_(fresh.up.weight, 0.25)
    assert compiled.load_state_dict(fresh.state_dict()) is not None
    torch.testing.assert_close(compiled(x), fresh(x))
    assert compiled.up.weight.eq(0.25).all()

    # Inside a bigger model too: keys are the ones the same model built from the original would use.
    outer, plain = torch.nn.Sequential(compiled), torch.nn.Sequential(copy.deepcopy(fresh))
    assert list(outer.state_dict()) == list(plain.state_dict())
    torch.nn.init.constant_(plain[0].up.weight, -1.0)
    report = outer.load_state_dict(plain.state_dict())
    assert report.missing_keys == [] and report.unexpected_keys == []
    torch.testing.assert_close(outer(x), plain(x))
    partial = {k: v for k, v in plain.state_dict().items() if k != "0.up.bias"}
    assert outer.load_state_dict(partial, strict=False).missing_keys == ["0.up.bias"]


def test_train_and_eval_reach_the_original_and_recompile():
    model = block(dropout=0.5)
    compiled = cc.compile(model, backend="cpp")
    x = torch.randn(8, 16)
    assert compiled.training and model.training
    torch.manual_seed(1)
    a = compiled(x)
    b = compiled(x)
    assert not torch.equal(a, b)  # dropout is on: two calls draw different masks
    assert compiled.eval() is compiled and not model.training and not model.drop.training
    first, second = compiled(x), compiled(x)
    torch.testing.assert_close(first, model(x))  # eval: deterministic, as eager in eval mode
    assert torch.equal(first, second)
    assert len(compiled.session.recompiles) == 1  # the mode change failed a guard
    compiled.train()
    assert model.training and not torch.equal(compiled(x), first)
    model.eval()  # the original's mode is the compiled module's mode
    assert not compiled.training and torch.equal(compiled(x), first)


def test_explain_takes_a_module_or_its_compiled_wrapper():
    model = block()
    x = torch.randn(3, 16)
    for fn in (model, cc.compile(model, backend="cpp")):
        session = cc.explain(fn, x, backend="cpp", train=True)
        assert session.graphs and session.graphs[0].backward is not None
        assert session.stats["kernel_count"] > 0 and session.stats["fallback_graphs"] == 0


def test_many_compiled_modules_in_one_process_all_compile():
    # Dynamo counts recompilations per code object, and torch.compile(module) calls every module
    # through one shared wrapper: the ninth module compiled in a process (a notebook exploring model
    # after model) ran in eager PyTorch, and the ones after it silently. Each compile() has its own now.
    torch.manual_seed(0)
    for i in range(12):
        model = torch.nn.Sequential(torch.nn.Linear(4 + i, 3), torch.nn.GELU())
        x = torch.randn(2, 4 + i)
        compiled = cc.compile(model, backend="cpp")
        torch.testing.assert_close(compiled(x), model(x))
        session = compiled.session
        assert session.graphs and session.stats["kernel_count"] >= 1, (i, session.messages)
        assert session.graphs[0].captured.inputs[0].name.startswith("l_fn_"), session.graphs[0].captured.inputs


def test_functions_sharing_one_code_object_all_compile():
    # Lambdas made in a loop (or by a factory) share one code object, so they shared Dynamo's cache
    # and its recompile limit: the ninth ran in eager PyTorch. Each compile() copies the function with
    # a code object of its own.
    x = torch.randn(5)
    compiled = [cc.compile(lambda x, i=i: torch.sin(x) + i, backend="cpp") for i in range(11)]
    for i, f in enumerate(compiled):
        torch.testing.assert_close(f(x), torch.sin(x) + i)
        assert f.session.graphs and f.session.stats["kernel_count"] == 1, (i, f.session.messages)


class _Scaled:
    def __init__(self, k: float):
        self.k = k

    def scaled_sin(self, x):
        return torch.sin(x) * self.k

    def __call__(self, x):
        return torch.cos(x) * self.k


_BUILTINS = [torch.sin, torch.cos, torch.tan, torch.exp, torch.log1p, torch.erf, torch.tanh, torch.sigmoid,
             torch.atan, torch.asinh, torch.expm1, torch.abs]


@pytest.mark.parametrize("kind", ["builtin", "bound method", "callable object", "partial"])
def test_every_kind_of_callable_compiles_past_the_recompile_limit_and_twice(kind):
    # The whole class of the two tests above: whatever a compile() is given, its session must hold its
    # own graphs. torch.compile(torch.sin) calls every builtin through one shared wrapper frame, and a
    # class's bound methods share their function's code: the ninth builtin compiled ran in eager PyTorch
    # with no word after the first, and a builtin compiled a second time reused the first compile's
    # graph with an empty session.
    x = torch.randn(6)
    if kind == "builtin":
        made = [(f, f) for f in _BUILTINS] + [(torch.sin, torch.sin)]  # the last: torch.sin again
    elif kind == "bound method":
        made = [(_Scaled(i).scaled_sin, _Scaled(i).scaled_sin) for i in range(12)]
    elif kind == "callable object":
        made = [(_Scaled(i), _Scaled(i)) for i in range(12)]
    else:
        made = [(functools.partial(torch.add, alpha=i), functools.partial(torch.add, alpha=i)) for i in range(12)]
    for i, (fn, reference) in enumerate(made):
        args = (x, x) if kind == "partial" else (x,)
        compiled = cc.compile(fn, backend="cpp")
        torch.testing.assert_close(compiled(*args), reference(*args), equal_nan=True)
        session = compiled.session
        assert session.graphs and session.stats["kernel_count"] == 1, (kind, i, session.messages)
        assert not session.messages, session.messages

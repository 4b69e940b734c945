"""The compiled optimizer step (issue 7 item 6): torch.optim's SGD with momentum, Adam and AdamW (their
default foreach implementations) compiled by cc.compile, three steps against eager PyTorch.

Dynamo captures opt.step() as one graph per parameter list: per parameter a chain of pointwise ops
(the step counter is a 0-d tensor, lr a Python float), whose results AOTAutograd writes back into
the parameters and the optimizer state. Our scheduler puts the chains into a few kernels: one for
the step counters and bias corrections, one horizontal kernel with a segment per parameter shape.
"""

import pytest
import torch

import compiler_core as cc

OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "adam": (torch.optim.Adam, {"lr": 0.01}),
    "adamw": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
}
# Kernels one compiled step may take (before: Adam 16 kernels and 4 prims.fma extern calls for these
# four parameters; SGD 4 kernels).
MAX_KERNELS = {"sgd": 2, "adam": 4, "adamw": 4}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Dynamo caches torch.optim's step wrapper per optimizer object and runs it eagerly, without a
    word, past its recompile limit (8): every test starts from an empty cache."""
    torch._dynamo.reset()
    yield


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    # Parameters of four shapes: [10, 6], [10], [3, 10], [3].
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))


def _grads(model: torch.nn.Module, steps: int) -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [[torch.randn(p.shape, generator=gen) for p in model.parameters()] for _ in range(steps)]


def _state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {f"param{i}": p.detach().clone() for i, p in enumerate(model.parameters())}
    for i, p in enumerate(model.parameters()):
        for key, value in opt.state[p].items():
            out[f"param{i}.{key}"] = torch.as_tensor(value).clone()
    return out


def _three_steps(kind: str, backend: str | None, **extra) -> tuple[dict[str, torch.Tensor], list]:
    """Parameters and optimizer state after three steps (eager when backend is None), and the
    session of each compilation."""
    model = _mlp()
    cls, kwargs = OPTIMIZERS[kind]
    opt = cls(model.parameters(), **kwargs, **extra)

    def step():
        opt.step()

    fn = step if backend is None else cc.compile(step, backend=backend)
    sessions = []
    for grads in _grads(model, 3):
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        fn()
        if backend is not None and all(fn.session is not s for s in sessions):
            sessions.append(fn.session)
    return _state(model, opt), sessions


def _assert_compiled(session, max_kernels: int) -> None:
    """Every graph ran as our kernels: none fell back to eager, no op without a lowering."""
    stats = session.stats
    assert stats["fallback_graphs"] == 0, session.messages
    assert stats["fallback_ops"] == [], stats["fallback_ops"]
    assert not [m for m in session.messages if "eager" in m], session.messages
    assert 1 <= stats["kernel_count"] <= max_kernels, stats
    assert stats["extern_calls"] == 0, stats


def _assert_same_state(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-6, msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_three_compiled_steps_match_eager(kind, backend):
    want, _ = _three_steps(kind, None)
    got, sessions = _three_steps(kind, backend)
    _assert_same_state(got, want)
    assert sessions, "opt.step() was never compiled"
    for session in sessions:
        _assert_compiled(session, MAX_KERNELS[kind])
        update = session.graphs[-1]
        # The per-parameter updates share one horizontal kernel, a segment per parameter shape.
        segmented = [g for g in update.schedule.groups if g.segments]
        assert len(segmented) == 1 and len(segmented[0].segments) == 4, update.schedule.pretty()
        kernel = next(k for k in update.kernels if k.name == segmented[0].name)
        assert kernel.segments == (60, 10, 30, 3)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_foreach_implementation_is_taken_apart_into_our_kernels(kind, backend):
    # What torch.optim runs on CUDA by default: `_foreach_*` ops over the parameter lists. On the H200
    # each was an extern call (Adam: 19 per step, no kernel of ours); decomp/foreach.py takes them
    # apart per element during tracing, and the chains fuse as the per-parameter loop's do.
    want, _ = _three_steps(kind, None, foreach=True)
    got, sessions = _three_steps(kind, backend, foreach=True)
    _assert_same_state(got, want)
    assert sessions, "opt.step() was never compiled"
    for session in sessions:
        _assert_compiled(session, MAX_KERNELS[kind])
        assert not [op for op in session.stats["fallback_ops"] if "_foreach_" in op]


@pytest.mark.parametrize("variant", [{"capturable": True}, {"lr": torch.tensor(0.01)}],
                         ids=["capturable", "lr-tensor"])
def test_adam_variants_a_gpu_run_takes(variant):
    """Under torch.compile on CUDA, Dynamo turns on `capturable` (step counters on the device, other
    ops for the bias corrections); schedulers pass lr as a tensor. Same bounds, same values as eager
    Adam with a float lr."""
    model, reference = _mlp(), _mlp()
    opt = torch.optim.Adam(model.parameters(), **{"lr": 0.01, **variant})
    eager_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    step = cc.compile(lambda: opt.step(), backend="cpp")
    for grads in _grads(model, 3):
        for p, q, g in zip(model.parameters(), reference.parameters(), grads):
            p.grad, q.grad = g.clone(), g.clone()
        step()
        eager_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    _assert_compiled(step.session, MAX_KERNELS["adam"])
    assert len(step.session.graphs[-1].memory.inplace) == 16


def test_adam_without_horizontal_fusion_takes_a_kernel_per_parameter(monkeypatch):
    """What the horizontal kernel replaces: with it turned off, one kernel per parameter and one per
    step counter (the bound above is not met by vertical fusion alone)."""
    from compiler_core.schedule import fusion

    monkeypatch.setattr(fusion, "fuse_horizontally", lambda graph, sched, name: sched)
    want, _ = _three_steps("adam", None)
    got, sessions = _three_steps("adam", "cpp")
    _assert_same_state(got, want)
    assert sessions[-1].stats["kernel_count"] == 8


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer):
    def train_step(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    return train_step


def test_a_level_past_the_argument_cap_is_split_into_several_horizontal_kernels(monkeypatch):
    """Adam's update of one parameter takes 9 pointers (4 tensors, 2 bias corrections, 3 results): with
    at most 20 per kernel, the four updates need two horizontal kernels of two segments each."""
    from compiler_core.schedule import horizontal

    monkeypatch.setattr(horizontal, "MAX_ARGUMENTS", 20)
    want, _ = _three_steps("adam", None)
    got, sessions = _three_steps("adam", "cpp")
    _assert_same_state(got, want)
    groups = sessions[-1].graphs[-1].schedule.groups
    assert [len(g.segments) for g in groups if g.segments] == [2, 2]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_training_step_with_backward_and_adam(backend):
    """`loss.backward(); opt.step()` in one compiled function: torch.optim breaks the graph around the
    step, so the model's forward/backward and the update are separate graphs, all compiled."""
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(2))
    results = []
    for compiled in (False, True):
        model = _mlp()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        train_step = _train_step(model, opt)
        fn = cc.compile(train_step, backend=backend) if compiled else train_step
        losses = [fn(x).detach() for _ in range(3)]
        results.append((losses, _state(model, opt)))
        if compiled:
            session = fn.session
            assert len(session.graphs) == 2, "expected the model's graph and the update's"
            assert session.graphs[0].backward is not None
            assert session.stats["fallback_graphs"] == 0 and session.stats["fallback_ops"] == [], session.messages
            update = session.graphs[-1]
            assert not update.prims.externs and update.schedule.kernel_count <= MAX_KERNELS["adam"]
    (eager_losses, eager_state), (losses, state) = results
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses), rtol=1e-5, atol=1e-6)
    _assert_same_state(state, eager_state)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_independent_outputs_of_different_sizes_share_one_launch(backend):
    """Horizontal fusion outside optimizers: three unrelated pointwise results, three shapes."""
    def f(a, b, c):
        return a.sin() * 2, b.cos() + 1, c.exp()

    args = (torch.randn(5, 3), torch.randn(7), torch.randn(()))
    compiled = cc.compile(f, backend=backend)
    for got, want in zip(compiled(*args), f(*args)):
        torch.testing.assert_close(got, want)
    sched = compiled.session.graphs[0].schedule
    assert sched.kernel_count == 1
    assert [x for _, x in sched.groups[0].segments] == [(5, 3), (7,), ()]
    assert any(d.reason.startswith("horizontal") and d.accepted for d in sched.decisions)


def test_dependent_kernels_are_not_merged_horizontally():
    """A kernel reading another's result runs after it: never in the same launch."""
    def f(a, b):
        s = a.sum()
        return s, b * s

    args = (torch.randn(6, 4), torch.randn(9))
    compiled = cc.compile(f, backend="cpp")
    for got, want in zip(compiled(*args), f(*args)):
        torch.testing.assert_close(got, want)
    sched = compiled.session.graphs[0].schedule
    assert not any(g.segments for g in sched.groups)


# ---- in-place updates of mutated inputs ---------------------------------------------------------
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_optimizer_step_writes_parameters_and_state_in_place(backend):
    """Each updated parameter and state tensor is written by our kernel into its own storage, so
    AOTAutograd's copy back into the input is a copy onto itself (ATen returns at once)."""
    want, _ = _three_steps("adam", None)
    got, sessions = _three_steps("adam", backend)
    _assert_same_state(got, want)
    update = sessions[-1].graphs[-1]
    written = {target for _, target in update.memory.inplace}
    # 4 parameters, each with its step counter, exp_avg and exp_avg_sq.
    assert len(written) == 16 and not update.memory.inplace_refused, update.memory.pretty()
    assert "written in place" in update.wrapper.source


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_mutated_input_of_a_plain_function_is_updated(backend):
    def f(x, y):
        x.mul_(2).add_(y)
        return y * 3

    args = (torch.randn(6, 5), torch.randn(5))
    eager_x = args[0].clone()
    want = f(eager_x, args[1])
    compiled = cc.compile(f, backend=backend)
    got = compiled(*args)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(args[0], eager_x)
    assert [t for _, t in compiled.session.graphs[0].memory.inplace] == ["arg0_1"]


def test_input_read_at_other_elements_is_not_overwritten():
    """flip reads x[5 - i] in the kernel that updates x: written in place, the C++ loop would read
    elements it had already overwritten. The planner refuses and says why; the values match eager."""
    def f(x):
        y = x.flip(0) + 1
        x.mul_(2)
        return y

    x = torch.arange(6.0)
    eager_x = x.clone()
    want = f(eager_x)
    compiled = cc.compile(f, backend="cpp")
    torch.testing.assert_close(compiled(x), want)
    torch.testing.assert_close(x, eager_x)
    memory = compiled.session.graphs[0].memory
    assert memory.inplace == () and "other elements" in memory.inplace_refused[0][1], memory.pretty()


def test_dynamo_giving_up_on_the_step_is_said_not_silent():
    """Dynamo guards torch.optim's step wrapper on the optimizer object: each new optimizer compiles it
    again, and past torch._dynamo.config.recompile_limit Dynamo runs it in eager PyTorch. The
    session of that call says so (it used to show no graph and no word)."""
    # config.patch, not monkeypatch: undoing a monkeypatch deletes the setting from Dynamo's config.
    sessions = []
    with torch._dynamo.config.patch(recompile_limit=2):
        _steps_of_new_optimizers(sessions)
    assert sessions[0].stats["kernel_count"] >= 1 and not sessions[0].messages
    assert sessions[-1].stats["kernel_count"] == 0
    assert any("recompile_limit" in m and "eager" in m for m in sessions[-1].messages), sessions[-1].messages


def _steps_of_new_optimizers(sessions: list) -> None:
    for _ in range(3):
        model = _mlp()
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        before = [p.detach().clone() for p in model.parameters()]
        step = cc.compile(lambda opt=opt: opt.step(), backend="cpp")
        step()
        for p, b in zip(model.parameters(), before):  # the step ran, compiled or not
            torch.testing.assert_close(p.detach(), b - 0.1)
        sessions.append(step.session)

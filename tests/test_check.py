"""The check mode (issue #5, "finding the guilty kernel"): `cc.compile(fn, check=True)` compares every
kernel with its FX nodes run in eager PyTorch, right after its launch, and names the first kernel
that disagrees: graph, kernel, FX nodes, the user's source line and the max error."""

import inspect

import pytest
import torch

import compiler_core as cc
from compiler_core.codegen.cpp import kernel as cpp_kernel
from compiler_core.codegen.triton import kernel as triton_kernel
from compiler_core.codegen.wrapper import local
from compiler_core.ir.graph import Layout, ViewRef
from compiler_core.runtime import host
from compiler_core.runtime.artifacts import KernelCheck
from compiler_core.runtime.check import KernelChecker, compare, user_frame, within_eager_rounding

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _line_of(fn, text):
    """`test_check.py:N` of the line in `fn` that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"test_check.py:{start + offset}"


def _three_kernels(x, w):
    a = torch.relu(x) + 1  # a pointwise kernel before the matmul
    y = a @ w
    s = torch.sigmoid(y) * 2  # fused with the row sum below
    return s.sum(-1), torch.tanh(y).sum(0)  # a reduction over the other axis: a third kernel


def _break_sigmoid(monkeypatch, backend):
    """A wrong kernel: sigmoid printed as exp, in the code generator of `backend` only."""
    if backend == "cpp":
        monkeypatch.setitem(cpp_kernel._STD_UNARY, "sigmoid", "std::exp")
    else:
        monkeypatch.setitem(triton_kernel._TL_UNARY, "sigmoid", "tl.exp")


def _inputs():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(8, 16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_correct_program_passes_with_one_check_per_kernel(backend):
    x, w = _inputs()
    before = (x.clone(), w.clone())
    checked = cc.compile(_three_kernels, backend=backend, check=True)
    out = checked(x, w)
    torch.testing.assert_close(out, _three_kernels(x, w), rtol=1e-5, atol=1e-5)

    record = checked.session.graphs[0]
    assert [c.kernel for c in record.checks] == [k.name for k in record.kernels]
    assert len(record.checks) == 3
    for check, kernel in zip(record.checks, record.kernels):
        assert check.ok and check.node == "" and check.note == ""
        assert check.nodes == kernel.origins
        assert 0.0 <= check.max_abs_error < 1e-5
        assert check.graph == "graph 0 (forward)"
    fused = next(c for c in record.checks if "sigmoid" in c.nodes)
    assert _line_of(_three_kernels, "torch.sigmoid") in fused.source_line
    assert "rt.check_kernel(checker, " in record.wrapper.source

    # The check reads, never writes: same outputs as an unchecked program, inputs untouched.
    torch._dynamo.reset()
    unchecked = cc.compile(_three_kernels, backend=backend)
    plain = unchecked(x, w)
    assert "check_kernel" not in unchecked.session.graphs[0].wrapper.source
    for a, b in zip(out, plain):
        assert torch.equal(a, b)
    assert torch.equal(x, before[0]) and torch.equal(w, before[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wrong_kernel_is_named_with_its_nodes_and_source_line(backend, monkeypatch):
    _break_sigmoid(monkeypatch, backend)
    x, w = _inputs()
    checked = cc.compile(_three_kernels, backend=backend, check=True)
    with pytest.raises(cc.KernelCheckError) as caught:
        checked(x, w)

    record = checked.session.graphs[0]
    guilty = next(k for k in record.kernels if "sigmoid" in k.origins)
    check = caught.value.check
    assert check.kernel == guilty.name and not check.ok
    assert check.nodes == guilty.origins
    # sigmoid's own value stays in registers; the first output written to memory is the row sum.
    assert check.node == "sum_1"
    assert check.max_abs_error > 0.1  # exp(y) against sigmoid(y) for y of order 1
    assert _line_of(_three_kernels, "s.sum(-1)") in check.source_line
    message = str(caught.value)
    for part in (guilty.name, "graph 0 (forward)", "sigmoid, mul, sum_1", "first wrong node:  sum_1",
                 f"computed from:     {__file__}:{_line_of(_three_kernels, 'torch.sigmoid').split(':')[1]}"):
        assert part in message
    # The kernel before it passed; the guilty one is recorded too, and nothing after it ran.
    assert [(c.kernel, c.ok) for c in record.checks] == [(record.kernels[0].name, True), (guilty.name, False)]


def test_debug_flag_and_environment_variable_turn_the_check_on(monkeypatch):
    _break_sigmoid(monkeypatch, "cpp")
    x, w = _inputs()
    with pytest.raises(cc.KernelCheckError, match="first wrong node:  sum_1"):
        cc.compile(_three_kernels, backend="cpp", debug="check")(x, w)

    torch._dynamo.reset()
    unchecked = cc.compile(_three_kernels, backend="cpp")
    unchecked(x, w)  # wrong, but nobody looks
    assert unchecked.session.graphs[0].checks == ()

    torch._dynamo.reset()
    monkeypatch.setenv("FCOMPILE_DEBUG", "memory,check")
    from_env = cc.compile(_three_kernels, backend="cpp")
    with pytest.raises(cc.KernelCheckError) as caught:
        from_env(x, w)
    assert "sigmoid" in caught.value.check.nodes
    assert [c.ok for c in from_env.session.graphs[0].checks] == [True, False]


def test_inputs_no_longer_live_are_recomputed_from_the_graph_inputs(monkeypatch):
    # The reference reads an argument from the host program's locals when it is live there, and
    # otherwise evaluates it from its own arguments: give the check only `args` and the outputs.
    scopes = []
    real = host.check_kernel

    def keep(value):  # copies: later kernels reuse these storages, and the memory mode poisons them
        if isinstance(value, list):
            return [keep(v) for v in value]
        return value.clone() if isinstance(value, torch.Tensor) else value

    def spy(checker, kernel, scope):
        scopes.append((kernel, {name: keep(value) for name, value in scope.items()}))
        real(checker, kernel, scope)

    monkeypatch.setattr(host, "check_kernel", spy)
    x, w = _inputs()
    checked = cc.compile(_three_kernels, backend="cpp", check=True)
    checked(x, w)
    record = checked.session.graphs[0]
    checker = record.artifact.checker
    kernel, scope = next((k, s) for k, s in scopes if k == record.checks[1].kernel)  # after the matmul
    kept = {f"v_{checker.values[n].buffer}" for n in checker.kernels[kernel].outputs} | {"args"}
    assert set(scope) - kept  # the matmul's result and the inputs' locals are gone now
    bare = {name: value for name, value in scope.items() if name in kept}
    assert checker.check(kernel, bare).max_abs_error == pytest.approx(record.checks[1].max_abs_error, abs=1e-6)

    wrong = dict(bare)
    name = next(iter(kept - {"args"}))
    wrong[name] = bare[name] + 0.5
    with pytest.raises(cc.KernelCheckError) as caught:
        checker.check(kernel, wrong)
    assert caught.value.check.max_abs_error == pytest.approx(0.5, abs=1e-5)


def test_source_line_falls_back_to_dynamos_graph():
    x, w = _inputs()
    checked = cc.compile(_three_kernels, backend="cpp", check=True)
    checked(x, w)
    checker = checked.session.graphs[0].artifact.checker
    line = _line_of(_three_kernels, "torch.sigmoid")
    assert line in checker.source_line("sigmoid")
    # Without the ATen node's stack trace, the Dynamo node it came from (meta "from_node") answers.
    checker.nodes["sigmoid"].meta.pop("stack_trace")
    checker._lines.clear()
    assert line in checker.source_line("sigmoid")
    assert checker.source_line("no_such_node") == ""


def _sigmoid_scale(x, w):
    return torch.sigmoid(x) * w  # the backward of sigmoid subtracts; the forward does not


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_kernels_are_checked(backend, monkeypatch):
    x, w = torch.randn(4, 8), torch.randn(8)
    x1, w1 = x.clone().requires_grad_(), w.clone().requires_grad_()
    x2, w2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    checked = cc.compile(_sigmoid_scale, backend=backend, check=True)
    checked(x1, w1).square().sum().backward()
    _sigmoid_scale(x2, w2).square().sum().backward()
    torch.testing.assert_close((x1.grad, w1.grad), (x2.grad, w2.grad), rtol=1e-5, atol=1e-5)
    backward = checked.session.graphs[0].backward
    assert backward.checks and all(c.ok and c.graph == "graph 0 (backward)" for c in backward.checks)
    assert [c.kernel for c in backward.checks] == [k.name for k in backward.kernels]

    # A kernel wrong only in the backward graph is named there, with the forward line it came from.
    torch._dynamo.reset()
    monkeypatch.setitem(cpp_kernel._BINARY_INFIX, "sub", "+")
    monkeypatch.setitem(triton_kernel._INFIX, "sub", "+")
    x3, w3 = x.clone().requires_grad_(), w.clone().requires_grad_()
    checked = cc.compile(_sigmoid_scale, backend=backend, check=True)
    loss = checked(x3, w3).square().sum()  # the forward is still right
    assert all(c.ok for c in checked.session.graphs[0].checks)
    with pytest.raises(cc.KernelCheckError) as caught:
        loss.backward()
    check = caught.value.check
    assert check.graph == "graph 0 (backward)" and not check.ok and check.max_abs_error > 0
    assert check.kernel in [k.name for k in checked.session.graphs[0].backward.kernels]
    assert _line_of(_sigmoid_scale, "torch.sigmoid(x) * w") in check.source_line


def test_compare_treats_nan_infinity_integers_and_low_precision_as_documented():
    nan, inf = float("nan"), float("inf")
    assert compare(torch.tensor([1.0, nan, inf]), torch.tensor([1.0, nan, inf])) == (0.0, True)
    assert compare(torch.tensor([1.0, nan]), torch.tensor([1.0, 2.0])) == (inf, False)
    assert compare(torch.tensor([1.0]), torch.tensor([1.0 + 2**-20])) == (2**-20, True)  # within rtol 1e-4
    assert compare(torch.tensor([1.0]), torch.tensor([1.0 + 2**-10])) == (2**-10, False)
    assert compare(torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([1.0078125], dtype=torch.bfloat16)) \
        == (0.0078125, True)
    assert compare(torch.tensor([3, 4]), torch.tensor([3, 5])) == (1.0, False)
    assert compare(torch.tensor([True]), torch.tensor([False])) == (1.0, False)
    assert compare(torch.zeros(2, 3), torch.zeros(3, 2)) == (inf, False)


def test_user_frame_and_pretty():
    trace = ('  File "/home/me/model.py", line 12, in forward\n    h = self.fc(x)\n        ^^^^\n'
             '  File "/home/me/layers.py", line 40, in gelu\n    return x * torch.sigmoid(1.702 * x)\n')
    assert user_frame(trace) == "/home/me/layers.py:40 in gelu: return x * torch.sigmoid(1.702 * x)"
    assert user_frame(None) == ""
    check = KernelCheck("fused_sigmoid_mul_0", ("sigmoid", "mul"), 0.75, False, "model.py:3 in f: y = x",
                        "graph 0 (forward)", "sigmoid")
    assert check.pretty() == ("FAIL fused_sigmoid_mul_0 (sigmoid, mul): max abs error 0.75, first wrong node "
                              "sigmoid  # model.py:3 in f: y = x")


def test_user_frame_skips_fcompiles_own_wrapper_of_a_module_call():
    import compiler_core.api as api

    wrapper = f'  File "{api.__file__}", line 353, in call_M_0\n    return fn(*args, **kwargs)\n'
    user = '  File "/home/me/model.py", line 7, in forward\n    y = self.fc(x)\n'
    assert user_frame(wrapper + user) == "/home/me/model.py:7 in forward: y = self.fc(x)"
    # An nn.Sequential of torch layers: Dynamo drops torch's frames, only the wrapper is left: no user line.
    assert user_frame(wrapper) == ""

    from explorer.exploration import explore_function
    from explorer.provenance import provenance

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    lines = [o.user_line for o in provenance(explore_function(model, (torch.randn(2, 4),), backend="cpp")).nodes]
    assert lines and not any("api.py" in line or "compiled_module.py" in line for line in lines), lines


def test_a_sum_with_cancellation_is_judged_against_the_exact_result():
    # Centred values summed: the result is near 0, and both eager and the kernel are off by the rounding
    # of terms ~1e4 in size, differently (the C++ kernel compensates its sums). Against eager's value
    # with fp32 tolerances that looked like a wrong kernel (MobileViT's layer norm backward did); the
    # kernel passes because it is as close to the fp64 result as eager is, and the check says so.
    torch.manual_seed(0)

    def centred_sum(x, w):
        return ((x * w) - (x * w).mean(-1, keepdim=True)).sum(-1)
    x, w = torch.randn(16, 20000) * 100, torch.randn(20000)
    checked = cc.compile(centred_sum, backend="cpp", check=True)
    out = checked(x, w)
    assert not compare(out, centred_sum(x, w))[1]  # outside fp32 tolerance of eager's value...
    (check,) = checked.session.graphs[0].checks
    assert check.ok and "fp64" in check.rounding, check.pretty()  # ...but as exact as eager
    exact = centred_sum(x.double(), w.double())
    assert (out.double() - exact).abs().max() <= 2 * (centred_sum(x, w).double() - exact).abs().max()


def test_rounding_allowance_is_eagers_own_error_not_more():
    exact = torch.tensor([1000.0, -3.0, 0.0], dtype=torch.float64)
    eager = (exact + torch.tensor([1e-3, -1e-3, 5e-4], dtype=torch.float64)).float()
    close = (exact + torch.tensor([-1.5e-3, 0.0, 1e-3], dtype=torch.float64)).float()
    far = (exact + torch.tensor([0.0, 0.0, 2e-2], dtype=torch.float64)).float()
    assert within_eager_rounding(close, eager, exact)[0]
    assert not within_eager_rounding(far, eager, exact)[0]  # 20x eager's error: wrong
    assert not within_eager_rounding(close, eager, None)[0]  # no exact result: no allowance


def test_an_externs_tuple_with_python_numbers_is_read_whole():
    # CUDA's flash attention returns (out, lse, cum_seq_q, cum_seq_k, max_q, max_k, ...): two Python
    # ints beside the tensors. Reading such a tuple back for a reference raised AttributeError ('int'
    # object has no attribute 'buffer') and stopped Swin bf16's checked run on the GPU.
    checker = object.__new__(KernelChecker)
    out = ViewRef("buf0", Layout((2, 3), (3, 1)), torch.float32)
    checker.values, checker.last_step = {"flash": (out, None, 7, 9)}, {}
    data = torch.arange(6.0)
    got = checker._live_value("flash", {local("buf0"): data}, frozenset(), 0)
    assert torch.equal(got[0], data.view(2, 3)) and got[1:] == (None, 7, 9)

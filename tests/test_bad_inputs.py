"""Bad or unusual input never crashes and never gives a wrong answer: it matches eager, or the op
or graph runs in eager PyTorch and the session says so."""

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp.sorting import SHORT_SORT


def _run(fn, *args, backend="cpp"):
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args), equal_nan=True)
    return compiled.session


def test_op_without_lowering_runs_as_extern_and_is_listed():
    s = _run(lambda x: torch.special.airy_ai(x * 2) + 1, torch.randn(10))  # airy_ai: no lowering (yet)
    assert any("airy_ai" in op for op in s.stats["fallback_ops"]), s.stats
    assert s.stats["kernel_count"] >= 1  # the pointwise neighbours still compiled


def test_graph_break_is_recorded_with_user_line():
    def fn(x):
        y = x.sin()
        print("side effect", end="")  # Dynamo cannot capture print: graph break
        return y.cos()

    s = _run(fn, torch.randn(4))
    assert s.breaks, "the break should be recorded"
    br = s.breaks[0]
    assert br.filename.endswith("test_bad_inputs.py") and br.lineno > 0
    assert br.reason
    assert len(s.graphs) == 2


def test_unsupported_dtype_falls_back_to_eager_with_a_message():
    # complex32: no real pair dtype of ours (complex64 and complex128 compile: tests/test_complex.py)
    s = _run(lambda x: x * 2 + 1, torch.randn(4, dtype=torch.complex64).to(torch.complex32))
    assert s.graphs[0].fell_back
    assert any("eager" in m and "complex32" in m for m in s.messages), s.messages
    assert s.stats["fallback_graphs"] == 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name,fn,make", [
    ("empty", lambda x: torch.softmax(x, -1) + 1, lambda: (torch.randn(0, 5),)),
    ("zero_dim", lambda x: x.exp() * 2, lambda: (torch.tensor(1.5),)),
    ("nan_inf", lambda x: (x.amax(-1), torch.softmax(x, -1), x * 0), lambda: (
        torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), 1.0, 0.0], [-float("inf"), 1.0, 2.0]]),)),
    ("nan_maximum", lambda x, y: torch.maximum(x, y) + torch.minimum(x, y),
     lambda: (torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([float("nan"), 2.0, 1.0]))),
    ("int_division_signs", lambda a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc")),
     lambda: (torch.tensor([7, -7, 7, -7, 0]), torch.tensor([2, 2, -2, -2, 3]))),
    ("float_division_signs", lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.remainder(a, b)),
     lambda: (torch.tensor([7.5, -7.5, 7.5, -7.5]), torch.tensor([2.0, 2.0, -2.0, -2.0]))),
    ("noncontiguous", lambda x: torch.softmax(x, -1), lambda: (torch.randn(6, 4).t(),)),
    ("broadcast_stride0", lambda x, y: x * y, lambda: (torch.randn(3, 1).expand(3, 5), torch.randn(5))),
    ("returns_input_view", lambda x: (x.t(), x + 1), lambda: (torch.randn(3, 4),)),
])
def test_unusual_inputs_match_eager(backend, name, fn, make):
    _run(fn, *make(), backend=backend)


def test_input_mutation_matches_eager():
    def fn(x):
        x.add_(1)
        return x * 2

    a, b = torch.randn(5), None
    b = a.clone()
    out = cc.compile(fn)(a)
    expected = fn(b)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, b)


def test_autograd_through_compiled_function():
    def fn(x, w):
        return torch.softmax(x @ w, -1).square().sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    compiled = cc.compile(fn)
    compiled(x, w).backward()
    fn(x, w2).backward()
    torch.testing.assert_close(w.grad, w2.grad)
    s = compiled.session
    assert s.graphs[0].backward is not None and not s.graphs[0].backward.fell_back


def test_bad_options_raise_a_clear_error():
    with pytest.raises(cc.CompileError, match="backend"):
        cc.compile(lambda x: x, backend="cuda")


def test_recompile_is_recorded_with_the_failed_guard():
    compiled = cc.compile(lambda x: x * 2)
    compiled(torch.randn(3))
    compiled(torch.randn(3, dtype=torch.float64))
    s = compiled.session
    assert len(s.recompiles) == 1 and "dtype" in s.recompiles[0].reason
    assert len(s.graphs) == 1  # the session shows the latest compilation


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_erf_is_accurate_over_its_whole_range(backend):
    # Both backends' erf (two fitted polynomials, no exp) against erf in double precision.
    x = torch.cat([torch.linspace(-6, 6, 100001), torch.logspace(-30, 0, 500), -torch.logspace(-30, 0, 500),
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, 4.0])])
    ours = cc.compile(torch.erf, backend=backend)(x)
    exact = torch.erf(x.double())
    assert ((ours.double() - exact).abs().nan_to_num() <= 2e-7).all()
    assert torch.isnan(ours[-4]) and ours[-6] == 1 and ours[-5] == -1


def test_extern_op_with_several_outputs():
    # aten.sort of rows longer than SHORT_SORT returns (values, indices): one extern call, two buffers, and
    # fused neighbours. (max.dim, then short sorts, were the example until they became our reductions.)
    rows = torch.randn(2, SHORT_SORT + 7)
    s = _run(lambda x: (lambda v_i: (v_i[0] * 2, v_i[1] + 1))(torch.sort(x * 3, dim=1)), rows)
    assert s.stats["fallback_graphs"] == 0 and s.stats["extern_calls"] == 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_arg_reductions_take_the_first_extreme_and_nan_like_eager(backend):
    # decomp/arg_reductions.py: ties give the first position, a NaN anywhere in a row wins (its first).
    x = torch.tensor([[1.0, 3.0, 3.0, -2.0], [float("nan"), 5.0, float("nan"), 5.0], [-1.0, -1.0, -1.0, -1.0]])

    def f(x):
        values, positions = torch.max(x, dim=1)
        low, low_at = torch.min(x, dim=0, keepdim=True)
        return x.argmax(1), x.argmin(), values, positions, low, low_at

    s = _run(f, x, backend=backend)
    assert s.stats["fallback_ops"] == [] and s.stats["kernel_count"] >= 1, s.stats


# ---- integer division by zero: eager on the CPU raises RuntimeError("ZeroDivisionError") -------------
_ZERO_DIVISION = {
    "floordiv": (lambda a, b: a // b, lambda: (torch.tensor([7, -7, 5]), torch.tensor([2, 0, 1]))),
    "remainder": (lambda a, b: a % b, lambda: (torch.tensor([7, -7, 5]), torch.tensor([2, 0, 1]))),
    "trunc_int32": (lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                    lambda: (torch.tensor([7, -7], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32))),
    "scalar_divisor": (lambda a: (a + 1) // 0, lambda: (torch.tensor([3, 4]),)),
    # the zero divisor exists only inside the fused kernel, never in memory
    "intermediate_divisor": (lambda a, b: (a * 2) % (b - 1) + 1, lambda: (torch.tensor([3, 4]), torch.tensor([1, 3]))),
    "inside_reduction": (lambda a, b: (a // b).sum(-1) + a.amax(-1),
                         lambda: (torch.arange(12).view(3, 4), torch.tensor([[1, 2, 3, 4]] * 2 + [[1, 0, 1, 1]]))),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(_ZERO_DIVISION))
def test_integer_division_by_zero_raises_like_eager(backend, name):
    fn, make = _ZERO_DIVISION[name]
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as eager:
        fn(*make())
    compiled = cc.compile(fn, backend=backend)
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as ours:
        compiled(*make())
    assert type(ours.value) is type(eager.value) and str(ours.value) == str(eager.value)
    assert compiled.session.stats["fallback_graphs"] == 0 and compiled.session.stats["kernel_count"] >= 1
    # The error does not stick: the same compiled graph on good inputs gives eager's values.
    good = tuple(torch.where(t == 0, 3, t) if t.dim() else t for t in make())
    if name in ("scalar_divisor", "intermediate_divisor"):
        return  # the divisor is 0 by construction whatever the inputs hold
    torch.testing.assert_close(compiled(*good), fn(*good))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_integer_division_without_zero_or_on_empty_tensors_matches_eager(backend):
    # Empty tensors compute no element, so eager raises nothing even for `// 0`.
    _run(lambda a: (a // 0, a % 0), torch.zeros(0, dtype=torch.int64), backend=backend)
    # A zero divisor that the kernel computes then discards still raises in eager; here none is zero.
    _run(lambda a, b: (a // b, torch.where(b > 0, a % b, -1)), torch.tensor([9, -9, 4]), torch.tensor([2, 5, -3]),
         backend=backend)


def test_only_kernels_with_integer_division_check_for_zero():
    # The check costs a flag read per call: kernels that cannot divide an integer by zero skip it.
    int_div = cc.explain(lambda a, b: a // b + 1, torch.tensor([4]), torch.tensor([2]), backend="cpp")
    float_div = cc.explain(lambda a, b: a // b + 1, torch.tensor([4.0]), torch.tensor([2.0]), backend="cpp")
    assert [k.checks_int_div for k in int_div.kernels] == [True]
    assert [k.checks_int_div for k in float_div.kernels] == [False]


# ---- subtraction with a bool operand: eager raises RuntimeError, whichever side the bool is on ------------
@pytest.mark.parametrize("name,fn,make", [
    ("tensor_minus_true", lambda x: x.exp() - True, lambda: (torch.randn(3),)),
    ("true_minus_tensor", lambda x: True - x.exp(), lambda: (torch.randn(3),)),
    ("int_minus_false", lambda x: (x + 1) - False, lambda: (torch.tensor([1, 2]),)),
    ("float_minus_bool_tensor", lambda x, m: x - m, lambda: (torch.randn(3), torch.tensor([True, False, True]))),
    ("bool_tensor_minus_float", lambda x, m: m - x * 2, lambda: (torch.randn(3), torch.tensor([True, False, True]))),
    ("bool_minus_bool", lambda a, b: torch.sub(a, b), lambda: (torch.tensor([True, False]), torch.tensor([True] * 2))),
    ("rsub", lambda x: torch.rsub(x, True), lambda: (torch.randn(3),)),
    ("in_place", lambda x: x.clone().sub_(True), lambda: (torch.randn(3),)),
])
def test_subtraction_with_bool_raises_like_eager(name, fn, make):
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with") as eager:
        fn(*make())
    compiled = cc.compile(fn, backend="cpp")
    with pytest.raises(RuntimeError) as ours:
        compiled(*make())
    # Dynamo may wrap the error (bool - bool fails while tracing); the message is eager's.
    assert isinstance(ours.value, RuntimeError) and str(eager.value) in str(ours.value)


def test_subtraction_beside_bool_still_compiles():
    # Booleans in a subtraction's neighbours are fine: only the subtraction itself is refused.
    s = _run(lambda x, m: (x - m.float()) * (x > 0) - 1, torch.randn(5), torch.tensor([True, False] * 2 + [True]))
    assert s.stats["fallback_graphs"] == 0 and not s.stats["fallback_ops"] and s.stats["kernel_count"] == 1


@pytest.mark.parametrize("fn", [lambda x: torch.sub(x, x * 2, alpha=True), lambda x: torch.add(x, x * 2, alpha=True)])
def test_bool_alpha_raises_like_eager(fn):
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="Boolean alpha") as eager:
        fn(x)
    with pytest.raises(RuntimeError) as ours:
        cc.compile(fn, backend="cpp")(x)
    assert str(eager.value) in str(ours.value)


# ---- devices: each kernel reads all its tensors through pointers of one device ----------------------------
def _fake_tensors(*specs):
    """FakeTensors (no memory, no GPU needed) for (device, shape) pairs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return [torch.empty(shape, device=device) for device, shape in specs]


@pytest.mark.parametrize("requested,specs,expected", [
    ("auto", [("cuda", (4,)), ("cuda", ())], "triton"),
    ("auto", [("cpu", (4,)), ("cpu", ())], "cpp"),
    ("triton", [("cpu", (4,))], "triton"),  # the Triton interpreter
    ("cpp", [("cpu", (4,))], "cpp"),
])
def test_backend_follows_the_inputs_device(requested, specs, expected):
    from compiler_core.api import _choose_backend

    assert _choose_backend(requested, _fake_tensors(*specs)) == expected


@pytest.mark.parametrize("requested", ["auto", "triton", "cpp"])
def test_mixed_device_graph_is_refused_with_a_clear_reason(requested):
    # A CPU 0-d tensor beside a CUDA tensor is legal in eager; C++ kernels on the CUDA pointer (what
    # "auto" chose) or Triton kernels on the CPU pointer would read the wrong memory.
    from compiler_core.api import _choose_backend

    with pytest.raises(cc.CompileError, match=r"more than one device \(cpu, cuda\).*Python number"):
        _choose_backend(requested, _fake_tensors(("cuda", (4,)), ("cpu", ())))


def test_cpp_backend_refuses_cuda_tensors_and_other_devices_are_refused():
    from compiler_core.api import _choose_backend

    with pytest.raises(cc.CompileError, match="backend='cpp' needs CPU tensors"):
        _choose_backend("cpp", _fake_tensors(("cuda", (4,))))
    with pytest.raises(cc.CompileError, match="'meta'"):
        _choose_backend("auto", _fake_tensors(("meta", (4,))))


def test_graph_without_inputs_takes_the_device_of_the_tensors_it_makes():
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler_core.api import _choose_backend

    gm = make_fx(lambda: torch.ones(3, device="cuda") * 2, tracing_mode="fake")()
    assert _choose_backend("auto", [], gm) == "triton"
    with pytest.raises(cc.CompileError, match="cpp"):
        _choose_backend("cpp", [], gm)


def test_mixed_device_graph_runs_in_eager_and_the_session_says_why():
    # The aten-graph stage of compile() on a traced graph with a CUDA tensor and a CPU 0-d tensor
    # (FakeTensors: no GPU needed): it must hand back eager PyTorch, with the reason as a message.
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler_core.session import CompileSession, GraphRecord

    def fn(x, scale):
        return (x * scale + 1,)

    x, scale = _fake_tensors(("cuda", (4,)), ("cpu", ()))
    gm = make_fx(fn, tracing_mode="fake")(x, scale)
    compiled = cc.compile(fn, backend="auto")
    record = GraphRecord(captured=cc.explain(fn, torch.randn(4), torch.tensor(2.0)).graphs[0].captured)
    session = CompileSession(backend="auto", mode="default")
    run = compiled._compile_aten(gm, [x, scale], record, session)
    assert record.fell_back and record.loops is None and not record.kernels  # refused before lowering
    assert session.messages == [
        "graph 0 runs in eager PyTorch: the graph's inputs are on more than one device (cpu, cuda) but each of "
        "our kernels runs on one. A 0-d CPU tensor beside CUDA tensors is legal in eager PyTorch; to compile "
        "this graph, pass a Python number instead or move the tensor to the GPU (.cuda())."]
    real = [torch.randn(4), torch.tensor(3.0)]  # eager runs the graph as traced (here on the CPU)
    torch.testing.assert_close(run(list(real)), list(fn(*real)))

"""Both backends match eager PyTorch on the program catalogue (tests/programs.py).

The C++ backend compiles for real; the Triton backend runs its generated kernels in the Triton
interpreter on the CPU.  A graph that silently fell back to eager would pass a numerics check, so
every test also asserts that our kernels ran.
"""

import pytest
import torch
from programs import PROGRAMS

import compiler_core as cc
from compiler_core.ir.values import Constant, Op


def _check(name, fn, make_inputs, backend):
    torch.manual_seed(0)
    args = make_inputs()
    expected = fn(*args)
    compiled = cc.compile(fn, backend=backend)
    actual = compiled(*args)
    torch.testing.assert_close(actual, expected, equal_nan=True)
    session = compiled.session
    fallbacks = [g.fallback_reason for g in session.all_records() if g.fell_back]
    assert not fallbacks, f"{name}: graph fell back to eager: {fallbacks}"
    assert session.stats["fallback_ops"] == [], session.stats
    assert session.stats["kernel_count"] >= 1
    return session


@pytest.mark.parametrize("name,fn,make_inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_cpp_matches_eager(name, fn, make_inputs):
    _check(name, fn, make_inputs, "cpp")


@pytest.mark.parametrize("name,fn,make_inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_triton_interpreter_matches_eager(name, fn, make_inputs):
    _check(name, fn, make_inputs, "triton")


def test_catalogue_is_large_enough():
    assert len(PROGRAMS) >= 30


# ---- lgamma and digamma (decomp/special.py): against eager at its special points and poles -----------
SPECIAL_POINTS = torch.cat([torch.linspace(-9.7, 9.7, 389), torch.tensor(
    [0.0, -0.0, -1.0, -2.0, -3.0, 1.0, 2.0, 0.5, 1e-30, -1e-30, 1e5, 3e37, float("inf"), float("-inf"),
     float("nan"), 1.4616321, -0.5, -2.5])])


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn", [torch.lgamma, torch.digamma, lambda x: torch.mvlgamma(x.abs() + 1.5, 3)],
                         ids=["lgamma", "digamma", "mvlgamma"])
def test_gamma_functions_are_our_kernels_and_match_eager(fn, backend):
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(SPECIAL_POINTS), fn(SPECIAL_POINTS), equal_nan=True)
    assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["kernel_count"] == 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_polygamma_is_ours_and_as_accurate_as_eager(n, backend):
    """polygamma(n, x): trigamma's series for n = 1, Hurwitz zeta with the cot reflection (in float64)
    for n = 2..4; at eager's special points (infinities of its sign at 0 and the negative integers, NaN
    at +inf) and, elsewhere, within float32's rounding of the float64 value."""
    fn = lambda x: torch.polygamma(n, x)  # noqa: E731
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(SPECIAL_POINTS), fn(SPECIAL_POINTS)
    assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["kernel_count"] == 1
    exact = torch.polygamma(n, SPECIAL_POINTS.double())
    finite = torch.isfinite(expected) & (expected.abs() < 1e30)
    torch.testing.assert_close(got[~finite], expected[~finite], equal_nan=True)  # NaN and infinities, signed
    measurable = finite & torch.isfinite(exact) & (exact != 0)
    ours = ((got.double() - exact).abs() / exact.abs())[measurable]
    eagers = ((expected.double() - exact).abs() / exact.abs())[measurable]
    assert ours.max() <= max(2 * eagers.max().item(), 2e-7), (ours.max(), eagers.max())


def test_polygamma_of_integers_and_high_orders():
    ints = torch.arange(-3, 6)
    compiled = cc.compile(lambda x: torch.polygamma(1, x) + torch.polygamma(3, x))
    torch.testing.assert_close(compiled(ints), torch.polygamma(1, ints) + torch.polygamma(3, ints), equal_nan=True)
    assert compiled.session.stats["fallback_ops"] == []
    high = cc.compile(lambda x: torch.polygamma(5, x))  # n above 4: PyTorch's call
    torch.testing.assert_close(high(SPECIAL_POINTS), torch.polygamma(5, SPECIAL_POINTS), equal_nan=True)
    assert high.session.stats["fallback_ops"] == ["aten.polygamma.default"]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_angle_of_real_numbers(backend):
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan"), float("-inf")])
    for value in (x, torch.tensor([-3, 0, 4])):  # an integer input gives float angles
        compiled = cc.compile(torch.angle, backend=backend)
        got, expected = compiled(value), torch.angle(value)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, equal_nan=True)
        assert compiled.session.stats["fallback_ops"] == []
        torch._dynamo.reset()


def test_addbmm_is_one_matmul_call_and_pointwise():
    g = torch.Generator().manual_seed(0)
    c, b1, b2 = torch.randn(5, 6, generator=g), torch.randn(4, 5, 3, generator=g), torch.randn(4, 3, 6, generator=g)
    fn = lambda c, b1, b2: torch.addbmm(c, b1, b2, beta=0.5, alpha=2)  # noqa: E731
    compiled = cc.compile(fn, backend="cpp")
    torch.testing.assert_close(compiled(c, b1, b2), fn(c, b1, b2))
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["extern_calls"] == 1, stats


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_frexp_is_exact(backend):
    """Mantissa and exponent bit for bit: powers of two, subnormals, the largest float, signed zeros,
    infinities, NaN, and a thousand numbers spread over float32's exponents."""
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1.0, 0.5, 0.75, -3.0, 8.0, 1e-45, 1.17e-38, 3.4e38, 2.0 ** -126, 2.0 ** 127,
                            -(2.0 ** -149), 0.9999999, float("inf"), float("-inf"), float("nan")])
    spread = torch.randn(1000, generator=g) * torch.exp2(torch.randint(-130, 128, (1000,), generator=g).float())
    x = torch.cat([special, spread])
    compiled = cc.compile(torch.frexp, backend=backend)
    (mantissa, exponent), (expected_m, expected_e) = compiled(x), torch.frexp(x)
    assert exponent.dtype == torch.int32 and torch.equal(exponent, expected_e)
    torch.testing.assert_close(mantissa, expected_m, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(mantissa), torch.signbit(expected_m))
    assert compiled.session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_spherical_bessel_j0_is_as_accurate_as_eager(backend):
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1e-3, 0.4999999, 0.5, 3.0, -7.0, 1e30, float("inf"), float("-inf"),
                            float("nan")])
    x = torch.cat([special, torch.randn(500, generator=g) * 20, torch.rand(500, generator=g) - 0.5])
    fn = torch.special.spherical_bessel_j0
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(x), fn(x)
    torch.testing.assert_close(got, expected, equal_nan=True)
    exact = fn(x.double())
    measurable = torch.isfinite(exact) & (exact != 0)
    ours = ((got.double() - exact).abs() / exact.abs())[measurable].max()
    eagers = ((expected.double() - exact).abs() / exact.abs())[measurable].max()
    assert ours <= max(2 * eagers, 2e-7), (ours, eagers)
    assert compiled.session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_sign_of_nan_and_signed_zero_is_eagers(backend):
    # ATen's sign is two comparisons: NaN gives 0 (found by the OpInfo sweep's --reference-inputs;
    # ours had kept NaN). Also through sgn and in a fused expression.
    x = torch.tensor([1.5, -2.0, 0.0, -0.0, float("nan"), float("inf"), float("-inf"), -float("nan"), 3e-39])

    def fn(x):
        return torch.sign(x), torch.sgn(x) * 2 + 1

    compiled = cc.compile(fn, backend=backend)
    for got, expected in zip(compiled(x), fn(x)):
        torch.testing.assert_close(got, expected, equal_nan=True)
        assert torch.equal(torch.signbit(got), torch.signbit(expected))


# Eager's clamps by a number keep x unless it lies beyond the bound (std::max(x, lo), vmaxps(lo, x)):
# relu(-0.0), clamp(-0.0, min=0.0) and relu6(-0.0) are -0.0, NaN stays NaN; a NaN bound gives NaN
# everywhere and a lower bound above the upper gives the upper. Written as maximum/minimum with the
# bound they gave +0.0 (of equal values maximum returns the second). cummax/cummin take the later of
# two equal values (-0.0 then 0.0 gives 0.0), as they take its index.
ZERO_SIGN_FUNCTIONS = {
    "relu": torch.relu,
    "clamp_min": lambda x: x.clamp(min=0.0),
    "clamp_max": lambda x: x.clamp(max=0.0),
    "clamp_both_zero": lambda x: x.clamp(-0.0, 0.0),
    "clamp_min_above_max": lambda x: x.clamp(1.0, -1.0),
    "clamp_nan_bound": lambda x: x.clamp(min=float("nan")),
    "relu6": torch.nn.functional.relu6,
    "hardtanh_zero": lambda x: torch.nn.functional.hardtanh(x, -0.0, 0.0),
    "cummax": lambda x: torch.cummax(x, 0),
    "cummin": lambda x: torch.cummin(x.flip(0), 0),
}
# Tensor bounds and maximum/minimum, on the GPU only: eager's CPU maximum(-0.0, 0.0) depends on where the
# element lies (0.0 from the vector body's vmaxps, -0.0 from the scalar tail's std::max), no rule to match.
ZERO_SIGN_FUNCTIONS_CUDA = {
    **ZERO_SIGN_FUNCTIONS,
    "maximum_with_zero": lambda x: torch.maximum(x, torch.zeros_like(x)),
    "minimum_with_negative_zero": lambda x: torch.minimum(x, torch.full_like(x, -0.0)),
    "clamp_tensor_zero_bounds": lambda x: x.clamp(torch.full_like(x, -0.0), torch.zeros_like(x)),
    "clamp_tensor_bounds_flipped": lambda x: x.clamp(torch.zeros_like(x), torch.full_like(x, -0.0)),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", list(ZERO_SIGN_FUNCTIONS))
def test_clamps_keep_the_sign_of_zero_and_nan_as_eager_does(backend, dtype, name):
    fn = ZERO_SIGN_FUNCTIONS[name]
    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), float("inf"), 0.0, -0.0, 7.0] * 3,
                     dtype=dtype)
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(x), fn(x)
    for g, e in zip(*((got, expected) if isinstance(got, tuple) else ((got,), (expected,)))):
        if g.is_floating_point():  # the values; cummax's indices are compared below
            assert torch.equal(g.isnan(), e.isnan()), (g, e)
            assert torch.equal(g.nan_to_num().signbit(), e.nan_to_num().signbit()), (g, e)
        torch.testing.assert_close(g, e, equal_nan=True, rtol=0, atol=0)
    assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages


def test_constants_are_equal_only_when_their_bits_are():
    f32 = torch.float32
    assert Constant(-0.0, f32) != Constant(0.0, f32)
    assert len({Constant(-0.0, f32), Constant(0.0, f32)}) == 2
    assert Constant(float("nan"), f32) == Constant(float("nan"), f32)
    assert Constant(1.5, f32) == Constant(1.5, f32) and Constant(1.5, f32) != Constant(1.5, torch.float64)
    assert Op("maximum", (Constant(-0.0, f32), Constant(1.0, f32)), f32) != \
        Op("maximum", (Constant(0.0, f32), Constant(1.0, f32)), f32)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_literals_that_differ_in_a_zeros_sign_stay_apart(backend, dtype):
    """-0.0 == 0.0 as numbers, so the tables of values (common subexpressions, inlining) took
    clamp(x, -0.0, 0.0)'s upper bound for the -0.0 beside it: clamp(2.5, -0.0, 0.0) gave -0.0, both backends."""
    def fn(x):
        return x.clamp(-0.0, 0.0), torch.where(x > 0, -0.0, 1.0), x.clamp(min=0.0) + x.clamp(max=-0.0)

    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), 3.0], dtype=dtype)
    compiled = cc.compile(fn, backend=backend)
    for got, expected in zip(compiled(x), fn(x)):
        assert torch.equal(got.nan_to_num().signbit(), expected.nan_to_num().signbit()), (got, expected)
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_negative_zero_literal_reaches_triton_as_its_bits(dtype):
    """Triton 3.6's compiler makes every -0.0 literal +0.0 (seen on an H100: clamp(-1.5, -0.0, 0.0) gave
    +0.0, minimum(x, -0.0) took +0.0; the interpreter keeps the sign, so only the source can show it
    here): -0.0 is printed as its bits, also where a literal becomes a block (libdevice, pow, where).
    Our pow took an infinite exponent for an odd integer: pow(-0.0, -inf) was -inf, pow(-1.5, inf) -inf."""
    def fn(x):
        return (x.clamp(-0.0, 0.0), torch.where(x > 0, -0.0, 1.0), torch.atan2(torch.full_like(x, -0.0), x),
                torch.pow(torch.full_like(x, -0.0), x), torch.pow(x, float("inf")), torch.pow(x, float("-inf")))

    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), 3.0], dtype=dtype)
    compiled = cc.compile(fn, backend="triton")
    for got, expected in zip(compiled(x), fn(x)):
        assert torch.equal(got.nan_to_num().signbit(), expected.nan_to_num().signbit()), (got, expected)
        torch.testing.assert_close(got, expected, equal_nan=True)
    code = "\n".join(line.split("#")[0] for k in compiled.session.kernels for line in k.source.splitlines())
    assert "-0.0" not in code, code
    assert "bitcast=True" in code, code


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_negative_zero_literals_keep_their_sign_on_the_gpu(dtype):
    def fn(x):
        return (x.clamp(-0.0, 0.0), torch.where(x > 0, -0.0, 1.0), torch.atan2(torch.full_like(x, -0.0), x),
                torch.pow(torch.full_like(x, -0.0), x), torch.pow(x, float("inf")), torch.pow(x, float("-inf")),
                torch.minimum(x, torch.full_like(x, -0.0)), x * -0.0, torch.where(x > 0, 1.0, -0.0),
                torch.where(x > 0, -0.0, 2.5), torch.where(x > 0, -0.0, 0.0))

    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), 3.0], dtype=dtype, device="cuda")
    compiled = cc.compile(fn)
    for i, (got, expected) in enumerate(zip(compiled(x), fn(x))):
        assert torch.equal(got.nan_to_num().signbit(), expected.nan_to_num().signbit()), (i, got, expected)
        torch.testing.assert_close(got, expected, equal_nan=True)


def test_a_select_between_negative_zero_and_a_literal_holds_the_zero_in_a_register_on_the_gpu():
    """ptxas compiled where(c, -0.0, 1.0), a select between two immediates, as if the -0.0 were +0.0
    (H100, Triton 3.6). The GPU source makes that -0.0 with one PTX move (opaque to LLVM and to the
    select's immediates); it compiles for sm_90 here, and the interpreter's source keeps its bitcast."""
    from compiler_core.codegen.triton.ahead import compile_for_gpu, nvidia_target_available
    from compiler_core.codegen.triton.kernel import generate_triton_kernel

    def fn(x):
        return torch.where(x > 0, -0.0, 1.0), torch.where(x > 0, 1.0, -0.0), torch.where(x > 0, 2.0, 3.0)

    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), 3.0])
    session = cc.explain(fn, x, backend="triton")
    compiled = cc.compile(fn, backend="triton")
    for got, expected in zip(compiled(x), fn(x)):  # the interpreter's source
        assert torch.equal(got.signbit(), expected.signbit()), (got, expected)
    plans = [k.plan for k in session.kernels]
    gpu_source = "".join(generate_triton_kernel(plan, interpret=False).source for plan in plans)
    assert gpu_source.count('mov.b32 $0, 0x80000000;') == 2, gpu_source
    assert "inline_asm" not in "".join(generate_triton_kernel(plan, interpret=True).source for plan in plans)
    if not nvidia_target_available():
        pytest.skip("this Triton has no NVIDIA backend to compile the GPU source with")
    assert compile_for_gpu(plans) == [None] * len(plans)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(ZERO_SIGN_FUNCTIONS_CUDA))
def test_clamps_keep_the_sign_of_zero_and_nan_as_eager_does_on_the_gpu(dtype, name):
    """The same family against eager CUDA, whose clamps by a number are fmaxf/fminf of the bound: a NaN
    bound is ignored and -0.0 is below 0.0, so relu(-0.0) is 0.0 there (-0.0 on the CPU)."""
    fn = ZERO_SIGN_FUNCTIONS_CUDA[name]
    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), float("inf"), 0.0, -0.0, 7.0] * 3,
                     dtype=dtype, device="cuda")
    compiled = cc.compile(fn)
    got, expected = compiled(x), fn(x)
    for g, e in zip(*((got, expected) if isinstance(got, tuple) else ((got,), (expected,)))):
        if g.is_floating_point():
            assert torch.equal(g.isnan(), e.isnan()), (g, e)
            assert torch.equal(g.nan_to_num().signbit(), e.nan_to_num().signbit()), (g, e)
        torch.testing.assert_close(g, e, equal_nan=True, rtol=0, atol=0)

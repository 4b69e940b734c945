"""Complex tensors (compiler_core/decomp/complex_pairs.py): a graph holding one used to run wholly in
eager PyTorch ("dtype complex64, which the code generators do not support"). It is now rewritten into
real ops; the caller still passes and gets complex tensors. Checked on both backends: values (and
gradients) as eager's, nothing left to PyTorch, what the rewrite recorded, and that an op with no rule
still falls back with that op named."""

import pytest
import torch

import compiler_core as cc
from tests.models.meta_llama import rotate, rotation_table

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _all_ours(session, externs: int = 0) -> None:
    stats = session.stats
    assert stats["fallback_graphs"] == 0, session.messages
    assert stats["fallback_ops"] == [], stats["fallback_ops"]
    assert stats["extern_calls"] == externs, stats
    assert all(g.complex_pairs is not None for g in session.all_records()), "no graph was rewritten"


def _c_reference(fn, *args):
    """Eager's answer computed on the CPU (glibc's complex functions and ATen's CPU kernels, the values
    the rewrite follows), moved to the inputs' device: on CUDA, eager's own complex functions
    (libcu++'s) differ from C at some edges, and these tests pin our kernels to C's answers there."""
    want = fn(*(a.cpu() for a in args))
    return [w.to(args[0].device) for w in want]


@pytest.mark.parametrize("backend", BACKENDS)
def test_meta_rotary_embedding_is_one_kernel_and_trains(backend):
    table = rotation_table(16, 8)
    q = torch.randn(2, 8, 4, 16, requires_grad=True)
    k = torch.randn(2, 8, 2, 16, requires_grad=True)
    compiled = cc.compile(rotate, backend=backend)
    got = compiled(q, k, table)
    expected = rotate(q, k, table)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same four products and two sums as eager
    probe_q, probe_k = torch.randn_like(q), torch.randn_like(k)
    grads = torch.autograd.grad((got[0] * probe_q).sum() + (got[1] * probe_k).sum(), (q, k))
    expected_grads = torch.autograd.grad((expected[0] * probe_q).sum() + (expected[1] * probe_k).sum(), (q, k))
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b)
    session = compiled.session
    _all_ours(session)
    forward, backward = session.graphs[0], session.graphs[0].backward
    assert len(forward.kernels) <= 2 and len(backward.kernels) == 1, [k.name for k in session.kernels]
    assert forward.complex_pairs.complex_inputs == (2,)  # the table, viewed as real pairs by the host
    assert "mul: aten.mul.Tensor" in forward.complex_pairs.pretty()
    assert "complex values as real pairs" in forward.pretty()


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_arithmetic_matches_eager(backend):
    def fn(re, im, w):
        z = torch.complex(re, im)
        rotated = torch.polar(z.abs(), z.angle() + 0.25) * (1 - 2j) + w.conj()
        quotient = rotated / (w + 0.5)  # Smith's division, both branches (|re| >= |im| and not)
        grown = torch.exp(quotient * 0.1) - z / 3 + 2.0
        picked = torch.where(re > 0, grown, z)
        both = torch.cat([picked, z.real.to(torch.complex64)], dim=1)
        return both.sum(0), torch.view_as_real(both).mean(), both.imag * 2, (both * both.conj()).real

    re, im = torch.randn(5, 6), torch.randn(5, 6)
    w = torch.complex(torch.randn(5, 6) * torch.tensor([1e3, 1e-3]).repeat(3), torch.randn(5, 6))
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(re, im, w), fn(re, im, w)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5)
    _all_ours(compiled.session)
    assert compiled.session.graphs[0].complex_pairs.complex_inputs == (2,)
    assert compiled.session.graphs[0].complex_pairs.complex_outputs == (0,)  # both.sum(0) is complex


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_matmul_is_four_real_products(backend):
    def fn(a, b, c):
        return a @ b, torch.bmm(c, c.transpose(1, 2).conj())

    a = torch.randn(4, 6, dtype=torch.complex64)
    b = torch.randn(6, 3, dtype=torch.complex64)
    c = torch.randn(2, 3, 5, dtype=torch.complex64)
    compiled = cc.compile(fn, backend=backend)
    for got, expected in zip(compiled(a, b, c), fn(a, b, c)):
        torch.testing.assert_close(got, expected)
    _all_ours(compiled.session, externs=8)  # real mm / bmm calls: ac, bd, ad, bc for each product


def test_complex128_and_a_lazily_conjugated_input():
    def fn(z, scale):
        return (z * scale).exp(), z.abs()

    z = torch.randn(3, 4, dtype=torch.complex128)
    scale = torch.randn(4, dtype=torch.complex128).conj()  # conj bit set: the host resolves it
    assert scale.is_conj()
    compiled = cc.compile(fn)
    for got, expected in zip(compiled(z, scale), fn(z, scale)):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected)
    _all_ours(compiled.session)


def test_views_of_a_complex_input_stay_views():
    """A complex output that is a view of an input: the caller gets a view of the same storage."""

    def fn(z):
        return z.t()[1:], z.abs().sum()

    z = torch.randn(3, 4, dtype=torch.complex64)
    compiled = cc.compile(fn)
    got, expected = compiled(z), fn(z)
    torch.testing.assert_close(got, expected)
    assert got[0].untyped_storage().data_ptr() == z.untyped_storage().data_ptr()
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_complex_op_without_a_rule_is_pytorchs_call_on_pairs_and_counted(backend):
    def fn(z):
        return z.asin() * 2 + 1

    z = torch.randn(3, 4, dtype=torch.complex64)
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(z), fn(z))
    stats = compiled.session.stats
    assert stats["fallback_graphs"] == 0 and stats["kernel_count"] == 1, stats  # * 2 + 1 on both parts
    assert stats["fallback_ops"] == ["fcompile.complex_asin_default.default"], stats  # asin ran in PyTorch
    assert "no lowering for aten.asin.default on complex values" in compiled.session.graphs[0].prims.pretty()


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_roots_and_logarithms_match_c_at_their_edges(backend):
    """sqrt, rsqrt, log, log2 and log10 of complex values as C's csqrt and clog give them: the branch cut
    along the negative real axis (the sign of a zero imaginary part), zeros, infinities, NaN, denormals
    and parts whose |z| overflows float32 (or float64)."""
    edges = [0.0, -0.0, 1.0, -4.0, 0.5, 3e38, -3e38, 1e-40, float("inf"), float("-inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a in edges for b in edges], dtype=torch.complex64)
    big = torch.tensor([1.7e308 + 1.7e308j, -1e308 + 2j, 1e-310 - 0.0j], dtype=torch.complex128)

    def fn(z, big):
        return torch.sqrt(z), torch.rsqrt(z), torch.log(z), torch.log2(z), torch.log10(z), torch.log(big)

    compiled = cc.compile(fn, backend=backend)
    # Part by part: a complex difference of two infinite real parts is NaN, which hid that only the
    # imaginary part differed by an ulp (log10 of i inf on CUDA). Four subnormal steps of room: the
    # imaginary parts of sqrt and rsqrt of 0.5 + 1e-40i are subnormal, ours rounded once from float64,
    # eager's through float32 steps (3 steps apart on the CPU, 1 on CUDA).
    for got, want in zip(compiled(z, big), _c_reference(fn, z, big)):
        torch.testing.assert_close(torch.view_as_real(got), torch.view_as_real(want), rtol=2e-6, atol=6e-45,
                                   equal_nan=True)
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_atanh_and_atan_match_c_at_their_edges(backend):
    """atanh as glibc's catanh (the C++ backend's complex128 equals eager's bit for bit) and atan as
    -i atanh(iz), which ran in PyTorch before: C's Annex G values where a part is infinite or NaN (signs
    of zero and of pi/2 included: atan(inf + nan i)'s +0 needed a negation that flips a NaN's sign bit
    in Triton's kernels), |x| = 1 with a tiny y, parts past 16 / epsilon, and the unit circle, where
    1 - x^2 - y^2 cancels."""
    edges = [0.0, -0.0, 1e-300, 1e-170, 1e-20, 0.3, 0.5, 0.75, 0.9, 1.0, -1.0, 1.0 + 2 ** -52, 1 - 2 ** -53, 2.0,
             1e10, 1e17, 1e300, float("inf"), float("-inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a in edges for b in edges], dtype=torch.complex128)
    narrow = [0.0, -0.0, 1e-40, 1e-20, 0.3, 0.75, 1.0, -1.0, 1.0000001, 0.99999994, 2.0, 1e10, 3e38,
              float("inf"), float("nan")]
    w = torch.tensor([complex(a, b) for a in narrow for b in narrow], dtype=torch.complex64)
    generator = torch.Generator(torch.get_default_device()).manual_seed(0)  # cuda in test_complex_gpu.py
    w = torch.cat([w, torch.randn(300, dtype=torch.complex64, generator=generator) * 3])

    def fn(z, w):
        return torch.atanh(z), torch.atan(z), torch.atanh(w), torch.atan(w)

    compiled = cc.compile(fn, backend=backend)
    got, want = compiled(z, w), _c_reference(fn, z, w)
    if backend == "cpp":  # bit for bit
        torch.testing.assert_close(torch.view_as_real(got[0]), torch.view_as_real(want[0]), rtol=0, atol=0,
                                   equal_nan=True)
    for g, e in zip(got, want):
        # float32's own steps in eager's catanhf and the Triton interpreter's atan2 (about 1e-7): float32's
        # tolerance there; one subnormal step of room for results near 1e-40
        single = e.dtype == torch.complex64 or backend == "triton"
        g, e = torch.view_as_real(g), torch.view_as_real(e)
        torch.testing.assert_close(g, e, rtol=2e-6 if single else 1e-14, atol=6e-45 if single else 0, equal_nan=True)
        special = (e == 0) | e.isinf() | (e.abs() == torch.pi / 2)
        assert torch.equal(g.signbit()[special], e.signbit()[special])
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_log1p_and_expm1_match_eager_near_zero_and_at_their_edges(backend):
    """log1p and expm1 of complex values as ATen's CPU kernels take them (c10's formulas: log u * z /
    (u - 1) with u = 1 + z, and expm1(x) cos y - 2 sin(y/2)^2 + i e^x sin y), which ran in PyTorch before:
    small parts (where 1 + z rounds z away), |1 + z| near 1 (where log|u| needs glibc's care:
    complex128 log1p of 1.4e-6 + 0.007i was 4e-13 off, relative, with log(hypot)), zeros, infinities,
    NaN. Triton's interpreter composes atan2 to about 1e-7, so its complex128 tolerance is float32's."""
    edges = [0.0, -0.0, 1e-30, -1.0, -1.0 + 1e-7, 0.4, -0.5, 2.0, 1e30, 100.0, -100.0, float("inf"),
             float("-inf"), float("nan")]
    grid = [complex(a, b) for a in edges for b in edges]
    generator = torch.Generator(torch.get_default_device()).manual_seed(0)
    scales = torch.logspace(-8, 3, 600, dtype=torch.float64)
    near_zero = torch.complex(torch.randn(600, dtype=torch.float64, generator=generator) * scales,
                              torch.randn(600, dtype=torch.float64, generator=generator) * scales.flip(0))
    z = torch.cat([torch.tensor(grid, dtype=torch.complex128), near_zero])

    def fn(z, w):
        return torch.log1p(z), torch.expm1(z), torch.log1p(w), torch.expm1(w)

    w = z.to(torch.complex64)
    compiled = cc.compile(fn, backend=backend)
    edge = slice(0, len(grid))
    for got, want in zip(compiled(z, w), _c_reference(fn, z, w)):
        got, want = torch.view_as_real(got), torch.view_as_real(want)
        single = want.dtype == torch.float32 or backend == "triton"
        rtol = 2e-6 if single else 1e-13
        torch.testing.assert_close(got[edge], want[edge], rtol=rtol, atol=0, equal_nan=True)
        # Near zero, float32's own cancellation in expm1's real part (e^x - 1 against 2 sin(y/2)^2, each
        # rounded) leaves an ulp of the terms, not of the result: an allowance at the terms' scale.
        torch.testing.assert_close(got[len(grid):], want[len(grid):], rtol=rtol, atol=1e-10 if single else 0)
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_exponential_trigonometric_and_hyperbolic_functions_match_c_at_their_edges(backend):
    """exp, sin, cos, tan, sinh, cosh and tanh of complex values as glibc's cexp ... ctanh give them
    (exp(100 + 0j) in complex64 once gave (inf, NaN), not (inf, 0)): zero
    parts kept, infinities and NaN as C's Annex G says (and glibc's choice where it leaves a sign
    open), cosh(x) * cos(y) finite where cosh(x) alone overflows (x = 710 in float64), and tanh's
    tiny imaginary part 4 sin y cos y e^(-2|x|) for large x."""
    edges = [0.0, -0.0, 1.0, -4.0, 0.5, 2.0, 30.0, -46.0, -95.0, 100.0, 3e38, -3e38, 1e-40, float("inf"),
             float("-inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a in edges for b in edges], dtype=torch.complex64)
    big = torch.tensor([complex(a, b) for a in [709.5, 710.3, -710.3, 1e300, 0.0, 2.0, 360.0, float("inf"), -800.0]
                        for b in [0.3, 1e-300, 0.0, 3.0, float("nan"), float("inf")]], dtype=torch.complex128)

    def fn(z, big):
        return [f(t) for t in (z, big)
                for f in (torch.exp, torch.sin, torch.cos, torch.sinh, torch.cosh, torch.tanh, torch.tan)]

    compiled = cc.compile(fn, backend=backend)
    # part by part: inf - inf is NaN in a complex difference
    for got, want in zip(compiled(z, big), _c_reference(fn, z, big)):
        torch.testing.assert_close(torch.view_as_real(got), torch.view_as_real(want), rtol=2e-6, atol=0, equal_nan=True)
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_exp2_is_atens_exp_of_the_scaled_parts(backend):
    """2 ** z as ATen's CPU kernel computes it: exp(z) of the parts times log 2, with exp's edges
    (infinite, NaN and zero parts; complex64 computed in float64 where exp(x) alone overflows). One
    difference from eager is allowed by one subnormal step: 2 ** (-4 + 1e-40j), whose imaginary part
    eager's float32 product rounds once more than ours in float64."""
    edges = [0.0, -0.0, 1.0, -4.0, 0.5, 2.0, 30.0, -46.0, -95.0, 100.0, 130.0, 3e38, 1e-40, float("inf"),
             float("-inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a in edges for b in edges], dtype=torch.complex64)
    fn = lambda z, w: (torch.exp2(z), torch.exp2(w))  # noqa: E731
    w = torch.randn(333, dtype=torch.complex128) * 20
    compiled = cc.compile(fn, backend=backend)
    for got, want in zip(compiled(z, w), _c_reference(fn, z, w)):
        torch.testing.assert_close(torch.view_as_real(got), torch.view_as_real(want), rtol=2e-6, atol=1.5e-45,
                                   equal_nan=True)
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_sigmoid_and_reciprocal_keep_eagers_zeros_and_edges(backend):
    """sigmoid(z) = 1 / (1 + exp(-z)) as ATen computes it, and the reciprocal (c10's division of 1 by
    z) with eager's signs of zero (1 / (2 + 0i) is 0.5 + 0i: the real dividend promoted to 1 + 0i;
    ours gave -0i before). Near sigmoid's poles (z = i pi) eager's float32 value is less accurate than
    ours (exp in float64 first), so random complex64 values are judged against complex128: ours within
    assert_close's tolerance of it, or no further off than eager's (seed 0 holds w = -0.02 - 3.16i, where
    eager's float32 value is 9.9e-5 off and ours 4.2e-5; unseeded, one run in ~40 failed here)."""
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 40.0, -40.0, 100.0, -100.0, 800.0, float("inf"), -float("inf"),
             float("nan")]
    z = torch.tensor([complex(a, b) for a in edges for b in edges], dtype=torch.complex128)
    w = torch.randn(257, dtype=torch.complex64, generator=torch.Generator().manual_seed(0)) * 2

    def fn(z, w):
        return torch.sigmoid(z), torch.reciprocal(z), torch.sigmoid(w)

    compiled = cc.compile(fn, backend=backend)
    got, want = compiled(z, w), _c_reference(fn, z, w)
    for g, e in zip(got[:2], want[:2]):
        g, e = torch.view_as_real(g), torch.view_as_real(e)
        torch.testing.assert_close(g, e, rtol=1e-12, atol=0, equal_nan=True)
        assert torch.equal(g.signbit() | g.isnan(), e.signbit() | e.isnan())
    exact = torch.sigmoid(w.to(torch.complex128))
    ours_off = (got[2].cpu().to(torch.complex128) - exact).abs()
    eager_off = (want[2].cpu().to(torch.complex128) - exact).abs()
    assert bool((ours_off <= torch.maximum(1e-5 + 1.3e-6 * exact.abs(), eager_off)).all())
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_powers_match_eager_with_atens_shortcuts_and_cs_products(backend):
    """z ** w as eager gives it: ATen's shortcuts for scalar exponents (0, 1, 2, 3, -1, -2, 0.5, -0.5,
    also written as complex numbers), else glibc's cpow, exp(w log z) with w * log z multiplied as C
    does (the infinity recovered where both parts of the plain product are NaN): zeros, infinities
    and NaN in the base included; a tensor exponent, a real tensor exponent, a number base."""
    values = [0.0, -0.0, 1.0, -2.0, 0.5, 3.0, float("inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a in values for b in values], dtype=torch.complex64)
    w = torch.tensor([1.5 + 0.5j, 2 + 0j, -2 + 1j, 0j] * (len(z) // 4), dtype=torch.complex64)

    def fn(z, w):
        scalars = [z ** e for e in (0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.5, -1.5, 1j, 2 + 0j, 0.5 + 0j)]
        return [*scalars, z ** w, z ** w.real, (2 + 1j) ** w]

    compiled = cc.compile(fn, backend=backend)
    for got, want in zip(compiled(z, w), _c_reference(fn, z, w)):
        torch.testing.assert_close(torch.view_as_real(got), torch.view_as_real(want), rtol=2e-5, atol=1e-6,
                                   equal_nan=True)
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fourier_transforms_are_library_calls_between_our_kernels(backend):
    """FNet's token mixing, a spectral filter, a round trip: FFTs run in PyTorch (PocketFFT here, cuFFT
    on the GPU) on real pairs; the products, real parts and magnitudes around them are our kernels."""

    def fn(x, weights):
        mixed = torch.fft.fftn(x.to(torch.complex64), dim=(-2, -1)).real
        filtered = torch.fft.irfft(torch.fft.rfft(x, dim=-1) * weights, n=x.shape[-1], dim=-1)
        return mixed, filtered, torch.fft.fft(x).abs().sum(-1)

    x = torch.randn(2, 6, 8, requires_grad=True)
    weights = torch.randn(5, dtype=torch.complex64)
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(x, weights), fn(x, weights)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    probes = [torch.randn_like(e) for e in expected]
    grad = torch.autograd.grad(sum((g * p).sum() for g, p in zip(got, probes)), x)[0]
    expected_grad = torch.autograd.grad(sum((e * p).sum() for e, p in zip(expected, probes)), x)[0]
    torch.testing.assert_close(grad, expected_grad)
    stats = compiled.session.stats
    assert stats["fallback_graphs"] == 0 and stats["fallback_ops"] == [], stats
    reasons = [n.extern.reason for g in compiled.session.all_records() for n in g.loops.nodes if n.kind == "extern"]
    assert reasons and all("FFT on complex values" in r for r in reasons), reasons
    # The host program calls the FFT's Python function itself, not the custom op through the dispatcher.
    source = compiled.session.graphs[0].wrapper.source
    assert "host_fcompile_complex__fft_" in source and "torch.ops.fcompile.complex" not in source, source


def test_rotary_embedding_with_dynamic_sequence_length():
    """Compiled once with symbolic sizes: the rewrite computes its new nodes' values in the graph's
    fake mode, sizes as symbols."""
    table = rotation_table(16, 32)
    compiled = cc.compile(lambda q, k, n: rotate(q, k, table[:n]), dynamic=True)
    for seq in (5, 9, 17):
        q, k = torch.randn(2, seq, 4, 16), torch.randn(2, seq, 4, 16)
        for a, b in zip(compiled(q, k, seq), rotate(q, k, table[:seq])):
            torch.testing.assert_close(a, b)
    (graph,) = compiled.session.graphs
    assert graph.symbolic and graph.complex_pairs is not None and not graph.fell_back, compiled.session.messages


def test_composite_ops_on_complex_values_are_right_on_the_first_call(monkeypatch):
    """AOTAutograd runs a compiled program's first call inside a dispatch mode that checks custom ops
    for aliasing; inside its handler the Conjugate and Negative keys are excluded, so linalg.pinv (a
    composite op taking a conjugate transpose) gives a wrong answer on that call (max error 1.13 here;
    torch.compile's aot_eager and Inductor backends give it too). Ours are right: PyTorch's calls on
    pairs re-enable the keys, and a graph that falls back runs outside that check."""
    from compiler_core import api
    from compiler_core.decomp.complex_pairs import NotRealPairs

    a = torch.randn(3, 5, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    compiled = cc.compile(torch.linalg.pinv)
    torch.testing.assert_close(compiled(a), torch.linalg.pinv(a))
    assert compiled.session.stats["fallback_graphs"] == 0

    def refuse(gm):
        raise NotRealPairs("refused for this test")

    monkeypatch.setattr(api, "as_real_pairs", refuse)
    torch._dynamo.reset()
    compiled = cc.compile(torch.linalg.pinv)
    torch.testing.assert_close(compiled(a), torch.linalg.pinv(a))
    assert compiled.session.stats["fallback_graphs"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_keep_their_traced_strides_so_a_backward_reads_its_saved_tensors_right(backend):
    """Autoformer's auto-correlation, irfft(rfft(q) * conj(rfft(k))), along dim 1: the forward saves
    complex tensors laid out as the FFT lays them out (not row-major). The rewritten forward returned
    them as concatenations of parts (row-major), and the backward, compiled for the traced strides,
    read other elements: the query and key gradients were off by 3.7x their size while the loss
    matched. Every output of a rewritten graph now has its traced strides."""

    def correlation(q, k):
        q_spectrum, k_spectrum = torch.fft.rfft(q, dim=1), torch.fft.rfft(k, dim=1)
        return torch.fft.irfft(q_spectrum * torch.conj(k_spectrum), n=q.shape[1], dim=1)

    q = torch.randn(2, 16, 4, requires_grad=True)
    k = torch.randn(2, 16, 4, requires_grad=True)
    probe = torch.randn(2, 16, 4)
    compiled = cc.compile(correlation, backend=backend)
    got = compiled(q, k)
    expected = correlation(q, k)
    torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad((got * probe).sum(), (q, k))
    expected_grads = torch.autograd.grad((expected * probe).sum(), (q, k))
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b)
    assert compiled.session.stats["fallback_graphs"] == 0

    def spectrum(x):
        return torch.fft.rfft(x * 2, dim=1) * 1j  # an output computed from parts, traced not row-major

    x = torch.randn(2, 16, 4)
    compiled = cc.compile(spectrum, backend=backend)
    got, expected = compiled(x), spectrum(x)
    assert got.stride() == expected.stride(), (got.stride(), expected.stride())
    torch.testing.assert_close(got, expected)

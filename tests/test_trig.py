"""The C++ backend's float sine and cosine (codegen/cpp/prelude.py): a float reduction up to
fc::SMALL_TRIG_ARGUMENT and a double one with a table beyond, picked per lane. Where the argument's
magnitude is proven small (ir/value_range.magnitude_range) the kernel calls the float path alone. The
two must give the same bits there: one kernel may prove what another, reading the same value from a
buffer, cannot, and a value computed twice must not differ (a recomputed max's position, test_fuzz.py)."""

import pytest
import torch

import compiler_core as cc
from compiler_core.codegen.cpp.kernel import SMALL_TRIG_ARGUMENT


def _sources(fn) -> str:
    return "\n".join(k.source for g in fn.session.graphs for k in g.kernels)


def _worst_ulps(got: torch.Tensor, x: torch.Tensor, reference) -> float:
    exact = reference(x.double())
    ulp = (torch.nextafter(exact.float().abs(), torch.tensor(float("inf"))) - exact.float().abs()).double()
    return ((got.double() - exact).abs() / ulp).max().item()


@pytest.mark.parametrize("scale", [1.0, 3e4, 0.99 * SMALL_TRIG_ARGUMENT])
def test_a_proven_small_argument_takes_the_float_path_with_the_same_bits_as_the_general_one(scale):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(100_000, generator=g) * 3, torch.linspace(-8, 8, 50_001)])
    proven = cc.compile(lambda t: ((t.tanh() * scale).sin(), (t.tanh() * scale).cos()), backend="cpp")
    scaled = cc.compile(lambda t: t.tanh() * scale, backend="cpp")
    general = cc.compile(lambda y: (y.sin(), y.cos()), backend="cpp")  # y read from memory: anything
    sin_small, cos_small = proven(x)
    y = scaled(x)
    sin_any, cos_any = general(y)
    assert "fc::sin_f32_small(" in _sources(proven) and "fc::cos_f32_small(" in _sources(proven)
    assert "fc::sin_f32(" in _sources(general) and "_small(" not in _sources(general)
    assert torch.equal(sin_small, sin_any) and torch.equal(cos_small, cos_any)
    assert _worst_ulps(sin_small, y, torch.sin) <= 0.65 and _worst_ulps(cos_small, y, torch.cos) <= 0.65
    torch.testing.assert_close(sin_small, y.sin())  # eager on the same arguments
    torch.testing.assert_close(cos_small, y.cos())


def test_an_argument_that_may_pass_the_bound_takes_the_general_path():
    x = torch.linspace(-1, 1, 4097)
    big = cc.compile(lambda t: (t.tanh() * (2 * SMALL_TRIG_ARGUMENT)).sin(), backend="cpp")
    got = big(x)
    assert "_small(" not in _sources(big) and "fc::sin_f32(" in _sources(big)
    y = cc.compile(lambda t: t.tanh() * (2 * SMALL_TRIG_ARGUMENT), backend="cpp")(x)
    assert _worst_ulps(got, y, torch.sin) <= 0.65


def test_nan_and_signed_zero_through_the_float_path():
    x = torch.tensor([float("nan"), -0.0, 0.0, 1.0, -1.0, float("inf"), -float("inf")])
    fn = cc.compile(lambda t: ((t.sin() * 2).sin(), (t.sin() * 2).cos()), backend="cpp")
    s, c = fn(x)
    assert "fc::sin_f32_small(" in _sources(fn)
    expect_s, expect_c = (x.sin() * 2).sin(), (x.sin() * 2).cos()
    assert torch.equal(s.isnan(), expect_s.isnan()) and torch.equal(c.isnan(), expect_c.isnan())
    assert s.isnan().sum() == 3  # NaN, inf and -inf: sin of them is NaN, and so is all that follows
    assert torch.equal(s[1:3].signbit(), torch.tensor([True, False]))  # sin(2 sin(-0)) = -0
    torch.testing.assert_close(s, expect_s, equal_nan=True)
    torch.testing.assert_close(c, expect_c, equal_nan=True)


def test_a_small_kernel_of_many_sines_is_split_between_threads_and_matches_eager():
    """20 sines of 1,024 floats (the bench's tiny_chain) are ~50 us of work: parallel in chunks, though
    only kernels of 32,768 elements are parallel for their size alone."""
    def chain(x):
        for _ in range(20):
            x = torch.sin(x) * 1.01 + 0.1
        return x

    x = torch.randn(1024, generator=torch.Generator().manual_seed(1)) * 100
    fn = cc.compile(chain, backend="cpp")
    got = fn(x)
    source = _sources(fn)
    assert "#pragma omp parallel for" in source and "chunk += 64" in source
    assert source.count("fc::sin_f32(") == 1 and source.count("fc::sin_f32_small(") == 19
    torch.testing.assert_close(got, chain(x))
    cheap = cc.compile(lambda t: t * 1.01 + 0.1, backend="cpp")
    cheap(x)
    assert "omp parallel" not in _sources(cheap)  # a plain 1,024-element kernel stays on one thread
    one_exp = cc.compile(lambda t: t.exp() * 2, backend="cpp")  # ~4 us of work: waking a thread costs more
    torch.testing.assert_close(one_exp(x.repeat(4) / 100), (x.repeat(4) / 100).exp() * 2)
    assert "omp parallel" not in _sources(one_exp)

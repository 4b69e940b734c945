"""Statistics about a pivot (decomp/moments.py): a normalisation of a constant row is exactly 0, as eager's
and Inductor's Welford make it, where mean = sum / n left a rounding that the division by the standard
deviation magnified (layer_norm of a row of 1000.1s gave 0.019); every other row still matches eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]
CONSTANTS = [0.1, 0.3, -1.7, 3.3, 1000.1, 2.2e-3, 77.7, 0.0]


def constant_rows(width: int, dtype=torch.float32) -> torch.Tensor:
    """One row per constant, then rows with an inf or a NaN first, in the middle, and two opposite infs,
    then rows far from 0 (mean 5000, deviation 100)."""
    torch.manual_seed(0)
    rows = torch.tensor(CONSTANTS).repeat_interleave(width).view(len(CONSTANTS), width)
    special = torch.randn(5, width)
    special[0, 0] = float("inf")
    special[1, width // 2] = float("-inf")
    special[2, 0] = float("nan")
    special[3, 1] = float("nan")
    special[4, 0], special[4, 1] = float("inf"), float("-inf")
    return torch.cat([rows, special, torch.randn(3, width) * 100 + 5000]).to(dtype)


def same(got: torch.Tensor, expected: torch.Tensor, exact: bool, atol: float = 1e-5) -> None:
    assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
    if exact:
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=1.3e-6, atol=atol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("width", [16, 768])
def test_layer_norm_of_a_constant_row_is_exactly_zero(backend, width):
    x = constant_rows(width)
    weight, bias = torch.randn(width), torch.randn(width)

    def fn(x):
        return F.layer_norm(x, (width,)), F.layer_norm(x, (width,), weight, bias)

    plain, affine = cc.compile(fn, backend=backend)(x)
    expected_plain, expected_affine = fn(x)
    constant = len(CONSTANTS)
    assert torch.equal(plain[:constant], torch.zeros(constant, width))  # was up to 0.019 (the 1000.1 row)
    same(plain[constant:constant + 5], expected_plain[constant:constant + 5], exact=True)  # inf and NaN rows
    same(plain, expected_plain, exact=False, atol=1e-4)
    same(affine, expected_affine, exact=False, atol=1e-4)
    # The rows far from 0, against float64: as accurate as eager's Welford
    far = slice(constant + 5, None)
    precise = F.layer_norm(x[far].double(), (width,))
    eager_error = (expected_plain[far].double() - precise).abs().max()
    assert (plain[far].double() - precise).abs().max() <= 2 * eager_error + 1e-6
    assert torch.equal(affine[:constant], bias.expand(constant, width))


@pytest.mark.parametrize("backend", BACKENDS)
def test_var_mean_about_a_pivot_matches_eager(backend):
    """Every form of var_mean: dims, corrections (fractional, beyond the count), keepdim, bf16."""
    torch.manual_seed(0)
    x = torch.randn(4, 6, 10) * 3 + 100

    def fn(x, xb):
        return (*torch.var_mean(x, -1), *torch.var_mean(x, (0, 2), keepdim=True),
                *torch.var_mean(x, 1, correction=0.5), *torch.var_mean(x, None, correction=0),
                *torch.var_mean(x[:, :1], 1, correction=2), *torch.var_mean(xb, -1),
                *torch.std_mean(x, (1, 2)))

    xb = x.bfloat16()
    for got, expected in zip(cc.compile(fn, backend=backend)(x, xb), fn(x, xb)):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        same(got, expected, exact=False)
    const = torch.full((3, 12), 1000.1)
    var, mean = cc.compile(lambda t: torch.var_mean(t, -1), backend=backend)(const)
    assert torch.equal(var, torch.zeros(3)) and torch.equal(mean, torch.full((3,), 1000.1))


def test_normalisations_train_and_their_gradients_match_eager():
    """Layer, group and batch norm in one training step over the same rows (constant ones among them), judged
    against float64: ours at least as near it as eager (eager's group norm of a constant group of 1000.1s
    is 7e-3 off float64 here; ours 2e-3)."""
    torch.manual_seed(0)
    x = constant_rows(32)[:, :32].reshape(-1, 4, 8).nan_to_num(0.0, 0.0, 0.0)
    ln, gn, bn = torch.nn.LayerNorm(8), torch.nn.GroupNorm(2, 4), torch.nn.BatchNorm1d(4)
    weights = torch.randn(16, 4, 8)  # a plain sum of normalised values is 0 up to rounding: weigh them

    def fn(x):
        return ((ln(x) * 2 + gn(x) + bn(x)) * weights).sum()

    def step(f, x):
        x = x.clone().requires_grad_(True)
        loss = f(x)
        return loss.detach(), torch.autograd.grad(loss, x)[0]

    got = step(cc.compile(fn), x)
    expected = step(fn, x)
    for m in (ln, gn, bn):
        m.double()
    weights = weights.double()
    precise = step(fn, x.double())
    for g, e, p in zip(got, expected, precise):
        eager_error = (e.double() - p).abs().max()
        assert (g.double() - p).abs().max() <= 2 * eager_error + 1e-5, ((g.double() - p).abs().max(), eager_error)

"""var_mean about a pivot: the statistics every normalisation (layer, batch and group norm) is made of.

torch's reference computes mean = sum(x) / n and var = sum((x - mean)**2) / (n - correction). A sum in
float rounds, so the mean of a row of n equal values c is not c but c plus a few ulps, x - mean is that
rounding instead of 0, and a layer norm, which divides it by sqrt(var + eps), returns up to ~300 times it:
layer_norm of a row of 1000.1s gave 0.019 where eager, Inductor (both Welford) and float64 give 0.
Found by the random programs (seed 9525, a scatter_add whose rows came out constant).

Here the statistics are taken about the row's first element p (made 0 where it is not finite, so an inf
or NaN propagates as in eager): d = x - p, mean = p + sum(d) / n, var = sum((d - sum(d) / n)**2) / (n -
correction). A constant row gives d = 0 exactly, so mean = p and var = 0, and the normalised values are
exactly 0; any other row is at least as accurate (the shifted-data form of the two-pass variance).
It still lowers to two sums over the row that share one kernel (and to Welford's one pass over long
rows, schedule/plan_passes.welford, which recognises the same centred square). Not for complex or
integer inputs, nor reductions over an empty dimension: torch's reference takes those.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch._refs

aten = torch.ops.aten


def _var_mean(x: torch.Tensor, dim: Optional[Sequence[int]] = None, *, correction=None,
              keepdim: bool = False, root: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(var, mean), or with `root` (std, mean), rounded to x's dtype once."""
    dims = sorted({d % max(x.dim(), 1) for d in dim}) if dim else list(range(x.dim()))
    if not x.is_floating_point() or x.dim() == 0 or any(
            isinstance(x.shape[d], int) and x.shape[d] == 0 for d in dims):
        var, mean = torch._refs.var_mean(x, dim, keepdim=keepdim, correction=correction)
        return (torch.sqrt(var) if root else var), mean
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    wide = x.to(compute)
    pivot = wide
    count = 1
    for d in dims:
        pivot = pivot.narrow(d, 0, 1)
        count = count * x.shape[d]
    pivot = torch.where(torch.isfinite(pivot), pivot, 0.0)
    shifted = wide - pivot
    shifted_mean = torch.sum(shifted, dims, keepdim=True) / count
    centred = shifted - shifted_mean
    denominator = count - (1 if correction is None else correction)
    denominator = torch.sym_max(denominator, 0) if isinstance(denominator, torch.SymInt) else max(denominator, 0)
    var = torch.sum(centred * centred, dims, keepdim=keepdim) / denominator
    mean = pivot + shifted_mean
    if not keepdim:
        mean = mean.squeeze(dims)
    if root:
        var = torch.sqrt(var)
    return var.to(x.dtype), mean.to(x.dtype)


def _correction(unbiased: bool) -> int:
    return 1 if unbiased else 0


# The overloads of var_mean, var, std and std_mean: `correction=` and `unbiased=` (torch's references of
# layer, group and batch norm call `torch.var_mean(..., unbiased=False)`), over dims or over everything.
# var and std share var_mean's sums, so a program taking several of them of one row sums it once
# (the merge-reductions pass) and a constant row's variance is exactly 0 for each.
def _var_mean_dim(x, dim=None, unbiased=True, keepdim=False):
    return _var_mean(x, dim, correction=_correction(unbiased), keepdim=keepdim)


def _var_mean_all(x, unbiased=True):
    return _var_mean(x, None, correction=_correction(unbiased))


def _var(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction=correction, keepdim=keepdim)[0]


def _var_dim(x, dim=None, unbiased=True, keepdim=False):
    return _var_mean_dim(x, dim, unbiased, keepdim)[0]


def _var_all(x, unbiased=True):
    return _var_mean_all(x, unbiased)[0]


def _std_mean(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction=correction, keepdim=keepdim, root=True)


def _std_mean_dim(x, dim=None, unbiased=True, keepdim=False):
    return _std_mean(x, dim, correction=_correction(unbiased), keepdim=keepdim)


def _std_mean_all(x, unbiased=True):
    return _std_mean(x, None, correction=_correction(unbiased))


def _std(x, dim=None, *, correction=None, keepdim=False):
    return _std_mean(x, dim, correction=correction, keepdim=keepdim)[0]


def _std_dim(x, dim=None, unbiased=True, keepdim=False):
    return _std_mean_dim(x, dim, unbiased, keepdim)[0]


def _std_all(x, unbiased=True):
    return _std_mean_all(x, unbiased)[0]


MOMENTS = {
    aten.var_mean.correction: _var_mean, aten.var_mean.dim: _var_mean_dim, aten.var_mean.default: _var_mean_all,
    aten.var.correction: _var, aten.var.dim: _var_dim, aten.var.default: _var_all,
    aten.std_mean.correction: _std_mean, aten.std_mean.dim: _std_mean_dim, aten.std_mean.default: _std_mean_all,
    aten.std.correction: _std, aten.std.dim: _std_dim, aten.std.default: _std_all,
}

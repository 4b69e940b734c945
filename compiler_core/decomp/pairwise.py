"""Products and distances over pairs of rows, as broadcast arithmetic and reductions of our primitives:
`_trilinear` (what bilinear calls), `_cdist_forward` (cdist) and `_pdist_forward` (pdist).

- _trilinear: each input unsqueezed at its `expand` dims, the three multiplied and summed over
  `sumdim`; the multiply and the sum fuse into one reduction kernel, nothing of the broadcast product
  is stored.
- cdist (`_cdist_forward`, and `_euclidean_dist` for its matmul route): |x1_i - x2_j| reduced along
  the rows' last dim for p = 0 (count of differing elements), 1, 2 and any other finite p. For p = 2
  where ATen takes its matmul route (compute_mode "use_mm_for_euclid_dist", or "if necessary" with
  more than 25 rows on a side) ours takes the same one, ||x1||^2 + ||x2||^2 - 2 x1.x2 through one
  matmul, so the values round as eager's do. In training the backward is ATen's `_cdist_backward`
  (autograd differentiates cdist before we decompose it); the roots and powers are still written so
  that their gradients at a zero distance or difference would be 0, as that backward's are, not
  inf * 0 = NaN.
- pdist (`_pdist_forward`): the same distances for the pairs i < j of one input's rows, in ATen's
  row-major order; pair k's rows come from arithmetic on k (a square root in float64, exact for
  these sizes), so the rows are gathered, never a square of distances stored.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten
MM_ABOVE_ROWS = 25  # ATen's "if necessary": the matmul route when either side has more rows
PDIST_MAX_ROWS = 1 << 14  # pair arithmetic in float64 stays exact far beyond this


def _trilinear(i1: torch.Tensor, i2: torch.Tensor, i3: torch.Tensor, expand1: list, expand2: list,
               expand3: list, sumdim: list, unroll_dim: int = 1) -> torch.Tensor:
    def grown(t: torch.Tensor, dims: list) -> torch.Tensor:
        for d in sorted(dims):
            t = t.unsqueeze(d)
        return t

    product = grown(i1, expand1) * grown(i2, expand2) * grown(i3, expand3)
    return product.sum(list(sumdim)) if len(sumdim) else product


def _safe_root(total: torch.Tensor, p: float) -> torch.Tensor:
    """total^(1/p), with gradient 0 where total is 0."""
    positive = total > 0
    inside = torch.where(positive, total, 1.0)
    root = torch.sqrt(inside) if p == 2 else torch.pow(inside, 1.0 / p)
    return torch.where(positive, root, 0.0)


def _safe_power(difference: torch.Tensor, p: float) -> torch.Tensor:
    """|d|^p, with gradient 0 where d is 0 (ATen's cdist backward; for p < 1 the true one is infinite)."""
    nonzero = difference != 0
    magnitude = torch.where(nonzero, difference.abs(), 1.0)
    return torch.where(nonzero, magnitude * magnitude if p == 2 else torch.pow(magnitude, p), 0.0)


def _euclid_by_matmul(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """ATen's matmul route for p = 2: [-2 x1, |x1|^2, 1] . [x2, 1, |x2|^2], clamped, square-rooted."""
    norm1 = x1.pow(2).sum(-1, keepdim=True)
    norm2 = x2.pow(2).sum(-1, keepdim=True)
    left = torch.cat([x1 * -2, norm1, torch.ones_like(norm1)], -1)
    right = torch.cat([x2, torch.ones_like(norm2), norm2], -1)
    return torch.matmul(left, right.transpose(-1, -2)).clamp_min(1e-30).sqrt()


def cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None = None):
    if not x1.is_floating_point() or x1.dtype != x2.dtype or x1.dim() < 2 or x2.dim() < 2:
        return NotImplemented
    if p < 0 or math.isnan(p) or (math.isinf(p) and x1.shape[-1] == 0):
        return NotImplemented
    rows1, rows2 = x1.shape[-2], x2.shape[-2]
    if not isinstance(rows1, int) or not isinstance(rows2, int):
        return NotImplemented
    mode = 0 if compute_mode is None else compute_mode
    if p == 2 and (mode == 1 or (mode == 0 and (rows1 > MM_ABOVE_ROWS or rows2 > MM_ABOVE_ROWS))):
        return _euclid_by_matmul(x1, x2)
    return _distance(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)  # differences [..., P, R, M]


def _distance(difference: torch.Tensor, p: float) -> torch.Tensor:
    """The p-norm of `difference` along its last dim."""
    if p == 0:
        return (difference != 0).to(difference.dtype).sum(-1)
    if p == 1:
        return difference.abs().sum(-1)
    if math.isinf(p):
        return difference.abs().amax(-1)
    return _safe_root(_safe_power(difference, p).sum(-1), p)


def pdist_forward(x: torch.Tensor, p: float = 2.0):
    if not x.is_floating_point() or x.dim() != 2 or p < 0 or math.isnan(p):
        return NotImplemented
    rows, width = x.shape
    if not isinstance(rows, int) or rows > PDIST_MAX_ROWS or (math.isinf(p) and width == 0):
        return NotImplemented
    i, j = pair_rows(rows, x.device)
    return _distance(x.index_select(0, i) - x.index_select(0, j), p)


def pair_rows(rows: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(i, j) of every pair i < j in row-major order, as int64 tensors: ATen's pdist order."""
    return pairs_at(torch.arange(rows * (rows - 1) // 2, device=device, dtype=torch.float64), rows)


def pairs_at(k: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(i, j) of pair number k (float64) among `rows` rows, in pair_rows' order."""
    # Pairs (0,1) .. (0,n-1), (1,2) ..: row i starts at k = i (2n - i - 1) / 2; invert that quadratic.
    span = 2 * rows - 1
    i = torch.floor((span - torch.sqrt(span * span - 8 * k)) / 2)
    j = k - i * (span - i) / 2 + i + 1
    return i.to(torch.int64), j.to(torch.int64)


def euclidean_dist(x1: torch.Tensor, x2: torch.Tensor):
    """What cdist calls for p = 2 on its matmul route."""
    if not x1.is_floating_point() or x1.dtype != x2.dtype:
        return NotImplemented
    return _euclid_by_matmul(x1, x2)


PAIRWISE = {aten._trilinear.default: _trilinear, aten._cdist_forward.default: cdist_forward,
            aten._euclidean_dist.default: euclidean_dist, aten._pdist_forward.default: pdist_forward}

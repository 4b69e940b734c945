"""The orthogonal polynomials of torch.special (Chebyshev T, U, V, W and their shifted forms, Hermite H and
He, Laguerre, Legendre) as our kernels, with the degree n a tensor.

Eager evaluates each by its three-term recurrence, n - 1 steps per element, after a few special
cases (n < 0, the ends x = +-1, a closed trigonometric form for |x| < 1 and large n). The number of
steps differs per element and has no bound known when compiling, so no unrolled expression computes
it: the recurrence is one primitive, `recurrence` (docs/primitives.md), which the C++ backend prints
as a loop per element and the Triton backend as a loop to the block's largest n with the finished
lanes held. Here it is `fcompile::three_term_recurrence`, a custom op whose eager implementation
(used by fallbacks and by FakeTensor tracing) steps the same recurrence over whole tensors. Its eight
coefficients are affine in the step k, which covers every recurrence below:

    P_0 = p, P_1 = q, P_{k+1} = ((a1 k + a0) x + (b1 k + b0)) P_k - (c1 k + c0) P_{k-1}) / (d1 k + d0)

The special cases are `where`s around it, written as eager's branches are, so each element takes the
branch eager takes (and elements of another branch step the recurrence 0 times). Each step's
arithmetic is eager's in the same order (Legendre's (2k+1) x q, Laguerre's 2k + (1 - x)), so the
values agree to rounding. Degrees come from truncating n as eager's int64 conversion does; a
non-finite n (an undefined conversion in eager, giving INT64_MIN on x86) counts as negative.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

aten = torch.ops.aten

# Coefficients (a1, a0, b1, b0, c1, c0, d1, d0) of each family's step.
_CHEBYSHEV = (0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0)  # 2x P_k - P_{k-1}
_HERMITE_H = (0.0, 2.0, 0.0, 0.0, 2.0, 0.0, 0.0, 1.0)  # 2x P_k - 2k P_{k-1}
_HERMITE_HE = (0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0)  # x P_k - k P_{k-1}
_LAGUERRE = (0.0, 1.0, 2.0, 0.0, 1.0, 0.0, 1.0, 1.0)  # ((2k + (1 - x)) P_k - k P_{k-1}) / (k + 1), on 1 - x
_LEGENDRE = (2.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0)  # ((2k + 1) x P_k - k P_{k-1}) / (k + 1)
_HERMITE_LIMIT = {torch.float32: 128, torch.float64: 512}  # eager's degree above which Hermite gives NaN


@torch.library.custom_op("fcompile::three_term_recurrence", mutates_args=())
def three_term_recurrence(x: torch.Tensor, n: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                          coefficients: Sequence[float]) -> torch.Tensor:
    """P_n of the recurrence above, elementwise over the broadcast operands (P_0 where n < 1)."""
    a1, a0, b1, b0, c1, c0, d1, d0 = coefficients
    x, n, p, q = torch.broadcast_tensors(x, n, p, q)
    p, q = p.clone(), q.clone()
    steps = int(n.max()) if n.numel() else 0
    for k in range(1, steps):
        r = ((a1 * k + a0) * x + (b1 * k + b0)) * q - (c1 * k + c0) * p
        r = r / (d1 * k + d0)
        live = k < n
        p, q = torch.where(live, q, p), torch.where(live, r, q)
    return torch.where(n < 1, p, q).contiguous()


@three_term_recurrence.register_fake
def _(x, n, p, q, coefficients):
    shape = torch.broadcast_shapes(x.shape, n.shape, p.shape, q.shape)
    return x.new_empty(shape)


def _operands(x: Any, n: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(x in the result dtype, n as eager's int64 degree, that degree as the result dtype); None for
    what stays PyTorch's (complex, half precision, which eager does not implement either)."""
    dtype = torch.result_type(x, n)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if dtype not in (torch.float32, torch.float64):
        return None
    like = x if isinstance(x, torch.Tensor) else n
    xt = x.to(dtype) if isinstance(x, torch.Tensor) else torch.full_like(like, x, dtype=dtype)
    nt = n.to(dtype) if isinstance(n, torch.Tensor) else torch.full_like(like, n, dtype=dtype)
    xt, nt = torch.broadcast_tensors(xt, nt)
    # Out of int64's range (or not finite) eager's conversion gives INT64_MIN on x86: a negative degree.
    inside = nt.abs() < 2.0 ** 62
    degree = torch.where(inside, nt, -1.0).to(torch.int64)
    return xt, degree, degree.to(dtype)


def _stepped(x: torch.Tensor, degree: torch.Tensor, first: torch.Tensor, coefficients: Sequence[float],
             used: torch.Tensor) -> torch.Tensor:
    """P_degree from P_0 = 1 and P_1 = first, stepping only where `used` (elsewhere 0 steps)."""
    return three_term_recurrence(x, torch.where(used, degree, 0), torch.ones_like(x), first, coefficients)


def _finish(degree: torch.Tensor, cases: list[tuple[torch.Tensor, Any]], first: torch.Tensor,
            rest: torch.Tensor) -> torch.Tensor:
    """Eager's branch order: n < 0 gives 0, then `cases` in order, then n == 0, n == 1, the recurrence."""
    out = torch.where(degree == 1, first, rest)
    out = torch.where(degree == 0, 1.0, out)
    for condition, value in reversed(cases):
        out = torch.where(condition, value, out)
    return torch.where(degree < 0, 0.0, out)


def _odd_sign(degree: torch.Tensor, value: Any) -> torch.Tensor:
    """value for an even degree, -value for an odd one."""
    return torch.where(degree % 2 == 0, value, -value)


def _chebyshev(closed_above: tuple[int, int], first: Callable, closed_form: Callable, ends: Callable) -> Callable:
    """One Chebyshev kind, plain and shifted (y = 2x - 1): eager's ends (per x: `ends(x, degree, nf,
    shifted)`, a list of (where, value)), then for |y| < 1 above degree `closed_above[shifted]` its
    trigonometric form (`closed_form(y, x, degree, nf, shifted)`), then n == 0, n == 1 (`first(y)`) and
    the recurrence 2y P_k - P_{k-1}."""

    def kind(x: torch.Tensor, n: Any, shifted: bool = False) -> Any:
        ops = _operands(x, n)
        if ops is None:
            return NotImplemented
        x, degree, nf = ops
        y = x + x - 1.0 if shifted else x
        closed = (degree > closed_above[shifted]) & (y.abs() < 1.0)
        cases = ends(x, degree, nf, shifted) + [(closed, closed_form(y, x, degree, nf, shifted))]
        used = ~closed
        for at, _ in cases[:-1]:
            used = used & ~at
        start = first(y)
        return _finish(degree, cases, start, _stepped(y, degree, start, _CHEBYSHEV, used))

    return kind


def _signed_ends(one: Callable, minus_one: Callable) -> Callable:
    """Eager's ends: plain, x = 1 and x = -1 (|x| == 1); shifted, x = 1 and x = 0 (y = -1)."""

    def ends(x: torch.Tensor, degree: torch.Tensor, nf: torch.Tensor, shifted: bool) -> list:
        if shifted:
            return [(x == 1.0, one(degree, nf)), (x == 0.0, minus_one(degree, nf))]
        return [(x.abs() == 1.0, torch.where(x > 0.0, one(degree, nf), minus_one(degree, nf)))]

    return ends


def _u_form(y, x, degree, nf, shifted):
    angle = torch.acos(y)
    sine = torch.sin(angle)
    return torch.where(sine != 0.0, torch.sin((nf + 1.0) * angle) / sine,
                       (nf + 1.0) * torch.cos((nf + 1.0) * angle) / y)


def _v_form(y, x, degree, nf, shifted):
    angle = torch.acos(y)
    return torch.where(torch.sin(angle / 2.0) != 1.0, torch.cos((nf + 0.5) * angle) / torch.cos(angle / 2.0),
                       _odd_sign(degree, nf + nf + 1.0))


def _w_form(y, x, degree, nf, shifted):
    angle = torch.acos(y)
    at_one = (x > 0.0) if not shifted else torch.zeros_like(x, dtype=torch.bool)
    return torch.where(torch.cos(angle / 2.0) != 1.0, torch.sin((nf + 0.5) * angle) / torch.sin(angle / 2.0),
                       torch.where(at_one, nf + nf + 1.0, _odd_sign(degree, 1.0)))


# At y = -1 each kind is +-1, +-(n + 1) or +-(2n + 1) by the degree's parity, or 1; at y = 1 its own value.
chebyshev_t = _chebyshev((6, 6), lambda y: y, lambda y, x, degree, nf, shifted: torch.cos(nf * torch.acos(y)),
                         _signed_ends(lambda degree, nf: 1.0, lambda degree, nf: _odd_sign(degree, 1.0)))
chebyshev_u = _chebyshev((8, 6), lambda y: y + y, _u_form,
                         _signed_ends(lambda degree, nf: nf + 1.0, lambda degree, nf: _odd_sign(degree, nf + 1.0)))
chebyshev_v = _chebyshev((8, 6), lambda y: y + y - 1.0, _v_form,
                         _signed_ends(lambda degree, nf: 1.0, lambda degree, nf: _odd_sign(degree, nf + nf + 1.0)))
chebyshev_w = _chebyshev((8, 4), lambda y: y + y + 1.0, _w_form,
                         _signed_ends(lambda degree, nf: nf + nf + 1.0, lambda degree, nf: _odd_sign(degree, 1.0)))


def _hermite(coefficients: Sequence[float], doubled: bool) -> Callable:
    def hermite(x: torch.Tensor, n: Any) -> Any:
        ops = _operands(x, n)
        if ops is None:
            return NotImplemented
        x, degree, _ = ops
        first = x + x if doubled else x
        beyond = degree > _HERMITE_LIMIT[x.dtype]
        rest = _stepped(x, degree, first, coefficients, ~beyond)
        return _finish(degree, [], first, torch.where(beyond, float("nan"), rest))

    return hermite


def laguerre(x: torch.Tensor, n: Any) -> Any:
    ops = _operands(x, n)
    if ops is None:
        return NotImplemented
    x, degree, _ = ops
    first = 1.0 - x
    at_zero = x.abs() == 0.0
    return _finish(degree, [(at_zero, 1.0)], first, _stepped(first, degree, first, _LAGUERRE, ~at_zero))


def legendre(x: torch.Tensor, n: Any) -> Any:
    ops = _operands(x, n)
    if ops is None:
        return NotImplemented
    x, degree, _ = ops
    end = x.abs() == 1.0
    ends = [(end, torch.where((x > 0.0) | (degree % 2 == 0), 1.0, -1.0))]
    return _finish(degree, ends, x, _stepped(x, degree, x, _LEGENDRE, ~end))


def _shifted(fn: Callable) -> Callable:
    return lambda x, n: fn(x, n, shifted=True)


_BY_NAME = {
    "chebyshev_polynomial_t": chebyshev_t, "chebyshev_polynomial_u": chebyshev_u,
    "chebyshev_polynomial_v": chebyshev_v, "chebyshev_polynomial_w": chebyshev_w,
    "shifted_chebyshev_polynomial_t": _shifted(chebyshev_t), "shifted_chebyshev_polynomial_u": _shifted(chebyshev_u),
    "shifted_chebyshev_polynomial_v": _shifted(chebyshev_v), "shifted_chebyshev_polynomial_w": _shifted(chebyshev_w),
    "hermite_polynomial_h": _hermite(_HERMITE_H, doubled=True),
    "hermite_polynomial_he": _hermite(_HERMITE_HE, doubled=False),
    "laguerre_polynomial_l": laguerre, "legendre_polynomial_p": legendre,
}
# Each with a tensor or a Python number for x or n (the three overloads).
ORTHOGONAL = {getattr(getattr(aten, f"special_{name}"), overload): fn
              for name, fn in _BY_NAME.items() for overload in ("default", "x_scalar", "n_scalar")}

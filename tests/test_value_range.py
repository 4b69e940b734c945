"""ir/value_range.py: the intervals the `bounds` plan pass relies on to drop a range check. A wrong
interval would let a kernel read outside its input, so each case is also checked against the values
the expression takes on every point of its loop range."""

import itertools

import torch

from compiler_core.ir.index import Index
from compiler_core.ir.value_range import magnitude_range, value_range
from compiler_core.ir.values import Cast, Constant, IndexValue, Load, Op

F32, I64 = torch.float32, torch.int64


def _x(name="x0"):
    return IndexValue(Index.var(name), I64)


def _c(v, dtype=F32):
    return Constant(v, dtype)


def _op(name, *args, dtype=F32):
    return Op(name, args, dtype)


def _source_coordinate(out_size, scale, in_size):
    """A bilinear upsample's lower source coordinate (align_corners=False), as the decomposition builds it."""
    real = _op("sub", _op("mul", _op("add", Cast(_x(), F32), _c(0.5)), _c(1 / scale)), _c(0.5))
    low = Cast(_op("maximum", real, _c(0.0)), I64)
    high = _op("minimum", _op("add", low, _c(1, I64), dtype=I64), _c(in_size - 1, I64), dtype=I64)
    return low, high


def _evaluate(value, x0):
    """The expression's value at x0, computed by torch in the dtypes the tree names."""
    if isinstance(value, IndexValue):
        return torch.tensor(x0, dtype=value.dtype)
    if isinstance(value, Constant):
        return torch.tensor(value.value, dtype=value.dtype)
    if isinstance(value, Cast):
        return _evaluate(value.arg, x0).to(value.dtype)
    args = [_evaluate(a, x0) for a in value.args]
    fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
          "minimum": torch.minimum}[value.op]
    return fn(*args).to(value.dtype)


def test_clamped_upsample_coordinates_stay_inside_the_input():
    low, high = _source_coordinate(224, 4, 56)
    for value in (low, high):
        lo, hi = value_range(value, {"x0": 224})
        assert 0 <= lo and hi <= 55, (lo, hi)
        taken = [_evaluate(value, x).item() for x in range(224)]
        assert lo <= min(taken) and max(taken) <= hi


def test_unclamped_coordinates_are_not_claimed_inside():
    real = _op("sub", _op("mul", _op("add", Cast(_x(), F32), _c(0.5)), _c(0.25)), _c(0.5))
    lo, hi = value_range(Cast(real, I64), {"x0": 224})
    assert lo <= 0 and hi >= 55  # -0.375 truncates to 0; the interval may say so, never less than the truth


def test_unknown_leaves_and_risky_ops_give_no_range():
    ids = Load("ids", Index.var("x0"), I64)
    assert value_range(ids, {"x0": 4}) is None  # an embedding's ids: anything
    assert value_range(_op("add", ids, _c(1, I64), dtype=I64), {"x0": 4}) is None
    assert value_range(_x("x9"), {"x0": 4}) is None  # a variable with no known range
    zero_or_more = _op("sub", Cast(_x(), F32), _c(1.0))  # [-1, 2]: holds zero
    assert value_range(_op("truediv", _c(1.0), zero_or_more), {"x0": 4}) is None
    assert value_range(_op("exp", Cast(_x(), F32)), {"x0": 4}) is None  # not followed
    assert value_range(_c(float("inf")), {}) is None


def test_float_results_are_widened_past_their_rounding():
    # (x + 0.5) * 0.25 - 0.5 reaches 55.375 at x = 223; in bf16 the rounding alone is ~0.25, so the
    # interval must say more than the exact value
    bf16 = torch.bfloat16
    shifted = _op("add", Cast(_x(), bf16), _c(0.5, bf16), dtype=bf16)
    real = _op("sub", _op("mul", shifted, _c(0.25, bf16), dtype=bf16), _c(0.5, bf16), dtype=bf16)
    lo, hi = value_range(real, {"x0": 224})
    assert hi >= 55.375 + 0.25 and lo <= -0.375
    low_precision = [_evaluate(real, x).item() for x in range(224)]
    assert lo <= min(low_precision) and max(low_precision) <= hi


def test_where_comparisons_and_integer_division():
    x = _x()
    cond = _op("lt", Load("m", Index.var("x0"), F32), _c(0.0), dtype=torch.bool)  # unknown operand: still 0 or 1
    assert value_range(cond, {"x0": 8}) == (0.0, 1.0)
    pick = _op("where", cond, x, _c(3, I64), dtype=I64)
    assert value_range(pick, {"x0": 8}) == (0.0, 7.0)
    for name, expect in (("floordiv", (-2.0, 1.0)), ("remainder", (0.0, 2.0)), ("truncdiv", (-1.0, 1.0))):
        shifted = _op("sub", x, _c(4, I64), dtype=I64)  # [-4, 3]
        got = value_range(_op(name, shifted, _c(3, I64), dtype=I64), {"x0": 8})
        assert got == expect, (name, got)
        py = {"floordiv": lambda a: a // 3, "remainder": lambda a: a % 3,
              "truncdiv": lambda a: int(a / 3)}[name]
        taken = [py(a) for a in range(-4, 4)]
        assert got[0] <= min(taken) and max(taken) <= got[1]


def test_integer_arithmetic_that_could_wrap_gives_no_range():
    big = _op("mul", _x(), _c(2**40, I64), dtype=I64)
    assert value_range(big, {"x0": 2**20}) is None  # 2**60: past what the analysis follows
    small = Cast(_op("mul", _x(), _c(300, I64), dtype=I64), torch.int8)
    assert value_range(small, {"x0": 4}) is None  # 900 does not fit int8


def test_products_of_signed_intervals():
    a = _op("sub", _x(), _c(2, I64), dtype=I64)  # [-2, 1]
    b = _op("sub", _x("x1"), _c(1, I64), dtype=I64)  # [-1, 3]
    got = value_range(_op("mul", a, b, dtype=I64), {"x0": 4, "x1": 5})
    taken = [(p - 2) * (q - 1) for p, q in itertools.product(range(4), range(5))]
    assert got == (min(taken), max(taken))


def test_magnitude_ranges_allow_nan_and_bound_what_sin_cos_tanh_and_sigmoid_return():
    """The C++ backend picks its faster sine where the argument's magnitude range (NaN allowed) stays
    small. A float load is anything; sin of it is in [-1, 1] or NaN, and so on up the tree. A NaN turned
    into an integer is any integer: no range."""
    x = Load("x", Index.var("x0"), F32)
    chain = x
    for _ in range(3):  # the bench's tiny_chain: sin(x) * 1.01 + 0.1, three times
        chain = _op("add", _op("mul", _op("sin", chain), _c(1.01)), _c(0.1))
    assert value_range(chain, {"x0": 4}) is None  # NaN possible: nothing claimed there
    lo, hi = magnitude_range({})(chain)
    assert lo <= -0.91 and hi >= 1.11 and hi < 1.2  # widened past the rounding, no further
    assert magnitude_range({})(_op("sigmoid", x))[0] <= 0.0
    tanh_scaled = _op("mul", _op("tanh", x), _c(3e4))
    assert 3e4 <= magnitude_range({})(tanh_scaled)[1] < 3.01e4
    assert magnitude_range({})(x) is None and magnitude_range({})(_op("exp", _op("sin", x))) is None
    assert magnitude_range({})(Cast(_op("sin", x), I64)) is None
    assert magnitude_range({})(Cast(_op("sin", x), torch.bool)) == (0.0, 1.0)
    divided = _op("truediv", _c(1.0), _op("sin", x))  # a divisor that may be zero: may be infinite
    assert magnitude_range({})(divided) is None
    # NaN really flows through these: the claim holds for every element that is not NaN
    values = torch.tensor([float("nan"), 2.0, -1e30, float("inf")])
    taken = (values.sin() * 1.01 + 0.1).sin() * 1.01 + 0.1
    finite = taken[~taken.isnan()]
    lo, hi = magnitude_range({})(_op("add", _op("mul", _op("sin", _op("add", _op("mul", _op("sin", x), _c(1.01)),
                                                                      _c(0.1))), _c(1.01)), _c(0.1)))
    assert taken.isnan().sum() == 2 and bool(((lo <= finite) & (finite <= hi)).all())

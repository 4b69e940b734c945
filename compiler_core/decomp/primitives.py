"""The primitive op set: everything after decomposition is one of these, or an extern call.

Both code generators implement exactly these primitives and nothing else, so this table is the
contract between lowering (compiler_core/ir/lowering/) and codegen (compiler_core/codegen/).
Semantics follow PyTorch's elementwise ops on the computation dtype (fp32 for bf16/fp16 inputs).
"""

from __future__ import annotations

# name -> (arity, semantics)
POINTWISE: dict[str, tuple[int, str]] = {
    # arithmetic
    "add": (2, "a + b"),
    "sub": (2, "a - b"),
    "mul": (2, "a * b"),
    "truediv": (2, "a / b (IEEE division; float operands)"),
    "floordiv": (2, "floor(a / b); integer operands round toward -inf like Python"),
    "truncdiv": (2, "a / b rounded toward zero (integer C division)"),
    "remainder": (2, "a - floordiv(a, b) * b: result takes the sign of b, like torch.remainder"),
    "fused_multiply_add": (3, "a * b + c rounded once (an FMA; eager CUDA's contracted complex product)"),
    "neg": (1, "-a"),
    "abs": (1, "absolute value"),
    "reciprocal": (1, "1 / a"),
    "maximum": (2, "max(a, b); NaN if either is NaN"),
    "minimum": (2, "min(a, b); NaN if either is NaN"),
    # transcendental (float)
    "exp": (1, "e ** a"),
    "log": (1, "natural logarithm"),
    "log1p": (1, "log(1 + a)"),
    "expm1": (1, "exp(a) - 1"),
    "sqrt": (1, "square root"),
    "rsqrt": (1, "1 / sqrt(a)"),
    "sin": (1, "sine"),
    "cos": (1, "cosine"),
    "tanh": (1, "hyperbolic tangent"),
    "erf": (1, "error function"),
    "sigmoid": (1, "1 / (1 + exp(-a))"),
    "floor": (1, "round toward -inf"),
    "ceil": (1, "round toward +inf"),
    "trunc": (1, "round toward zero"),
    "round": (1, "round half to even"),
    "sign": (1, "-1, 0 or 1 (NaN gives 0, as ATen's two comparisons)"),
    "tan": (1, "tangent"),
    "asin": (1, "arcsine (NaN outside [-1, 1])"),
    "acos": (1, "arccosine (NaN outside [-1, 1])"),
    "atan": (1, "arctangent"),
    "sinh": (1, "hyperbolic sine"),
    "cosh": (1, "hyperbolic cosine"),
    "asinh": (1, "inverse hyperbolic sine"),
    "acosh": (1, "inverse hyperbolic cosine (NaN below 1)"),
    "atanh": (1, "inverse hyperbolic tangent (NaN outside [-1, 1])"),
    "log2": (1, "base-2 logarithm"),
    "log10": (1, "base-10 logarithm"),
    "exp2": (1, "2 ** a"),
    "erfc": (1, "1 - erf(a)"),
    "atan2": (2, "angle of the point (b, a), in (-pi, pi]"),
    "hypot": (2, "sqrt(a*a + b*b)"),
    "pow": (2, "a ** b; float: C pow (pow(x, 0) = 1, pow(1, y) = 1, NaN for a negative base and a "
                "non-integer exponent); integer: exact, a negative exponent gives 1/a rounded toward zero"),
    "fmod": (2, "a - trunc(a / b) * b: result takes the sign of a, like torch.fmod and C fmod"),
    "copysign": (2, "|a| with the sign bit of b"),
    "gcd": (2, "greatest common divisor of integers, ATen's Euclid on |a| and |b| (gcd(0, 0) = 0; the most "
               "negative value keeps its sign, as std::abs leaves it)"),
    "signbit": (1, "the sign bit of a (true for -0.0 and negative NaN), a bool"),
    "bitwise_and": (2, "a & b on integers"),
    "bitwise_or": (2, "a | b on integers"),
    "bitwise_xor": (2, "a ^ b on integers"),
    "bitwise_not": (1, "~a on integers"),
    "lshift": (2, "a << b on integers; a shift below 0 or of the width or more gives 0, as ATen's"),
    "rshift": (2, "a >> b on integers (arithmetic for signed types); below 0 or past the width, the sign "
                  "fill (0 for unsigned), as ATen's"),
    # comparison and logic (bool results)
    "eq": (2, "a == b"),
    "ne": (2, "a != b"),
    "lt": (2, "a < b"),
    "le": (2, "a <= b"),
    "gt": (2, "a > b"),
    "ge": (2, "a >= b"),
    "isnan": (1, "a != a"),
    "logical_not": (1, "not a"),
    "logical_and": (2, "a and b"),
    "logical_or": (2, "a or b"),
    "logical_xor": (2, "a != b on bools"),
    "where": (3, "b if a else c"),
    # a loop per element
    "recurrence": (12, "recurrence(x, n, p, q, a1, a0, b1, b0, c1, c0, d1, d0): P_n of P_0 = p, P_1 = q, "
                       "P_{k+1} = ((a1 k + a0) x + (b1 k + b0)) P_k - (c1 k + c0) P_{k-1}) / (d1 k + d0), "
                       "P_0 where n < 1 (n an int64, the coefficients constants); stops early once P_k is NaN"),
}

REDUCTIONS: dict[str, str] = {
    "sum": "add over the reduction ranges, starting at 0",
    "prod": "multiply over the reduction ranges, starting at 1",
    "amax": "maximum over the reduction ranges (NaN propagates), starting at -inf",
    "amin": "minimum over the reduction ranges (NaN propagates), starting at +inf",
}

OTHER: dict[str, str] = {
    "load": "read buffer[index]; index is an affine expression of the loop variables with // and %, plus for an "
            "indirect load (gather, index, embedding) positions read from other buffers, each times a stride",
    "store": "write buffer[index] = value",
    "cast": "convert to another dtype (bool -> 0/1, float -> int truncates)",
    "constant": "a scalar literal",
    "index": "an index expression used as a value (arange)",
    "scatter_add": "out = a copy of self, then for each element e of index: out[..., index[e], ...] += src[e] along "
                   "dim, an atomic add, the position range-checked (fcompile::scatter_add; decomp/atomic_scatter.py)",
    "scatter_store": "out = a copy of self, then for each element e of index: out[..., index[e], ...] = src[e] "
                     "along dim, a plain store, the position range-checked (fcompile::scatter_store; "
                     "decomp/store_scatter.py)",
    "view": "no code: a new layout (sizes, strides, offset) over an existing buffer",
    "extern": "call PyTorch (matmul, convolution, and any op without a lowering)",
}


def describe() -> str:
    """The primitive set as a Markdown table (used by the docs and the explorer)."""
    lines = ["| primitive | kind | semantics |", "|---|---|---|"]
    for name, (arity, text) in POINTWISE.items():
        lines.append(f"| `{name}` | pointwise/{arity} | {text} |")
    for name, text in REDUCTIONS.items():
        lines.append(f"| `{name}` | reduction | {text} |")
    for name, text in OTHER.items():
        lines.append(f"| `{name}` | {name} | {text} |")
    return "\n".join(lines)

"""Triton code generation: KernelPlan -> KernelSource.

Pointwise kernels are 1-D blocks over the flattened kernel space.  Reduction kernels are 2-D
blocks [XBLOCK rows, RBLOCK columns]: "persistent" when a whole row fits one block (each input
element is loaded once and reused by every phase), otherwise one loop over the row per phase.

Generated code also runs under TRITON_INTERPRET=1 on a CPU (PITFALLS.md): only `tl` functions,
bf16 upcast to fp32 in registers, functions libdevice would provide composed from `tl` ones unless
the kernel is compiled for a real GPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from compiler_core import _compat
from compiler_core.codegen.artifacts import KernelSource, SplitLaunch
from compiler_core.codegen.cse import CSEPrinter
from compiler_core.codegen.origins import split_origins
from compiler_core.ir.index import Index, floordiv, mod
from compiler_core.ir.symbolic import decide, hint, is_symbolic, python_expr, symbols_in
from compiler_core.ir.values import (
    GATHER_ERROR,
    INDEX_ERROR,
    SCATTER_ERROR,
    TARGET_ERROR,
    Cast,
    Constant,
    IndexValue,
    IndirectIndex,
    Load,
    Op,
    ReductionResult,
    Value,
    subs_index,
    walk,
)
from compiler_core.schedule import plan_passes
from compiler_core.schedule.kernel_plan import KernelPlan, Step

TL_TYPE = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
LOW_PRECISION = (torch.float16, torch.bfloat16)
# A position read from an index tensor outside its dimension: eager CUDA's kernels stop with a
# device-side assert; ours do the same, with eager's words for the error (runtime/kernel_errors.py).
DEVICE_ASSERT_MESSAGES = {INDEX_ERROR: "index out of range in self",
                          GATHER_ERROR: "index out of bounds for the dimension it gathers from",
                          SCATTER_ERROR: "index out of bounds for the dimension it scatters into",
                          TARGET_ERROR: "Target is out of bounds"}
ASSERT_OPTIONS = _compat.triton_assert_options()  # Triton compile options keeping them, passed at launch
# No multiply-add contracted into an FMA (compiler_core/runtime/cpp_build.py says why), in every launch.
EXACT_FLOAT_OPTIONS = _compat.triton_exact_float_options()
PERSISTENT_MAX_RBLOCK = plan_passes.PERSISTENT_MAX_RBLOCK
LOOPED_RBLOCK = 2048

# runtime/eager_libdevice.py: libdevice's functions take IEEE square roots inside, as eager's (nvcc's) do.
LIBDEVICE_NOTE = "libdevice's square roots rounded to nearest (sqrt.rn.f32, not .approx), as nvcc links it for eager"

_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "logical_and": "&", "logical_or": "|", "logical_xor": "!=",
          "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_TL_UNARY = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt", "sin": "tl.sin",
             "cos": "tl.cos", "erf": "tl.erf", "floor": "tl.floor", "ceil": "tl.ceil", "abs": "tl.abs",
             "sigmoid": "tl.sigmoid", "log2": "tl.log2", "exp2": "tl.exp2"}
# On a real GPU these come from libdevice; the interpreter's libdevice is a stub, so compose them.
_LIBDEVICE = {"tanh": "libdevice.tanh", "log1p": "libdevice.log1p", "expm1": "libdevice.expm1",
              "round": "libdevice.nearbyint", "trunc": "libdevice.trunc", "tan": "libdevice.tan",
              "asin": "libdevice.asin", "acos": "libdevice.acos", "atan": "libdevice.atan", "sinh": "libdevice.sinh",
              "cosh": "libdevice.cosh", "asinh": "libdevice.asinh", "acosh": "libdevice.acosh",
              "atanh": "libdevice.atanh", "log10": "libdevice.log10", "erfc": "libdevice.erfc"}
_LIBDEVICE_BINARY = {"atan2": "libdevice.atan2", "hypot": "libdevice.hypot", "pow": "libdevice.pow",
                     "fmod": "libdevice.fmod", "copysign": "libdevice.copysign"}
# Compositions of `tl` functions for the interpreter (libdevice is a stub there): accurate to a few
# ulp where the formula is stable, and to ~1e-6 absolute where it cancels (sinh, asinh near 0 use
# a series; erfc keeps its relative precision in the far tail: _erfc).
_COMPOSED_UNARY = {
    "tan": "(tl.sin({0}) / tl.cos({0}))",
    "atan": "_atan({0})",
    "asin": "_atan2({0}, tl.sqrt((1.0 - {0}) * (1.0 + {0})))",
    "acos": "_atan2(tl.sqrt((1.0 - {0}) * (1.0 + {0})), {0})",
    "sinh": "_sinh({0})",
    "cosh": "(0.5 * (tl.exp({0}) + tl.exp(-{0})))",
    "asinh": "_asinh({0})",
    "acosh": "tl.log({0} + tl.sqrt(({0} - 1.0) * ({0} + 1.0)))",
    "atanh": "(0.5 * tl.log((1.0 + {0}) / (1.0 - {0})))",
    "log10": "(tl.log({0}) * 0.4342944819032518)",
    "erfc": "_erfc({0})",
}


def register_dtype(dtype: torch.dtype) -> str:
    return "tl.float32" if dtype in LOW_PRECISION else TL_TYPE[dtype]


class TritonPrinter(CSEPrinter):
    def __init__(self, mask: str, interpret: bool):
        super().__init__(lambda name, text, value: f"{name} = {text}", prefix="tmp")
        self.mask = mask
        self.interpret = interpret

    def load(self, v: Load, mask: str | None = None, positions: list[str] | None = None) -> str:
        lanes = self.mask if mask is None else f"{self.mask} & {mask}"
        offset = pointer_offset(v.index)
        for t, p in zip(v.indirect, positions or ()):
            offset += f" + {p}" if t.stride == 1 else f" + {p} * {python_expr(t.stride)}"
        text = f"tl.load({v.buffer} + {offset}, {lanes}, other=0)"
        return f"{text}.to(tl.float32)" if v.dtype in LOW_PRECISION else text

    def position(self, t: IndirectIndex, value: str, mask: str | None) -> str:
        """The position wrapped (with t.wrap, negative counts from the end) and, out of range, 0 so the
        load stays inside the buffer.  In the interpreter a live lane out of range also sets the error
        flag (the runtime raises eager's error); a GPU kernel cannot call Python and only stays inside."""
        if value.lstrip("-").isdigit():  # a constant position: Triton's compiler has no `.to` on a Python int
            value = f"tl.full([], {value}, tl.int64)"
        if not t.checked:  # proven inside [0, size): no wrap, no check, and no debug build for an assert
            return f"{value}.to(tl.int64)"
        wrapped = self.named(f"tl.where({value} < 0, {value} + {python_expr(t.size)}, {value}).to(tl.int64)" if t.wrap
                             else f"{value}.to(tl.int64)", t.value)
        inside = f"({wrapped} >= 0) & ({wrapped} < {python_expr(t.size)})"
        lanes = self.mask if mask is None else f"{self.mask} & {mask}"
        if self.interpret:
            line = f"_check_position({inside}, {lanes}, {t.error})"
        else:  # as eager's CUDA kernels do: a device-side assert (the kernel is compiled with debug on)
            line = f'tl.device_assert(({inside}) | ~({lanes}), "{DEVICE_ASSERT_MESSAGES[t.error]}")'
        if line not in self.lines:
            self.lines.append(line)
        return f"tl.where({inside}, {wrapped}, 0)"

    def constant(self, v: Constant) -> str:
        return triton_literal(v.value, v.dtype)

    def index_value(self, v: IndexValue) -> str:
        if not v.index.free_vars():  # a constant: Triton's compiler has no `.to` on a Python int
            return f"tl.full([], {v.index.render()}, {register_dtype(v.dtype)})"
        return f"({v.index.render()}).to({register_dtype(v.dtype)})"

    def reduction_result(self, v: ReductionResult) -> str:
        return f"red_{v.node}"

    def cast(self, arg: str, source: Value, v: Cast) -> str:
        if source.dtype == v.dtype or (v.dtype not in LOW_PRECISION and register_dtype(source.dtype) == register_dtype(
                v.dtype)):
            return arg  # same register type, and no rounding to do
        if isinstance(source, Constant):  # rounded here: a literal has no `.to` in Triton's compiler
            value = torch.tensor(source.value, dtype=v.dtype).item() if v.dtype in LOW_PRECISION else source.value
            return triton_literal(value, v.dtype)
        if v.dtype == torch.bfloat16 and self.interpret:
            return f"_round_to_bf16({arg}.to(tl.float32))"
        if v.dtype in LOW_PRECISION:
            return f"{arg}.to({TL_TYPE[v.dtype]}).to(tl.float32)"
        return f"{arg}.to({register_dtype(v.dtype)})"

    def op(self, v: Op, args: list[str]) -> str:
        name, a = v.op, args
        floating = v.dtype.is_floating_point
        if name == "truediv" and floating:
            return _divide(v, a)
        if name in _INFIX:
            return f"({a[0]} {_INFIX[name]} {a[1]})"
        if name == "fused_multiply_add":
            # Rounded once even with contraction off (an explicit FMA); the interpreter's is exact too.
            return f"tl.fma({a[0]}, {a[1]}, {a[2]})"
        if name == "erf" and v.dtype == torch.float32 and self.interpret:
            # The interpreter gets the C++ backend's polynomial (the two CPU backends agree). On a GPU
            # libdevice's erf is faster in memory-bound kernels: bf16 GELU over 32M elements on an H200
            # 64.0 -> 51.4 us, GELU's gradient with its column sum 102.8 -> 83.0 us (Inductor: 52.1, 90.3).
            return f"_erf_f32({a[0]})"
        if register_dtype(v.dtype) == "tl.float32" and name == "sqrt":
            return f"tl.sqrt_rn({a[0]})"  # tl.sqrt is sqrt.approx.f32; eager's sqrtf is IEEE
        if register_dtype(v.dtype) == "tl.float32" and name in ("exp", "sigmoid") and not self.interpret:
            # tl.exp is ex2.approx of x * log2(e) (a few ulp off for large |x|); libdevice's expf is the
            # function eager's CUDA kernels call, and sigmoid is eager's 1 / (1 + exp(-x)).
            if name == "exp":
                return f"libdevice.exp({a[0]})"
            return f"tl.math.div_rn(1.0, 1.0 + libdevice.exp({a[0]} * -1.0))"
        if name in _TL_UNARY:
            return f"{_TL_UNARY[name]}({a[0]})"
        if (name in _LIBDEVICE or name in _LIBDEVICE_BINARY and floating) and not self.interpret:
            # libdevice picks its overload by the argument types, all alike: a Python float literal is
            # float32 to Triton, so copysign(0.0, a float64) has no overload, nor has copysign of a
            # float32 and a float64 (the IR's binary ops may mix widths; C++ promotes). Every argument
            # gets the op's register dtype.
            return f"{_LIBDEVICE.get(name) or _LIBDEVICE_BINARY[name]}({', '.join(_in_dtype_of(v, a))})"
        if name in _COMPOSED_UNARY:
            return _COMPOSED_UNARY[name].format(a[0])
        if name == "atan2":
            return f"_atan2({a[0]}, {a[1]})"
        if name == "hypot":
            return f"_hypot({a[0]}, {a[1]})"
        if name == "gcd":  # a loop (Euclid's): operands as blocks, as pow's
            a = [literal_block(t, x, "[1]", register_dtype(x.dtype)) if isinstance(x, Constant) else t
                 for t, x in zip(a, v.args)]
            return f"_int_gcd({a[0]}, {a[1]}, {_signed(v.dtype)})"
        if name == "pow":
            # The helpers test their operands elementwise: give a scalar literal a (broadcastable) block.
            a = [literal_block(t, x, "[1]", register_dtype(x.dtype)) if isinstance(x, Constant) else t
                 for t, x in zip(a, v.args)]
            return f"_pow({a[0]}, {a[1]})" if floating else f"_int_pow({a[0]}, {a[1]})"
        if name in ("floordiv", "remainder", "fmod") and floating:
            # As ATen's floating kernels (CPU and CUDA alike), all three from the exact fmod: C's fmod
            # is libdevice's on a GPU and numpy's behind the interpreter's `%`. Formulas through a / b
            # round the quotient first: floor_divide(1.0, 0.1) gave 10 (ATen: 9, as 0.1f is above 1/10),
            # remainder(1.0, 0.1) 0 (ATen: 0.0999...), remainder(-1, 1e-39) inf where a / b overflows.
            a = _in_dtype_of(v, a)
            exact = f"({a[0]} % {a[1]})" if self.interpret else f"libdevice.fmod({a[0]}, {a[1]})"
            if name == "fmod":
                return exact
            if name == "remainder":
                return f"_float_remainder({exact}, {a[1]})"
            return f"_float_floordiv({a[0]}, {a[1]}, {exact})"
        # A literal has no `.to` in Triton: its sign bit is known here.
        constant_sign = [math.copysign(1.0, float(x.value)) < 0 if isinstance(x, Constant) else None for x in v.args]
        if name == "signbit" and constant_sign[0] is not None:
            return "True" if constant_sign[0] else "False"
        if name == "signbit":
            bits, _ = _float_bits(v.args[0].dtype)
            source = a[0] if v.args[0].dtype in (torch.float32, torch.float64) else f"{a[0]}.to(tl.float32)"
            return f"({source}.to({bits}, bitcast=True) < 0)"
        if name == "copysign":
            # C's copysign, bit for bit: the magnitude's bits but the sign bit, and the sign's (a NaN's
            # too: abs(x) * -1 keeps a NaN positive). The GPU calls libdevice's, above.
            bits, sign = _float_bits(v.dtype)
            a = _in_dtype_of(v, a)  # a literal in the op's dtype (Python's float is float32 to Triton)
            magnitude = f"({a[0]}.to({bits}, bitcast=True) & {-sign - 1})"
            if constant_sign[1] is not None:  # a literal has no `.to`: its sign is known here
                signed = f"({magnitude} | {sign})" if constant_sign[1] else magnitude
            else:
                signed = f"({magnitude} | ({a[1]}.to({bits}, bitcast=True) & {sign}))"
            return f"{signed}.to({register_dtype(v.dtype)}, bitcast=True)"
        if name == "bitwise_not":
            return f"(~{a[0]})"
        if name in ("lshift", "rshift"):
            # As ATen's: a shift below 0 or past the width is defined (LLVM's would be poison), so the
            # amount is clamped into range first and the result chosen after. (Lowering shifts integers
            # only; other dtypes print the bare operator, like bitwise_and's.)
            if v.dtype.is_floating_point or v.dtype == torch.bool:
                return f"({a[0]} {'<<' if name == 'lshift' else '>>'} {a[1]})"
            width = torch.iinfo(v.dtype).bits
            signed = torch.iinfo(v.dtype).min < 0
            top = width - 1 if name == "rshift" and signed else width
            outside = f"(({a[1]} < 0) | ({a[1]} >= {top}))"
            if name == "lshift":
                return f"tl.where({outside}, 0, {a[0]} << tl.where({outside}, 0, {a[1]}))"
            if signed:  # the sign fill: a >> (width - 1)
                return f"({a[0]} >> tl.where({outside}, {top}, {a[1]}))"
            return f"tl.where({outside}, 0, {a[0]} >> tl.where({outside}, 0, {a[1]}))"
        if name == "tanh":
            return f"(2.0 * tl.sigmoid(2.0 * {a[0]}) - 1.0)"
        if name == "log1p":
            return f"_log1p({a[0]})"
        if name == "expm1":
            return f"_expm1({a[0]})"
        if name == "trunc":
            return f"tl.where({a[0]} >= 0, tl.floor({a[0]}), tl.ceil({a[0]}))"
        if name == "round":
            return f"_round_half_even({a[0]})"
        if name == "neg":
            # Triton 3.6 compiles a float's `-x` as 0 - x, which makes -(+0.0) +0.0 (seen on the H200), and
            # x * -1 keeps a NaN's sign (the sign of atan(inf + nan i)'s zero came from one): the sign bit
            # flipped, as C++'s -x and eager's negation do, for every value.
            if not floating or isinstance(v.args[0], Constant):
                return f"(-{a[0]})"
            bits, sign = _float_bits(v.dtype)
            return f"({a[0]}.to({bits}, bitcast=True) ^ {sign}).to({register_dtype(v.dtype)}, bitcast=True)"
        if name == "reciprocal":
            return _divide(v, a)
        if name in ("maximum", "minimum"):
            nan = ", propagate_nan=tl.PropagateNan.ALL" if floating else ""
            return f"tl.{name}({a[0]}, {a[1]}{nan})"
        if name == "isnan":
            return f"({a[0]} != {a[0]})"
        if name == "logical_not":
            return f"({a[0]} == 0)"
        if name == "where":
            if isinstance(v.args[1], Constant) and isinstance(v.args[2], Constant):
                dtype = register_dtype(v.dtype)
                if not self.interpret and dtype == "tl.float32" and any(
                        _is_negative_zero(x.value, x.dtype) for x in v.args[1:]):
                    sides = [_opaque_negative_zero(a[0]) if _is_negative_zero(x.value, x.dtype) else t
                             for t, x in zip(a[1:], v.args[1:])]
                    return f"tl.where({a[0]}, {sides[0]}, {sides[1]})"
                # Two literals make a float32 (or int32) block: give it the op's dtype, else a float64
                # where(c, 1.0, 0.0) reaches libdevice as float32 and an int64 one can overflow.
                return f"tl.where({a[0]}, {literal_block(a[1], v.args[1], '[]', dtype)}, {a[2]})"
            return f"tl.where({a[0]}, {a[1]}, {a[2]})"
        if name == "recurrence":
            # Operands as blocks (a literal has none), the coefficients as plain numbers.
            blocks = [literal_block(t, x, "[1]", register_dtype(x.dtype)) if isinstance(x, Constant) else t
                      for t, x in zip(a[:4], v.args[:4])]
            return f"_recurrence({', '.join(blocks + a[4:])})"
        if name == "sign":  # two comparisons, as ATen's: NaN and -0.0 give 0
            return f"tl.where({a[0]} > 0, 1, tl.where({a[0]} < 0, -1, 0)).to({register_dtype(v.dtype)})"
        if name in ("floordiv", "truncdiv", "remainder", "fmod"):
            if floating:  # truncdiv: ATen's is trunc(a / b)
                q = _divide(v, a)
                return f"tl.where({q} >= 0, tl.floor({q}), tl.ceil({q}))"
            if self.interpret and not _nonzero_constant(v.args[1]):
                self._check_divisor(a[1])
            return f"_int_{name}({a[0]}, {a[1]}, {_signed(v.dtype)})"
        raise NotImplementedError(f"Triton codegen has no primitive {name!r}")

    def _check_divisor(self, divisor: str) -> None:
        line = f"_check_divisor({divisor}, {self.mask})"
        if line not in self.lines:  # a divisor already checked in this scope
            self.lines.append(line)


def _divide(v: Value, operands: list[str]) -> str:
    """v's float division (a reciprocal when it has one operand) rounded as IEEE, and eager, round it:
    Triton's `/` on float32 is div.full.f32, within 2 ulp (on an H100, 29% of random quotients
    differed from eager's); div_rn is exact. float64's `/` is IEEE already, and an operand in float64
    makes Triton divide in float64 (as C++ would); integers and literals are made float32 first."""
    widths = {register_dtype(x.dtype) for x in v.args if not isinstance(x, Constant)}
    ieee = register_dtype(v.dtype) == "tl.float32" and "tl.float64" not in widths
    if ieee:
        operands = _in_dtype_of(v, operands)
    dividend, divisor = ("1.0", operands[0]) if len(operands) == 1 else operands
    return f"tl.math.div_rn({dividend}, {divisor})" if ieee else f"({dividend} / {divisor})"


def _in_dtype_of(v: Value, operands: list[str]) -> list[str]:
    """The operands of a libdevice call, each in the op's register dtype (a literal made a block)."""
    want = register_dtype(v.dtype)
    return [literal_block(t, x, "[]", want) if isinstance(x, Constant)
            else t if register_dtype(x.dtype) == want else f"{t}.to({want})" for t, x in zip(operands, v.args)]


def _signed(dtype: torch.dtype) -> bool:
    """Whether an integer dtype has negative values (the division helpers' `signed`)."""
    return dtype != torch.bool and not dtype.is_floating_point and torch.iinfo(dtype).min < 0


def _nonzero_constant(value: Value) -> bool:
    return isinstance(value, Constant) and value.value != 0


HELPERS = '''
@triton.jit
def _int_quotient(a, safe, signed: tl.constexpr):
    # a // safe, its rounding corrected by the callers; the most negative value over -1 wraps, as on the
    # CPU (the hardware's quotient overflows there: x86 traps, a GPU's is unspecified). `signed` comes
    # from the printer: an operand may be a Python int, which has no dtype to ask.
    q = a // safe
    if signed:
        q = tl.where(safe == -1, 0 - a, q)
    return q


@triton.jit
def _int_floordiv(a, b, signed: tl.constexpr):
    # Correct the quotient with the remainder's sign, whatever rounding `//` uses on this target.
    safe = tl.where(b == 0, 1, b)
    q = _int_quotient(a, safe, signed)
    r = a - q * safe
    q = tl.where((r != 0) & ((r < 0) != (safe < 0)), q - 1, q)
    return tl.where(b == 0, 0, q)


@triton.jit
def _int_truncdiv(a, b, signed: tl.constexpr):
    safe = tl.where(b == 0, 1, b)
    q = _int_quotient(a, safe, signed)
    r = a - q * safe
    q = tl.where((r != 0) & ((r < 0) != (a < 0)), q + 1, q)
    return tl.where(b == 0, 0, q)


@triton.jit
def _int_remainder(a, b, signed: tl.constexpr):
    return a - _int_floordiv(a, b, signed) * b


@triton.jit
def _divide_ieee(a, b):
    # float32's `/` is Triton's approximate div.full.f32; div_rn rounds as IEEE (float64's `/` does).
    # The helpers' own divisions: an IR op's division is printed by `_divide`, which knows the dtypes.
    if a.dtype == tl.float32:
        return tl.math.div_rn(a, b.to(tl.float32))
    else:
        return a / b


@triton.jit
def _float_remainder(truncated, b):
    # truncated = fmod(a, b), moved by b where its sign differs from b's
    return tl.where((truncated != 0) & ((truncated < 0) != (b < 0)), truncated + b, truncated)


@triton.jit
def _float_floordiv(a, b, truncated):
    # ATen's floor division of floats: (a - fmod(a, b)) / b is an integer up to rounding, one less where
    # the remainder's sign differs from b's, rounded to the nearest integer; zero keeps a / b's sign.
    div = _divide_ieee(a - truncated, b)
    div = tl.where((truncated != 0) & ((truncated < 0) != (b < 0)), div - 1.0, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1.0, floored)
    quotient = _divide_ieee(a, b)
    return tl.where(b == 0, quotient, tl.where(div != 0, floored, quotient * 0.0))


@triton.jit
def _int_fmod(a, b, signed: tl.constexpr):
    return a - _int_truncdiv(a, b, signed) * b


@triton.jit
def _int_gcd(a, b, signed: tl.constexpr):
    # ATen's calc_gcd: Euclid's on the magnitudes (the most negative value stays itself, as std::abs
    # leaves it), every lane stepping until the block's last is done; C's remainder (`%` floors in the
    # interpreter).
    zero = a * 0 + b * 0
    a = tl.where(a < 0, zero - a, a) + zero
    b = tl.where(b < 0, zero - b, b) + zero
    while tl.max((a != 0).to(tl.int32)) > 0:
        live = a != 0
        divisor = tl.where(live, a, 1)
        a, b = tl.where(live, _int_fmod(b, divisor, signed), a), tl.where(live, divisor, b)
    return b


@triton.jit
def _int_pow(a, b):
    # By squaring over all 64 exponent bits; negative exponents as ATen: 1/a rounded toward zero.
    r = a * 0 + 1
    x = a
    e = tl.where(b < 0, 0, b)
    for _ in tl.static_range(64):
        r = tl.where((e & 1) != 0, r * x, r)
        x = x * x
        e = e >> 1
    odd = (b & 1) != 0
    negative = tl.where(a == 1, 1, tl.where(a == -1, tl.where(odd, -1, 1), 0))
    return tl.where(b < 0, negative, r)


@triton.jit
def _pow(a, b):
    # C pow's special cases, then |a| ** b with the sign of an odd integer power of a negative base.
    r = tl.exp2(b * tl.log2(tl.abs(a)))
    integral = tl.floor(b) == b
    odd = integral & ((b - 2.0 * tl.floor(b * 0.5)) == 1.0)  # NaN for an infinite b, which is not odd
    negative = a.to(tl.float32).to(tl.int32, bitcast=True) < 0  # -0.0 too: pow(-0.0, -1) is -inf
    r = tl.where(negative & odd, r * -1.0, r)  # not -r: see the neg primitive
    finite = (tl.abs(a) != float("inf")) & (tl.abs(b) != float("inf"))
    r = tl.where((a < 0) & finite & (tl.floor(b) != b), float("nan"), r)
    r = tl.where(b == 0, 1.0, r)
    return tl.where(a == 1, 1.0, r)


@triton.jit
def _atan(x):
    # Cephes' atanf: reduce |x| to [0, tan(pi/8)], then an odd polynomial; |error| ~1e-7.
    ax = tl.abs(x)
    big = ax > 2.414213562373095
    mid = (ax > 0.4142135623730950) & (ax <= 2.414213562373095)
    base = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0))
    t = tl.where(big, -1.0 / ax, tl.where(mid, (ax - 1.0) / (ax + 1.0), ax))
    z = t * t
    p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    r = base + p
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))  # atan(-0) is -0


@triton.jit
def _atan2(y, x):
    # atan(y / x) moved to the right quadrant; the signs of zeros as C's atan2.
    safe = tl.where(x == 0, 1.0, x)
    r = _atan(y / safe)
    pi = 3.141592653589793
    sign_y = tl.where(y.to(tl.float32).to(tl.int32, bitcast=True) < 0, -1.0, 1.0)
    r = tl.where(x < 0, r + sign_y * pi, r)
    x_negative = x.to(tl.float32).to(tl.int32, bitcast=True) < 0
    r = tl.where(x == 0, tl.where(y == 0, tl.where(x_negative, sign_y * pi, y * 1.0), sign_y * (pi / 2)), r)
    inf = float("inf")
    both_inf = (tl.abs(x) == inf) & (tl.abs(y) == inf)
    r = tl.where(both_inf, sign_y * tl.where(x > 0, pi / 4, 3 * pi / 4), r)
    return tl.where((x != x) | (y != y), x + y, r)


@triton.jit
def _hypot(a, b):
    # The larger magnitude times sqrt(1 + ratio^2): the squares of large or tiny parts (1e308, 1e-310)
    # would overflow or vanish. Infinite beats NaN, as in C's hypot.
    x = tl.abs(a)
    y = tl.abs(b)
    m = tl.where(x > y, x, y)
    n = tl.where(x > y, y, x)
    r = tl.where(m == 0, 0.0, n / tl.where(m == 0, 1.0, m))
    h = m * tl.sqrt(1.0 + r * r)
    inf = float("inf")
    h = tl.where((x != x) | (y != y), x + y, h)
    return tl.where((x == inf) | (y == inf), inf, h)


@triton.jit
def _log1p(x):
    # log(u) * x / (u - 1) with u = 1 + x: the digits of x that 1 + x rounded away come back (tl.log of
    # 1 + x alone kept none of x = 1e-12); x itself where 1 + x is 1.
    u = 1.0 + x
    d = u - 1.0
    r = tl.log(u) * (x / tl.where(d == 0, 1.0, d))
    return tl.where(d == 0, x, tl.where(u == float("inf"), u, r))


@triton.jit
def _expm1(x):
    # (u - 1) * x / log(u) with u = exp(x), the error of u cancelling out; x where u is 1, -1 where u - 1
    # is -1, and inf for inf.
    u = tl.exp(x)
    d = u - 1.0
    r = d * (x / tl.where(u == 1.0, 1.0, tl.log(u)))
    r = tl.where(u == 1.0, x, tl.where(d == -1.0, -1.0, r))
    return tl.where(u == float("inf"), u, r)


@triton.jit
def _sinh(x):
    s = x * x
    series = x * (1.0 + s * (1.0 / 6.0 + s * (1.0 / 120.0 + s * (1.0 / 5040.0))))
    return tl.where(tl.abs(x) < 0.5, series, 0.5 * (tl.exp(x) - tl.exp(-x)))


@triton.jit
def _asinh(x):
    ax = tl.abs(x)
    s = x * x
    series = x * (1.0 - s * (1.0 / 6.0 - s * (3.0 / 40.0 - s * (15.0 / 336.0))))
    r = tl.log(ax + tl.sqrt(s + 1.0))
    return tl.where(ax < 0.125, series, tl.where(x < 0, -r, r))


@triton.jit
def _round_to_bf16(x):
    # Round-to-nearest-even on the bits: the interpreter's own float->bf16 cast is not reliable.
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True))


@triton.jit
def _erf_f32(x):
    # The C++ backend's erf (see codegen/cpp/prelude.py): two fitted polynomials, no exp, no
    # division; |error| <= 1.3e-7. Used by the interpreter only (TritonPrinter.op says why).
    ax = tl.abs(x)
    s = x * x
    small = x * (((((-5.696634526e-04 * s + 4.934501048e-03) * s + -2.672697577e-02) * s
                   + 1.128078851e-01) * s + -3.761241467e-01) * s + 1.128379150e+00)
    u = (tl.minimum(ax, 4.0) - 2.5) * (1.0 / 1.5)
    mid = ((((((((((((-1.129996359e-03 * u + 1.851572642e-03) * u + 3.426040101e-03) * u
        + -1.079767318e-02) * u + 7.483686962e-03) * u + 9.810802527e-03) * u + -3.216435445e-02) * u
        + 4.632206392e-02) * u + -4.360219006e-02) * u + 2.819584621e-02) * u + -1.225590855e-02) * u
        + 3.266968930e-03) * u + 9.995930794e-01)
    mid = tl.where(ax < 4.0, tl.minimum(mid, 1.0), 1.0)  # past 4, erf is exactly +-1 in float
    large = tl.where(x < 0, -mid, mid)
    return tl.where(x != x, x, tl.where(ax <= 1.0, small, large))


@triton.jit
def _recurrence(x, n, p, q, a1, a0, b1, b0, c1, c0, d1, d0):
    # The `recurrence` primitive (C++: fc::recurrence): every lane steps to the block's largest n, a lane
    # past its own n keeps its value.
    zero = tl.zeros_like(x) + tl.zeros_like(p) + tl.zeros_like(q) + tl.zeros_like(n).to(x.dtype)
    degree = tl.zeros_like(zero).to(tl.int64) + n
    p = zero + p
    q = zero + q
    for k in range(1, tl.max(degree)):
        kk = zero + k
        r = ((a1 * kk + a0) * x + (b1 * kk + b0)) * q - (c1 * kk + c0) * p
        r = _divide_ieee(r, d1 * kk + d0)
        live = k < degree
        p, q = tl.where(live, q, p), tl.where(live, r, q)
    return tl.where(degree < 1, p, q)


@triton.jit
def _round_half_even(x):
    r = tl.floor(x + 0.5)
    return tl.where((r - x == 0.5) & ((r - 2.0 * tl.floor(r * 0.5)) != 0), r - 1.0, r)


@triton.jit
def _erfc(x):
    # In float64 and rounded once: 1 - erf(|x|) below 2 (erfc >= 4.7e-3 there), above it
    # exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + (2/2) / (x + ...))), 40 levels started at the fraction's
    # fixed point; erfc(-x) = 2 - erfc(x). Relative error ~1e-13 in the far tail (x^2's rounding).
    a = tl.abs(x.to(tl.float64))
    near = a < 2.0
    large = tl.where(near, 2.0, a)
    t = 0.5 * (large + tl.sqrt(large * large + 81.0))
    for k in tl.static_range(40, 0, -1):
        t = large + (0.5 * k) / t
    r = tl.where(near, 1.0 - tl.erf(tl.where(near, a, 0.0)), tl.exp(-large * large) / (1.7724538509055159 * t))
    return tl.where(x < 0, 2.0 - r, r).to(x.dtype)
'''

# Only in interpreter mode, where Python runs the kernels on CPU tensors: eager on the CPU raises
# RuntimeError("ZeroDivisionError") on an integer division by zero, so kernels note a zero divisor in
# a live lane here and the runtime raises after the call (fc_take_error, as the C++ prelude has).
# A GPU kernel cannot call Python: there, as eager CUDA does, no error is raised.
INTERPRETER_HELPERS = '''
_fc_error = [0]


def _note_zero_division():
    _fc_error[0] = 1


def _note_error(code):
    _fc_error[0] = int(code)


def fc_take_error():
    error, _fc_error[0] = _fc_error[0], 0
    return error


@triton.jit
def _check_divisor(b, mask):
    if tl.max(((b == 0) & mask).to(tl.int32)) > 0:
        _note_zero_division()


@triton.jit
def _check_position(inside, mask, code):
    if tl.max(((inside == 0) & mask).to(tl.int32)) > 0:
        _note_error(code)
'''


def pointer_offset(index: Index) -> str:
    """Offset text; an index that names no block variable is broadcast to a block, since Triton
    rejects a scalar pointer with a block mask."""
    text = f"({index.render()})"
    return text if index.free_vars() else f"{text} + 0 * xindex"


def _float_bits(dtype: torch.dtype) -> tuple[str, int]:
    """The integer type a float register of `dtype` is bitcast to, and its sign bit as a literal of that
    type (negative): neg, copysign and signbit read and write the sign through these."""
    return ("tl.int64", -(1 << 63)) if register_dtype(dtype) == "tl.float64" else ("tl.int32", -(1 << 31))


def triton_literal(value: object, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        f = float(value)
        if math.isnan(f) or math.isinf(f):
            return f'float("{f}")'
        if _is_negative_zero(value, dtype):
            return _negative_zero_block("[1]", dtype)
        return repr(f)
    return str(int(value))


def _is_negative_zero(value: object, dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and not isinstance(value, complex) and float(value) == 0.0 \
        and math.copysign(1.0, float(value)) < 0


def _negative_zero_block(shape: str, dtype: torch.dtype) -> str:
    """-0.0 made from its bits. Triton 3.6's compiler turns every -0.0 literal into +0.0 (`-0.0`,
    `float("-0.0")` and `tl.full([], -0.0, ...)` alike: measured on an H100, the TTIR holds a +0.0
    constant; the interpreter keeps the sign), so clamp(x, -0.0, 0.0) gave +0.0 where eager CUDA gives -0.0.
    Never 0-d: the interpreter's `&` refuses the comparisons of a 0-d block's tl.abs (numpy scalars)."""
    shape = "[1]" if shape == "[]" else shape
    if register_dtype(dtype) == "tl.float64":
        return f"tl.full({shape}, -9223372036854775808, tl.int64).to(tl.float64, bitcast=True)"
    return f"tl.full({shape}, -2147483648, tl.int32).to(tl.float32, bitcast=True)"


def _opaque_negative_zero(condition: str) -> str:
    """A float32 -0.0 block shaped as `condition`, made by one PTX move the compilers cannot see into.
    ptxas (Triton 3.6, H100) compiles a select between two immediates -0.0 and 1.0 (`selp.f32
    0f80000000, 0f3F800000`, which LLVM makes of our bitcast -0.0 too) as if the -0.0 were +0.0:
    where(x > 0, -0.0, 1.0) gave +0.0 where eager CUDA gives -0.0. With the -0.0 in a register the
    select keeps its bits (`SEL R, R0, 0x3f800000`; measured, scripts/probe_gpu_s54.py). Other pairs
    (-0.0 against 2.5 or 0.0) kept the sign; every float32 select between two literals with a -0.0 takes
    the register, as cheap as the immediate. GPU source only: the interpreter has no inline PTX."""
    return ('tl.inline_asm_elementwise("mov.b32 $0, 0x80000000;", "=r,r", '
            f'[({condition}).to(tl.int32)], dtype=tl.int32, is_pure=True, pack=1).to(tl.float32, bitcast=True)')


def literal_block(text: str, value: Value, shape: str, dtype: str) -> str:
    """A literal operand as a block of `shape` in register dtype `dtype` (helpers that test their
    operands elementwise, libdevice calls): `tl.full`, except for -0.0, which tl.full would make +0.0."""
    if isinstance(value, Constant) and _is_negative_zero(value.value, value.dtype):
        block = _negative_zero_block(shape, value.dtype)
        return block if register_dtype(value.dtype) == dtype else f"{block}.to({dtype})"
    return f"tl.full({shape}, {text}, {dtype})"


_next_pow2 = plan_passes.next_pow2


def choose_config(plan: KernelPlan, interpret: bool) -> dict:
    """Launch configuration by heuristic; the interpreter prefers few, large programs. Symbolic sizes:
    chosen for the example call's (any block size is correct; a symbolic row is always looped)."""
    xnumel, rnumel = hint(plan.xnumel), hint(plan.rnumel)
    if not plan.is_reduction:
        # A horizontal kernel: blocks sized for its largest segment (the interpreter then runs one
        # program per segment; a GPU as many as for that segment alone).
        xnumel = max((hint(seg.xnumel) for seg in plan.segments), default=xnumel)
        block = _next_pow2(min(xnumel, 1 << 16)) if interpret else min(1024, _next_pow2(xnumel))
        return {"XBLOCK": max(block, 1), "num_warps": 4 if block >= 512 else 1}
    if plan.columns:  # schedule/plan_passes.choose_reduction_layout: wide in x, a few rows per loop step
        if interpret:  # few, large programs
            return {"XBLOCK": min(_next_pow2(xnumel), 256), "RBLOCK": min(_next_pow2(rnumel), 256),
                    "num_warps": 4}
        return {"XBLOCK": min(plan_passes.COLUMN_XBLOCK, _next_pow2(xnumel)),
                "RBLOCK": min(COLUMN_RBLOCK, _next_pow2(rnumel)), "num_warps": COLUMN_NUM_WARPS}
    rblock = _next_pow2(rnumel)
    if rblock > PERSISTENT_MAX_RBLOCK:
        rblock = LOOPED_RBLOCK
    elif is_symbolic(plan.rnumel):  # looped (see _is_persistent): at least a warp's width per step
        rblock = max(rblock, 32)
    budget = (1 << 16) if interpret else 4096
    xblock = max(1, min(_next_pow2(xnumel), budget // rblock))
    warps = 16 if rblock >= 8192 else 8 if rblock >= 2048 else 4 if rblock >= 512 else 2
    return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps}


# Persistent rows up to this block are tuned over rows per program rather than over warps per row.
SHORT_ROW_RBLOCK = 64
# Kernels smaller than this keep the heuristic config: tuning costs compiles and cannot win much.
TUNE_MIN_ELEMENTS = 1 << 20


def candidate_configs(plan: KernelPlan, interpret: bool) -> tuple[dict, ...]:
    """The heuristic config first, then alternatives the GPU runtime may time (same source code)."""
    best = choose_config(plan, interpret)
    xnumel, rnumel = hint(plan.xnumel), hint(plan.rnumel)  # symbolic sizes: the example call's
    if interpret or xnumel * max(rnumel, 1) < TUNE_MIN_ELEMENTS:
        return (best,)
    # Each candidate costs one Triton compile at cold start (~0.3-0.5 s): keep the list short.
    out = [best]
    if plan.columns:  # looped: the source does not depend on RBLOCK, so both blocks may change
        for xblock, rblock, warps in ((128, 16, 4), (32, 64, 4), (64, 64, 8), (128, 32, 8)):
            if xblock <= _next_pow2(xnumel) and rblock <= _next_pow2(rnumel):
                out.append({"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps})
    elif not plan.is_reduction:
        for block, warps in ((2048, 8), (512, 4)):
            out.append({"XBLOCK": min(block, _next_pow2(xnumel)), "num_warps": warps})
    elif best["RBLOCK"] <= SHORT_ROW_RBLOCK:
        # Short rows (a per-pixel softmax over 19 classes): the heuristic packs many rows into each
        # program; fewer rows per thread keep more loads in flight when each element gathers.
        for xblock, warps in ((best["XBLOCK"], 8), (best["XBLOCK"] // 2, 4), (best["XBLOCK"] // 4, 4)):
            if xblock >= 1 and warps * 32 <= xblock * best["RBLOCK"]:
                out.append({"XBLOCK": xblock, "RBLOCK": best["RBLOCK"], "num_warps": warps})
    else:
        rblock = best["RBLOCK"]
        for xblock, warps in ((1, 4), (1, 16), (2, 8)):
            if xblock * rblock <= 16384 and xblock <= _next_pow2(xnumel) and warps * 32 <= xblock * rblock:
                out.append({"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps})
    unique = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return tuple(unique)


@dataclass(frozen=True)
class LaunchSite:
    """One launch the host program makes for a kernel: the function, its grid as Python text (over the
    size symbols where sizes are symbolic), whether the split reduction's workspaces follow the kernel's
    arguments, and the launch's meta-parameters. The host program prints these and the autotuner
    compiles them ahead (runtime/autotune.py), from this one list."""

    function: str
    grid: str
    workspaces: bool
    meta: tuple[tuple[str, Any], ...]


def launch_sites(kernel: KernelSource, config: dict) -> list[LaunchSite]:
    """The kernel's launches with `config`: one, or one per stage of a split reduction (its "chunks"
    stages on (blocks, programs) with `config`, its "rows" stages one program per row block with the
    split's own row config)."""
    if kernel.split is None:
        return [LaunchSite(kernel.name, launch_grid(kernel.xnumel, config, kernel.segments), False,
                           tuple(config.items()))]
    split, sites = kernel.split, []
    for function, kind in split.stages:
        meta = config if kind == "chunks" else split.row_config
        blocks = -(-kernel.xnumel // meta["XBLOCK"])
        grid = (blocks, split.programs) if kind == "chunks" else (blocks,)
        sites.append(LaunchSite(function, str(grid), True, tuple(meta.items())))
    return sites


def launch_grid(xnumel: int, config: dict, segments: tuple[int, ...] = ()) -> str:
    """The grid as text; a horizontal kernel's covers each segment in turn (`_segmented_kernel`)."""
    block = config['XBLOCK']
    if is_symbolic(xnumel) or any(is_symbolic(n) for n in segments):  # computed by the host at each call
        counts = [f"(({python_expr(n)}) + {block - 1}) // {block}" if is_symbolic(n) else str(max(-(-n // block), 1))
                  for n in (segments or (xnumel,))]
        return f"({' + '.join(counts)},)"
    if segments:
        return f"({sum(max(-(-n // block), 1) for n in segments)},)"
    return f"({max(-(-xnumel // block), 1)},)"


def _segmented_kernel(plan: KernelPlan, interpret: bool, stores_last: bool = False) -> list[str]:
    """Each program runs the one segment its program id falls in, as an ordinary pointwise kernel
    over that segment's elements. A segment of n elements takes cdiv(n, XBLOCK) programs (one if
    empty, as launch_grid counts them); the bounds are expressions of XBLOCK, so the source does not
    change with the block size the runtime picks. Separate `if`s, no `elif`: Triton merges names an
    if/else defines on both sides and demands equal types."""
    pid = "tl.program_id(0).to(tl.int64)" if _segments_index_dtype(plan) == "int64" else "tl.program_id(0)"
    lines = [f"    pid = {pid}"]
    previous = ""
    for k, seg in enumerate(plan.segments):
        count = f"({python_expr(seg.xnumel)} + XBLOCK - 1) // XBLOCK" if decide(seg.xnumel > 1) else "1"
        lines.append(f"    seg{k}_end = {previous + ' + ' if previous else ''}{count}")
        previous = f"seg{k}_end"
    for k, seg in enumerate(plan.segments):
        condition = f"pid < seg{k}_end" if k == 0 else f"(pid >= seg{k - 1}_end) & (pid < seg{k}_end)"
        offset = "pid" if k == 0 else f"(pid - seg{k - 1}_end)"
        lines += [f"    # segment {k}: {seg.xnumel} elements, source ops {', '.join(seg.origins)}",
                  f"    if {condition}:",
                  f"        xnumel = {python_expr(seg.xnumel)}",
                  f"        xindex = {offset} * XBLOCK + tl.arange(0, XBLOCK)",
                  "        xmask = xindex < xnumel"]
        lines += ["        " + ln for ln in _pointwise_body(_flat_steps(seg), interpret, stores_last)]
    return lines


def generate_triton_kernel(plan: KernelPlan, interpret: bool = True, aliased: frozenset[str] = frozenset()
                           ) -> KernelSource:
    """`aliased`: parameters pointing at one storage (MemoryPlan.inplace): each program then loads
    all it reads before it stores, so an element's old value is read before it is overwritten."""
    kernel = _generate_triton_kernel(plan, interpret, aliased)
    if interpret:
        return kernel
    kernel = _with_libdevice_note(kernel)
    # Triton drops device_assert unless the kernel is compiled with assertions on; its integer-overflow
    # checks, which debug also turns on, stay off (they would guard every index computation).
    # The options travel in each launch config, so the host program and autotuning pass them alike.
    options = {**EXACT_FLOAT_OPTIONS, **(ASSERT_OPTIONS if "tl.device_assert(" in kernel.source else {})}
    if not options:
        return kernel
    split = kernel.split and dataclasses.replace(kernel.split, row_config={**kernel.split.row_config, **options})
    return dataclasses.replace(kernel, config_space=tuple({**c, **options} for c in kernel.config_space),
                               split=split or None)


def _with_libdevice_note(kernel: KernelSource) -> KernelSource:
    """Each function that calls libdevice says, first in its body, how libdevice's square roots round. The
    line also keys Triton's on-disk cache, which sees a function's text but not the PTX rewrite: a binary
    with approximate square roots (an older fcompile's) is not reused."""
    if "libdevice." not in kernel.source:
        return kernel
    lines = kernel.source.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("def ")] + [len(lines)]
    out, after = lines[:starts[0]], []  # after: 1-based numbers of the lines a note follows
    for start, end in zip(starts, starts[1:]):
        body = lines[start:end]
        out.append(body[0])
        if any("libdevice." in line for line in body):
            out.append(f"    # {LIBDEVICE_NOTE}")
            after.append(start + 1)
        out += body[1:]
    origins = tuple((n + sum(n > k for k in after), names) for n, names in kernel.line_origins)
    return dataclasses.replace(kernel, source="\n".join(out), line_origins=origins)


def _generate_triton_kernel(plan: KernelPlan, interpret: bool, aliased: frozenset[str]) -> KernelSource:
    if plan.split > 1:
        return _split_reduction_kernels(plan, interpret)
    configs = candidate_configs(plan, interpret)
    config = configs[0]
    # A row of symbolic length never fits one block for every size: looped.
    persistent = (plan.is_reduction and not plan.columns and not is_symbolic(plan.rnumel)
                  and _next_pow2(plan.rnumel) <= PERSISTENT_MAX_RBLOCK)
    sizes = symbols_in(plan)
    args = [n for n, _ in plan.inputs] + [n for n, _ in plan.outputs] + list(sizes)
    constexprs = ["XBLOCK: tl.constexpr"] + (["RBLOCK: tl.constexpr"] if plan.is_reduction else [])
    # Sizes unspecialized: Triton would compile again for a size of 1 and for multiples of 16 (a stall of
    # ~0.3 s a kernel mid-decode, each time a growing cache reached such a length); one binary serves all.
    jit = f"@triton.jit(do_not_specialize={list(sizes)!r})" if sizes else "@triton.jit"
    lines = [jit, f"def {plan.name}({', '.join(args + constexprs)}):", *_header(plan)]
    if aliased and (plan.is_reduction or plan.scatters):
        raise ValueError(f"{plan.name}: only pointwise kernels write an input in place")
    if plan.segments:
        lines += _segmented_kernel(plan, interpret, stores_last=bool(aliased))
        source, line_origins = split_origins(lines)
        return KernelSource(name=plan.name, backend="triton", source=source, signature=plan.arguments,
                            grid=launch_grid(plan.xnumel, config, _numels(plan)), config_space=configs,
                            origins=plan.origins, xnumel=plan.xnumel, kind="pointwise",
                            checks_int_div=interpret and plan.may_flag_errors(), segments=_numels(plan),
                            line_origins=line_origins, index_dtype=_segments_index_dtype(plan), size_args=sizes)
    lines.append(f"    xnumel = {python_expr(plan.xnumel)}")
    steps = _flat_steps(plan)
    if plan.is_reduction:
        lines += [f"    rnumel = {python_expr(plan.rnumel)}",
                  f"    xindex = {_program_id(plan, 0)} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                  "    xmask = xindex < xnumel"]
        body = _reduction_body(plan, steps, persistent, interpret)
    else:
        lines += [f"    xindex = {_program_id(plan, 0)} * XBLOCK + tl.arange(0, XBLOCK)",
                  "    xmask = xindex < xnumel"]
        body = _pointwise_body(steps, interpret, stores_last=bool(aliased))
    lines += ["    " + ln for ln in body]
    source, line_origins = split_origins(lines)
    return KernelSource(name=plan.name, backend="triton", source=source, signature=plan.arguments,
                        grid=launch_grid(plan.xnumel, config), config_space=configs, origins=plan.origins,
                        xnumel=plan.xnumel, kind=_kind(plan),
                        checks_int_div=interpret and plan.may_flag_errors(), line_origins=line_origins,
                        index_dtype=plan.index_dtype, size_args=sizes)


def _kind(plan: KernelPlan) -> str:
    return "reduction" if plan.is_reduction else "scatter" if plan.scatters else "pointwise"


def _numels(plan: KernelPlan) -> tuple[int, ...]:
    return tuple(seg.xnumel for seg in plan.segments)


def _segments_index_dtype(plan: KernelPlan) -> str:
    """A horizontal kernel indexes in int64 when any of its segments needs it (plan_passes decided each)."""
    return "int64" if any(seg.index_dtype == "int64" for seg in plan.segments) else "int32"


def _header(plan: KernelPlan) -> list[str]:
    return [f"    # source ops: {', '.join(plan.origins)}"] + [f"    # {note}" for note in plan.notes]


def _row_positions(plan: KernelPlan) -> str:
    """The [1, RBLOCK] positions along a row, in the kernel's index type: an offset made of row
    positions alone (a strided slice summed whole: r0 * 100000) never meets the int64 program id."""
    positions = "tl.arange(0, RBLOCK)[None, :]"
    return f"{positions}.to(tl.int64)" if plan.index_dtype == "int64" else positions


def _program_id(plan: KernelPlan, axis: int) -> str:
    """The program id in the kernel's index type: everything computed from it (xindex, rindex, every
    offset) is then int64 too when the plan says int64, so no product wraps at 2**31."""
    pid = f"tl.program_id({axis})"
    return f"{pid}.to(tl.int64)" if plan.index_dtype == "int64" else pid


def _flat_steps(plan: KernelPlan) -> list[Step]:
    """Rewrite every index from the kernel's multi-dim variables to flat xindex / rindex."""
    # Upper bounds for simplifying divisions: a pointwise kernel's rindex is 0; a symbolic row length
    # is its own bound (Python's max would ask sympy whether the size is below 1, which it cannot say).
    rbound = plan.rnumel if is_symbolic(plan.rnumel) else max(plan.rnumel, 1)
    ranges = {"xindex": plan.xnumel, "rindex": rbound}
    mapping: dict[str, Index] = {}
    for prefix, flat, sizes in (("x", "xindex", plan.space.x), ("r", "rindex", plan.space.r)):
        # An empty space (a size 0) has no live lane: any mapping will do, as long as none divides by 0.
        sizes = tuple(size if decide(size >= 1) else 1 for size in sizes)  # max(size, 1), a symbolic one guarded
        stride = 1
        for k in reversed(range(len(sizes))):
            q = floordiv(Index.var(flat), stride, ranges)
            mapping[f"{prefix}{k}"] = q if k == 0 else mod(q, sizes[k], ranges)
            stride *= sizes[k]
    out = []
    for s in plan.steps:
        store = s.store_index.subs(mapping, ranges) if s.store_index is not None else None
        out.append(dataclasses.replace(s.map_values(lambda v: subs_index(v, mapping, ranges)), store_index=store))
    return out


def _store(step: Step, value: str, mask: str, shape: str, reduced: bool = False) -> str:
    """`reduced`: `value` names the step's reduction result (a block), not its value expression, which
    may be a constant (the sum of `ones_like(x)`) while the result is not a scalar."""
    if not reduced and not _depends_on_position(step.value):
        value = f"tl.full({shape}, {value}, {register_dtype(step.value.dtype)})"
    cast = f".to({TL_TYPE[step.store_dtype]})" if step.store_dtype != torch.bool else ".to(tl.int1)"
    return f"tl.store({step.store_buffer} + {pointer_offset(step.store_index)}, ({value}){cast}, {mask})"


def _scattered_store(printer: TritonPrinter, step: Step) -> str:
    """A scatter's step: its value added into positions read from memory, one atomic add per lane (lanes of
    one block may hit one element: a plain load-add-store would lose all but one), or stored there (an
    overwrite). A lane whose position is out of range writes nothing; the position check has flagged it
    (the runtime raises eager's error)."""
    value = printer.emit(step.value)
    if not _depends_on_position(step.value):
        value = literal_block(value, step.value, "[XBLOCK]", register_dtype(step.value.dtype))
    offset, lanes = pointer_offset(step.store_index), "xmask"
    for t in step.store_positions:
        raw = printer.emit(t.value)
        checked = printer.named(printer.position(t, raw, None), t.value)
        offset += f" + {checked}" if t.stride == 1 else f" + {checked} * {python_expr(t.stride)}"
        lanes += f" & ({raw} >= 0) & ({raw} < {python_expr(t.size)})"
    if step.accumulate == "overwrite":  # lanes landing on one element: one of them wins, as on eager CUDA
        return f"tl.store({step.store_buffer} + {offset}, ({value}).to({TL_TYPE[step.store_dtype]}), mask={lanes})"
    return (f"tl.atomic_add({step.store_buffer} + {offset}, ({value}).to({TL_TYPE[step.store_dtype]}), "
            f"mask={lanes}, sem=\"relaxed\")")


def _depends_on_position(value: Value) -> bool:
    return any(isinstance(v, (Load, IndexValue, ReductionResult)) for v in walk(value))


def _pointwise_body(steps: list[Step], interpret: bool, stores_last: bool = False) -> list[str]:
    """`stores_last`: all loads before the first store (steps never read what their kernel stores)."""
    printer = TritonPrinter("xmask", interpret)
    stores = []
    for s in steps:
        printer.origins = s.origins
        store = _scattered_store(printer, s) if s.accumulate else _store(s, printer.emit(s.value), "xmask", "[XBLOCK]")
        stores.append(printer.mark(store))
        if not stores_last:
            printer.lines += stores
            stores = []
    return printer.lines + stores


_INIT = {"sum": "0", "prod": "1", "amax": 'float("-inf")', "amin": 'float("inf")', "sumexp": "0"}


def _init_value(kind: str, dtype: torch.dtype) -> str:
    if dtype.is_floating_point or kind in ("sum", "prod"):
        return _INIT[kind]
    if dtype == torch.bool:  # any() / all() as amax / amin: torch.iinfo has no bool
        return "0" if kind == "amax" else "1"
    info = torch.iinfo(dtype)
    return str(info.min if kind == "amax" else info.max)


def _finish_reduction(kind: str, block: str, dtype: torch.dtype) -> list[str]:
    """Reduce a [XBLOCK, RBLOCK] block along the row; NaN propagates for max/min like PyTorch."""
    fn = {"sum": "tl.sum", "prod": None, "amax": "tl.max", "amin": "tl.min"}[kind]
    if fn is None:
        return [f"_red = tl.reduce({block}, 1, _mul_combine)[:, None]"]
    if kind in ("amax", "amin") and dtype.is_floating_point:
        # One tree whose combine keeps a NaN: tl.max / tl.min drop NaN, and a second reduction
        # looking for one costs as much as the first.
        return [f"_red = tl.reduce({block}, 1, _{kind}_combine)[:, None]"]
    return [f"_red = {fn}({block}, 1)[:, None]"]


def _reduction_body(plan: KernelPlan, steps: list[Step], persistent: bool, interpret: bool) -> list[str]:
    row = TritonPrinter("xmask", interpret)
    full_mask = "xmask & rmask"
    by_node = {s.node: s for s in steps}
    if persistent:
        row.lines += [f"rindex = {_row_positions(plan)}", "rmask = rindex < rnumel"]
    full_scope = row.child() if persistent else None
    if full_scope is not None:
        full_scope.mask = full_mask
    for kind, group in plan.phases():
        group = [by_node[s.node] for s in group]
        if kind == "row":
            s = group[0]
            row.origins = s.origins
            row.lines.append(row.mark(_store(s, row.emit(s.value), "xmask", "[XBLOCK, 1]")))
            if full_scope is not None:
                full_scope.cache.update(row.cache)
            continue
        if persistent:
            scope = full_scope
            scope.lines = []
            scope.cache.update(row.cache)
            scope.counter = max(scope.counter, row.counter)
            for s in group:
                scope.origins = s.origins
                name = scope.emit(s.value)
                if s.reduction_type:
                    init = _init_value(s.reduction_type, s.value.dtype)
                    scope.lines.append(scope.mark(f"_blk = tl.where({full_mask}, {name}, {init})"))
                    scope.lines += map(scope.mark, _finish_reduction(s.reduction_type, "_blk", s.value.dtype))
                    scope.lines.append(scope.mark(f"red_{s.node} = _red"))
                    if s.store_buffer:
                        scope.lines.append(scope.mark(_store(s, f"red_{s.node}", "xmask", "[XBLOCK, 1]", reduced=True)))
                else:
                    scope.lines.append(scope.mark(_store(s, name, full_mask, "[XBLOCK, RBLOCK]")))
            row.lines += scope.lines
            row.counter = max(row.counter, scope.counter)
            continue
        reductions = [s for s in group if s.reduction_type]
        _accumulate(row, group, full_mask, "range(0, rnumel, RBLOCK)", f"roffset + {_row_positions(plan)}")
        for s in reductions:
            if s.centre is not None:
                row.origins = s.origins
                finish = _welford_finish(s, row.emit(s.centre))  # the centre reads reductions finished above
            elif s.online_max:
                finish = _online_sum_finish(s)
            else:
                finish = _finish_reduction(s.reduction_type, f"acc_{s.node}", s.value.dtype)
            row.lines += [row.mark(line, s.origins) for line in finish]
            row.lines.append(row.mark(f"red_{s.node} = _red", s.origins))
            if s.store_buffer:
                row.lines.append(row.mark(_store(s, f"red_{s.node}", "xmask", "[XBLOCK, 1]", reduced=True), s.origins))
    return row.lines


def _accumulate(row: TritonPrinter, group: list[Step], full_mask: str, loop: str, rindex: str) -> None:
    """One pass over the row in RBLOCK pieces: each reduction of `group` into its [XBLOCK, RBLOCK]
    accumulator `acc_<node>`, each other step stored."""
    reductions = [s for s in group if s.reduction_type]
    for s in reductions:
        if s.centre is not None:
            row.lines += [row.mark(line, s.origins) for line in _welford_init(s)]
            continue
        init = _init_value(s.reduction_type, s.value.dtype)
        row.lines.append(row.mark(f"acc_{s.node} = tl.full([XBLOCK, RBLOCK], {init}, "
                                  f"{register_dtype(s.value.dtype)})", s.origins))
    rescaled = {s.online_max for s in group if s.online_max}  # maxima an online sum is rescaled by
    inner = row.child()
    inner.mask = full_mask
    inner.lines += [f"rindex = {rindex}", "rmask = rindex < rnumel"]
    for s in group:
        inner.origins = s.origins
        name = inner.emit(s.value)
        if s.online_max:
            inner.lines += map(inner.mark, _online_sum_update(s, name, full_mask))
        elif s.centre is not None:
            inner.lines += map(inner.mark, _welford_update(s, name, full_mask))
        elif s.reduction_type:
            acc = f"acc_{s.node}"
            init = _init_value(s.reduction_type, s.value.dtype)
            v = f"tl.where({full_mask}, {name}, {init})"
            if s.node in rescaled:  # the online sum needs the max before this piece
                inner.lines.append(inner.mark(f"before_{s.node} = {acc}"))
            inner.lines.append(inner.mark(f"{acc} = {_combine(s, acc, v)}"))
        else:
            inner.lines.append(inner.mark(_store(s, name, full_mask, "[XBLOCK, RBLOCK]")))
    row.sync_counter(inner)
    row.lines.append(f"for roffset in {loop}:")
    row.lines += ["    " + ln for ln in inner.lines]


def _online_sum_update(s: Step, name: str, mask: str) -> list[str]:
    """One piece of an online sum(exp(x - M)) (plan_passes.online_softmax), after the piece's update of
    M's accumulator: the lane's sum is rescaled from the max before the piece to the max after it, and
    the piece's terms are added at the new max. A lane whose max did not move keeps its scale (so -inf
    against -inf never makes a NaN), and an -inf element adds 0, as exp(-inf - M) does for any M but
    -inf, the case `_online_sum_finish` restores."""
    acc, peak, before = f"acc_{s.node}", f"acc_{s.online_max}", f"before_{s.online_max}"
    v = f"v_{s.node}"
    return [f"{v} = tl.where({mask}, {name}, float('-inf'))",
            f"{acc} = {acc} * tl.where({before} == {peak}, 1.0, tl.exp({before} - {peak})) + "
            f"tl.where({v} == float('-inf'), 0.0, tl.exp({v} - {peak}))"]


def _online_sum_finish(s: Step) -> list[str]:
    """The lanes' sums brought to the row's max `red_<M>` (finished before) and added; a row whose max is
    -inf (every element -inf) sums exp(-inf - -inf) = NaN in eager PyTorch, and so here."""
    acc, peak, row_max = f"acc_{s.node}", f"acc_{s.online_max}", f"red_{s.online_max}"
    return [f"_red = tl.sum({acc} * tl.where({peak} == {row_max}, 1.0, tl.exp({peak} - {row_max})), 1)[:, None]",
            f"_red = tl.where({row_max} == float('-inf'), float('nan'), _red)"]


def _welford_init(s: Step) -> list[str]:
    """Per lane of a Welford step (plan_passes.welford): how many elements it has seen, their mean, and
    M2 = the sum of their squared distances to that mean (in `acc_<node>`). The count is fp32: a lane
    sees rnumel / RBLOCK elements, exact far below 2**24."""
    dtype = register_dtype(s.value.dtype)
    return [f"count_{s.node} = tl.full([XBLOCK, RBLOCK], 0, tl.float32)",
            f"mean_{s.node} = tl.full([XBLOCK, RBLOCK], 0, {dtype})",
            f"acc_{s.node} = tl.full([XBLOCK, RBLOCK], 0, {dtype})"]


def _welford_update(s: Step, name: str, mask: str) -> list[str]:
    """One piece of a Welford step: each live lane takes its element x into its count, mean and M2
    (mean += (x - mean) / count; M2 += (x - old mean) * (x - new mean)). A masked lane (past the row's
    end) changes nothing, whatever its x; a NaN or inf element makes its lane's M2 NaN, as eager's var."""
    count, mean, m2, delta = f"count_{s.node}", f"mean_{s.node}", f"acc_{s.node}", f"delta_{s.node}"
    return [f"{count} = {count} + tl.where({mask}, 1.0, 0.0)",
            f"{delta} = tl.where({mask}, {name} - {mean}, 0.0)",
            f"{mean} = {mean} + _divide_ieee({delta}, tl.maximum({count}, 1.0))",
            f"{m2} = {m2} + tl.where({mask}, {delta} * ({name} - {mean}), 0.0)"]


def _welford_finish(s: Step, centre: str) -> list[str]:
    """The lanes combined around the row's `centre` (its mean, finished before): the sum over the lanes
    of M2 + count * (lane mean - centre)**2 is sum((x - centre)**2) over the row, all terms >= 0 (no
    cancellation). Lanes that saw nothing (rows past xnumel) add 0."""
    count, mean, m2 = f"count_{s.node}", f"mean_{s.node}", f"acc_{s.node}"
    return [f"_dev = {mean} - {centre}",
            f"_red = tl.sum(tl.where({count} > 0, {m2} + {count} * _dev * _dev, 0.0), 1)[:, None]"]


def _combine(step: Step, acc: str, value: str) -> str:
    return {"sum": f"{acc} + {value}", "prod": f"{acc} * {value}",
            "amax": f"tl.maximum({acc}, {value}{_nan_arg(step)})",
            "amin": f"tl.minimum({acc}, {value}{_nan_arg(step)})"}[step.reduction_type]


# The split reduction's first kernel: elements per loop step, and warps (16 fp32 per thread in flight).
SPLIT_RBLOCK = 4096
SPLIT_NUM_WARPS = 8
# A column reduction's tile (plan_passes.choose_reduction_layout): COLUMN_XBLOCK columns by COLUMN_RBLOCK
# rows, 2048 elements, loaded row by row as contiguous pieces.
COLUMN_RBLOCK = 32
COLUMN_NUM_WARPS = 4


def _split_reduction_kernels(plan: KernelPlan, interpret: bool) -> KernelSource:
    """A reduction split across `plan.split` programs per row (schedule/plan_passes.py).

    Each pass over the row (the plan's loop phases: one for a sum, two for var, three for a softmax over
    a whole tensor) becomes two kernels.  `<name>_partials`, on a grid (rows, programs): program (x, p)
    runs the pass over elements [p*CHUNK, (p+1)*CHUNK) of row x, storing the elements it writes and one
    partial per reduction at partials[x * programs + p].  `<name>_finish`, one program per row, reduces
    the row's partials in a fixed order (the same result on every run, unlike atomics), keeps in a
    results workspace what a later pass reads (var's mean), and runs the row's steps that follow the pass
    (mean's scaling, stores).  NaN propagates through both, as in eager."""
    steps = _flat_steps(plan)
    by_node = {s.node: s for s in steps}
    passes: list[tuple[list[Step], list[Step]]] = []  # (the pass's steps, the row steps after it)
    for kind, group in plan.phases():
        if kind == "loop":
            passes.append(([by_node[s.node] for s in group], []))
        else:
            passes[-1][1].append(by_node[group[0].node])
    programs = plan.split
    per_program = -(-plan.rnumel // programs)
    # Rows: one row per program, long loop steps. Columns: COLUMN_XBLOCK adjacent columns per program
    # (contiguous loads), a few rows per loop step; the finishing kernel takes as many columns.
    xblock = min(plan_passes.COLUMN_XBLOCK, _next_pow2(plan.xnumel)) if plan.columns else 1
    rblock = min(COLUMN_RBLOCK if plan.columns else SPLIT_RBLOCK, _next_pow2(per_program))
    chunk = -(-per_program // rblock) * rblock  # a multiple of RBLOCK: chunks never overlap

    # Workspaces: the partials of every reduction, and the results of those a later kernel reads.
    reductions = [s for loop, _ in passes for s in loop if s.reduction_type]
    read_later: set[str] = set()
    for i, (loop, _) in enumerate(passes):
        for later_loop, later_rows in passes[i + 1:]:
            read_later |= _reads_reductions(later_loop + later_rows) & {s.node for s in loop}
    partial_ws = {s.node: f"partials_{k}" for k, s in enumerate(reductions)}
    result_ws = {s.node: f"results_{k}" for k, s in enumerate(r for r in reductions if r.node in read_later)}
    spaces = [(partial_ws[s.node], plan.xnumel * programs, s) for s in reductions]
    spaces += [(result_ws[s.node], plan.xnumel, s) for s in reductions if s.node in result_ws]
    args = [n for n, _ in plan.inputs] + [n for n, _ in plan.outputs] + [w for w, _, _ in spaces]
    dtype_of = {s.node: s.value.dtype for s in reductions}

    def earlier_results(printer: TritonPrinter, needed: set[str]) -> None:
        for node in sorted(needed & set(result_ws)):
            printer.lines.append(f"red_{node} = tl.load({result_ws[node]} + xindex, xmask, other=0)"
                                 f".to({register_dtype(dtype_of[node])})")

    several = len(passes) > 1
    sources, stages = [], []
    for i, (loop, rows) in enumerate(passes):
        suffix = str(i + 1) if several else ""
        first = TritonPrinter("xmask", interpret)
        earlier_results(first, _reads_reductions(loop))
        _accumulate(first, loop, "xmask & rmask", f"range(0, {chunk}, RBLOCK)",
                    "rstart + roffset + tl.arange(0, RBLOCK)[None, :]")
        for s in loop:
            if s.reduction_type:
                first.lines += _finish_reduction(s.reduction_type, f"acc_{s.node}", s.value.dtype)
                first.lines.append(f"tl.store({partial_ws[s.node]} + xindex * {programs} + tl.program_id(1), _red, "
                                   "xmask)")
        what = f"pass {i + 1} of {len(passes)} over the row" if several else "the pass over the row"
        sources.append("\n".join([
            "@triton.jit",
            f"def {plan.name}_partials{suffix}({', '.join(args)}, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):",
            *(_header(plan) if i == 0 else [f"    # source ops: {', '.join(plan.origins)}"]),
            f"    # {what}: program (x, p) covers elements [p*{chunk}, (p+1)*{chunk}) of row x",
            f"    xnumel = {python_expr(plan.xnumel)}", f"    rnumel = {python_expr(plan.rnumel)}",
            f"    xindex = {_program_id(plan, 0)} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
            "    xmask = xindex < xnumel",
            f"    rstart = {_program_id(plan, 1)} * {chunk}",
        ] + ["    " + ln for ln in first.lines]))
        stages.append((f"{plan.name}_partials{suffix}", "chunks"))

        second = TritonPrinter("xmask", interpret)
        earlier_results(second, _reads_reductions(rows) - {s.node for s in loop})
        for s in loop:
            if not s.reduction_type:
                continue
            init = _init_value(s.reduction_type, s.value.dtype)
            second.lines.append(f"_part = tl.load({partial_ws[s.node]} + xindex * {programs} + sindex, "
                                f"xmask & smask, other={init})")
            second.lines += _finish_reduction(s.reduction_type, "_part", s.value.dtype)
            second.lines.append(f"red_{s.node} = _red")
            if s.node in result_ws:
                second.lines.append(f"tl.store({result_ws[s.node]} + xindex, red_{s.node}, xmask)")
            if s.store_buffer:
                second.lines.append(_store(s, f"red_{s.node}", "xmask", "[XBLOCK, 1]", reduced=True))
        for s in rows:
            second.lines.append(_store(s, second.emit(s.value), "xmask", "[XBLOCK, 1]"))
        if not second.lines:
            continue  # a pass that only stores elements (softmax's last): nothing to finish
        sources.append("\n".join([
            "@triton.jit",
            f"def {plan.name}_finish{suffix}({', '.join(args)}, XBLOCK: tl.constexpr, SBLOCK: tl.constexpr):",
            f"    # reduces the {programs} partials of each row of {plan.name}_partials{suffix}",
            f"    xnumel = {python_expr(plan.xnumel)}",
            f"    xindex = {_program_id(plan, 0)} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
            "    xmask = xindex < xnumel",
            "    sindex = tl.arange(0, SBLOCK)[None, :]",
            f"    smask = sindex < {programs}",
        ] + ["    " + ln for ln in second.lines]))
        stages.append((f"{plan.name}_finish{suffix}", "rows"))

    warps = COLUMN_NUM_WARPS if plan.columns else SPLIT_NUM_WARPS if rblock >= 2048 else 4
    config = {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps}
    split = SplitLaunch(programs=programs, stages=tuple(stages),
                        workspaces=tuple((n, _workspace_dtype(s.value.dtype)) for _, n, s in spaces),
                        row_config={"XBLOCK": xblock, "SBLOCK": _next_pow2(programs), "num_warps": 4})
    blocks = -(-plan.xnumel // xblock)
    grid = ", ".join(f"({blocks}, {programs})" if kind == "chunks" else f"({blocks},)" for _, kind in stages)
    source, line_origins = split_origins("\n\n\n".join(sources).split("\n"))
    return KernelSource(name=plan.name, backend="triton", source=source, signature=plan.arguments,
                        grid=f"{len(stages)} launches: {grid}", config_space=(config,), origins=plan.origins,
                        xnumel=plan.xnumel, kind="reduction", checks_int_div=interpret and plan.may_flag_errors(),
                        index_dtype=plan.index_dtype, split=split, line_origins=line_origins)


def _reads_reductions(steps: list[Step]) -> set[str]:
    return {v.node for s in steps for v in walk(s.value) if isinstance(v, ReductionResult)}


def _workspace_dtype(dtype: torch.dtype) -> torch.dtype:
    """Partials are kept in the accumulator's register type: fp32 for bf16/fp16 values."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def _nan_arg(step: Step) -> str:
    return ", propagate_nan=tl.PropagateNan.ALL" if step.value.dtype.is_floating_point else ""


# Combine functions of tl.reduce: a product, and a max and min that keep NaN (_finish_reduction).
COMBINE_FUNCTIONS = '''
@triton.jit
def _mul_combine(a, b):
    return a * b


@triton.jit
def _amax_combine(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _amin_combine(a, b):
    return tl.where((a < b) | (a != a), a, b)
'''

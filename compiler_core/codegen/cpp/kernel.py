"""C++/OpenMP code generation: KernelPlan -> KernelSource.

Pointwise kernels are nested loops over the kernel's dims, parallel over the outer ones and
vectorisable in the innermost.  Reduction kernels run one row per iteration of a parallel loop;
inside, each phase of the plan is one pass over the row's reduction variables.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from compiler_core.codegen.artifacts import KernelSource
from compiler_core.codegen.cpp.scatter import scatter_body
from compiler_core.codegen.cse import CSEPrinter
from compiler_core.codegen.origins import split_origins
from compiler_core.ir.graph import Layout
from compiler_core.ir.index import Index, Var, linear_index
from compiler_core.ir.symbolic import c_expr, decide, hint, is_symbolic, symbols_in
from compiler_core.ir.value_range import magnitude_range
from compiler_core.ir.values import (
    Cast,
    Constant,
    IndexValue,
    IndirectIndex,
    Load,
    Op,
    ReductionResult,
    Value,
    _memoized,
    walk,
)
from compiler_core.schedule.kernel_plan import KernelPlan, Step
from compiler_core.schedule.simplify import simplify_value

# Storage types in memory; bf16/fp16 values are held as float in registers.
STORAGE_TYPE = {
    torch.float32: "float", torch.float64: "double", torch.float16: "_Float16", torch.bfloat16: "uint16_t",
    torch.int64: "int64_t", torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
    torch.uint8: "uint8_t", torch.bool: "bool",
}
LOW_PRECISION = {torch.bfloat16: "bf16", torch.float16: "f16"}
STORAGE_BYTES = {dtype: torch.empty((), dtype=dtype).element_size() for dtype in STORAGE_TYPE}
ZERO_BYTES = 65536  # the size of fc::zero_bytes (prelude.py)
# Kernels smaller than this run on one thread: waking the OpenMP team costs more than it saves.
PARALLEL_MIN_ELEMENTS = 32768


def register_type(dtype: torch.dtype) -> str:
    return "float" if dtype in LOW_PRECISION else STORAGE_TYPE[dtype]


_BINARY_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
                 "gt": ">", "ge": ">=", "logical_and": "&&", "logical_or": "||", "logical_xor": "!=",
                 "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_STD_UNARY = {"exp": "std::exp", "log": "std::log", "log1p": "std::log1p", "expm1": "std::expm1",
              "sqrt": "std::sqrt", "sin": "std::sin", "cos": "std::cos", "tanh": "std::tanh", "erf": "std::erf",
              "floor": "std::floor", "ceil": "std::ceil", "trunc": "std::trunc", "round": "std::nearbyint",
              "abs": "std::abs", "rsqrt": "fc::rsqrt", "sigmoid": "fc::sigmoid", "sign": "fc::sign",
              "tan": "std::tan", "asin": "std::asin", "acos": "std::acos", "atan": "std::atan", "sinh": "std::sinh",
              "cosh": "std::cosh", "asinh": "std::asinh", "acosh": "std::acosh", "atanh": "std::atanh",
              "log2": "std::log2", "log10": "std::log10", "exp2": "std::exp2", "erfc": "std::erfc",
              "signbit": "std::signbit"}
_HELPER_BINARY = {"maximum": "fc::maximum", "minimum": "fc::minimum", "floordiv": "fc::floordiv",
                  "truncdiv": "fc::truncdiv", "remainder": "fc::remainder", "fmod": "fc::fmod", "pow": "fc::pow",
                  "atan2": "std::atan2", "hypot": "std::hypot", "copysign": "std::copysign",
                  "lshift": "fc::lshift", "rshift": "fc::rshift", "gcd": "fc::gcd"}


class CppPrinter(CSEPrinter):
    """`inner`, `inner_size`: the vectorised (innermost) loop variable of the body being printed and its
    extent, where known: a load under a condition that does not change along it reads from
    `fc::or_zeros` (no branch; prelude.py says why GCC needs it), and every `where` is a blend
    (`fc::select`)."""

    def __init__(self, inner: str | None = None, inner_size: int = 0, narrow: bool = False) -> None:
        super().__init__(lambda name, text, value: f"auto {name} = {text};", prefix="t")
        self.inner, self.inner_size = inner, inner_size
        self.narrow = narrow  # comparisons of positions with numbers in int32 (see _narrow_comparison)
        self._varies: dict[int, tuple[Value, bool]] = {}
        self._magnitude = magnitude_range({})  # one memo for the kernel's values (sin and cos below)

    def loop_body(self, inner: str, inner_size) -> "CppPrinter":
        """The scope of a vectorised loop over `inner` nested in this one."""
        body = self.child()
        body.inner, body.inner_size, body._varies = inner, inner_size, {}
        return body

    def varies_along_inner(self, value: Value) -> bool:
        """Whether `value` may differ between iterations of the inner loop (conservative: a reduction's
        result or a position read from a tensor counts as varying)."""
        hit = self._varies.get(id(value))
        if hit is None:
            hit = self._varies[id(value)] = (value, any(_depends_on(v, self.inner) for v in walk(value)))
        return hit[1]

    def _uniform(self, condition: Value | None) -> bool:
        return self.inner is not None and condition is not None and not self.varies_along_inner(condition)

    def load(self, v: Load, mask: str | None = None, positions: list[str] | None = None) -> str:
        offset = v.index.render(div='/')
        for t, p in zip(v.indirect, positions or ()):
            offset += f" + {p}" if t.stride == 1 else f" + {p} * {c_expr(t.stride)}"
        ref = f"{v.buffer}[{offset}]"
        if mask is not None and not positions and self._uniform(v.mask):
            split = self._zeros_offsets(v)
            if split is not None:  # read zeros instead of the buffer where the mask is off: no branch
                outer, along = split
                ref, mask = f"fc::or_zeros({mask}, {v.buffer}, {outer})[{along}]", None
        if v.dtype == torch.bfloat16:
            ref = f"fc::bf16_to_float({ref})"
        elif v.dtype == torch.float16:
            ref = f"fc::f16_to_float({ref})"
        # The conditional keeps a masked-off element from being read at all (its index may lie
        # outside the buffer).
        return ref if mask is None else f"({mask} ? {ref} : {register_type(v.dtype)}(0))"

    def _zeros_offsets(self, v: Load) -> tuple[str, str] | None:
        """(the offset without the inner variable, the inner variable's term) of a load whose offsets
        along the inner loop stay inside fc::zero_bytes; None otherwise."""
        inner_terms = [(a, c) for a, c in v.index.terms if a == Var(self.inner)]
        rest = Index(tuple(t for t in v.index.terms if t not in inner_terms), v.index.const)
        if self.inner in rest.free_vars():  # the inner variable inside a division or modulo
            return None
        coef = inner_terms[0][1] if inner_terms else 0
        largest = coef * (self.inner_size - 1)
        if is_symbolic(largest) or coef < 0 or (largest + 1) * STORAGE_BYTES[v.dtype] > ZERO_BYTES:
            return None
        along = Index(tuple(inner_terms), 0).render(div="/") if inner_terms else "0"
        return rest.render(div="/"), along

    def position(self, t: IndirectIndex, value: str, mask: str | None) -> str:
        if not t.checked:  # proven inside [0, size) (plan pass `bounds`)
            return f"static_cast<int64_t>({value})"
        # wraps a negative position (index, take), flags one out of range (and reads element 0 instead)
        size = f"static_cast<int64_t>({c_expr(t.size)})" if is_symbolic(t.size) else f"{t.size}LL"
        if mask is not None:  # a masked read checks only the positions it reads, as the Triton kernels do
            return (f"fc::checked_position_if({mask}, static_cast<int64_t>({value}), {size}, {t.error}, "
                    f"{str(t.wrap).lower()})")
        return f"fc::checked_position(static_cast<int64_t>({value}), {size}, {t.error}, {str(t.wrap).lower()})"

    def render(self, value: Value) -> str:
        if self.narrow and isinstance(value, Op) and value.op in _COMPARISONS:
            narrow = _narrow_comparison(value)
            if narrow is not None:
                return narrow
        return super().render(value)

    def constant(self, v: Constant) -> str:
        return cpp_literal(v.value, v.dtype)

    def index_value(self, v: IndexValue) -> str:
        return f"static_cast<{register_type(v.dtype)}>({v.index.render(div='/')})"

    def reduction_result(self, v: ReductionResult) -> str:
        return f"red_{v.node}"

    def cast(self, arg: str, source: Value, v: Cast) -> str:
        if source.dtype == v.dtype or (v.dtype not in LOW_PRECISION and register_type(source.dtype) == register_type(
                v.dtype)):
            return arg  # same register type, and no rounding to do
        if v.dtype in LOW_PRECISION:
            inner = arg if register_type(source.dtype) == "float" else f"static_cast<float>({arg})"
            return f"fc::round_{LOW_PRECISION[v.dtype]}({inner})"
        if register_type(source.dtype) in ("float", "double") and v.dtype != torch.bool \
                and not v.dtype.is_floating_point and not v.dtype.is_complex:
            return f"fc::float_to_int<{register_type(v.dtype)}>({arg})"  # prelude: no undefined behaviour
        return f"static_cast<{register_type(v.dtype)}>({arg})"

    def op(self, v: Op, args: list[str]) -> str:
        name = v.op
        if name in _BINARY_INFIX:
            return f"({args[0]} {_BINARY_INFIX[name]} {args[1]})"
        if name in ("sin", "cos") and register_type(v.dtype) == "float" and self._small_trig_argument(v.args[0]):
            return f"fc::{name}_f32_small({args[0]})"  # the same bits as fc::{name}_f32 there (prelude)
        if name in ("erf", "exp", "tanh", "sin", "cos") and register_type(v.dtype) == "float":
            return f"fc::{name}_f32({args[0]})"  # ours: vectorised, and the same bits in every loop (prelude)
        if name in _STD_UNARY:
            return f"{_STD_UNARY[name]}({args[0]})"
        if name in _HELPER_BINARY:
            return f"{_HELPER_BINARY[name]}({args[0]}, {args[1]})"
        if name == "fused_multiply_add":
            return f"std::fma({args[0]}, {args[1]}, {args[2]})"  # rounded once, whatever -ffp-contract says
        if name == "neg":
            return f"(-{args[0]})"
        if name == "reciprocal":
            return f"({register_type(v.dtype)}(1) / {args[0]})"
        if name == "isnan":
            return f"({args[0]} != {args[0]})"
        if name == "logical_not":
            return f"(!{args[0]})"
        if name == "bitwise_not":
            return f"static_cast<{register_type(v.dtype)}>(~{args[0]})"
        if name == "where":
            return f"fc::select({args[0]}, {args[1]}, {args[2]})"  # a blend, never a branch (prelude)
        if name == "recurrence":
            t = register_type(v.dtype)  # every operand but the degree in one type, for the template
            operands = [a if i == 1 else f"static_cast<{t}>({a})" for i, a in enumerate(args)]
            return f"fc::recurrence<{t}>({', '.join(operands)})"
        raise NotImplementedError(f"C++ codegen has no primitive {name!r}")


    def _small_trig_argument(self, arg: Value) -> bool:
        bounds = self._magnitude(arg)
        return bounds is not None and max(-bounds[0], bounds[1]) <= SMALL_TRIG_ARGUMENT


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_INT32 = (-(2**31), 2**31 - 1)
SMALL_TRIG_ARGUMENT = 65536.0  # fc::SMALL_TRIG_ARGUMENT (prelude.py)


def _narrow_comparison(v: Op) -> str | None:
    """A position compared with a number (a cat's or pad's `x0 < 256`) as int32 arithmetic, or None.

    Index values are int64 (torch's index dtype), and a vectorised int64 comparison costs AVX2 a
    compare per four lanes plus the shuffles that narrow its mask to float lanes: a column sum over a
    cat (a qkv bias's gradient) spent most of its time there, 1.5x the time with int32 compares. Only
    in a kernel whose every index value fits int32 (the plan's index width), where the cast is exact."""
    sides = []
    for a in v.args:
        if isinstance(a, IndexValue) and a.dtype in (torch.int32, torch.int64):
            sides.append(f"static_cast<int32_t>({a.index.render(div='/')})")
        elif (isinstance(a, Constant) and a.dtype in (torch.int32, torch.int64) and type(a.value) is int
              and _INT32[0] <= a.value <= _INT32[1]):
            sides.append(str(a.value))
        else:
            return None
    if not any(isinstance(a, IndexValue) for a in v.args):
        return None
    return f"({sides[0]} {_BINARY_INFIX[v.op]} {sides[1]})"


def _narrow(plan: KernelPlan) -> bool:
    """Whether every index value of `plan` fits int32 at any size it may run at (static sizes only:
    a symbolic kernel's int32 choice holds for the sizes it was compiled for, guarded elsewhere)."""
    return plan.index_dtype == "int32" and not is_symbolic(plan.largest_offset)


def _depends_on(v: Value, inner: str | None) -> bool:
    if isinstance(v, Load):
        return bool(v.indirect) or inner in v.index.free_vars()
    if isinstance(v, IndexValue):
        return inner in v.index.free_vars()
    return isinstance(v, ReductionResult)


def cpp_literal(value: object, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        f = float(value)
        if math.isnan(f):
            return "std::numeric_limits<float>::quiet_NaN()" if dtype != torch.float64 else \
                "std::numeric_limits<double>::quiet_NaN()"
        if math.isinf(f):
            t = "double" if dtype == torch.float64 else "float"
            return f"{'-' if f < 0 else ''}std::numeric_limits<{t}>::infinity()"
        return repr(f) if dtype == torch.float64 else f"{f!r}f"
    return f"static_cast<{STORAGE_TYPE[dtype]}>({int(value)}LL)"


_INIT = {"sum": "0", "prod": "1"}


def reduction_init(kind: str, dtype: torch.dtype) -> str:
    t = register_type(dtype)
    if kind in _INIT:
        return f"{t}({_INIT[kind]})"
    if kind == "amax":
        return f"-std::numeric_limits<{t}>::infinity()" if dtype.is_floating_point else \
            f"std::numeric_limits<{t}>::lowest()"
    return f"std::numeric_limits<{t}>::infinity()" if dtype.is_floating_point else \
        f"std::numeric_limits<{t}>::max()"


def reduction_combine(kind: str, acc: str, value: str, floating: bool) -> str:
    if kind in ("amax", "amin"):
        # A plain compare-select plus a NaN flag vectorises to max/min instructions; a
        # NaN-propagating select inside the reduction does not (1.25x slower softmax).
        cmp = ">" if kind == "amax" else "<"
        line = f"{acc} = {value} {cmp} {acc} ? {value} : {acc};"
        return line + (f" nan_{acc} |= ({value} != {value});" if floating else "")
    return {"sum": f"{acc} = {acc} + {value};", "prod": f"{acc} = {acc} * {value};"}[kind]


def store_statement(step: Step, value_name: str) -> str:
    return f"{step.store_buffer}[{step.store_index.render(div='/')}] = {stored_value(step.store_dtype, value_name)};"


def stored_value(dtype: torch.dtype, value_name: str) -> str:
    """A register value as the storage type holds it (bf16 and fp16 rounded from float, not cast)."""
    if dtype == torch.bfloat16:
        return f"fc::float_to_bf16({value_name})"
    if dtype == torch.float16:
        return f"fc::float_to_f16({value_name})"
    return f"static_cast<{STORAGE_TYPE[dtype]}>({value_name})"


def generate_cpp_kernel(plan: KernelPlan, aliased: frozenset[str] = frozenset()) -> KernelSource:
    """`aliased`: parameters pointing at one storage (an output written into the input it replaces,
    MemoryPlan.inplace): they lose `__restrict__`, and each element's stores come after its loads."""
    def restrict(name: str) -> str:
        return "" if name in aliased else "__restrict__ "

    params = [f"const {STORAGE_TYPE[dt]}* {restrict(name)}{name}" for name, dt in plan.inputs]
    params += [f"{STORAGE_TYPE[dt]}* {restrict(name)}{name}" for name, dt in plan.outputs]
    sizes = symbols_in(plan)
    params += [f"int64_t {s}" for s in sizes]
    params.append("int nthreads")
    # Loop counters and offsets are int64_t in every kernel (a 64-bit CPU addresses in 64 bits: no cost),
    # so the plan's index decision changes no code here; the note says what the plan found.
    notes = [f"// {note}" + ("; int64_t loop counters as in every C++ kernel" if note.startswith("index:") else "")
             for note in plan.notes]
    lines = [f"// kernel {plan.name}", f"// source ops: {', '.join(plan.origins)}", *notes,
             f'extern "C" void {plan.name}({", ".join(params)}) {{']
    if aliased and (plan.is_reduction or plan.scatters):
        raise ValueError(f"{plan.name}: only pointwise kernels write an input in place")
    if plan.scatters:
        body = scatter_body(plan, CppPrinter(narrow=_narrow(plan)), store_statement, stored_value)
    elif plan.segments:
        body = _segmented_body(plan, stores_last=bool(aliased))
    elif plan.is_reduction and plan.columns and len(plan.space.x) == 1:
        body = _column_reduction_body(plan)
    else:
        body = _reduction_body(plan) if plan.is_reduction else _pointwise_body(plan, stores_last=bool(aliased))
    lines += ["    " + ln for ln in body]
    lines.append("}")
    signature = plan.arguments
    kind = "reduction" if plan.is_reduction else "scatter" if plan.scatters else "pointwise"
    source, line_origins = split_origins(lines)
    return KernelSource(name=plan.name, backend="cpp", source=source, signature=signature,
                        grid=f"omp parallel over {plan.xnumel} rows" if plan.is_reduction else
                        f"omp parallel over {plan.xnumel} elements",
                        config_space=(), origins=plan.origins, kind=kind,
                        checks_int_div=plan.may_flag_errors(), line_origins=line_origins,
                        segments=tuple(seg.xnumel for seg in plan.segments), index_dtype="int64",
                        size_args=sizes)


def _segmented_body(plan: KernelPlan, stores_last: bool = False) -> list[str]:
    """A horizontal kernel: each segment's loop nest in turn, each in its own block (its temporaries
    are its own) and with its own parallel loop, as that segment would run alone: one call from the
    host instead of one per segment."""
    out = []
    for seg in plan.segments:
        out += [f"// segment {seg.name.rsplit('_segment', 1)[-1]}: {seg.xnumel} elements, "
                f"source ops {', '.join(seg.origins)}", "{"]
        out += ["    " + ln for ln in _pointwise_body(seg, stores_last)]
        out.append("}")
    return out


def _loops(names: list[str], sizes: tuple[int, ...]) -> list[str]:
    return [f"for (int64_t {n} = 0; {n} < {c_expr(s)}; {n}++) {{" for n, s in zip(names, sizes)]


def _parallel_pragma(collapse: int) -> str:
    clause = f" collapse({collapse})" if collapse > 1 else ""
    return f"#pragma omp parallel for{clause} num_threads(nthreads)"


POINTWISE_CHUNK = 4096  # elements per parallel work item of a 1-D pointwise kernel
# A transcendental function of one float costs about as much as this many elements of loads, adds and
# stores (2-core AMD EPYC, AVX2: a sine ~2.3 ns an element in a vector loop, an add of two 1,024-float
# vectors ~0.15 ns), so a small kernel of many of them is worth splitting between threads: 20 sines of
# 1,024 floats (the bench's tiny_chain) take ~50 us on one thread.
TRANSCENDENTAL_WEIGHT = 8
# ...and it goes parallel for its work from this many units (~20 us on one thread): below, waking the
# second thread cost more than it saved (4,096 exps: 28 us a call parallel, 25 on one thread).
PARALLEL_MIN_WORK = 4 * PARALLEL_MIN_ELEMENTS
MIN_CHUNK = 64  # elements: a few vector iterations per work item at least


def _pointwise_work(plan: KernelPlan) -> int:
    """The kernel's work in element-sized units: elements times (1 + TRANSCENDENTAL_WEIGHT per
    transcendental function computed for each)."""
    functions = sum(1 for step in plan.steps for v in walk(step.value) if isinstance(v, Op) and v.op in _EXPENSIVE)
    return hint(plan.xnumel) * (1 + TRANSCENDENTAL_WEIGHT * functions)


def _pointwise_body(plan: KernelPlan, stores_last: bool = False) -> list[str]:
    """`stores_last`: every load of an element before any store of it (a kernel writing in place).
    Steps never read what their kernel stores (in-kernel producers are inlined), so moving the
    stores to the end of the iteration changes no value."""
    names = [f"x{i}" for i in range(len(plan.space.x))]
    outer = CppPrinter(narrow=_narrow(plan))  # the scope around the innermost loop (with two or more loops)
    if len(names) >= 2 and decide(plan.space.x[-1] > 0):
        for step in plan.steps:
            outer.origins = step.origins
            _hoist_row_invariants(outer, step.value, frozenset(names[-1:]))
    switch = _unswitch_condition([s.value for s in plan.steps], names) if len(names) >= 2 else None
    printer = outer.loop_body(names[-1], plan.space.x[-1]) if names else CppPrinter(narrow=_narrow(plan))
    if switch is None:
        _emit_steps(printer, plan.steps, [s.value for s in plan.steps], stores_last)
    if not names:  # 0-d output: one element, no loop
        return ["{"] + ["    " + ln for ln in printer.lines] + ["}"]
    # speed only: the example's sizes decide
    outer_elements = hint(plan.xnumel) // max(hint(plan.space.x[-1]), 1)
    parallel = hint(plan.xnumel) >= PARALLEL_MIN_ELEMENTS or (
        _pointwise_work(plan) >= PARALLEL_MIN_WORK and (len(names) == 1 or outer_elements > 1))
    out = []
    if len(names) == 1:
        # Parallel over chunks, vectorised within one: `parallel for simd` on one loop stops GCC
        # from vectorising bodies with many math calls.
        if parallel:
            n = c_expr(plan.space.x[0])
            chunk = POINTWISE_CHUNK  # a kernel parallel for its work alone: a sixteenth of it, at least
            if hint(plan.xnumel) < PARALLEL_MIN_ELEMENTS:
                chunk = max(MIN_CHUNK, -(-hint(plan.xnumel) // (16 * MIN_CHUNK)) * MIN_CHUNK)
            out += [_parallel_pragma(1),
                    f"for (int64_t chunk = 0; chunk < {n}; chunk += {chunk}) {{",
                    f"    const int64_t chunk_end = std::min<int64_t>(chunk + {chunk}, {n});",
                    "    #pragma omp simd",
                    "    for (int64_t x0 = chunk; x0 < chunk_end; x0++) {"]
            out += ["        " + ln for ln in printer.lines]
            return out + ["    }", "}"]
        out += ["#pragma omp simd", f"for (int64_t x0 = 0; x0 < {c_expr(plan.space.x[0])}; x0++) {{"]
        return out + ["    " + ln for ln in printer.lines] + ["}"]
    if parallel:
        out.append(_parallel_pragma(len(names) - 1))
    loops = _loops(names, plan.space.x)
    for depth, loop in enumerate(loops[:-1]):
        out.append("    " * depth + loop)
    hoisted_at = "    " * (len(loops) - 1)
    inner, size = names[-1], plan.space.x[-1]
    if switch is None:
        out += [hoisted_at + ln for ln in outer.lines]  # what does not change along the innermost loop, before it
        out += _inner_loops([s.value for s in plan.steps], printer.lines, inner, size, hoisted_at)
    else:
        # One inner loop per side of the condition, each with the condition's value folded in
        condition = outer.emit(switch)
        sides = []
        for truth in (True, False):
            values = _with_condition([s.value for s in plan.steps], switch, truth)
            side = outer.loop_body(inner, size)
            _emit_steps(side, plan.steps, values, stores_last)
            sides.append(_inner_loops(values, side.lines, inner, size, hoisted_at + "    "))
        out += [hoisted_at + ln for ln in outer.lines]
        out += [hoisted_at + f"if ({condition}) {{", *sides[0], hoisted_at + "} else {", *sides[1], hoisted_at + "}"]
    out += ["    " * d + "}" for d in reversed(range(len(loops) - 1))]
    return out


def _emit_steps(printer: CppPrinter, steps: tuple, values: list[Value], stores_last: bool) -> None:
    """Each step's value (`values`, in step order) and its store, printed into the loop body `printer`."""
    stores = []
    for step, value in zip(steps, values):
        printer.origins = step.origins
        stores.append(printer.mark(store_statement(step, printer.emit(value))))
        if not stores_last:
            printer.lines += stores
            stores = []
    printer.lines += stores


def _inner_loops(values: list[Value], body: list[str], inner: str, size, indent: str) -> list[str]:
    """The innermost loop around `body`, cut into bands where a comparison of its variable changes."""
    out = []
    for begin, end in _bands(values, inner, size) or [(0, size)]:
        out += [indent + "#pragma omp simd",
                indent + f"for (int64_t {inner} = {begin}; {inner} < {c_expr(end)}; {inner}++) {{"]
        out += [indent + "    " + ln for ln in body]
        out.append(indent + "}")
    return out


_COMPLEMENT = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}


def _unswitch_condition(values: list[Value], names: list[str]) -> Op | None:
    """A comparison of the outer loops' positions that picks, in a `where`, between a branch computing
    a transcendental function and another, and does not change along the innermost loop: the kernel
    then gets one inner loop per side of it. A `where` is a blend that computes both branches: a
    DynamicCache's cat of the past keys with the new one computed the new key's rotary embedding
    (a cosine and a sine) for every row of the cache and kept it for the last row only."""
    inner, outer = names[-1], set(names[:-1])
    for value in values:
        for v in walk(value):
            if not (isinstance(v, Op) and v.op == "where"):
                continue
            c = v.args[0]
            if not (isinstance(c, Op) and c.op in _COMPLEMENT) or any(_depends_on(n, inner) for n in walk(c)):
                continue
            if not any(isinstance(n, IndexValue) and n.index.free_vars() & outer for n in walk(c)):
                continue  # the same on every row: nothing to split
            if any(isinstance(n, Op) and n.op in _EXPENSIVE for branch in v.args[1:] for n in walk(branch)):
                return c
    return None


def _with_condition(values: list[Value], condition: Op, truth: bool) -> list[Value]:
    """`values` where `condition` is `truth` (and its complement, the same comparison with the other
    operator, is not), folded (schedule/simplify.py): the where it picks in keeps one branch."""
    table: dict[Value, Value] = {condition: Constant(truth, torch.bool)}
    complement = Op(_COMPLEMENT[condition.op], condition.args, condition.dtype)
    for value in values:
        for v in walk(value):
            if v == complement:
                table[v] = Constant(not truth, torch.bool)
    return [simplify_value(_replace(value, table))[0] for value in values]


MAX_BANDS = 4


def _comparison_cut(v: Value, var: str) -> int | None:
    """Where `v`, a comparison of the loop variable `var` (plus a constant) with a number, changes value
    along `var`; None for any other value. x < c and x >= c change at c, x <= c and x > c at c + 1."""
    if not (isinstance(v, Op) and v.op in ("lt", "le", "gt", "ge") and isinstance(v.args[0], IndexValue)
            and isinstance(v.args[1], Constant) and type(v.args[1].value) is int):
        return None
    index = v.args[0].index
    if index.terms != ((Var(var), 1),) or type(index.const) is not int:
        return None
    return v.args[1].value - index.const + (1 if v.op in ("le", "gt") else 0)


def _bands(values: list[Value], inner: str, size: int) -> list[tuple[int, int]] | None:
    """The innermost loop cut where a comparison of its variable with a number changes value, so that
    every such comparison is constant in each piece: None where nothing cuts (or too much would).

    A cat or pad along the innermost dimension (rotary's half-rotation, `d < 64 ? x[d + 64] : ...`)
    reads each input under a mask. In one loop the masked loads need the vector unit's masked loads,
    which AVX2 lacks for 16-bit types (a bf16 rotary ran scalar, 7x slower than eager); GCC knows the
    loop variable's range in each piece, folds the masks and drops the branches."""
    if type(size) is not int:
        return None
    cuts = set()
    for value in values:
        for v in walk(value):
            cut = _comparison_cut(v, inner)
            if cut is not None and 0 < cut < size:
                cuts.add(cut)
    if not cuts or len(cuts) >= MAX_BANDS:
        return None
    edges = [0, *sorted(cuts), size]
    if len(edges) == size + 1:
        # Every piece one element wide (a pair of real and imaginary parts, GPT-J's rotate_every_two):
        # nothing left to vectorise along it, and GCC 12 unrolls the pieces and vectorises the loop
        # around them, taking `a*c - b*d` beside `a*d + b*c` for one vfmaddsub despite
        # -ffp-contract=off (its SLP add/sub pattern ignores the flag until GCC 14): one rounding
        # where eager rounds twice. The single loop computes both values in every lane and selects.
        return None
    return list(zip(edges, edges[1:]))


_OMP_REDUCTION = {"sum": "+", "prod": "*", "amax": "max", "amin": "min"}


def _tracks_nan(step: Step) -> bool:
    return step.reduction_type in ("amax", "amin") and step.value.dtype.is_floating_point


def _finished(step: Step, element: str = "") -> str:
    """A reduction's value once its pass is over: NaN if amax/amin saw one, else the accumulator
    (`element`: the subscript of a column reduction's per-column accumulators)."""
    result = f"acc_{step.node}{element}"
    if _tracks_nan(step):
        nan = f"std::numeric_limits<{register_type(step.value.dtype)}>::quiet_NaN()"
        result = f"(nan_acc_{step.node}{element} ? {nan} : {result})"
    return result


def _simd_reduction_pragma(reductions: list[Step], blocked: tuple[Step, ...] = ()) -> str:
    clauses = "".join(f" reduction({_OMP_REDUCTION[s.reduction_type]}:{'blk' if s in blocked else 'acc'}_{s.node})"
                      for s in reductions)
    clauses += "".join(f" reduction(|:nan_acc_{s.node})" for s in reductions if _tracks_nan(s))
    return f"#pragma omp simd{clauses}"


# Transcendental ops cost far more than a load from L1: a row cache pays off for them.
_EXPENSIVE = {"exp", "log", "log1p", "expm1", "erf", "tanh", "sin", "cos", "sigmoid", "sqrt", "rsqrt", "truediv"}
ROW_CACHE_MAX_ELEMENTS = 8192  # per cached expression, on each thread's stack
ROW_CACHE_MAX_EXPRESSIONS = 4


def _row_cached_expressions(plan: KernelPlan, phases: list) -> dict[Value, int]:
    """Expensive subexpressions computed in one pass over a row and needed again in a later pass
    (softmax's exp(x - max)): cache them per row instead of recomputing. Value -> first phase."""
    if is_symbolic(plan.rnumel) or plan.rnumel > ROW_CACHE_MAX_ELEMENTS:  # a cache of fixed size on the stack
        return {}
    r_vars = {f"r{i}" for i in range(len(plan.space.r))}
    first_seen: dict[Value, int] = {}
    cached: dict[Value, int] = {}

    def costly(v: Value) -> bool:
        deps_on_r = any(isinstance(n, Load) and n.index.free_vars() & r_vars for n in walk(v))
        return deps_on_r and any(isinstance(n, Op) and n.op in _EXPENSIVE for n in walk(v))

    for phase_index, (kind, steps) in enumerate(phases):
        if kind != "loop":
            continue
        for step in steps:
            stack = [step.value]
            while stack:
                v = stack.pop()
                if not isinstance(v, Op) or not costly(v):
                    continue
                if v in first_seen and first_seen[v] < phase_index:
                    if len(cached) < ROW_CACHE_MAX_EXPRESSIONS:
                        cached.setdefault(v, first_seen[v])
                    continue  # the whole subtree comes from the cache: do not look inside
                first_seen.setdefault(v, phase_index)
                stack.extend(v.args)
    return cached


def _replace(value: Value, table: dict[Value, Value]) -> Value:
    """`value` with every subexpression found in `table` replaced; a subtree with nothing replaced is
    kept as it is. Each shared subexpression is visited once (`_memoized`): a value is a DAG, and a
    rebuild per path was exponential in its depth of sharing (a 33-bin histogram's kernels took 45 s
    of a 65 s compile on the CPU machine; 2026-12-05)."""
    if not table:
        return value

    def transform(v: Value, recurse: Callable[[Value], Value]) -> Value:
        return table[v] if v in table else _rebuilt(v, recurse)

    return _memoized(transform)(value)


def _rebuilt(v: Value, recurse: Callable[[Value], Value], masks: bool = False) -> Value:
    """`v` with its operands (and with `masks`, a load's mask) passed through `recurse`: `v` itself where
    none changed, so a rewrite keeps the sharing of the subtrees it leaves alone."""
    if isinstance(v, Op):
        args = tuple(recurse(a) for a in v.args)
        return v if all(new is old for new, old in zip(args, v.args)) else Op(v.op, args, v.dtype, v.origins)
    if isinstance(v, Cast):
        arg = recurse(v.arg)
        return v if arg is v.arg else Cast(arg, v.dtype, v.origins)
    if masks and isinstance(v, Load) and v.mask is not None:
        mask = recurse(v.mask)
        return v if mask is v.mask else dataclasses.replace(v, mask=mask)
    return v


def _reduction_body(plan: KernelPlan) -> list[str]:
    xnames = [f"x{i}" for i in range(len(plan.space.x))]
    rnames = [f"r{i}" for i in range(len(plan.space.r))]
    row = CppPrinter(narrow=_narrow(plan))
    r_vars = frozenset(rnames)
    phases = plan.phases()
    cached = _row_cached_expressions(plan, phases)
    r_flat = linear_index(rnames, Layout.contiguous(plan.space.r).stride)
    cache_slots = {v: Load(f"rowcache{i}", r_flat, v.dtype) for i, v in enumerate(cached)}
    for v, slot in cache_slots.items():
        row.lines.append(f"{register_type(v.dtype)} {slot.buffer}[{plan.rnumel}];  // per-row cache")
    for phase_index, (kind, steps) in enumerate(phases):
        readable = {v: slot for v, slot in cache_slots.items() if cached[v] < phase_index}
        if kind == "row":
            step = steps[0]
            row.origins = step.origins
            row.lines.append(row.mark(store_statement(step, row.emit(step.value))))
            continue
        reductions = [s for s in steps if s.reduction_type]
        for s in reductions:
            init = reduction_init(s.reduction_type, s.value.dtype)
            row.lines.append(row.mark(f"{register_type(s.value.dtype)} acc_{s.node} = {init};", s.origins))
            if _tracks_nan(s):
                row.lines.append(row.mark(f"int nan_acc_{s.node} = 0;", s.origins))
        blocked = _blocked_sums(reductions)
        for s in blocked:
            row.lines.append(row.mark(f"{register_type(s.value.dtype)} comp_{s.node} = 0;", s.origins))
        if decide(plan.rnumel > 0):
            for s in steps:
                row.origins = s.origins
                _hoist_row_invariants(row, _replace(s.value, readable), r_vars)
        # A load under a mask that holds for the whole row (a cat along the rows) reads fc::or_zeros,
        # as in a pointwise kernel's innermost loop: AVX2 has no masked 16-bit loads.
        inner = row.loop_body(rnames[-1], plan.space.r[-1])
        for s in steps:
            inner.origins = s.origins
            name = inner.emit(_replace(s.value, readable))
            if s.reduction_type:
                acc = f"{'blk' if s in blocked else 'acc'}_{s.node}"
                inner.lines.append(inner.mark(reduction_combine(s.reduction_type, acc, name, _tracks_nan(s))))
            else:
                inner.lines.append(inner.mark(store_statement(s, name)))
        for v, slot in cache_slots.items():
            if cached[v] == phase_index:
                cached_value = inner.emit(_replace(v, readable))
                inner.lines.append(inner.mark(f"{slot.buffer}[{r_flat.render(div='/')}] = {cached_value};", v.origins))
        row.sync_counter(inner)
        bands = _bands([s.value for s in steps], rnames[-1], plan.space.r[-1])
        row.lines += _reduction_loops(row, inner, rnames, plan.space.r, reductions, blocked, bands)
        for s in reductions:
            row.lines.append(row.mark(f"const {register_type(s.value.dtype)} red_{s.node} = {_finished(s)};",
                                      s.origins))
            if s.store_buffer:
                row.lines.append(row.mark(store_statement(s, f"red_{s.node}"), s.origins))
    out = []
    if xnames:
        if hint(plan.xnumel) * max(hint(plan.rnumel), 1) >= PARALLEL_MIN_ELEMENTS and hint(plan.xnumel) > 1:
            out.append(_parallel_pragma(len(xnames)))
        loops = _loops(xnames, plan.space.x)
        out += ["    " * d + lp for d, lp in enumerate(loops)]
        out += ["    " * len(loops) + ln for ln in row.lines]
        out += ["    " * d + "}" for d in reversed(range(len(loops)))]
    else:
        out += ["{"] + ["    " + ln for ln in row.lines] + ["}"]
    return out


def _hoist_row_invariants(row: CppPrinter, value: Value, r_vars: frozenset[str]) -> None:
    """Print into the row's scope, before a reduction loop (or a pointwise kernel's innermost loop:
    `r_vars` are that loop's variables), every largest subexpression of `value` that does not change
    along that loop, and each gathered position whose value does not: the loop
    body (a child scope, which finds them by their text) then only names them. GPT-2's embedding +
    layer norm kernel read the token id and called `fc::checked_position` at each of a row's 768
    elements, three times over: a call with a side effect (the error flag) that no compiler moves
    out of a loop, in the loop GCC is asked to vectorise. The values and their order are unchanged,
    so are the bits; the caller hoists only when the loop runs at least once (plan.rnumel > 0), so
    nothing is read that the loop would not have read."""
    varies: dict[int, tuple[Value, bool]] = {}

    def along_r(v: Value) -> bool:
        hit = varies.get(id(v))
        if hit is None:
            hit = varies[id(v)] = (v, any(
                (isinstance(n, (Load, IndexValue)) and bool(n.index.free_vars() & r_vars)) for n in walk(v)))
        return hit[1]

    seen: set[int] = set()

    def visit(v: Value) -> None:
        if id(v) in seen or isinstance(v, (Constant, ReductionResult)):
            return
        seen.add(id(v))
        if not along_r(v):
            row.emit(v)
            return
        if isinstance(v, Load):
            if v.mask is not None:
                visit(v.mask)
            mask_fixed = v.mask is None or not along_r(v.mask)
            for t in v.indirect:
                visit(t.value)
                if mask_fixed and not along_r(t.value):
                    mask = None if v.mask is None else row.emit(v.mask)
                    row.named(row.position(t, row.emit(t.value), mask), t.value)
            return
        for child in (v.args if isinstance(v, Op) else (v.arg,) if isinstance(v, Cast) else ()):
            visit(child)

    visit(value)


# Float sums are blocked: each pass of the innermost loop (at most SUM_BLOCK elements) sums into a
# fresh vectorised accumulator, and the block sums are added with Kahan compensation. One accumulator
# over a whole [64, 128] softmax summed 64 row sums of about 2.0 into a total near 128, rounding
# each (5 ulps off where eager, which cascades, is exact). The compensation is dropped once the sum
# is not finite, so inf and NaN come out as eager's.
SUM_BLOCK = 4096


def _blocked_sums(reductions: list[Step]) -> tuple[Step, ...]:
    return tuple(s for s in reductions if s.reduction_type == "sum" and s.value.dtype.is_floating_point)


def _kahan_add(step: Step, block_sum: str) -> str:
    # fc::select, not `?:` with a constant arm: GCC 12 left such loops scalar with AVX2 (prelude.py).
    t, acc, comp = register_type(step.value.dtype), f"acc_{step.node}", f"comp_{step.node}"
    return (f"{{ const {t} y = {block_sum} - {comp}; const {t} sum = {acc} + y; "
            f"{comp} = fc::select(std::isfinite(sum), (sum - {acc}) - y, {t}(0)); {acc} = sum; }}")


def _reduction_loops(row: CppPrinter, inner: CppPrinter, rnames: list[str], sizes: tuple[int, ...],
                     reductions: list[Step], blocked: tuple[Step, ...],
                     bands: list[tuple[int, int]] | None = None) -> list[str]:
    """The loop nest of one reduction phase around `inner`'s body, the innermost loop vectorised;
    with blocked sums the innermost loop is split into SUM_BLOCK-sized passes when longer, else into
    `bands` (see _bands), each its own vector loop adding to the same accumulators."""
    def indent(depth: int) -> str:
        return "    " * depth

    loops = _loops(rnames, sizes)
    depth = len(loops) - 1
    out = [indent(d) + loop for d, loop in enumerate(loops[:-1])]
    innermost, name, size = loops[-1], rnames[-1], sizes[-1]
    innermost_loops = [innermost]
    if blocked and (is_symbolic(size) or size > SUM_BLOCK):  # blocks of a shorter row: one pass
        out.append(indent(depth) + f"for (int64_t {name}b = 0; {name}b < {c_expr(size)}; {name}b += {SUM_BLOCK}) {{")
        innermost_loops = [f"for (int64_t {name} = {name}b; {name} < std::min<int64_t>({name}b + {SUM_BLOCK}, "
                           f"{c_expr(size)}); {name}++) {{"]
        depth += 1
    elif bands:
        innermost_loops = [f"for (int64_t {name} = {begin}; {name} < {end}; {name}++) {{" for begin, end in bands]
    for s in blocked:
        out.append(indent(depth) + row.mark(f"{register_type(s.value.dtype)} blk_{s.node} = 0;", s.origins))
    for loop in innermost_loops:
        out += [indent(depth) + _simd_reduction_pragma(reductions, blocked), indent(depth) + loop]
        out += [indent(depth + 1) + ln for ln in inner.lines]
        out.append(indent(depth) + "}")
    out += [indent(depth) + row.mark(_kahan_add(s, f"blk_{s.node}"), s.origins) for s in blocked]
    return out + [indent(d) + "}" for d in reversed(range(depth))]


# ---- column reductions -------------------------------------------------------------------------
# A reduction over the outer dimension (plan.columns: memory runs along x) walks a row's columns in
# the innermost, vectorised loop: each work item takes COLUMN_BLOCK adjacent columns, keeps one
# accumulator per column, and goes down the rows. One row per iteration (the row body) would read
# its column a whole row apart at each step, neither vectorised nor in one cache line.
COLUMN_BLOCK = 64


class _ColumnPrinter(CppPrinter):
    """Inside a column block, a reduction's finished value is one per column: red_<node>[j]."""

    def reduction_result(self, v: ReductionResult) -> str:
        return f"red_{v.node}[j]"


def _operand(size) -> str:
    """A size as the right operand of / or %: a symbolic one in parentheses."""
    return f"({c_expr(size)})" if is_symbolic(size) else str(size)


def _block_uniform(block: int) -> Callable[[Value], Value]:
    """A transform of values: a comparison of the column x0 (plus a constant) with a number that cuts the
    columns at a multiple of `block` compares the block's first column xb instead.

    Blocks start at multiples of `block`, so no block straddles such a cut and both comparisons agree
    on every column; xb's does not change along the block, so a cat along the columns (the gradient
    of a qkv split, summed for the bias) reads each input unmasked (fc::or_zeros) instead of three
    masked loads per element."""

    def transform(v: Value, recurse: Callable[[Value], Value]) -> Value:
        if isinstance(v, Op) and (at := _comparison_cut(v, "x0")) is not None and at % block == 0:
            index = v.args[0]
            shifted = IndexValue(Index(((Var("xb"), 1),), index.index.const), index.dtype)
            return Op(v.op, (shifted, v.args[1]), v.dtype, v.origins)
        return _rebuilt(v, recurse, masks=True)

    return _memoized(transform)


def _column_reduction_body(plan: KernelPlan) -> list[str]:
    (xnumel,) = plan.space.x
    rnames = [f"r{i}" for i in range(len(plan.space.r))]
    block = COLUMN_BLOCK if is_symbolic(xnumel) else min(COLUMN_BLOCK, xnumel)  # the last block: std::min
    root = _ColumnPrinter(narrow=_narrow(plan))
    if not is_symbolic(xnumel):
        # x0 is the vectorised variable: a load under a mask that holds for the whole block (a row's,
        # or a block-aligned cat's, below) reads fc::or_zeros, no masked load.
        root.inner, root.inner_size = "x0", xnumel
    uniform = _block_uniform(block) if not is_symbolic(xnumel) else (lambda v: v)
    body: list[str] = []

    def over_columns(printer: CppPrinter, simd: bool = True) -> list[str]:
        """The block's columns as the innermost loop, x0 the column."""
        root.sync_counter(printer)
        head = ["#pragma omp simd"] if simd else []
        return head + ["for (int64_t j = 0; j < xn; j++) {", "    const int64_t x0 = xb + j;"] + \
            ["    " + ln for ln in printer.lines] + ["}"]

    for kind, steps in plan.phases():
        if kind == "row":
            step = steps[0]
            inner = root.child()
            inner.origins = step.origins
            inner.lines.append(inner.mark(store_statement(step, inner.emit(uniform(step.value)))))
            body += over_columns(inner)
            continue
        reductions = [s for s in steps if s.reduction_type]
        init = root.child()
        for s in reductions:
            t = register_type(s.value.dtype)
            body.append(root.mark(f"{t} acc_{s.node}[{block}];", s.origins))
            body.append(root.mark(f"{t} red_{s.node}[{block}];", s.origins))
            init.lines.append(init.mark(f"acc_{s.node}[j] = {reduction_init(s.reduction_type, s.value.dtype)};",
                                        s.origins))
            if _tracks_nan(s):
                body.append(root.mark(f"int nan_acc_{s.node}[{block}];", s.origins))
                init.lines.append(init.mark(f"nan_acc_{s.node}[j] = 0;", s.origins))
        # Sums are compensated (Kahan): one accumulator down 8192 rows would lose ~30x eager's accuracy
        # (eager sums in vector lanes and cascades). The compensation is dropped once the sum is not
        # finite, so inf and NaN come out as eager's.
        compensated = [s for s in reductions if s.reduction_type == "sum" and s.value.dtype.is_floating_point]
        inner = root.child()
        for s in compensated:
            body.append(root.mark(f"{register_type(s.value.dtype)} comp_{s.node}[{block}];", s.origins))
            init.lines.append(init.mark(f"comp_{s.node}[j] = 0;", s.origins))
        if init.lines:
            body += over_columns(init)
        for s in steps:
            inner.origins = s.origins
            name = inner.emit(uniform(s.value))
            if s in compensated:
                acc, comp = f"acc_{s.node}[j]", f"comp_{s.node}[j]"
                t = register_type(s.value.dtype)
                inner.lines.append(inner.mark(f"{{ const {t} y = {name} - {comp}; const {t} sum = {acc} + y; "
                                              f"{comp} = fc::select(std::isfinite(sum), (sum - {acc}) - y, {t}(0)); "
                                              f"{acc} = sum; }}"))
            elif s.reduction_type:
                inner.lines.append(inner.mark(reduction_combine(s.reduction_type, f"acc_{s.node}[j]", name,
                                                                _tracks_nan(s))))
            else:
                inner.lines.append(inner.mark(store_statement(s, name)))
        rnumel = plan.rnumel
        body.append(f"for (int64_t rr = 0; rr < {c_expr(rnumel)}; rr++) {{")
        for name, stride, size in zip(rnames, Layout.contiguous(plan.space.r).stride, plan.space.r):
            position = "rr" if stride == 1 else f"rr / {_operand(stride)}"
            position = position if stride * size == rnumel else f"({position}) % {_operand(size)}"
            body.append(f"    const int64_t {name} = {position};")
        body += ["    " + ln for ln in over_columns(inner)]
        body.append("}")
        finish = root.child()
        for s in reductions:
            finish.lines.append(finish.mark(f"red_{s.node}[j] = {_finished(s, '[j]')};", s.origins))
            if s.store_buffer:
                finish.lines.append(finish.mark(store_statement(s, f"red_{s.node}[j]"), s.origins))
        if finish.lines:
            body += over_columns(finish)
    out = []
    if hint(xnumel) > block and hint(xnumel) * max(hint(plan.rnumel), 1) >= PARALLEL_MIN_ELEMENTS:
        out.append(_parallel_pragma(1))
    out += [f"for (int64_t xb = 0; xb < {c_expr(xnumel)}; xb += {block}) {{",
            f"    const int64_t xn = std::min<int64_t>({block}, {c_expr(xnumel)} - xb);"]
    out += ["    " + ln for ln in body]
    return out + ["}"]

"""Named passes over a KernelPlan, run after the plan is built and before code generation.

Each pass takes a plan and returns a new one with its decision set and the reason in `plan.notes`
(both code generators print the notes at the top of the kernel). `run_plan_passes` applies them in
order and keeps a `PassRecord` per pass (the plan as printed after it), so the explorer can show a
kernel before and after each one:

    merge_reductions        a reduction of the very value an earlier one of the kernel reduces, the same
                            way (layer norm sums x twice: for the mean and inside the variance), is that
                            one's result: computed once, and every later step reads the first
    bounds                  a gathered position whose value range lies inside its dimension (a clamped
                            coordinate) is used unchecked: no wrap, no range check, no GPU debug build
    simplify                algebraic simplification and constant folding of every step's value,
                            exact rules only (schedule/simplify.py): no `x * 1.0` left in a kernel
    common_subexpressions   equal subexpressions of one pass over memory (written twice in the source, or
                            made twice by inlining) become one value of the plan, computed once
    choose_loop_order       a pointwise kernel's x dimensions in the order of its stores' strides, so a
                            channels-last or transposed output is written contiguously
    choose_index_width      int32 index arithmetic, or int64 when some offset or loop counter of the
                            kernel can pass 2**31 - 1
    choose_reduction_layout a reduction whose loads run contiguously along x (a sum over a tensor's outer
                            dimension: bias gradients) reduces columns: each program takes many adjacent
                            columns and loops over the rows, so every load is one contiguous piece (both
                            backends: C++ puts the columns in the innermost, vectorised loop)
    choose_reduction_split  a reduction with few rows and long rows, or few column blocks and long
                            columns, is split across many programs per row (Triton): each pass over the row
                            leaves partials, a small kernel reduces them
    online_softmax          (Triton) a row too long for registers whose max M and sum(exp(x - M)) took two
                            passes over memory takes one: a running max, the sum rescaled when it grows
    welford                 (Triton) a row too long for registers whose sum(x) (the mean) and sum((x - mean)**2)
                            took two passes over memory takes one: per lane a running count, mean and M2,
                            centred on the row's mean after the pass (layer norm, var, std, var_mean)

    plan = choose_reduction_split(choose_reduction_layout(choose_index_width(plan)))
    plan.notes   # ('index: int64 (largest offset 4.3e9 > 2**31-1)', 'reduction split: 1024 programs per row...')
"""

from __future__ import annotations

import dataclasses
import difflib
from collections import Counter
from dataclasses import dataclass, field
from math import ceil
from typing import Callable, Optional

import sympy
import torch

from compiler_core.ir.index import FloorDiv, Index, Mod, Var
from compiler_core.ir.symbolic import (
    NotSymbolic,
    Size,
    fits,
    hint,
    is_symbolic,
    known,
    python_expr,
    upper_max,
)
from compiler_core.ir.value_range import value_range
from compiler_core.ir.values import (
    Cast,
    IndexValue,
    IndirectIndex,
    Load,
    Op,
    ReductionResult,
    Value,
    children,
    format_value,
    rebuild,
    subs_index,
    walk,
)
from compiler_core.schedule.kernel_plan import KernelPlan
from compiler_core.schedule.simplify import simplify_value

INT32_MAX = 2**31 - 1
# Triton keeps a reduction's whole row in registers up to this many elements (one pass, "persistent");
# longer rows are looped over in pieces, once per dependent reduction.
PERSISTENT_MAX_RBLOCK = 16384
# Loop counters run past their bound by up to a block (Triton's xindex, rindex) or a split's rounding
# before the mask cuts them off; the mask compares the counter, so the counter itself must not wrap.
COUNTER_HEADROOM = 1 << 24

# A reduction is split when it has fewer rows than this (one program per row could not fill a GPU of
# ~132 SMs) and each row has at least SPLIT_MIN_ELEMENTS elements. Module constants so that tests can
# lower them and the GPU check can try others.
SPLIT_MAX_ROWS = 128
SPLIT_MIN_ELEMENTS = 1 << 17
# Elements per program at least: fewer and the second kernel costs more than it saves. SegFormer's
# loss (401,408 pixels, four gathers each) ran 25 programs of 16,384 on 132 SMs in 23 us; the
# sum over 10**9 elements is capped by SPLIT_TARGET_PROGRAMS long before this.
SPLIT_MIN_CHUNK = 1 << 11
SPLIT_TARGET_PROGRAMS = 1024  # ~8 per SM of an H200 (132 SMs): loads in flight everywhere; the GPU check times others
SPLITTABLE_REDUCTIONS = ("sum", "prod", "amax", "amin")

# Column reductions: a program covers COLUMN_XBLOCK adjacent columns (64 fp32: 256 contiguous bytes per
# row read), from COLUMN_MIN_COLUMNS columns on. They are split when fewer than COLUMN_SPLIT_MAX_PROGRAMS
# column blocks (two per SM of an H200) would run, into chunks of at least COLUMN_MIN_CHUNK rows.
COLUMN_XBLOCK = 64
COLUMN_MIN_COLUMNS = 16
COLUMN_SPLIT_MAX_PROGRAMS = 264
COLUMN_MIN_CHUNK = 256


# ---- the pipeline -------------------------------------------------------------------------------
class PrintedPlan:
    """A plan and its pretty() text, printed when first read. The pass log keeps a plan per pass, and
    most are never shown: printed at every compile, they were most of a compile where values share
    deep subtrees (a plan prints each use of a shared value in full: histogramdd's kernels took 10 s
    of a 13 s compile, 2026-12-06)."""

    __slots__ = ("plan", "_text")

    def __init__(self, plan: KernelPlan):
        self.plan = plan
        self._text: Optional[str] = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.plan.pretty()
        return self._text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrintedPlan) and (self.plan is other.plan or self.text == other.text)

    def __hash__(self) -> int:
        return hash(self.text)


@dataclass(frozen=True)
class PassRecord:
    """One pass over one kernel's plan: what it decided, and the plan after it (`after`: as printed)."""

    name: str
    summary: str  # the pass's note, or "no change"
    printed: PrintedPlan = field(repr=False)
    changed: bool

    @property
    def after(self) -> str:
        """plan.pretty() after the pass, printed on first use."""
        return self.printed.text


def run_plan_passes(plan: KernelPlan, passes: list[tuple[str, Callable[[KernelPlan], KernelPlan]]]
                    ) -> tuple[KernelPlan, tuple[PassRecord, ...]]:
    """Apply `passes` (name, function) in order; the first record is the plan as built."""
    records = [PassRecord("built", "the plan the scheduler's fusion group gives", PrintedPlan(plan), True)]
    for name, apply in passes:
        after = apply(plan)
        new_notes = after.notes[len(plan.notes):]
        changed = after != plan
        summary = "; ".join(new_notes) if new_notes else ("rewritten" if changed else "no change")
        records.append(PassRecord(name, summary, PrintedPlan(after) if changed else records[-1].printed, changed))
        plan = after
    return plan, tuple(records)


def describe_passes(records: tuple[PassRecord, ...]) -> str:
    """Each pass with its decision and the lines of the printed plan it changed (a unified diff)."""
    out = []
    for before, record in zip((None,) + records[:-1], records):
        out.append(f"== {record.name}\n   {record.summary}")
        if before is not None and record.changed:
            diff = difflib.unified_diff(before.after.splitlines(), record.after.splitlines(), "before", "after",
                                        lineterm="", n=0)
            out += [line for line in diff if not line.startswith(("---", "+++"))]
    return "\n".join(out)


# ---- scatter order ------------------------------------------------------------------------------
def scatter_order(plan: KernelPlan) -> KernelPlan:
    """A note on a scatter kernel's atomic adds (decomp/atomic_scatter.py): float sums land in whatever
    order the programs or threads reach an element, so their last bits may differ from run to run, as
    on eager CUDA and in Inductor; integer sums are exact in any order. Changes nothing else."""
    overwrites = [s.node for s in plan.steps if s.accumulate == "overwrite"]
    if overwrites:
        plan = dataclasses.replace(plan, notes=plan.notes + (
            f"scatter: {', '.join(overwrites)} store each element at its position; where two land on one, C++ "
            "stores on one thread in index order (the last wins, as eager CPU), Triton in any order (as eager "
            "CUDA)",))
    steps = [s for s in plan.steps if s.accumulate == "add"]
    if not steps:
        return plan
    floats = [s.node for s in steps if s.store_dtype.is_floating_point]
    if floats:
        note = (f"scatter: {', '.join(floats)} add floats atomically, in the order the threads reach each element: "
                "the last bits may differ between runs (as eager CUDA's scatter_add and embedding backward do)")
    else:
        note = f"scatter: {', '.join(s.node for s in steps)} add integers atomically: exact in any order"
    return dataclasses.replace(plan, notes=plan.notes + (note,))


# ---- simplification -----------------------------------------------------------------------------
def simplify_plan(plan: KernelPlan) -> KernelPlan:
    """Every step's value (every segment's, in a horizontal kernel) through simplify_value; the note
    counts the rules that fired. A plan nothing simplifies comes back unchanged, with no note."""
    counts: Counter = Counter()

    def simplified(p: KernelPlan) -> KernelPlan:
        steps = []
        for step in p.steps:
            value, fired = simplify_value(step.value)
            counts.update(fired)
            steps.append(dataclasses.replace(step, value=value) if fired else step)
        return dataclasses.replace(p, steps=tuple(steps), segments=tuple(simplified(seg) for seg in p.segments))

    out = simplified(plan)
    if not counts:
        return plan
    rules = ", ".join(f"{rule} ({n}x)" for rule, n in sorted(counts.items()))
    return dataclasses.replace(out, notes=out.notes + (f"simplify: {rules}",))


# ---- bounds checks ------------------------------------------------------------------------------
def prove_positions(plan: KernelPlan) -> KernelPlan:
    """Each gathered or scattered position whose value range (ir/value_range.py) lies inside
    [0, size) loses its wrap and range check: a bilinear upsample's clamped coordinates, an index
    computed from the loop variables. On the GPU a kernel with any check left is built in Triton's
    debug mode (its `tl.device_assert` needs it), which cost SegFormer's loss kernel ~25x. Positions
    loaded from memory (embedding ids, gather indices) keep theirs."""
    proven = [0]

    def prove(p: KernelPlan) -> KernelPlan:
        ranges = p.space.ranges()

        def position(t: IndirectIndex) -> IndirectIndex:
            if not t.checked:
                return t
            bounds = value_range(t.value, ranges)
            if bounds is None or bounds[0] < 0 or not known(bounds[1] <= t.size - 1):  # for every size
                return t
            proven[0] += 1
            return dataclasses.replace(t, checked=False, wrap=False)

        def leaf(v: Value) -> Value:
            if isinstance(v, Load) and v.indirect:
                return dataclasses.replace(v, indirect=tuple(position(t) for t in v.indirect))
            return v

        steps = []
        for step in p.steps:
            step = step.map_values(lambda value: rebuild(value, leaf))
            steps.append(dataclasses.replace(step, store_positions=tuple(position(t) for t in step.store_positions)))
        return dataclasses.replace(p, steps=tuple(steps), segments=tuple(prove(seg) for seg in p.segments))

    if not any(isinstance(v, Load) and v.indirect for step in _all_steps(plan) for value in step.values()
               for v in walk(value)) and not any(step.store_positions for step in _all_steps(plan)):
        return plan
    out = prove(plan)
    if not proven[0]:
        return plan
    note = (f"bounds: {proven[0]} gathered position{'s' if proven[0] > 1 else ''} shown inside their dimension "
            "by value range (clamped or computed from loop variables): used unchecked")
    return dataclasses.replace(out, notes=out.notes + (note,))


def _all_steps(plan: KernelPlan) -> list:
    return list(plan.steps) + [s for seg in plan.segments for s in _all_steps(seg)]


# ---- common subexpressions -------------------------------------------------------------------------
def common_subexpressions(plan: KernelPlan) -> KernelPlan:
    """Equal subexpressions of one pass over memory become one value: inlined producers read twice
    (GELU's `x * 0.5` beside its derivative), a broadcast recomputed for each use. Each is one node of
    the plan's values, so both printers compute it once per pass (their temporaries are per value) and
    the note names the ones used most. Values of different passes stay apart: a reduction kernel's loop
    and what it does after the loop are printed in different scopes."""
    counts: Counter = Counter()
    shown: dict[int, Value] = {}

    def shared(p: KernelPlan) -> KernelPlan:
        groups = p.phases() if p.is_reduction else [("loop", list(p.steps))]
        steps = {}
        for _, members in groups:
            canonical = _Interner()
            for step in members:
                steps[id(step)] = step.map_values(canonical.value)
            for value, uses in canonical.shared():
                counts[id(value)] = uses
                shown[id(value)] = value
        return dataclasses.replace(p, steps=tuple(steps.get(id(s), s) for s in p.steps),
                                   segments=tuple(shared(seg) for seg in p.segments))

    out = shared(plan)
    if not counts:
        return plan
    top = sorted(counts, key=lambda i: -counts[i])[:3]
    examples = ", ".join(f"{_short_value(shown[i])} ({counts[i]} uses)" for i in top)
    note = f"common subexpressions: {len(counts)} written more than once, now one value each: {examples}"
    return dataclasses.replace(out, notes=out.notes + (note,))


class _Interner:
    """Rebuilds value trees so that equal subtrees are one object (hash-consing): children first, an
    op's key is its kind, dtype and its (already unique) children's ids."""

    def __init__(self):
        self.unique: dict[tuple, Value] = {}
        self.roots: Counter = Counter()  # id of a unique value -> steps whose value (or position) it is
        self.keep: list[Value] = []  # the originals, alive while their ids are keys of `done`
        self.done: dict[int, Value] = {}
        self.merged: set[int] = set()  # ids of unique values that stand for more than one original

    def value(self, root: Value) -> Value:
        out = self._visit(root)
        self.roots[id(out)] += 1
        return out

    def _visit(self, value: Value) -> Value:
        hit = self.done.get(id(value))
        if hit is not None:
            return hit
        self.keep.append(value)
        if isinstance(value, Op):
            args = tuple(self._visit(a) for a in value.args)
            key = ("op", value.op, value.dtype, tuple(id(a) for a in args))
            make = lambda: Op(value.op, args, value.dtype, value.origins)  # noqa: E731
        elif isinstance(value, Cast):
            arg = self._visit(value.arg)
            key = ("cast", value.dtype, id(arg))
            make = lambda: Cast(arg, value.dtype, value.origins)  # noqa: E731
        else:  # a leaf: a load's mask and positions made unique first, then compared whole
            leaf = value
            if isinstance(leaf, Load) and leaf.mask is not None:
                leaf = dataclasses.replace(leaf, mask=self._visit(leaf.mask))
            if isinstance(leaf, Load) and leaf.indirect:
                leaf = dataclasses.replace(leaf, indirect=tuple(dataclasses.replace(t, value=self._visit(t.value))
                                                                for t in leaf.indirect))
            key = ("leaf", leaf)
            make = lambda: leaf  # noqa: E731
        out = self.unique.get(key)
        if out is None:
            out = self.unique[key] = make()
        else:
            self.merged.add(id(out))  # a second object equal to one seen: one value from now on
        self.done[id(value)] = out
        return out

    def shared(self) -> list[tuple[Value, int]]:
        """The ops and casts this made one of several equal ones (an inlined producer read by two
        consumers, `x * x` of an expression), with the places that read each now."""
        uses = Counter(self.roots)
        for v in self.unique.values():
            for child in children(v):
                uses[id(child)] += 1
        return [(v, uses[id(v)]) for v in self.unique.values()
                if isinstance(v, (Op, Cast)) and id(v) in self.merged and uses[id(v)] > 1]


def _short_value(value: Value, limit: int = 48) -> str:
    text = format_value(value)
    return f"`{text}`" if len(text) <= limit else f"`{text[:limit - 3]}...`"


# ---- loop order ---------------------------------------------------------------------------------
def choose_loop_order(plan: KernelPlan) -> KernelPlan:
    """A pointwise kernel's x dimensions ordered by the stride of its stores, largest first, so that
    consecutive elements of a program are adjacent in the memory it writes. The scheduler places nodes
    in the logical (N, C, H, W) order; a channels-last output (C innermost in memory) was then written
    with stride C between neighbouring elements. Only when every store is a plain strided index of the
    x variables and all stores agree on the order; reductions and horizontal kernels keep theirs."""
    if plan.is_reduction or plan.segments or len(plan.space.x) < 2 or plan.scatters:
        return plan  # a scatter's adds land at positions read from memory: no store order to follow
    order: Optional[tuple[int, ...]] = None
    for step in plan.steps:
        if step.store_index is None:
            continue
        mine = _stride_order(step.store_index, plan.space.x)
        if mine is None or (order is not None and mine != order):
            return plan
        order = mine
    if order is None or order == tuple(range(len(plan.space.x))):
        return plan
    new_x = tuple(plan.space.x[d] for d in order)
    ranges = {f"x{i}": size for i, size in enumerate(new_x)}
    mapping = {f"x{old}": Index.var(f"x{new}") for new, old in enumerate(order)}
    steps = tuple(dataclasses.replace(
        step, value=subs_index(step.value, mapping, ranges),
        store_index=None if step.store_index is None else step.store_index.subs(mapping, ranges))
        for step in plan.steps)
    note = (f"loop order: x dims {list(plan.space.x)} run as {list(new_x)} (old x{order[-1]} innermost), "
            "the order of the stores' strides: each store runs contiguously")
    return dataclasses.replace(plan, space=dataclasses.replace(plan.space, x=new_x), steps=steps,
                               notes=plan.notes + (note,))


def _stride_order(index: Index, sizes: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """The x dims sorted by their coefficient in `index`, largest first (dims of size 1 and dims the
    index does not move with keep their place relative to each other); None unless `index` is a sum
    of plain variables times positive constants."""
    # Any loop order computes the same elements (a pointwise kernel whose stores are plain strides):
    # the example call's sizes choose it, and no guard is kept.
    stride = {}
    for atom, coef in index.terms:
        if not isinstance(atom, Var) or not atom.name.startswith("x") or hint(coef) <= 0:
            return None
        stride[int(atom.name[1:])] = coef
    moving = [d for d in range(len(sizes)) if hint(sizes[d]) > 1 and d in stride]
    if len(set(stride[d] for d in moving)) != len(moving):
        return None  # two dims with one stride: not a dense layout, keep the order
    ranked = iter(sorted(moving, key=lambda d: -hint(stride[d])))  # any order is correct: speed only
    # Dims that do not move keep their slots; the moving ones fill theirs in stride order.
    return tuple(next(ranked) if d in moving else d for d in range(len(sizes)))


# ---- index width --------------------------------------------------------------------------------
def choose_index_width(plan: KernelPlan) -> KernelPlan:
    """int64 index arithmetic for the whole kernel when any index computation (loads, stores, index
    values, gathered positions, the loop counters) can pass 2**31 - 1; int32, the fast default, otherwise."""
    largest = largest_index_value(plan)
    counters = upper_max(plan.xnumel, plan.rnumel) + COUNTER_HEADROOM
    # Symbolic sizes: decided for the example sizes; int32 is kept as a guard, the graph's largest bound
    # only (a larger call compiles again), int64 is correct at any size and needs none (symbolic.fits).
    if not fits(largest, INT32_MAX):
        dtype, why = "int64", f"largest offset {_short(largest)} > 2**31-1"
    elif not fits(counters, INT32_MAX):
        top = _short(upper_max(plan.xnumel, plan.rnumel))
        dtype, why = "int64", f"loop counter up to {top} plus a block's overshoot"
    else:
        dtype, why = "int32", f"largest offset {_short(largest)} fits"
    return dataclasses.replace(plan, index_dtype=dtype, largest_offset=largest,
                               notes=plan.notes + (f"index: {dtype} ({why})",))


def _short(n: int) -> str:
    """4294967296 -> '4.3e9'; small numbers as they are."""
    if is_symbolic(n):
        try:
            return python_expr(n)
        except NotSymbolic:  # a bound with a floor or max in it: only ever printed in a note
            return str(n)
    return str(n) if n < 100000 else f"{n:.1e}".replace("e+0", "e").replace("e+", "e")


def largest_index_value(plan: KernelPlan) -> int:
    """The largest magnitude an index computation of the kernel can reach, partial sums included
    (a term of `N - 1 - x0` is as large as the whole), over every load, store and index value."""
    ranges = plan.space.ranges()
    largest = upper_max(plan.xnumel, plan.rnumel)
    for step in plan.steps:
        if step.store_index is not None:
            scattered = sum(t.size * abs(t.stride) for t in step.store_positions)
            largest = upper_max(largest, _magnitude(step.store_index, ranges) + scattered)
        for v in (v for value in step.values() for v in walk(value)):
            if isinstance(v, Load):
                # A gathered position p adds p * stride, p < size: the offset reaches index + size * stride.
                gathered = sum(t.size * abs(t.stride) for t in v.indirect)
                largest = upper_max(largest, _magnitude(v.index, ranges) + gathered)
            elif isinstance(v, IndexValue):
                largest = upper_max(largest, _magnitude(v.index, ranges))
    return largest


def _magnitude(index: Index, ranges: dict[str, int]) -> int:
    """An upper bound on |any partial sum| of `index` and of the expressions inside its // and %."""
    total = abs(index.const)
    inner = 0
    for atom, coef in index.terms:
        if isinstance(atom, Var):
            size = ranges.get(atom.name)
            top = INT32_MAX + 1 if size is None else size - 1 if is_symbolic(size) else max(size - 1, 0)
        else:
            arg = _magnitude(atom.arg, ranges)
            inner = upper_max(inner, arg)
            if is_symbolic(arg) or is_symbolic(atom.divisor):  # a bound, never printed: no floor in it
                top = _quotient_bound(arg, atom.divisor) if isinstance(atom, FloorDiv) else atom.divisor - 1
            else:
                top = arg // atom.divisor if isinstance(atom, FloorDiv) else atom.divisor - 1
            assert isinstance(atom, (FloorDiv, Mod))
        total += abs(coef) * top
    return upper_max(total, inner)


def _quotient_bound(dividend: Size, divisor: Size) -> Size:
    """An upper bound on dividend // divisor (both nonnegative, the divisor >= 1) without a floor in
    it: q + r where dividend = q * divisor + r divides the polynomials (r / divisor <= r for r >= 0),
    each coefficient rounded up (every monomial of sizes is nonnegative), else the dividend itself.
    (16*s0 * ((64*s0*x + 48*s0) // (64*s0)) is bounded by 16*s0*(x + 1), not by 16*s0 times the
    dividend: a kernel of StableLM chose int64 at a sequence of 512 with that bound.)"""
    try:
        quotient, remainder = sympy.div(sympy.expand(dividend), sympy.expand(divisor))
    except (sympy.polys.polyerrors.PolynomialError, sympy.polys.polyerrors.CoercionFailed, TypeError):
        return dividend  # a Max or a floor in the divisor: not polynomials
    quotient, remainder = _rounded_up(quotient), _rounded_up(remainder)
    if known(remainder <= 0):
        return quotient
    if known(remainder >= 0):
        return quotient + remainder
    return dividend


def _rounded_up(polynomial: sympy.Expr) -> sympy.Expr:
    """The polynomial with each coefficient rounded up to an integer: not below it where every monomial
    is nonnegative (products of sizes, floors and remainders of nonnegative values)."""
    terms = (term.as_coeff_Mul() for term in sympy.Add.make_args(sympy.expand(polynomial)))
    return sympy.Add(*(sympy.ceiling(coefficient) * monomial for coefficient, monomial in terms))


# ---- reduction layout ---------------------------------------------------------------------------
def choose_reduction_layout(plan: KernelPlan) -> KernelPlan:
    """Columns when most loads that move along the reduction are contiguous along x and strided along r:
    one program per row (the row layout) would then read one element per row, a row apart, and the
    GPU fetches a whole sector for each."""
    if not plan.is_reduction or hint(plan.xnumel) < COLUMN_MIN_COLUMNS:  # speed only: the example's sizes
        return plan
    along_x, along_r = load_directions(plan)
    if along_x <= along_r:
        return plan
    note = (f"reduction layout: columns ({along_x} of {along_x + along_r} loads that move with the reduction "
            f"are contiguous along x); a Triton program takes up to {COLUMN_XBLOCK} adjacent columns and loops "
            "over rows, a C++ work item keeps one accumulator per column of its block with columns innermost")
    return dataclasses.replace(plan, columns=True, notes=plan.notes + (note,))


def load_directions(plan: KernelPlan) -> tuple[int, int]:
    """(loads contiguous along x and strided along r, loads contiguous along r), counting each distinct
    (buffer, index) once. Only loads that move with both x and r count: one that stays put as r moves
    (a per-row statistic) or as x moves (a per-column vector, the same for every program) is small."""
    x_last, r_last = Var(f"x{len(plan.space.x) - 1}"), Var(f"r{len(plan.space.r) - 1}")
    x_vars = {f"x{i}" for i in range(len(plan.space.x))}
    r_vars = {f"r{i}" for i in range(len(plan.space.r))}
    seen: set[tuple[str, Index]] = set()
    along_x = along_r = 0
    for step in plan.steps:
        for v in walk(step.value):
            if not isinstance(v, Load) or v.indirect or (v.buffer, v.index) in seen:
                continue
            seen.add((v.buffer, v.index))
            names = v.index.free_vars()
            if not (names & x_vars and names & r_vars):
                continue
            coefs = dict(v.index.terms)
            r_stride, x_stride = coefs.get(r_last, 0), coefs.get(x_last, 0)
            if abs(r_stride) == 1:
                along_r += 1
            elif r_stride and x_stride == 1:
                along_x += 1
    return along_x, along_r


# ---- reduction split ----------------------------------------------------------------------------
def choose_reduction_split(plan: KernelPlan) -> KernelPlan:
    """Split a reduction with few, long rows (x.sum(), x.abs().max(), x.var(), x - x.mean() over a big
    tensor) across many programs per row: each pass over the row runs on chunks and leaves partials, a
    second kernel reduces them in a fixed order (deterministic, unlike atomics). A plan that passes over
    the row twice (var: the sum, then the squares around the mean) becomes two such pairs."""
    if not plan.is_reduction:
        return plan
    if is_symbolic(plan.xnumel) or is_symbolic(plan.rnumel):
        return dataclasses.replace(plan, notes=plan.notes + ("reduction not split: its sizes are symbolic",))
    refusal = split_refusal(plan)
    if refusal is not None:
        candidate = (column_blocks(plan) < COLUMN_SPLIT_MAX_PROGRAMS and plan.rnumel >= 2 * COLUMN_MIN_CHUNK
                     if plan.columns else plan.xnumel < SPLIT_MAX_ROWS and plan.rnumel >= SPLIT_MIN_ELEMENTS)
        if candidate:  # say why not
            return dataclasses.replace(plan, notes=plan.notes + (f"reduction not split: {refusal}",))
        return plan
    if plan.columns:
        split = max(2, min(ceil(plan.rnumel / COLUMN_MIN_CHUNK), SPLIT_TARGET_PROGRAMS // column_blocks(plan)))
    else:
        split = max(2, min(ceil(plan.rnumel / SPLIT_MIN_CHUNK), SPLIT_TARGET_PROGRAMS // plan.xnumel))
    passes = sum(1 for kind, _ in plan.phases() if kind == "loop")
    how = ("one pass over the row, then a kernel reducing its partials" if passes == 1 else
           f"{passes} passes over the row, each followed by a kernel reducing its partials")
    lines = "column" if plan.columns else "row"
    note = (f"reduction split: {split} programs per {lines} ({plan.xnumel} {lines}{'s' if plan.xnumel > 1 else ''} of "
            f"{plan.rnumel} elements); {how}")
    return dataclasses.replace(plan, split=split, notes=plan.notes + (note,))


def split_refusal(plan: KernelPlan) -> str | None:
    """Why this reduction is not split, or None when it is."""
    if plan.columns:
        if column_blocks(plan) >= COLUMN_SPLIT_MAX_PROGRAMS:
            return f"{column_blocks(plan)} blocks of {COLUMN_XBLOCK} columns already give enough programs"
        if plan.rnumel < 2 * COLUMN_MIN_CHUNK:
            return f"columns of {plan.rnumel} elements are short"
    elif plan.xnumel >= SPLIT_MAX_ROWS:
        return f"{plan.xnumel} rows already give enough programs"
    elif plan.rnumel < SPLIT_MIN_ELEMENTS:
        return f"rows of {plan.rnumel} elements are short"
    phases = plan.phases()
    if phases[0][0] != "loop":
        return "a step runs once per row before the first pass over it"
    for kind, steps in phases:
        for step in steps:
            if kind != "loop" or step.reduction_type is None:
                continue
            if step.reduction_type not in SPLITTABLE_REDUCTIONS:
                return f"{step.node} is a {step.reduction_type} reduction"
            if step.value.dtype == torch.bool:  # any()/all(): partials of bool are not worth a check of their own
                return f"{step.node} reduces {step.value.dtype} values"
    return None


def column_blocks(plan: KernelPlan) -> int:
    """Programs a column reduction runs unsplit: one per COLUMN_XBLOCK adjacent columns."""
    return ceil(plan.xnumel / COLUMN_XBLOCK)


# ---- reduction merging ----------------------------------------------------------------------------
def merge_reductions(plan: KernelPlan) -> KernelPlan:
    """Each reduction whose (kind, value) an earlier step of the plan already reduces is dropped; what
    read it reads the earlier result (a later value that becomes equal through that is merged too), and
    where its buffer is stored, a row step stores the earlier result there."""
    if not plan.is_reduction:
        return plan
    first: dict[tuple, str] = {}  # (reduction kind, value) -> the step computing it
    renamed: dict[str, str] = {}  # merged reduction -> the one computing its value
    steps, merged = [], []
    for step in plan.steps:
        value = _results_renamed(step.value, renamed) if renamed else step.value
        if step.reduction_type and step.scope == "full":
            key = (step.reduction_type, value)
            if key in first:
                renamed[step.node] = first[key]
                merged.append(f"{step.node} is {first[key]}")
                if step.store_buffer:
                    steps.append(dataclasses.replace(step, scope="row", reduction_type=None,
                                                     value=ReductionResult(first[key], value.dtype)))
                continue
            first[key] = step.node
        steps.append(step if value is step.value else dataclasses.replace(step, value=value))
    if not merged:
        return plan
    note = f"merge reductions: {', '.join(merged)} (the same reduction of the same value), computed once"
    return dataclasses.replace(plan, steps=tuple(steps), notes=plan.notes + (note,))


def _results_renamed(value: Value, renamed: dict[str, str]) -> Value:
    def leaf(v: Value) -> Value:
        if isinstance(v, ReductionResult) and v.node in renamed:
            return dataclasses.replace(v, node=renamed[v.node])
        return v
    return rebuild(value, leaf)


# ---- online softmax -------------------------------------------------------------------------------
def online_softmax(plan: KernelPlan) -> KernelPlan:
    """Softmax, log-softmax and cross entropy over a long row (more than PERSISTENT_MAX_RBLOCK elements,
    an LM head's vocabulary) pass over the row for its max M, again for sum(exp(x - M)), and again for
    the outputs. The first two become one pass: per lane a running max m and a sum s of exp(x - m),
    rescaled by exp(m_old - m_new) when m grows; at the end the lanes are brought to the row's max.
    Eager's values at the edges are kept: a row of -inf (M = -inf) sums to NaN, NaN propagates. Triton
    only (the C++ backend's rows sit in cache); not for split reductions (their partials take one pass
    each) nor column reductions."""
    if not _loops_over_long_rows(plan):
        return plan
    maxima = {s.node: s for s in plan.steps if s.scope == "full" and s.reduction_type == "amax"
              and s.value.dtype in (torch.float32, torch.float64)}
    steps, merged = list(plan.steps), []
    for i, step in enumerate(steps):
        if step.scope != "full" or step.reduction_type != "sum":
            continue
        shifted = _exp_of_shifted(step.value)
        if shifted is None or shifted[1] not in maxima or maxima[shifted[1]].value != shifted[0]:
            continue
        peak = maxima[shifted[1]]
        candidate = steps[:i] + [dataclasses.replace(step, value=peak.value, reduction_type="sumexp",
                                                     online_max=peak.node)] + steps[i + 1:]
        if _one_pass_holds(plan, candidate, peak.node, step.node):
            steps = candidate
            merged.append((peak.node, step.node))
    return _merged_passes(plan, steps, merged, "online softmax", "running max, rescaled sum")


# ---- shared by the one-pass rewrites (online softmax, Welford) ----------------------------------
def _loops_over_long_rows(plan: KernelPlan) -> bool:
    """A row reduction that loops over its row in pieces: longer than a block's registers, not split
    into partials (each takes one pass anyway) and not over columns."""
    return (plan.is_reduction and not plan.columns and plan.split <= 1 and not plan.segments
            and (is_symbolic(plan.rnumel) or next_pow2(plan.rnumel) > PERSISTENT_MAX_RBLOCK))


def _one_pass_holds(plan: KernelPlan, candidate: list, first: str, second: str) -> bool:
    """Whether, with `candidate` steps, one loop over the row computes both `first` and `second`."""
    trial = dataclasses.replace(plan, steps=tuple(candidate))
    return any(first in nodes and second in nodes
               for nodes in ({s.node for s in group} for kind, group in trial.phases() if kind == "loop"))


def _merged_passes(plan: KernelPlan, steps: list, merged: list[tuple[str, str]], name: str, how: str) -> KernelPlan:
    """`plan` with `steps` and a note naming the merged pairs and the passes over memory before and
    after; `plan` itself when nothing merged."""
    if not merged:
        return plan
    passes_before = sum(1 for kind, _ in plan.phases() if kind == "loop")
    out = dataclasses.replace(plan, steps=tuple(steps))
    passes_after = sum(1 for kind, _ in out.phases() if kind == "loop")
    pairs = ", ".join(f"{a} and {b}" for a, b in merged)
    note = (f"{name}: {pairs} in one pass over rows of {plan.rnumel} ({how}); "
            f"{passes_before} passes over memory -> {passes_after}")
    return dataclasses.replace(out, notes=out.notes + (note,))


def _exp_of_shifted(value) -> Optional[tuple]:
    """(F, M) where `value` is exp(F - M), M a reduction result of the same float dtype; else None."""
    if not (isinstance(value, Op) and value.op == "exp" and len(value.args) == 1):
        return None
    inner = value.args[0]
    if not (isinstance(inner, Op) and inner.op == "sub" and len(inner.args) == 2):
        return None
    f, m = inner.args
    if not isinstance(m, ReductionResult) or not (f.dtype == m.dtype == inner.dtype == value.dtype):
        return None
    return f, m.node


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


# ---- Welford --------------------------------------------------------------------------------------
WELFORD_DTYPES = (torch.float32, torch.float64)


def welford(plan: KernelPlan) -> KernelPlan:
    """Layer norm, var, std and var_mean over a long row (more than PERSISTENT_MAX_RBLOCK elements) pass
    over the row for sum(x) (the mean), again for sum((x - mean)**2) and, for layer norm, again for the
    outputs: the squares need the finished mean. The first two become one pass: per lane a running count,
    mean and M2 (Welford's update), and after the pass each lane's M2 + count * (lane mean - centre)**2
    summed over the lanes, which is exactly sum((x - centre)**2) for any row value `centre`: the plan's
    own mean expression, so the values are the plan's. The sum of x stays a plain sum beside it. NaN and
    inf propagate as in eager (an inf makes the variance NaN). Triton only (the C++ backend's rows sit in
    cache); not for split reductions (their partials take one pass each) nor column reductions; only a
    sum of squares around a value made of the sum of the very same values (not another tensor's mean)."""
    if not _loops_over_long_rows(plan):
        return plan
    sums = {s.node: s for s in plan.steps if s.scope == "full" and s.reduction_type == "sum"
            and s.centre is None and s.value.dtype in WELFORD_DTYPES}
    steps, merged = list(plan.steps), []
    for i, step in enumerate(steps):
        if step.node not in sums:
            continue
        centred = _centred_square(step.value)
        if centred is None:
            continue
        value, centre = centred
        means = [n for n in _results_read(centre) if n in sums and sums[n].value == value]
        if not means:
            continue  # centred on something other than a sum of the same values
        candidate = steps[:i] + [dataclasses.replace(step, value=value, reduction_type="welford",
                                                     centre=centre)] + steps[i + 1:]
        if _one_pass_holds(plan, candidate, means[0], step.node):
            steps = candidate
            merged.append((means[0], step.node))
    return _merged_passes(plan, steps, merged, "welford", "per-lane count, mean and M2, combined after the pass")


def _centred_square(value: Value) -> Optional[tuple[Value, Value]]:
    """(F, C) where `value` is (F - C) * (F - C) or (C - F) * (C - F), C a row value (reduction results
    and constants, no load) that reads some reduction, all of one float dtype; else None."""
    if not (isinstance(value, Op) and value.op == "mul" and len(value.args) == 2):
        return None
    diff, other = value.args
    if diff != other or not (isinstance(diff, Op) and diff.op == "sub" and len(diff.args) == 2):
        return None
    for f, c in (diff.args, diff.args[::-1]):
        if _is_row_value(c) and not _is_row_value(f):
            if f.dtype == c.dtype == diff.dtype == value.dtype and value.dtype in WELFORD_DTYPES:
                return f, c
    return None


def _is_row_value(value: Value) -> bool:
    """Whether `value` is the same for every element of a row: made of reduction results and constants."""
    nodes = list(walk(value))
    return (any(isinstance(v, ReductionResult) for v in nodes)
            and not any(isinstance(v, (Load, IndexValue)) for v in nodes))


def _results_read(value: Value) -> list[str]:
    return list(dict.fromkeys(v.node for v in walk(value) if isinstance(v, ReductionResult)))

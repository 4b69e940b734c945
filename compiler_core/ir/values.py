"""Value expressions: the body of a loop node, as an explicit tree (never a closure).

    Op("exp", (Op("sub", (Load("arg0_1", x0*64 + r0), ReductionResult("buf0"))),))

prints as `exp(arg0_1[64*x0 + r0] - buf0)`.  Both code generators walk these trees; the explorer
prints them.  `dtype` on every node is the dtype the value is computed in (fp32 for bf16/fp16
storage: loads upcast, stores downcast).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Union

import torch

from compiler_core.ir.index import Index, all_static, subs_static

# Error codes of an index out of range (runtime/kernel_errors.ERRORS says which exception each is):
INDEX_ERROR = 2  # IndexError, as eager's index, index_select, embedding and take raise
GATHER_ERROR = 3  # RuntimeError, as eager's gather raises
SCATTER_ERROR = 4  # RuntimeError, as eager's scatter_add and index_add raise
TARGET_ERROR = 5  # IndexError, as eager's nll_loss and cross_entropy raise for a class out of range


@dataclass(frozen=True)
class IndirectIndex:
    """A position read from a tensor (gather, index, embedding): `value`, an int64 value, picks one of
    `size` elements `stride` apart.  With `wrap` a negative position counts from the end (index, take;
    gather, index_select and embedding refuse one, as in ATen).  A position out of range reads
    element 0 instead and sets the kernel error flag to `error`, so the runtime raises eager's error
    after the call. A position shown to lie in [0, size) (plan pass `bounds`: a clamped coordinate)
    has `checked` False: it is used as it is, with no wrap and no check."""

    value: "Value"
    size: int
    stride: int
    error: int
    wrap: bool
    checked: bool = True


def _hash_once(self) -> int:
    """A value's hash, computed once per object: the dataclass-made hash hashes the children again
    each time, once per *path* through a tree whose subtrees are shared (2^n for a recurrence of n
    steps), and dict and set lookups keyed by such a tree took 16 s of a 20-step kernel's codegen."""
    cached = self.__dict__.get("_hash")
    if cached is None:
        cached = hash((type(self).__name__, *(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)))
        object.__setattr__(self, "_hash", cached)  # not a field: equality, replace() and repr ignore it
    return cached


def _equal_once(self, other: object) -> bool:
    """Structural equality that compares each pair of distinct objects once: the dataclass-made one
    compares children again once per *path*, and two equal copies of a tree with shared subtrees
    (a plan pass that rebuilt every load with the same index) took 2^n comparisons: 10 s of a 13 s
    compile of histogramdd, deciding whether a pass had changed its plan (2026-12-06). Unequal trees
    part at their cached hashes; a proven-equal twin is remembered (weakly) on the object."""
    if self is other:
        return True
    if type(other) is not type(self) or hash(self) != hash(other):
        return False
    twin = self.__dict__.get("_twin")
    if twin is not None and twin() is other:
        return True
    for name in _compared_fields(type(self)):
        if getattr(self, name) != getattr(other, name):
            return False
    object.__setattr__(self, "_twin", weakref.ref(other))  # not a field: replace() and repr ignore it
    return True


def _state_without_twin(self) -> dict:
    """Pickled and copied without the twin (a weak reference, which pickle refuses)."""
    state = dict(self.__dict__)
    state.pop("_twin", None)
    return state


@functools.lru_cache(maxsize=None)
def _compared_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.compare)


@dataclass(frozen=True)
class Load:
    __hash__ = _hash_once
    __eq__ = _equal_once
    __getstate__ = _state_without_twin
    buffer: str
    index: Index
    dtype: torch.dtype  # storage dtype of the buffer
    # A bool value: where it is false nothing is read and the load gives 0 (cat, constant_pad_nd read
    # each input only inside its own region; the index is out of the buffer elsewhere).
    mask: Optional["Value"] = None
    # An indirect load reads buffer[index + sum(position * stride)], positions loaded from other
    # buffers: those loads are children of this one, so readers of the tree see every buffer read.
    indirect: tuple[IndirectIndex, ...] = ()


@dataclass(frozen=True, eq=False)
class Constant:
    value: Union[float, int, bool]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        # A symbolic scalar would be read (and compared, hashed, printed) at its example value: every
        # use a silent specialization to the first call. Sizes reach kernels as IndexValues instead.
        if isinstance(self.value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise TypeError(f"Constant({self.value}) holds a symbolic {type(self.value).__name__}: lower it as "
                            "a size expression (lowering.core.size_value), not a literal")

    # Equal when the bits are: as numbers -0.0 == 0.0, so every table of values (common subexpressions,
    # plan caches, inlining maps) took clamp(x, -0.0, 0.0)'s two bounds for one; and NaN != NaN made a
    # NaN literal unequal to itself.
    def _key(self) -> tuple:
        v = self.value
        if isinstance(v, float):
            return (self.dtype, struct.pack("<d", v))
        if isinstance(v, complex):
            return (self.dtype, struct.pack("<dd", v.real, v.imag))
        return (self.dtype, v)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Constant and self._key() == other._key())

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True)
class IndexValue:
    """An index expression used as a value (arange, iota, masks built from positions)."""

    index: Index
    dtype: torch.dtype


@dataclass(frozen=True)
class Op:
    __hash__ = _hash_once
    __eq__ = _equal_once
    __getstate__ = _state_without_twin
    op: str  # a primitive name from compiler_core.decomp.primitives.POINTWISE
    args: tuple["Value", ...]
    dtype: torch.dtype
    # The FX nodes this op computes (provenance for the generated lines); not part of the value:
    # two equal expressions from different nodes are still one common subexpression.
    origins: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Cast:
    __hash__ = _hash_once
    __eq__ = _equal_once
    __getstate__ = _state_without_twin
    arg: "Value"
    dtype: torch.dtype
    origins: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class ReductionResult:
    """The finished value of a reduction computed earlier in the same kernel (same row)."""

    node: str
    dtype: torch.dtype


Value = Union[Load, Constant, IndexValue, Op, Cast, ReductionResult]


def children(value: Value) -> tuple[Value, ...]:
    if isinstance(value, Op):
        return value.args
    if isinstance(value, Cast):
        return (value.arg,)
    if isinstance(value, Load):
        return ((value.mask,) if value.mask is not None else ()) + tuple(t.value for t in value.indirect)
    return ()


# A value is a tree whose subtrees are often shared: a decomposition that reads one intermediate twice
# per step (Clenshaw's recurrence, a chain of wheres over a running total) hands each step the same
# object twice, and after n steps the tree has 2^n paths but only ~n distinct nodes. Every traversal
# below therefore visits each distinct object once (keyed by id, the objects kept alive meanwhile):
# without that, compiling 22 such steps took a minute, 16 took 213 s in one decomposition.


def walk(value: Value) -> Iterator[Value]:
    """Every distinct node of the tree once, parents before children."""
    stack, seen = [value], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(children(node)))


class _Memo:
    """`transform(value, recurse)` applied once per distinct object of a tree. A class, not a closure:
    a closure that passes itself on is a reference cycle, and every traversal's results waited for
    the cyclic collector. It is entered through the bound method `visit`, not `__call__`: calling an
    instance goes through a C slot that counts against the recursion limit a second time per level,
    and Bessel's deep recurrences then ran out of stack under pytest."""

    __slots__ = ("done", "transform")

    def __init__(self, transform: Callable[[Value, Callable[[Value], Value]], Value]):
        self.done: dict[int, tuple[Value, Value]] = {}  # id -> (the object, so its id stays its own; the result)
        self.transform = transform

    def visit(self, value: Value) -> Value:
        hit = self.done.get(id(value))
        if hit is None:
            hit = self.done[id(value)] = (value, self.transform(value, self.visit))
        return hit[1]


def _memoized(transform: Callable[[Value, Callable[[Value], Value]], Value]) -> Callable[[Value], Value]:
    return _Memo(transform).visit


def rebuild(value: Value, leaf: Callable[[Value], Value]) -> Value:
    """Copy of the tree with each leaf (Load, Constant, IndexValue, ReductionResult) replaced (a Load's
    mask and positions are rebuilt before `leaf` sees it). A subtree shared in `value` is shared in the copy."""

    # A subtree no leaf changes is returned as it is, not copied: most of a kernel's tree reads buffers
    # made elsewhere, and copying it for every candidate plan was most of the scheduler's time.
    def transform(value: Value, recurse: Callable[[Value], Value]) -> Value:
        if isinstance(value, Op):
            args = tuple(recurse(a) for a in value.args)
            if all(new is old for new, old in zip(args, value.args)):
                return value
            return Op(value.op, args, value.dtype, value.origins)
        if isinstance(value, Cast):
            arg = recurse(value.arg)
            return value if arg is value.arg else Cast(arg, value.dtype, value.origins)
        if isinstance(value, Load) and value.mask is not None:  # the mask first; `leaf` sees the new one
            mask = recurse(value.mask)
            if mask is not value.mask:
                value = dataclasses.replace(value, mask=mask)
        if isinstance(value, Load) and value.indirect:
            positions = tuple(recurse(t.value) for t in value.indirect)
            if any(new is not t.value for new, t in zip(positions, value.indirect)):
                value = dataclasses.replace(value, indirect=tuple(dataclasses.replace(t, value=new)
                                                                  for new, t in zip(positions, value.indirect)))
        return leaf(value)

    return _memoized(transform)(value)


def subs_index(value: Value, mapping: dict[str, Index], ranges: dict[str, int]) -> Value:
    """Rename loop variables inside every index of the tree."""
    static = all_static(mapping, ranges)
    mapping_key, ranges_key = (tuple(sorted(mapping.items())), tuple(sorted(ranges.items()))) if static else ((), ())

    def subs(index: Index) -> Index:
        if static and index.is_static:
            return subs_static(index, mapping_key, ranges_key)
        return index.subs(mapping, ranges)

    def leaf(v: Value) -> Value:
        if isinstance(v, Load):
            return dataclasses.replace(v, index=subs(v.index))
        if isinstance(v, IndexValue):
            return IndexValue(subs(v.index), v.dtype)
        return v

    return rebuild(value, leaf)


def with_origins(value: Value, origins: tuple[str, ...]) -> Value:
    """Copy of the tree with every op and cast (masks and positions of loads included) saying it
    computes FX nodes `origins`: a loop node's own body, before producers are inlined into it."""

    def transform(value: Value, recurse: Callable[[Value], Value]) -> Value:
        if isinstance(value, Op):
            return Op(value.op, tuple(recurse(a) for a in value.args), value.dtype, origins)
        if isinstance(value, Cast):
            return Cast(recurse(value.arg), value.dtype, origins)
        if isinstance(value, Load) and (value.mask is not None or value.indirect):
            mask = None if value.mask is None else recurse(value.mask)
            indirect = tuple(dataclasses.replace(t, value=recurse(t.value)) for t in value.indirect)
            return dataclasses.replace(value, mask=mask, indirect=indirect)
        return value

    return _memoized(transform)(value)


def loads(value: Value) -> list[Load]:
    return [v for v in walk(value) if isinstance(v, Load)]


_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "eq": "==", "ne": "!=", "lt": "<",
          "le": "<=", "gt": ">", "ge": ">="}


def format_value(value: Value) -> str:
    """Readable one-line form, e.g. `exp(arg0_1[64*x0 + r0] - buf0)`; a long subtree read twice or more
    is printed once, after the rest (`(%0 * %0)  where %0 = exp(...)`, see format_values)."""
    bindings, (text,) = format_values([value])
    return text if not bindings else f"{text}  where {'; '.join(f'{n} = {t}' for n, t in bindings)}"


# A shared op is named when its own form is longer than this: `(x + 1)` read twice reads best as it
# is, and each name's text is then at most twice this plus the op around it.
NAME_SHARED_LONGER_THAN = 60


def format_values(values: list[Value]) -> tuple[list[tuple[str, str]], list[str]]:
    """Readable forms of `values` and the bindings they read: every op or cast read by two parents or
    more (counting `values` themselves as parents) whose form is longer than NAME_SHARED_LONGER_THAN
    characters is printed once as a numbered binding (`%0`, `%1`...; inner ones first) and read by its
    name. Printed in full, a tree whose 2^n paths share n nodes (a recurrence reading its last step
    twice, the common subexpressions a plan pass merged) is 2^n characters long: a Clenshaw recurrence
    of 30 steps would be a gigabyte of text."""
    # id -> reads of it: an edge from each distinct parent, `values` read by one synthetic parent (one
    # walk over all of them, so a node under two roots counts its own reads once).
    uses: dict[int, int] = {}
    for node in walk(Op("values", tuple(values), torch.float32)):
        for child in children(node):
            uses[id(child)] = uses.get(id(child), 0) + 1
    bindings: list[tuple[str, str]] = []

    def transform(value: Value, recurse: Callable[[Value], str]) -> str:
        text = _format(value, recurse)
        if isinstance(value, (Op, Cast)) and uses[id(value)] > 1 and len(text) > NAME_SHARED_LONGER_THAN:
            bindings.append((f"%{len(bindings)}", text))
            return bindings[-1][0]
        return text

    text_of = _memoized(transform)
    texts = [text_of(v) for v in values]
    return bindings, texts


def format_position(terms: tuple[IndirectIndex, ...]) -> str:
    """The positions part of an indirect address, e.g. ` + 64*checked(arg1_1[x0], 5000)`."""
    return _positions(terms, format_value)


def _positions(terms: tuple[IndirectIndex, ...], format_value: Callable[[Value], str]) -> str:
    return "".join(f" + {t.stride}*{_position_kind(t)}({format_value(t.value)}, {t.size})" for t in terms)


def _position_kind(t: IndirectIndex) -> str:
    if not t.checked:
        return "proven"  # inside [0, size) by its value range: no check
    return "wrapped" if t.wrap else "checked"


def _format(value: Value, format_value: Callable[[Value], str]) -> str:
    if isinstance(value, Load):
        ref = f"{value.buffer}[{value.index}{_positions(value.indirect, format_value)}]"
        return ref if value.mask is None else f"masked({format_value(value.mask)}, {ref})"
    if isinstance(value, Constant):
        return repr(value.value)
    if isinstance(value, IndexValue):
        return f"index({value.index})"
    if isinstance(value, ReductionResult):
        return value.node
    if isinstance(value, Cast):
        return f"to_{str(value.dtype).replace('torch.', '')}({format_value(value.arg)})"
    args = [format_value(a) for a in value.args]
    if value.op in _INFIX and len(args) == 2:
        return f"({args[0]} {_INFIX[value.op]} {args[1]})"
    return f"{value.op}({', '.join(args)})"

"""Common-subexpression printing: turn a value tree into numbered temporaries, once per distinct
subexpression, for both code generators.  A backend supplies how to print each leaf and op."""

from __future__ import annotations

from typing import Callable

from compiler_core.codegen.origins import marked
from compiler_core.ir.values import Cast, Constant, IndexValue, IndirectIndex, Load, Op, ReductionResult, Value


class CSEPrinter:
    """Emits `lines` (statements) and returns names; subclasses print leaves and ops."""

    def __init__(self, declare: Callable[[str, str, Value], str], prefix: str = "tmp"):
        self.declare = declare  # (name, expression text, value) -> one statement
        self.prefix = prefix
        self.lines: list[str] = []
        self.cache: dict[str, str] = {}
        self.names: set[str] = set()  # the temporaries declared, = cache's values
        # id of a value already emitted in this scope -> (the value, kept alive; its text): a subtree
        # shared in the tree is printed once, not once per path to it (ir/values.py says why).
        self.emitted: dict[int, tuple[Value, str]] = {}
        self.counter = 0
        # The FX nodes of the step being printed: the provenance of lines whose value names none
        # (loads, stores, accumulators). An op's own `origins` win (an inlined producer's line).
        self.origins: tuple[str, ...] = ()
        self._reading_for: tuple[str, ...] = ()  # the op whose arguments are being printed: a load's user

    def mark(self, line: str, origins: tuple[str, ...] = ()) -> str:
        """`line` marked with the FX nodes it computes (codegen/origins.py), the step's by default."""
        return marked(line, origins or self.origins)

    def child(self) -> "CSEPrinter":
        """A nested scope (e.g. one loop body) that still sees the parent's temporaries."""
        scope = type(self).__new__(type(self))
        scope.__dict__.update(self.__dict__)
        scope.lines = []
        scope.cache = dict(self.cache)
        scope.names = set(self.names)
        # Not the parent's emitted values: a scope prints under its own mask, so a value's text may
        # differ there (the text cache above still shares what prints the same).
        scope.emitted = {}
        return scope

    def sync_counter(self, scope: "CSEPrinter") -> None:
        self.counter = max(self.counter, scope.counter)

    def emit(self, value: Value) -> str:
        hit = self.emitted.get(id(value))
        if hit is not None:
            return hit[1]
        text = self.render(value)
        if not (isinstance(value, (Constant, ReductionResult)) or text in self.names):
            text = self.named(text, value)
        self.emitted[id(value)] = (value, text)
        return text

    def named(self, text: str, value: Value) -> str:
        """A temporary holding `text` (one per distinct text)."""
        if text in self.cache:
            return self.cache[text]
        name = f"{self.prefix}{self.counter}"
        self.counter += 1
        origins = getattr(value, "origins", ()) or self._reading_for
        self.lines.append(self.mark(self.declare(name, text, value), origins))
        self.cache[text] = name
        self.names.add(name)
        return name

    def render(self, value: Value) -> str:
        if isinstance(value, Load):
            mask = None if value.mask is None else self.emit(value.mask)
            if not value.indirect:
                return self.load(value, mask)
            # Each position wrapped and bounds-checked once, into a temporary the address then uses.
            positions = [self.named(self.position(t, self.emit(t.value), mask), t.value) for t in value.indirect]
            return self.load(value, mask, positions)
        if isinstance(value, Constant):
            return self.constant(value)
        if isinstance(value, IndexValue):
            return self.index_value(value)
        if isinstance(value, ReductionResult):
            return self.reduction_result(value)
        outer, self._reading_for = self._reading_for, value.origins or self._reading_for
        try:
            if isinstance(value, Cast):
                return self.cast(self.emit(value.arg), value.arg, value)
            assert isinstance(value, Op)
            return self.op(value, [self.emit(a) for a in value.args])
        finally:
            self._reading_for = outer

    # ---- supplied by each backend -------------------------------------------------------
    def load(self, value: Load, mask: str | None = None, positions: list[str] | None = None) -> str: ...
    # mask: a bool temporary; positions: checked int64 temporaries, one per value.indirect entry

    def position(self, term: IndirectIndex, value: str, mask: str | None) -> str: ...
    # the wrapped, bounds-checked position of `term` (whose value is the temporary `value`)
    def constant(self, value: Constant) -> str: ...
    def index_value(self, value: IndexValue) -> str: ...
    def reduction_result(self, value: ReductionResult) -> str: ...
    def cast(self, arg: str, source: Value, value: Cast) -> str: ...
    def op(self, value: Op, args: list[str]) -> str: ...

"""Schedule and MemoryPlan artifacts: which loop nodes share a kernel, and why; buffer reuse."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class FusionGroup:
    """One kernel (or one extern call): loop nodes in execution order within the group."""

    name: str  # kernel name, e.g. "fused_amax_sub_exp_sum_div_0"; "extern_aten.mm.default#2": the 2nd mm call
    kind: str  # "pointwise" | "reduction" | "extern" | "scatter" (pointwise loop whose atomic adds end its writes)
    nodes: tuple[str, ...]  # LoopNode names
    x_ranges: tuple[int, ...]  # iteration space of the kernel (rows)
    r_ranges: tuple[int, ...]  # reduction space (per row); () for pointwise kernels
    materialized: tuple[str, ...]  # buffers this group writes to memory
    internal: tuple[str, ...]  # buffers produced and consumed inside (never written)
    origins: tuple[str, ...]  # FX node names this kernel computes
    # A horizontal kernel (schedule/horizontal.py): independent pointwise computations of different
    # iteration spaces in one launch, each segment its nodes and its own x ranges. Empty otherwise.
    segments: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...] = ()

    def pretty(self) -> str:
        space = f"x={list(self.x_ranges)}" + (f", r={list(self.r_ranges)}" if self.r_ranges else "")
        if self.segments:
            space = "segments " + " | ".join(f"x={list(x)}" for _, x in self.segments)
        return (f"{self.name} ({self.kind}, {space}): nodes {', '.join(self.nodes)}; "
                f"writes {', '.join(self.materialized) or '-'}; kept in registers {', '.join(self.internal) or '-'}")


@dataclass(frozen=True)
class FusionDecision:
    first: tuple[str, ...]  # nodes of the producer-side group
    second: tuple[str, ...]  # nodes of the consumer-side group
    legal: bool
    accepted: bool
    reason: str
    bytes_saved: int

    def pretty(self) -> str:
        verdict = "fused" if self.accepted else ("legal, not taken" if self.legal else "refused")
        return (f"{'+'.join(self.first)}  <->  {'+'.join(self.second)}: {verdict}; {self.reason}; "
                f"saves {self.bytes_saved} bytes")


@dataclass(frozen=True)
class Schedule:
    """Groups in execution order, each named once: the stages after scheduling (horizontal fusion,
    kernel plans, the host program, the checker, the explorer) look groups up by name, and two extern
    calls of one op that shared a name once merged a kernel with one that depended on it (Falcon's
    whole forward then ran in eager). Build one with `Schedule.numbered`, which numbers repeated
    extern calls; a schedule with a name twice is refused here."""

    groups: tuple[FusionGroup, ...]
    decisions: tuple[FusionDecision, ...]

    def __post_init__(self):
        seen: set[str] = set()
        for g in self.groups:
            if g.name in seen:
                raise ValueError(f"schedule has two groups named {g.name!r}: group names must be unique")
            seen.add(g.name)

    @classmethod
    def numbered(cls, groups: tuple[FusionGroup, ...], decisions: tuple[FusionDecision, ...]) -> "Schedule":
        """A schedule of `groups` (in execution order) whose extern calls of one op are named
        `extern_aten.mm.default`, `extern_aten.mm.default#2`, ... in the order they run."""
        calls: dict[str, int] = {}
        named = []
        for g in groups:
            if g.kind == "extern":
                base = g.name.split("#", 1)[0]
                calls[base] = calls.get(base, 0) + 1
                name = base if calls[base] == 1 else f"{base}#{calls[base]}"
                g = g if name == g.name else dataclasses.replace(g, name=name)
            named.append(g)
        return cls(groups=tuple(named), decisions=decisions)

    @property
    def kernel_count(self) -> int:
        return sum(1 for g in self.groups if g.kind != "extern")

    def kernel_of(self) -> dict[str, str]:
        """Loop node name -> the kernel (group) computing it; for LoopGraph.to_dot(kernel_of=...)."""
        return {n: g.name for g in self.groups for n in g.nodes}

    def group_of(self, node: str) -> FusionGroup:
        return self._group_by_node[node]

    @cached_property
    def _group_by_node(self) -> dict[str, FusionGroup]:
        return {n: g for g in self.groups for n in g.nodes}

    def pretty(self) -> str:
        lines = ["# groups (execution order)"] + [g.pretty() for g in self.groups]
        lines.append("# fusion decisions")
        lines += [d.pretty() for d in self.decisions]
        return "\n".join(lines)


@dataclass(frozen=True)
class LiveRange:
    buffer: str
    nbytes: int
    first_step: int  # index of the group that writes it
    last_step: int  # index of the last group that reads it
    storage: str = ""  # the storage it lives in (LoopGraph.storage_of): its own name unless it aliases


@dataclass(frozen=True)
class MemoryPlan:
    live_ranges: tuple[LiveRange, ...]
    reuse: tuple[tuple[str, str], ...]  # (new buffer, dead buffer whose storage it takes)
    frees: tuple[tuple[int, tuple[str, ...]], ...]  # after step i, these buffers' storages are released
    inplace: tuple[tuple[str, str], ...]  # (output, input) written in place (schedule/inplace.py)
    peak_bytes_planned: int
    peak_bytes_unplanned: int
    inplace_refused: tuple[tuple[str, str], ...] = ()  # (output, why it is not written into its input)
    # (output, buffer dying in the kernel that writes the output over it: schedule/kernel_plan.write_over)
    written_over: tuple[tuple[str, str], ...] = ()

    def pretty(self) -> str:
        lines = [f"# peak bytes: planned {self.peak_bytes_planned}, without reuse {self.peak_bytes_unplanned}"]
        for r in self.live_ranges:
            shared = f" (in the storage of {r.storage})" if r.storage and r.storage != r.buffer else ""
            lines.append(f"{r.buffer}: {r.nbytes} bytes, live steps {r.first_step}..{r.last_step}{shared}")
        lines += [f"after step {step}: free {', '.join(names)}" for step, names in self.frees]
        lines += [f"{new} reuses the storage of {old}" for new, old in self.reuse]
        lines += [f"{new} is written in place into input {old}" for new, old in self.inplace]
        lines += [f"{new} is not written into its input: {why}" for new, why in self.inplace_refused]
        lines += [f"{new} is written over {old} by the kernel reading it last" for new, old in self.written_over]
        return "\n".join(lines)

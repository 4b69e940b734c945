"""Per-kernel costs: our host programs' steps timed one by one, and eager PyTorch's ops from torch.profiler.

    ours = profile_ours(compiled, args, session, repeats=5)      # OursProfile: a StepCost per kernel/extern
    eager = profile_eager(fn, args, session, repeats=3)          # tuple of StepCost, one per top-level ATen op

Our side: while the compiled function runs, the kernels (`k`) and PyTorch ops (`torch.ops`) its host
programs reach are swapped, in each program's own namespace, for timed stand-ins (the host program
reaches them only by those names: codegen/wrapper.py); everything else it does (allocations, views,
Python) is host overhead, found as the whole call's median minus the steps. The real inputs flow through,
so extern calls report their real FLOPs and bytes. Bytes of our kernels are the schedule's traffic
estimate (what a kernel reads from outside plus what it writes, as compiler_core.analysis.traffic
counts them), FLOPs the arithmetic nodes of the loop bodies times the points they run on.

Eager side: torch.profiler on the same program, the ATen ops PyTorch itself called (not their children):
time, input shapes and dtypes, bytes it allocated (the outputs), and FLOPs where the profiler counts
them (matmul, conv); other ops get the FLOPs our primitives count for the same source op.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from math import prod
from types import SimpleNamespace
from typing import Any, Callable, Optional, Sequence

import torch

from compiler_core.analysis.traffic import buffer_sizes, group_bytes
from compiler_core.codegen.wrapper import PUBLIC_FUNCTIONS
from compiler_core.ir.graph import LoopGraph, LoopNode
from compiler_core.ir.symbolic import hint
from compiler_core.ir.values import Op, walk
from compiler_core.schedule.artifacts import FusionGroup
from compiler_core.session import CompileSession, GraphRecord


@dataclass(frozen=True)
class StepCost:
    """One kernel, extern call or eager op: what it computes and moves, and how long it took."""

    name: str
    side: str  # "ours" or "eager"
    kind: str  # "kernel", "extern", "copy" (a kernel that only copies: a constant or a layout change), "op"
    flops: int
    bytes: int
    seconds: Optional[float]  # median per call; None when not measured
    graph: str = ""  # "graph 0", "graph 0 (backward)"
    computes: str = ""  # FX names (ours) or input shapes (eager)
    flops_source: str = "counted"  # how flops were found: "counted", "profiler", "primitives", "none"

    @property
    def intensity(self) -> Optional[float]:
        return self.flops / self.bytes if self.bytes > 0 and self.flops > 0 else None

    @property
    def flops_per_s(self) -> Optional[float]:
        return self.flops / self.seconds if self.seconds and self.flops > 0 else None

    @property
    def bytes_per_s(self) -> Optional[float]:
        return self.bytes / self.seconds if self.seconds and self.bytes > 0 else None


@dataclass(frozen=True)
class OursProfile:
    steps: tuple[StepCost, ...]  # in execution order, graph by graph
    total_s: Optional[float]  # median of the whole calls that were timed step by step
    note: str = ""  # why steps are missing or what to keep in mind
    rest_s: Optional[float] = None  # median over those calls of (whole call - its steps)

    @property
    def kernel_s(self) -> float:
        return sum(s.seconds or 0.0 for s in self.steps if s.kind != "extern")

    @property
    def extern_s(self) -> float:
        return sum(s.seconds or 0.0 for s in self.steps if s.kind == "extern")

    @property
    def host_s(self) -> Optional[float]:
        """Everything that is not a kernel or an extern call: guards, the host program's Python,
        allocations, launches (and the timing stand-ins' own microseconds). Each call's rest, then
        the median: a call slowed by another process is compared with its own steps."""
        return None if self.rest_s is None else max(0.0, self.rest_s)


# ---- FLOPs and bytes from the artifacts ----------------------------------------------------------
def node_flops(node: LoopNode, size_hints: Optional[dict[str, int]] = None) -> int:
    """Arithmetic nodes of the body at every point, plus one combine per reduced (or scattered) element.
    Symbolic sizes count at the example call's values (`size_hints`: LoopGraph.size_hints)."""
    if node.kind == "extern" or node.body is None:
        return 0
    per_point = sum(1 for v in walk(node.body) if isinstance(v, Op))
    points = prod(node.ranges) * prod(node.reduction_ranges)
    # a combine or an add per reduced or scattered element
    return hint(per_point * points + (points if node.kind in ("reduction", "scatter") else 0), size_hints)


def is_copy(loops: LoopGraph, group: FusionGroup) -> bool:
    """A kernel with no arithmetic: it copies (a constant into a buffer, or a tensor to a new layout)."""
    return group.kind != "extern" and all(node_flops(loops.node(n), loops.size_hints) == 0 for n in group.nodes)


def record_title(session: CompileSession, record: GraphRecord) -> str:
    return f"graph {record.captured.index}" + (" (backward)" if record.part == "backward" else "")


def planned_steps(session: CompileSession) -> list[tuple[GraphRecord, FusionGroup]]:
    return [(r, g) for r in session.all_records() if r.schedule is not None and r.loops is not None
            for g in r.schedule.groups]


# ---- our side: timed stand-ins in the host programs' namespaces ----------------------------------
def host_namespace(call: Any) -> Optional[dict]:
    """The globals of the printed host program behind a CompiledArtifact's call (which may be wrapped
    by the kernel-error check); None when it cannot be found."""
    todo, seen = [call], set()
    while todo:
        fn = todo.pop()
        if id(fn) in seen or fn is None:
            continue
        seen.add(id(fn))
        scope = getattr(fn, "__globals__", None)
        if getattr(fn, "__name__", "") == "call" and isinstance(scope, dict) and "k" in scope and "rt" in scope:
            return scope
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                todo.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        todo.append(getattr(fn, "__wrapped__", None))
    return None


class _Clock:
    """Start/stop pairs: perf_counter on the CPU, CUDA events on the GPU (resolved after a sync)."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def start(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started: Any) -> Any:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return (started, end)
        return time.perf_counter() - started

    def seconds(self, value: Any) -> float:
        if self.cuda:
            start, end = value
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return value


class _Recorder:
    def __init__(self, clock: _Clock):
        self.clock = clock
        self.events: list[tuple[str, str, Any, int, int]] = []  # (kind, name, time, flops, bytes)

    def timed(self, kind: str, name: str, fn: Callable, args: tuple, kwargs: dict, measure_extern: bool) -> Any:
        started = self.clock.start()
        out = fn(*args, **kwargs)
        elapsed = self.clock.stop(started)
        flops = nbytes = 0
        if measure_extern:
            flops, nbytes = extern_cost(fn, args, kwargs, out)
        self.events.append((kind, name, elapsed, flops, nbytes))
        return out


class _TimedKernel:
    def __init__(self, fn: Any, name: str, recorder: _Recorder):
        self.fn, self.name, self.recorder = fn, name, recorder

    def __call__(self, *args: Any) -> Any:  # C++: k.name(pointers..., NTHREADS)
        return self.recorder.timed("kernel", self.name, self.fn, args, {}, False)

    def __getitem__(self, grid: Any) -> Callable:  # Triton: k.name[grid](tensors..., BLOCK=...)
        launch = self.fn[grid]
        return lambda *a, **kw: self.recorder.timed("kernel", self.name, launch, a, kw, False)


class _TimedOps:
    """Stands in for `torch` inside a host program: torch.ops.<ns>.<op>.<overload>(...) is timed, and so are
    the extern ops printed as torch's own functions (codegen/wrapper.py's PUBLIC_FUNCTIONS)."""

    def __init__(self, recorder: _Recorder, path: tuple[str, ...] = ()):
        self._recorder, self._path = recorder, path

    def __getattr__(self, name: str) -> Any:
        if not self._path and name != "ops":
            if f"aten.{name}.default" in PUBLIC_FUNCTIONS:  # an extern op printed as torch's function
                return self._public(name)
            return getattr(torch, name)
        path = self._path + (name,)
        if len(path) == 4:  # ("ops", namespace, op, overload)
            op = getattr(getattr(getattr(torch.ops, path[1]), path[2]), path[3])
            target = ".".join(path[1:])
            return lambda *a, **kw: self._recorder.timed("extern", target, op, a, kw, True)
        return _TimedOps(self._recorder, path)


    def _public(self, name: str) -> Callable:
        """torch.<name>(...), run and timed as the overload it calls: the out overload when given out=."""

        def timed(*a: Any, **kw: Any) -> Any:
            overload = "out" if "out" in kw else "default"
            op = getattr(getattr(torch.ops.aten, name), overload)
            return self._recorder.timed("extern", f"aten.{name}.{overload}", op, a, kw, True)
        return timed


def extern_cost(op: Any, args: tuple, kwargs: dict, out: Any) -> tuple[int, int]:
    """(FLOPs, bytes) of one extern call from its real tensors: inputs read plus outputs written;
    FLOPs from torch.utils.flop_counter's formulas (matmul, conv, attention), else 0."""
    nbytes = sum(t.untyped_storage().nbytes() if not t.is_contiguous() else t.numel() * t.element_size()
                 for t in _tensors((args, kwargs)))
    nbytes += sum(t.numel() * t.element_size() for t in _tensors(out))
    flops = 0
    try:
        from torch.utils.flop_counter import flop_registry

        formula = flop_registry.get(getattr(op, "overloadpacket", None))
        if formula is not None:
            flops = int(formula(*args, **kwargs, out_val=out))
    except Exception:  # noqa: BLE001 - a formula that does not fit these arguments counts nothing
        flops = 0
    return flops, nbytes


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def profile_ours(run: Callable[[], object], session: CompileSession, device: str, repeats: int = 5) -> OursProfile:
    """Run `run` (the compiled program on its inputs) `repeats` times with every host program's kernels
    and extern calls timed; one StepCost per schedule group, median over the runs."""
    clock = _Clock(device)
    total_s = None
    records = [r for r in session.all_records() if r.artifact is not None and r.schedule is not None]
    if not records:
        return OursProfile((), total_s, "nothing ran as our compiled code")
    skipped = [r for r in records if r.artifact.cudagraph.startswith("used")]
    if skipped:
        return OursProfile((), total_s, "per-kernel times are not measured: the program replays as a CUDA graph, "
                                        "which runs no Python between kernels")
    swaps: list[tuple[dict, dict, _Recorder]] = []
    for record in records:
        scope = host_namespace(record.artifact.call)
        if scope is None:
            return OursProfile((), total_s, "per-kernel times are not measured: the host program of "
                                            f"{record_title(session, record)} was not found")
        recorder = _Recorder(clock)
        swaps.append((scope, {"k": scope["k"], "torch": scope["torch"]}, recorder))
    runs: dict[int, list[list]] = {i: [] for i in range(len(records))}
    wholes: list[float] = []
    rests: list[float] = []
    try:
        for scope, original, recorder in swaps:
            kernels = {name: _TimedKernel(fn, name, recorder) for name, fn in vars(original["k"]).items()}
            scope["k"], scope["torch"] = SimpleNamespace(**kernels), _TimedOps(recorder)
        for _ in range(max(1, repeats)):
            for _, _, recorder in swaps:
                recorder.events = []
            started = clock.start()
            run()
            whole = clock.seconds(clock.stop(started))
            inside = 0.0
            for i, (_, _, recorder) in enumerate(swaps):
                events = [(kind, name, clock.seconds(t), f, b) for kind, name, t, f, b in recorder.events]
                runs[i].append(events)
                inside += sum(e[2] for e in events)
            wholes.append(whole)
            rests.append(whole - inside)
    finally:
        for scope, original, _ in swaps:
            scope.update(original)
    steps: list[StepCost] = []
    for i, record in enumerate(records):
        steps += _steps_of(session, record, runs[i])
    note = ""
    if any(r.artifact.backend == "triton" for r in records) and device != "cuda":
        note = "Triton kernels ran in the Triton interpreter: their times say nothing about a GPU"
    return OursProfile(tuple(steps), statistics.median(wholes), note, statistics.median(rests))


def _steps_of(session: CompileSession, record: GraphRecord, runs: list[list]) -> list[StepCost]:
    groups = record.schedule.groups
    loops = record.loops
    title = record_title(session, record)
    sizes = buffer_sizes(loops)
    matched = [_events_by_group(groups, events) for events in runs]
    out = []
    for i, group in enumerate(groups):
        mine = [m[i] for m in matched if m[i] is not None]
        seconds = statistics.median(e[2] for e in mine) if mine else None
        computes = ", ".join(group.origins)
        if group.kind == "extern":
            flops = statistics.median([e[3] for e in mine]) if mine else 0
            nbytes = statistics.median([e[4] for e in mine]) if mine else group_bytes(loops, group, sizes)
            out.append(StepCost(group.name, "ours", "extern", int(flops), int(nbytes), seconds, title, computes))
        else:
            flops = sum(node_flops(loops.node(n), loops.size_hints) for n in group.nodes)
            kind = "copy" if is_copy(loops, group) else "kernel"
            out.append(StepCost(group.name, "ours", kind, flops, group_bytes(loops, group, sizes), seconds, title,
                                computes))
    return out


def _events_by_group(groups: Sequence[FusionGroup], events: list) -> list[Optional[tuple]]:
    """Each schedule group's event of one run, or None where the group launched nothing.

    The host program launches the groups in schedule order, but not one event per group: a constant is
    computed once at compile time and launches nothing, and an extern call whose output the memory plan
    places runs as its `.out` overload. So events are matched by name, walking both lists in order: a
    kernel by its name, an extern call by its op whatever the overload."""
    out: list[Optional[tuple]] = []
    at = 0
    for group in groups:
        found = None
        for j in range(at, len(events)):
            if _event_is(events[j], group):
                found, at = events[j], j + 1
                break
            if group.kind == "extern" and events[j][0] == "kernel":
                break  # an extern call is looked for only up to the next kernel, never in a later group's place
        out.append(found)
    return out


def _event_is(event: tuple, group: FusionGroup) -> bool:
    kind, name = event[0], event[1]
    if group.kind == "extern":
        wanted = group.name.removeprefix("extern_").split("#", 1)[0]  # the 2nd mm call: "...default#2"
        return kind == "extern" and name.rsplit(".", 1)[0] == wanted.rsplit(".", 1)[0]
    return kind == "kernel" and name == group.name


def steps_without_timing(session: CompileSession) -> tuple[StepCost, ...]:
    """FLOPs and bytes of every kernel from the artifacts alone (extern calls: bytes only)."""
    out, sizes = [], {}
    for record, group in planned_steps(session):
        loops, title = record.loops, record_title(session, record)
        if id(loops) not in sizes:  # one pass over a graph's buffers, not one per kernel
            sizes[id(loops)] = buffer_sizes(loops)
        kind = "extern" if group.kind == "extern" else ("copy" if is_copy(loops, group) else "kernel")
        flops = 0 if group.kind == "extern" else sum(node_flops(loops.node(n), loops.size_hints) for n in group.nodes)
        out.append(StepCost(group.name, "ours", kind, flops, group_bytes(loops, group, sizes[id(loops)]), None,
                            title, ", ".join(group.origins)))
    return tuple(out)


# ---- eager side: torch.profiler ------------------------------------------------------------------
# Element sizes of the profiler's dtype names (input_dtypes).
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
                "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
# Ops that move no data (views and metadata): left out of the eager points.
_NO_DATA = {"view", "reshape", "_reshape_alias", "_unsafe_view", "permute", "transpose", "t", "expand",
            "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "select", "slice", "narrow",
            "as_strided", "alias", "detach", "view_as", "split", "chunk", "unbind", "lift_fresh",
            "resolve_conj", "resolve_neg", "empty", "empty_like", "empty_strided", "zeros_like", "ones_like",
            "numpy_T", "size", "stride", "is_same_size", "to", "_to_copy_noop", "contiguous"}


def profile_eager(run: Callable[[], object], session: CompileSession, device: str,
                  repeats: int = 3) -> tuple[StepCost, ...]:
    """One StepCost per ATen op eager PyTorch calls (top-level only), times averaged over `repeats`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    run()  # warm: first-call costs are not the op's
    with profile(activities=activities, record_shapes=True, profile_memory=True, with_flops=True) as prof:
        for _ in range(repeats):
            run()
            if device == "cuda":
                torch.cuda.synchronize()
    events = [e for e in prof.events() if e.name.startswith("aten::") and not _under_aten(e)]
    per_call = len(events) // repeats if repeats and len(events) % repeats == 0 else 0
    if per_call == 0:
        return ()
    primitive_flops = _flops_by_source_fn(session)
    counts: dict[str, int] = {}
    for e in events[:per_call]:
        counts[_short(e.name)] = counts.get(_short(e.name), 0) + 1
    out = []
    for i in range(per_call):
        same = [events[i + k * per_call] for k in range(repeats)]
        first = same[0]
        name = _short(first.name)
        if name in _NO_DATA:
            continue
        times = [(e.device_time_total if device == "cuda" else e.cpu_time_total) / 1e6 for e in same]
        written = max(0, first.device_memory_usage if device == "cuda" else first.cpu_memory_usage)
        nbytes = _input_bytes(first) + written
        flops, source = _flops_with_children(first), "profiler"
        if not flops and name in primitive_flops:
            flops, source = primitive_flops[name] // counts[name], "primitives"
        elif not flops:
            source = "none"
        shapes = ", ".join("x".join(map(str, s)) for s in first.input_shapes if s)
        out.append(StepCost(f"aten::{name}", "eager", "op", flops, nbytes, statistics.median(times),
                            "eager", shapes, source))
    return tuple(out)


def _flops_with_children(event: Any) -> int:
    """The profiler counts FLOPs on the op that does them (aten::mm under aten::matmul)."""
    return int(event.flops or 0) + sum(_flops_with_children(c) for c in event.cpu_children)


def _under_aten(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def _short(name: str) -> str:
    return name.split("::", 1)[1] if "::" in name else name


def _input_bytes(event: Any) -> int:
    total = 0
    for shape, dtype in zip(event.input_shapes or (), getattr(event, "input_dtypes", None) or ()):
        if isinstance(shape, list) and shape and all(isinstance(s, int) for s in shape) and dtype in _DTYPE_BYTES:
            total += prod(shape) * _DTYPE_BYTES[dtype]
    return total


def _flops_by_source_fn(session: CompileSession) -> dict[str, int]:
    """Source op name ("gelu", "softmax", "layer_norm") -> FLOPs our primitives count for it."""
    out: dict[str, int] = {}
    for record in session.all_records():
        if record.loops is None or record.part == "backward":
            continue
        for node in record.loops.nodes:
            if node.source_fn:
                out[node.source_fn] = out.get(node.source_fn, 0) + node_flops(node, record.loops.size_hints)
    return {k: v for k, v in out.items() if v}

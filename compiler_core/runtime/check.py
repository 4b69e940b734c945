"""The check mode: after each kernel launch, run the kernel's FX nodes in eager PyTorch on the very
inputs the kernel read, and name the first kernel that disagrees.

    f2 = cc.compile(f, check=True)      # or debug="check", or FCOMPILE_DEBUG=check
    f2(x)                               # raises KernelCheckError at the first wrong kernel
    f2.session.graphs[0].checks         # a KernelCheck per kernel launched, passing ones included

Inductor users find a wrong kernel with the accuracy minifier (shrink the graph until it still
fails); we know which FX nodes each kernel computes, so we check each kernel where it runs.

The reference for a kernel: its FX nodes, evaluated with `node.target(*args, **kwargs)`.  An
argument computed outside the kernel is read from the host program's locals when its buffer is
live there (a graph input, an extern call's result, an earlier kernel's output); anything else (a
view of an in-kernel value, a buffer kept in an earlier kernel's registers, a freed one) is
evaluated from its own arguments in turn, back to the graph inputs if need be.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Optional

import torch

from compiler_core.codegen.wrapper import local
from compiler_core.decomp.artifacts import PrimGraph
from compiler_core.ir.graph import LoopGraph, ViewRef
from compiler_core.runtime import host
from compiler_core.runtime.artifacts import KernelCheck
from compiler_core.schedule.artifacts import MemoryPlan, Schedule

# (rtol, atol) per dtype.  A kernel computes bf16/fp16 in fp32 and rounds once on store while eager
# rounds after every op, so low precision gets a few units in the last place; integers are exact.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
_MISSING = object()


class KernelCheckError(RuntimeError):
    """A kernel's outputs disagree with eager PyTorch on the same inputs: a compiler bug."""

    def __init__(self, message: str, check: KernelCheck):
        super().__init__(message)
        self.check = check

    def _render_traceback_(self) -> list[str]:  # IPython shows just this message
        return [f"KernelCheckError: {self}"]


class _CannotCheck(Exception):
    """The reference cannot be computed (a random op would have to run again, eager raised...)."""


@dataclass(frozen=True)
class _Kernel:
    name: str
    origins: tuple[str, ...]  # FX node names, in graph order
    written: frozenset[str]  # buffers the kernel writes or keeps in registers
    outputs: tuple[str, ...]  # origins whose value is a buffer the kernel writes to memory
    step: int = 0  # its position in the schedule (the memory plan's step)


class KernelChecker:
    """One graph's checker; the host program calls `rt.check_kernel(checker, name, locals())` after
    each launch.  `results` keeps the latest KernelCheck per kernel, in launch order."""

    def __init__(self, prims: PrimGraph, loops: LoopGraph, sched: Schedule, graph: str,
                 dynamo_graph: Optional[torch.fx.GraphModule] = None, memory: Optional[MemoryPlan] = None):
        self.graph = graph
        self.graph_module = prims.graph_module
        self.values = loops.values
        self.nodes = {n.name: n for n in self.graph_module.graph.nodes}
        self.order = {name: i for i, name in enumerate(self.nodes)}
        self.placeholders = [n.name for n in self.nodes.values() if n.op == "placeholder"]
        self.dynamo_graph = dynamo_graph
        self.kernels: dict[str, _Kernel] = {}
        # A buffer's values can be read back only up to its last reader in the plan: after that its
        # storage may be poisoned (memory mode) or handed to another buffer. The reference is then
        # recomputed from earlier values instead (an epilogue's addmm reads a buffer that died at the
        # extern mm before it).
        self.last_step = {r.buffer: r.last_step for r in memory.live_ranges} if memory is not None else {}
        loop_nodes = {n.name: n for n in loops.nodes}
        for step, group in enumerate(sched.groups):
            if group.kind == "extern":
                continue
            origins = tuple(sorted((o for o in group.origins if o in self.nodes), key=self.order.get))
            outputs = tuple(o for o in origins if isinstance(self.values.get(o), ViewRef)
                            and self.values[o].buffer in group.materialized)
            written = frozenset(loop_nodes[n].output.name for n in group.nodes)
            self.kernels[group.name] = _Kernel(group.name, origins, written, outputs, step)
        self.results: dict[str, KernelCheck] = {}
        self._lines: dict[str, str] = {}  # FX node -> source line (every call of the program asks again)

    def check(self, kernel_name: str, scope: dict) -> KernelCheck:
        kernel = self.kernels[kernel_name]
        with torch.no_grad():
            result = self._check(kernel, scope)
        self.results[kernel_name] = result
        if not result.ok:
            raise KernelCheckError(self._message(result), result)
        return result

    # ---- one kernel -------------------------------------------------------------------------
    def _check(self, kernel: _Kernel, scope: dict) -> KernelCheck:
        first_line = next((line for line in map(self.source_line, kernel.origins) if line), "")
        try:
            reference = self._reference(kernel, scope)
        except _CannotCheck as why:
            return KernelCheck(kernel.name, kernel.origins, 0.0, True, first_line, self.graph, note=str(why))
        worst, wrong, rounding = 0.0, "", []
        exact: Optional[dict[str, Any]] = None
        for name in kernel.outputs:
            ref = self.values[name]
            actual = host.view(scope[local(ref.buffer)], tuple(ref.layout.size), tuple(ref.layout.stride),
                               ref.layout.offset)
            error, ok = compare(actual, reference[name])
            worst = max(worst, error)
            if not ok and ref.dtype == torch.float32:
                # fp32 tolerances are relative to eager's value: a sum whose terms cancel is off by the
                # rounding of its terms in both. Judge against the exact result instead.
                if exact is None:
                    exact = self._exact_reference(kernel, scope)
                if exact is not None:
                    ok, ours, eager = within_eager_rounding(actual, reference[name], exact.get(name))
                    if ok:
                        rounding.append(f"{name}: {ours:.2g} from fp64, eager {eager:.2g}")
            if not ok and not wrong:
                wrong = name
        line = self.source_line(wrong) if wrong else first_line
        judged = ("as close to the fp64 result as eager: " + "; ".join(rounding)) if rounding else ""
        return KernelCheck(kernel.name, kernel.origins, worst, not wrong, line or first_line, self.graph, wrong,
                           rounding=judged)

    def _exact_reference(self, kernel: _Kernel, scope: dict) -> Optional[dict[str, Any]]:
        """The kernel's outputs computed in float64 from the same inputs (float32 promoted), or None."""
        try:
            return self._reference(kernel, scope, upcast=True)
        except _CannotCheck:
            return None

    def _reference(self, kernel: _Kernel, scope: dict, upcast: bool = False) -> dict[str, Any]:
        """Eager values of the kernel's outputs: first find which nodes must run (walking back from the
        outputs until a value is live in `scope`), then run them in graph order. `upcast`: in float64
        where the program has float32 (inputs promoted, float32 dtype arguments read as float64)."""
        inside = set(kernel.origins)
        env: dict[str, Any] = {}
        needed: set[str] = set()
        stack = list(kernel.outputs)
        while stack:
            name = stack.pop()
            if name in env or name in needed:
                continue
            if name not in inside:
                value = self._live_value(name, scope, kernel.written, kernel.step)
                if value is not _MISSING:
                    env[name] = _to_float64(value) if upcast else value
                    continue
            needed.add(name)
            stack.extend(a.name for a in self.nodes[name].all_input_nodes)
        for name in sorted(needed, key=self.order.get):
            env[name] = self._evaluate(self.nodes[name], env, scope, upcast)
        return env

    def _live_value(self, name: str, scope: dict, written: frozenset[str], step: int) -> Any:
        """The node's value read from the host program's locals, or _MISSING when it is not live there
        (dead in the memory plan by this step, or in a buffer this very kernel writes: that is what is
        being checked)."""
        value = self.values.get(name, _MISSING)

        def read(v: Any) -> Any:
            if not isinstance(v, ViewRef):
                # None, or a Python number among an extern's results: flash attention's (out, lse,
                # cum_seq_q, cum_seq_k, max_q, max_k, ...) holds two ints (Swin bf16 on CUDA).
                return v
            if v.buffer in written or not isinstance(scope.get(local(v.buffer)), torch.Tensor):
                return _MISSING
            if self.last_step.get(v.buffer, step) < step:
                return _MISSING
            return host.view(scope[local(v.buffer)], tuple(v.layout.size), tuple(v.layout.stride), v.layout.offset)

        if isinstance(value, ViewRef):
            return read(value)
        if isinstance(value, tuple):
            parts = tuple(read(v) for v in value)
            return _MISSING if any(p is _MISSING for p in parts) else parts
        return value  # a Python scalar (or _MISSING)

    def _evaluate(self, node: torch.fx.Node, env: dict[str, Any], scope: dict, upcast: bool = False) -> Any:
        if node.op == "placeholder":
            value = scope["args"][self.placeholders.index(node.name)]
            return _to_float64(value) if upcast else value
        if node.op == "get_attr":
            return getattr(self.graph_module, node.target)
        if node.op != "call_function":
            raise _CannotCheck(f"{node.name} is a {node.op} node")
        target = node.target
        if torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
            raise _CannotCheck(f"{node.name} ({target}) is random: running it again gives other values")
        args = torch.fx.node.map_arg(node.args, lambda a: env[a.name])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: env[a.name])
        if upcast:
            args, kwargs = _to_float64((args, kwargs))
        schema = getattr(target, "_schema", None)
        if schema is not None and schema.is_mutable:  # never write into the program's tensors
            args, kwargs = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
        try:
            return target(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a reference we cannot make is a note, not a failure
            raise _CannotCheck(f"eager PyTorch raised on {node.name} ({target}): {type(exc).__name__}: {exc}") \
                from exc

    # ---- messages ---------------------------------------------------------------------------
    def source_line(self, name: str) -> str:
        """`file:line in function: code` of the user's line that made FX node `name` ("" if unknown)."""
        if name not in self._lines:
            self._lines[name] = self._find_source_line(name)
        return self._lines[name]

    def _find_source_line(self, name: str) -> str:
        node = self.nodes.get(name)
        return "" if node is None else node_source_line(node, self.dynamo_graph)

    def _message(self, result: KernelCheck) -> str:
        node = self.nodes[result.node]
        ref = self.values[result.node]
        rtol, atol = TOLERANCES.get(ref.dtype, (0.0, 0.0))
        # Values kept in registers cannot be compared: the guilty op may be any node up to the first
        # wrong output, so show every line those nodes came from.
        upto = result.nodes[:result.nodes.index(result.node) + 1]
        lines = [line for line in dict.fromkeys(map(self.source_line, upto)) if line]
        return (f"kernel {result.kernel} in {result.graph} disagrees with eager PyTorch on the same inputs.\n"
                f"  kernel's FX nodes: {', '.join(result.nodes)}\n"
                f"  first wrong node:  {result.node} = {node.target}, max abs error {result.max_abs_error:.4g} "
                f"({ref.dtype}: rtol={rtol:g}, atol={atol:g})\n"
                f"  your code:         {result.source_line or '(no source line recorded)'}\n"
                + "".join(f"  computed from:     {line}\n" for line in lines if line != result.source_line) +
                "This is a compiler bug: the kernel's source is in session.kernels; please report it. "
                "Until it is fixed, the other backend (backend='cpp' or 'triton') may avoid it.")


def compare(actual: torch.Tensor, expected: Any) -> tuple[float, bool]:
    """(max abs error, within tolerance): NaN equals NaN, equal infinities agree, integers and bools
    must be exact."""
    if not isinstance(expected, torch.Tensor) or tuple(actual.shape) != tuple(expected.shape):
        return float("inf"), False
    if actual.numel() == 0:
        return 0.0, True
    a, e = actual.detach().to(torch.float64), expected.detach().to(actual.device, torch.float64)
    agree = (a == e) | (a.isnan() & e.isnan())
    diff = torch.where(agree, torch.zeros_like(a), (a - e).abs()).nan_to_num(nan=float("inf"))
    rtol, atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    ok = bool((diff <= atol + rtol * e.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)).all())
    return float(diff.max()), ok


def within_eager_rounding(actual: torch.Tensor, eager: Any, exact: Any) -> tuple[bool, float, float]:
    """(ok, ours' max distance from `exact`, eager's): ok when each of ours lies within twice eager's
    largest distance from the fp64 result, plus the fp32 tolerance of that result. Eager's own error
    sets the scale of rounding the kernel's arithmetic has (a sum of n terms: ~n ulps of its largest)."""
    if not isinstance(exact, torch.Tensor) or tuple(exact.shape) != tuple(actual.shape):
        return False, float("inf"), float("inf")
    e64 = exact.detach().to(actual.device, torch.float64)
    ours = (actual.detach().to(torch.float64) - e64).abs()
    theirs = (eager.detach().to(actual.device, torch.float64) - e64).abs()
    if not bool(torch.isfinite(ours).all() and torch.isfinite(theirs).all()):
        return False, float("inf"), float("inf")
    rtol, atol = TOLERANCES[torch.float32]
    slack = 2 * float(theirs.max()) if theirs.numel() else 0.0
    ok = bool((ours <= slack + atol + rtol * e64.abs()).all())
    return ok, float(ours.max()) if ours.numel() else 0.0, float(theirs.max()) if theirs.numel() else 0.0


def _to_float64(value: Any) -> Any:
    """float32 tensors and dtype arguments as float64, everything else as it is (nested)."""
    if isinstance(value, torch.Tensor):
        return value.to(torch.float64) if value.dtype == torch.float32 else value
    if value is torch.float32:
        return torch.float64
    if type(value) in (list, tuple):  # not a torch.Size or a named tuple: nothing float in those
        return type(value)(_to_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_float64(v) for k, v in value.items()}
    return value


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n([^\n]*)')


def node_source_line(node: torch.fx.Node, dynamo_graph: Optional[torch.fx.GraphModule] = None) -> str:
    """`file:line in function: code` of the user's line that made FX `node` ("" if unknown): its own
    stack trace (a backward node carries its forward's), else that of the Dynamo node it came from."""
    line = user_frame(node.meta.get("stack_trace"))
    if line or dynamo_graph is None:
        return line
    # No stack trace on the ATen node: ask Dynamo's graph about the node it came from.
    dynamo_nodes = {n.name: n for n in dynamo_graph.graph.nodes}
    for source in _sources(node.meta.get("from_node") or ()):
        if source in dynamo_nodes:
            line = user_frame(dynamo_nodes[source].meta.get("stack_trace"))
            if line:
                return line
    return ""


# fcompile's call wrappers: a compiled module's trace starts in one (api.py's `return fn(...)`).
_WRAPPERS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name)
                  for name in ("api.py", "compiled_module.py"))


def user_frame(stack_trace: Optional[str]) -> str:
    """The last frame of an FX stack trace that is the user's, as `file:line in function: code`.
    Dynamo keeps the user's frames and drops torch's, but the outermost frame of a compiled module
    is fcompile's wrapper: where the user wrote no code (an `nn.Sequential` of torch layers) that
    frame is all there is, and it is nobody's line to show."""
    frames = [f for f in _FRAME.findall(stack_trace or "")
              if os.path.abspath(f[0]) not in _WRAPPERS]
    if not frames:
        return ""
    file, line, function, code = frames[-1]
    return f"{file}:{line} in {function.strip()}: {code.strip()}"


def _sources(sources: Any) -> list[str]:
    """Names along a node's `from_node` provenance (NodeSource objects, newest first)."""
    names: list[str] = []
    for s in sources:
        names.append(getattr(s, "name", ""))
        names += _sources(getattr(s, "from_node", None) or ())
    return [n for n in names if n]

"""compile() and explain(): the pipeline, top to bottom.

    capture (Dynamo)  ->  AOT trace + decompose  [training: JointGraph -> our min-cut Partition]
      ->  PrimGraph  ->  LoopGraph  ->  Schedule  ->  MemoryPlan  ->  KernelSource + WrapperProgram
      ->  CompiledArtifact

Each stage's artifact is stored on the graph's GraphRecord in the CompileSession as it is made, so
a failure at any stage still leaves everything before it inspectable, and the graph runs in eager
PyTorch instead (recorded as `fallback_reason`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from compiler_core import _compat, per_size
from compiler_core.autodiff.artifacts import Partition
from compiler_core.autodiff.joint import joint_graph
from compiler_core.autodiff.partition import fallback_partition, partition_joint
from compiler_core.capture.dynamo import capture_graph, new_breaks, recompile_watcher
from compiler_core.capture.overlapping_writes import overlapping_write
from compiler_core.codegen.wrapper import generate_program, host_program
from compiler_core.compiled_module import CompiledModule
from compiler_core.decomp.complex_pairs import as_real_pairs, has_complex, reinterpreting
from compiler_core.decomp.conv_layout import CHOICES as CONV_LAYOUTS
from compiler_core.decomp.conv_layout import choose_conv_layout
from compiler_core.decomp.corrections import corrected_references
from compiler_core.decomp.table import decomposition_table, to_prim_graph
from compiler_core.gc_pause import gc_paused
from compiler_core.ir import symbolic
from compiler_core.ir.lowering import lower
from compiler_core.runtime.autotune import choose_configs
from compiler_core.runtime.build import build_program, load_kernels
from compiler_core.runtime.check import KernelChecker
from compiler_core.runtime.parallel_compile import start_workers
from compiler_core.schedule.epilogues import schedule_with_epilogues
from compiler_core.schedule.gather_inline import inline_into_gathers
from compiler_core.schedule.index_inline import inline_index_computations
from compiler_core.schedule.memory import plan_memory
from compiler_core.session import CompileSession, GraphRecord
from compiler_core.stack_room import stack_room

BACKENDS = ("auto", "triton", "cpp")
MODES = ("default", "reduce-overhead", "max-autotune")


class CompileError(Exception):
    """A user-facing compile error: says what happened and what to do, without an internal traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython shows just this message
        return [f"CompileError: {self}"]


@dataclass(frozen=True)
class Options:
    backend: str = "auto"
    mode: str = "default"
    # True: sizes symbolic from the first call; None (the default, as torch.compile's): Dynamo's
    # automatic dynamic shapes, symbolic once a size changes; False: every new size traced again.
    dynamic: Optional[bool] = None
    # Graph-level fallback instead of raising: a graph we cannot compile runs in eager PyTorch.
    fallback: bool = True
    # Debugging aids, comma-separated; "memory": freed storages are poisoned and every new tensor is
    # checked against the live ones (slower); "check": every kernel is compared with eager PyTorch
    # after its launch (runtime/check.py). FCOMPILE_DEBUG in the environment adds to it.
    debug: str = ""
    # Training: the fraction of soft recompute bans our partitioner keeps (autodiff/budget.py).
    # 1.0 saves what the min-cut saves; lower recomputes more in the backward to save fewer bytes.
    activation_budget: float = 1.0
    # False: every loop node its own kernel (the scheduler still records each pair and whether it
    # could have fused): to see what fusion buys.
    fusion: bool = True
    # Convolution graphs: "channels_last" runs their activations in channels-last (decomp/conv_layout.py);
    # "auto" and "as_traced" keep the traced layout (channels-last measured slower: the module says why).
    conv_layout: str = "auto"

    @property
    def check_memory(self) -> bool:
        return "memory" in _debug_flags(self.debug)

    @property
    def check_kernels(self) -> bool:
        return "check" in _debug_flags(self.debug)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise CompileError(f"backend={self.backend!r} is not one of {BACKENDS}")
        if self.mode not in MODES:
            raise CompileError(f"mode={self.mode!r} is not one of {MODES}")
        if self.conv_layout not in CONV_LAYOUTS:
            raise CompileError(f"conv_layout={self.conv_layout!r} is not one of {CONV_LAYOUTS}")
        if not 0.0 <= self.activation_budget <= 1.0:
            raise CompileError(f"activation_budget={self.activation_budget!r} must be between 0.0 (recompute "
                               "all it can) and 1.0 (save what the min-cut saves)")


def _debug_flags(debug: str) -> set[str]:
    words = f"{debug},{os.environ.get('FCOMPILE_DEBUG', '')}".replace(" ", ",").split(",")
    return {w.strip().lower() for w in words if w.strip()}


def compile(fn: Optional[Callable] = None, *, backend: str = "auto", mode: str = "default",
            dynamic: Optional[bool] = None, debug: str = "", check: bool = False, activation_budget: float = 1.0,
            fusion: bool = True, conv_layout: str = "auto") -> Any:
    """Compile a function or nn.Module with our compiler; usable as a decorator.

        fast = compile(lambda x: torch.softmax(x, -1))
        y = fast(torch.randn(8, 16))
        fast.session.stats["kernel_count"]   # 1
        m2 = compile(model)                  # an nn.Module again: parameters, state_dict, train/eval...

    `check=True` (same as debug="check") compares every kernel with eager PyTorch after its launch and
    raises KernelCheckError naming the first kernel that disagrees, its FX nodes and your source line.
    `activation_budget` (training, 0.0 ... 1.0): lower saves fewer activations for the backward and
    recomputes more there (session.graphs[i].partition shows what was saved and the trade-off curve).
    `fusion=False` gives every loop node a kernel of its own (to measure what fusion buys).
    `conv_layout="channels_last"` runs convolution graphs' activations in channels-last (NHWC); the
    default keeps the model's layout (channels-last measured slower on the H200 so far).
    `dynamic=None` (the default, as torch.compile's) compiles the first call's sizes as numbers and
    makes a size symbolic once it changes: one graph with symbolic sizes then serves every later one
    (a KV cache that grows by a token per call, batches of varying length). `dynamic=False` compiles
    every new size again, up to Dynamo's recompile limit (8), then runs in eager PyTorch.
    `dynamic=True` traces sizes as symbols from the first call. Each compile() starts from static
    sizes, whatever earlier compilations of the same function saw.
    """
    options = Options(backend, mode, dynamic, debug=f"{debug},check" if check else debug,
                      activation_budget=activation_budget, fusion=fusion, conv_layout=conv_layout)
    if fn is None:
        return lambda f: _compiled(f, options)
    return _compiled(fn, options)


def _compiled(fn: Callable, options: Options) -> Any:
    fn = _original(fn)
    if isinstance(fn, torch.nn.Module):
        return CompiledModule(fn, CompiledFunction(fn, options))
    return CompiledFunction(fn, options)


def _original(fn: Any) -> Any:
    """Compiling (or explaining) a compiled module compiles the module it wraps, not our wrapper."""
    return fn._orig_mod if isinstance(fn, CompiledModule) else fn


def explain(fn: Callable, *args: Any, backend: str = "auto", mode: str = "default", train: bool = False,
            dynamic: Optional[bool] = None, activation_budget: float = 1.0, fusion: bool = True,
            **kwargs: Any) -> CompileSession:
    """Compile `fn`, run it once on `args`, and return the CompileSession with every stage's artifact.

        s = explain(lambda x: torch.softmax(x, -1), torch.randn(8, 16))
        print(s.graphs[0].schedule.pretty())
    """
    compiled = CompiledFunction(_original(fn), Options(backend, mode, dynamic, activation_budget=activation_budget,
                                                       fusion=fusion))
    if train:
        args = tuple(a.detach().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
                     for a in args)
    out = compiled(*args, **kwargs)
    if train:
        loss = training_loss(out)
        if loss is not None:
            loss.backward()
    return compiled.session


def training_loss(out: Any) -> Optional[torch.Tensor]:
    """The loss explain(train=True) differentiates: the sum of mean squares of the outputs that need
    a gradient (None when none does)."""
    loss = sum(t.float().square().mean() for t in _tensors(out) if t.requires_grad)
    return loss if isinstance(loss, torch.Tensor) else None


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


class CompiledFunction:
    """What compile() returns: call it like the original; `.session` shows the latest compilation."""

    def __init__(self, fn: Callable, options: Options):
        self.options = options
        self.session = CompileSession(backend=options.backend, mode=options.mode)
        self._pending: Optional[CompileSession] = None
        _compat.forget_compiled_code(fn)
        _compat.forget_automatic_dynamic(fn)
        target = _with_own_code(fn)
        self._dynamo_fn = torch.compile(target, backend=_outside_dynamo(self._backend), dynamic=options.dynamic)
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Kept cheap: most calls compile nothing. A session is made only if Dynamo calls our backend.
        self._pending = None
        mark = new_breaks.mark()
        watcher = recompile_watcher.start()
        try:
            if self.options.dynamic is not False:
                with _compat.floats_specialized():
                    return self._dynamo_fn(*args, **kwargs)
            return self._dynamo_fn(*args, **kwargs)
        finally:
            recompiles = recompile_watcher.stop(watcher)
            pending, self._pending = self._pending, None
            gave_up = [r.reason for r in recompiles if r.limit_hit]
            if gave_up:  # Dynamo runs part of this call in eager PyTorch from now on: never silently
                if pending is None:
                    pending = CompileSession(backend=self.options.backend, mode=self.options.mode)
                pending.messages.extend(gave_up)
            # This call compiled something: it is now the latest compilation, also when running it
            # raised (an integer division by zero as in eager, or a KernelCheckError naming a kernel).
            if pending is not None:
                pending.breaks.extend(new_breaks.since(mark))
                pending.recompiles.extend(r for r in recompiles if not r.limit_hit)
                self.session = pending

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # works as a method decorator too
        return self if obj is None else functools.partial(self.__call__, obj)

    def _call_session(self) -> CompileSession:
        """The session of what the current call compiles, made when it first compiles something."""
        if self._pending is None:
            self._pending = CompileSession(backend=self.options.backend, mode=self.options.mode)
        return self._pending

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        session = self._call_session()
        if any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs):
            start_workers()  # they start while Dynamo, AOT and our stages run; first used by autotuning
        try:
            captured = capture_graph(gm, example_inputs, len(session.graphs))
        except Exception as exc:  # noqa: BLE001 - never fail the user's call over bookkeeping
            session.messages.append(f"a captured graph runs in eager PyTorch: recording it failed ({exc})")
            return gm.forward
        record = GraphRecord(captured=captured)
        session.graphs.append(record)
        overlap = overlapping_write(gm)
        if overlap is not None:  # AOTAutograd would trace a wrong program (capture/overlapping_writes.py)
            if not self.options.fallback:
                raise CompileError(f"graph {captured.index} cannot be compiled: {overlap}. Run it without "
                                   "compiling, or write into the tensor the view was made from")
            record.fallback_reason = overlap
            session.messages.append(f"graph {captured.index} runs in eager PyTorch: {overlap}")
            return gm.forward
        traced = per_size.traced_inputs(gm, example_inputs)
        if per_size.symbolic_positions(traced):
            if self._symbolic_eligible(traced):
                try:
                    return self._symbolic(gm, example_inputs, record, session)
                except symbolic.NotSymbolic as why:
                    session.messages.append(
                        f"graph {captured.index} has symbolic sizes our kernels cannot take yet ({why}): it is "
                        "compiled for each new size instead")
                    fresh = GraphRecord(captured=captured)
                    session.graphs[session.graphs.index(record)] = record = fresh
            return self._per_size(gm, traced, record)
        return self._aot(gm, example_inputs, record, session)

    def _symbolic_eligible(self, traced: list) -> bool:
        """Symbolic kernels (ir/symbolic.py) serve graphs in the default mode; CUDA graphs and the
        kernel check compile per concrete size, and so does training where AOTAutograd cannot be
        made to compile the backward with the forward (its guards must exist before Dynamo installs them)."""
        training = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in traced)
        return (symbolic.ENABLED and self.options.mode == "default" and not self.options.check_kernels
                and (not training or _compat.can_compile_backward_eagerly()))

    def _symbolic(self, gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord,
                  session: CompileSession) -> Callable:
        """One compilation whose kernels take the sizes as arguments. Raises NotSymbolic where a
        stage cannot (yet): the caller then compiles per concrete size. A training graph's backward
        is compiled in the same call (the size decisions of both become Dynamo's guards)."""
        def compile_symbolic(part: GraphRecord, aten: torch.fx.GraphModule, inputs: list,
                             released: frozenset = frozenset()) -> Callable:
            part.aten_graph = aten
            part.symbolic, part.sizes = True, record.sizes
            env = symbolic.find_shape_env(aten)  # compile_aten_graph makes it current
            before = len(env.guards) if env is not None else 0
            try:
                compiled = compile_aten_graph(aten, inputs, part, self.options, released)
            except symbolic.NotSymbolic:
                raise
            except Exception as exc:  # noqa: BLE001 - a stage not ready for symbols: compile per size
                raise symbolic.NotSymbolic(f"{type(exc).__name__}: {exc}") from exc
            if env is not None:
                part.size_guards = tuple(str(g.expr) for g in env.guards[before:])
            return compiled

        def compile_backward(bw: torch.fx.GraphModule, inputs: list) -> Callable:
            record.backward = GraphRecord(captured=record.captured, part="backward")
            compiled = compile_symbolic(record.backward, bw, inputs, _released_backward_inputs(bw, record.partition))
            return _compat.boxed(_outside_dynamo(compiled))

        traced = per_size.traced_inputs(gm, example_inputs)
        record.symbolic = True
        record.sizes = per_size.describe(per_size.example_bindings(traced))
        try:
            with _compat.backward_compiled_eagerly(), corrected_references():
                return _compat.aot_compile(
                    gm, example_inputs, decompositions=decomposition_table(),
                    fw_compiler=_outside_dynamo(functools.partial(compile_symbolic, record)),
                    bw_compiler=_outside_dynamo(compile_backward),
                    partition_fn=functools.partial(self._partition, record=record, session=session))
        except symbolic.NotSymbolic:
            raise
        except _compat.dynamo_restart_exceptions():
            raise
        except Exception as exc:  # noqa: BLE001 - AOT tracing of the symbolic graph failed
            raise symbolic.NotSymbolic(f"AOT tracing failed: {type(exc).__name__}: {exc}") from exc

    def _aot(self, gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord,
             session: CompileSession) -> Callable:
        try:
            with corrected_references():  # torch references that differ from eager (decomp/corrections.py)
                return _compat.aot_compile(
                    gm, example_inputs,
                    fw_compiler=_outside_dynamo(functools.partial(self._compile_aten, record=record,
                                                                  session=session)),
                    bw_compiler=_outside_dynamo(functools.partial(self._compile_backward, record=record,
                                                                  session=session)),
                    decompositions=decomposition_table(),
                    partition_fn=functools.partial(self._partition, record=record, session=session),
                )
        except _compat.dynamo_restart_exceptions():
            # Dynamo restarts its analysis (e.g. dynamic=True specializing a float input that AOT
            # could not turn into a tensor) and calls us again: this attempt leaves no record.
            session.graphs[:] = [g for g in session.graphs if g is not record]
            raise
        except Exception as exc:  # noqa: BLE001 - any failure means: run this graph in eager
            record.fallback_reason = f"AOT tracing failed: {type(exc).__name__}: {exc}"
            session.messages.append(f"graph {record.captured.index} runs in eager PyTorch: {record.fallback_reason}")
            return gm.forward

    def _per_size(self, gm: torch.fx.GraphModule, traced: list, first: GraphRecord) -> Callable:
        """A graph with symbolic sizes: compiled for the sizes of each call, the first time they come
        (compiler_core/per_size.py). The first size fills the record Dynamo's compile made; each later
        one is a compilation of its own, so it becomes `.session`, with a record for that size."""
        captured, unused = first.captured, [first]

        def compile_for(args: tuple, bound: dict) -> Callable:
            session = self._call_session()
            record = unused.pop() if unused else GraphRecord(captured=captured)
            if record not in session.graphs:
                session.graphs.append(record)
            record.sizes = per_size.describe(bound)
            session.messages.append(
                f"graph {captured.index} has symbolic sizes: our kernels take fixed sizes, so it is compiled "
                f"for each new size when it first comes (this one: {record.sizes})")
            # PerSizeGraph runs with Dynamo off already: the compiled graph needs no wrapper of its own
            tensors = per_size.without(args, per_size.scalar_positions(traced))
            return self._aot(per_size.bind_scalars(gm, traced, args), list(tensors), record, session)

        said = []

        def over_limit(bound: dict) -> None:  # said once per graph, not at every call past the limit
            if not said:
                said.append(True)
                self._call_session().messages.append(
                    f"graph {captured.index} runs in eager PyTorch for {per_size.describe(bound)} and any "
                    f"later new size: it was compiled for {per_size.MAX_SIZES} sizes already "
                    "(compiler_core.per_size.MAX_SIZES)")

        return _outside_dynamo(per_size.PerSizeGraph(traced, compile_for, gm.forward, over_limit))

    def _partition(self, joint_module: torch.fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int,
                   record: GraphRecord, session: CompileSession, **kwargs: Any) -> tuple:
        """AOTAutograd's partition_fn: record the joint graph, split it with our min-cut. A graph ours
        cannot split uses AOTAutograd's default partition, said in session.messages."""
        with _StageTimer(record)("partition"):
            try:
                record.joint = joint_graph(joint_module, num_fwd_outputs)
                forward, backward, record.partition = partition_joint(record.joint, self.options.activation_budget)
            except Exception as exc:  # noqa: BLE001 - never fail the user's call over the partition
                reason = f"{type(exc).__name__}: {exc}"
                session.messages.append(f"graph {record.captured.index}: our partitioner could not split the joint "
                                        f"graph ({reason}); it uses AOTAutograd's default partition")
                forward, backward, record.partition = fallback_partition(joint_module, joint_inputs,
                                                                         num_fwd_outputs, reason, **kwargs)
        return forward, backward

    def _compile_backward(self, gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord,
                          session: CompileSession) -> Callable:
        # The same user code as the forward, its own ATen graph.
        record.backward = GraphRecord(captured=record.captured, part="backward")
        compiled = self._compile_aten(gm, example_inputs, record.backward, session,
                                      _released_backward_inputs(gm, record.partition))
        # The autograd engine runs the backward from the user's frame (their `loss.backward()`), where
        # Dynamo's frame callback may be active. The forward needs no wrapper (and pays none per call):
        # Dynamo calls every compiled graph through its own torch.compiler.disable.
        return _compat.boxed(_outside_dynamo(compiled))

    def _compile_aten(self, gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord,
                      session: CompileSession, released_inputs: frozenset = frozenset()) -> Callable:
        record.aten_graph = gm
        try:
            return compile_aten_graph(gm, example_inputs, record, self.options, released_inputs)
        except Exception as exc:  # noqa: BLE001
            if not self.options.fallback:
                raise
            record.fallback_reason = f"{type(exc).__name__}: {exc}"
            # A CompileError refuses the graph on purpose and says why; anything else is our bug.
            why = f": {exc}" if isinstance(exc, CompileError) else \
                f" because our compiler failed: {record.fallback_reason}"
            session.messages.append(f"graph {record.captured.index} runs in eager PyTorch{why}")
            record.error_traceback = traceback.format_exc()
            return _compat.boxed(_eagerly(gm))


def _eagerly(gm: torch.fx.GraphModule) -> Callable[[list], Any]:
    """The ATen graph run by PyTorch, op by op: what a graph that fell back runs."""

    def run(args: list) -> Any:
        with _compat.without_custom_op_alias_check():
            return gm(*args)

    return run


_CALL_FRAMES = itertools.count()


def _own_call_frame(fn: Callable) -> Callable:
    """`fn(*args, **kwargs)` in a function with a code object of its own.

    Dynamo keeps its compiled graphs, and counts recompilations against `recompile_limit` (8), per
    code object. torch.compile(module) calls every module through one shared wrapper frame, and
    torch.compile(torch.sin) every builtin through another, so the ninth module or builtin compiled in
    a process (a notebook exploring model after model) ran in eager PyTorch, and every one after it
    silently; a builtin compiled a second time reused the first compile's graph, and its session
    showed none. A fresh code object per compile() gives each its own cache and its own 8
    recompilations; the frame's variable is still named `fn`, as in torch's wrapper, so graph input
    names (`l_fn_...`) do not change."""

    def call_module(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    name = re.sub(r"\W", "_", getattr(fn, "__name__", type(fn).__name__))
    code = call_module.__code__.replace(co_name=f"call_{name}_{next(_CALL_FRAMES)}")
    return types.FunctionType(code, call_module.__globals__, code.co_name, None, call_module.__closure__)


def _with_own_code(fn: Callable) -> Callable:
    """fn with a code object of its own, for the reason _own_call_frame gives: functions made by one
    `def` or `lambda` (in a loop, or a factory) share a code object, and so do a class's bound methods
    (`compile(model.forward)` per model); the ninth of them compiled ran in eager PyTorch. A plain
    function is copied with the file, lines, name, globals, defaults and closure kept, so breaks and
    guards still point at the user's code; a bound method is bound again to such a copy; modules,
    builtins and other callables are called from a frame of their own."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(_with_own_code(fn.__func__), fn.__self__)
    if not isinstance(fn, types.FunctionType):
        return _own_call_frame(fn)
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    copy.__dict__.update(fn.__dict__)
    return copy


def _outside_dynamo(fn: Callable) -> Callable:
    """`fn`, run with Dynamo off: the compiler and its runtime are never traced (ARCHITECTURE.md), so
    graph breaks and recompiles in a session are always the user's."""
    return torch.compiler.disable(fn, reason="fcompile's compiler and runtime are not traced")


def _released_backward_inputs(gm: torch.fx.GraphModule, partition: Optional[Partition]) -> frozenset:
    """The backward's inputs only autograd holds: incoming gradients and saved activations (not the
    saved parameters or views of them, which the caller keeps)."""
    activations = {s.name for s in partition.saved if s.kind == "activation"} if partition is not None else set()
    return frozenset(n.name for n in gm.graph.find_nodes(op="placeholder")
                     if n.name.startswith("tangents") or n.name in activations)


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord,
                       options: Options, released_inputs: frozenset = frozenset()) -> Callable:
    """The stages after AOT tracing: each artifact lands on `record` as soon as it exists.
    `released_inputs`: graph inputs nobody but this program holds (LoopGraph.released_inputs)."""
    # gc_pause.py: the collector's walks were a third of scheduling; stack_room.py: deep value trees.
    with gc_paused(), stack_room(), symbolic.shape_env_of(gm):
        return _compile_stages(gm, example_inputs, record, options, released_inputs)


def _compile_stages(gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord, options: Options,
                    released_inputs: frozenset) -> Callable:
    backend = _choose_backend(options.backend, example_inputs, gm)
    timer = _StageTimer(record)
    with timer("decomp"):
        # Complex tensors become real ones (decomp/complex_pairs.py); the caller still sees complex.
        if has_complex(gm):
            gm, record.complex_pairs = as_real_pairs(gm)
        on_cpu = not any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in example_inputs)
        inference = record.joint is None and record.part == "forward"
        record.layout = choose_conv_layout(gm, options.conv_layout, on_cpu_inference=on_cpu and inference,
                                          on_cpu=on_cpu)
        record.prims = to_prim_graph(gm)
    # An inference graph's mutated inputs (an optimizer step's parameters and state, a KV cache) are
    # copied from its outputs afterwards: lowering and memory planning may write them directly. Not in
    # the check mode, which recomputes each kernel from its inputs after the launch (nor is anything
    # written over a kernel's dying input there).
    updates = _compat.inference_input_updates(gm) if inference and not options.check_kernels else ()
    with timer("lower"):
        record.loops = dataclasses.replace(lower(record.prims, updates), released_inputs=released_inputs)
    with timer("schedule"):
        # Gathers through pointwise producers read the producer's inputs (never on with fusion off:
        # it inlines across what would be two kernels).
        # Values of loop indices alone (an upsample's coordinates) are recomputed by their readers first.
        indexed, index_notes = inline_index_computations(record.loops) if options.fusion else (record.loops, ())
        gathered, gather_notes = inline_into_gathers(indexed) if options.fusion else (indexed, ())
        gather_notes = index_notes + gather_notes
        # Matmul epilogues: the loop graph keeps an addmm split into mm + bias add only where the add fuses.
        record.loops, record.schedule = schedule_with_epilogues(gathered, fusion=options.fusion)
        if gather_notes:
            record.schedule = dataclasses.replace(record.schedule, decisions=gather_notes + record.schedule.decisions)
    with timer("memory"):
        record.memory = plan_memory(record.loops, record.schedule, updates, write_over=not options.check_kernels)
    with timer("codegen"):
        record.kernels, record.wrapper = generate_program(record.loops, record.schedule, record.memory, backend,
                                                          check_memory=options.check_memory,
                                                          check_kernels=options.check_kernels)
    with timer("build"):
        loaded = load_kernels(record.kernels, backend, record.loops)
    with timer("autotune"):
        configs, tuning_log = choose_configs(record.kernels, loaded, record.loops)
        if any(configs[k.name] != k.config_space[0] for k in record.kernels if k.name in configs):
            record.wrapper = host_program(record.loops, record.schedule, record.memory, backend, record.kernels,
                                          configs, check_memory=options.check_memory,
                                          check_kernels=options.check_kernels)
    checker = None
    if options.check_kernels:
        checker = KernelChecker(record.prims, record.loops, record.schedule,
                                f"graph {record.captured.index} ({record.part})", record.captured.graph_module,
                                record.memory)
    with timer("build"):
        record.artifact = build_program(loaded, record.kernels, record.wrapper, record.loops, options.mode, configs,
                                        tuning_log, checker)
    if record.complex_pairs is not None:
        return reinterpreting(record.artifact.call, record.complex_pairs)
    return _compat.boxed(record.artifact.call)


def _choose_backend(requested: str, example_inputs: list, gm: Optional[torch.fx.GraphModule] = None) -> str:
    """The backend one graph runs on: Triton for CUDA tensors, C++ for CPU tensors (or what was asked).

    A graph neither can run raises CompileError, so it runs in eager PyTorch with the reason in
    session.messages: one kernel reads all its tensors through pointers of one device."""
    devices = _devices(example_inputs, gm)
    if len(devices) > 1:
        raise CompileError(
            f"the graph's inputs are on more than one device ({', '.join(sorted(devices))}) but each of our "
            "kernels runs on one. A 0-d CPU tensor beside CUDA tensors is legal in eager PyTorch; to compile "
            "this graph, pass a Python number instead or move the tensor to the GPU (.cuda()).")
    device = next(iter(devices), "cpu")
    if device not in ("cpu", "cuda"):
        raise CompileError(f"the graph's tensors are on {device!r}: our kernels run on 'cpu' (C++, or Triton's "
                           "interpreter) and 'cuda' (Triton) only")
    if requested == "cpp" and device == "cuda":
        raise CompileError("backend='cpp' needs CPU tensors; move the inputs to the CPU or use backend='triton'")
    if requested != "auto":
        return requested
    return "triton" if device == "cuda" else "cpp"


def _devices(example_inputs: list, gm: Optional[torch.fx.GraphModule]) -> set[str]:
    """Device types of the graph's tensor inputs; of the tensors it makes when it has no input (a
    graph that builds CUDA tensors from nothing must not get C++ kernels)."""
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
    if devices or gm is None:
        return devices
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "call_function"]
    return {t.device.type for t in _tensors(vals)}


class _StageTimer:
    def __init__(self, record: GraphRecord):
        self.record = record

    def __call__(self, stage: str) -> "_StageTimer":
        self.stage = stage
        return self

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        elapsed = time.perf_counter() - self.start
        self.record.timings[self.stage] = self.record.timings.get(self.stage, 0.0) + elapsed

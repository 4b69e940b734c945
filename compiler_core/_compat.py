"""Every private torch/triton API the compiler touches, in one place, version-gated.

Supported: torch 2.11 - 2.14, Triton 3.6 - 3.9.  When an upstream private API moves, this is the
only file to change.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from typing import Any, Callable, Optional

import torch

from compiler_core.runtime import eager_libdevice, interpreter_folds


def _prepare_triton_interpreter() -> None:
    """Without a GPU, generated Triton can only run in the interpreter, and Triton decides that for
    its own library functions (tl.sum, tl.sigmoid...) when it is first imported.  Dynamo imports
    Triton, so the switch must be set before the first compile."""
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_prepare_triton_interpreter()


def aot_compile(gm: torch.fx.GraphModule, example_inputs: list, *, fw_compiler: Callable, bw_compiler: Callable,
                decompositions: dict, partition_fn: Optional[Callable] = None) -> Callable:
    """AOTAutograd: trace forward (and backward when needed) to ATen graphs handed to our compilers.

    `partition_fn(joint_module, joint_inputs, num_fwd_outputs=..., **kwargs) -> (forward, backward)`
    splits the joint graph when training (AOTAutograd's default partition when None).
    Only keywords common to torch 2.11 and 2.13+ are passed (see PITFALLS.md).
    """
    from torch._functorch.aot_autograd import aot_module_simplified

    extra = {"partition_fn": partition_fn} if partition_fn is not None else {}
    with _tangents_laid_out_to_hold_any_gradient():
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                     decompositions=decompositions, keep_inference_input_mutations=False, **extra)


@contextlib.contextmanager
def _tangents_laid_out_to_hold_any_gradient() -> Any:
    """AOTAutograd traces each output's gradient (tangent) with the output's own strides and, at the
    backward, copies the incoming gradient into an empty tensor of those strides. For an output whose
    elements overlap in memory (`x.unfold(0, 2, 1)`: strides (1, 1), four windows over five numbers)
    that copy overwrites gradients with each other: torch 2.13 catches zero strides (expand) but not
    this, and gives wrong gradients under aot_eager and Inductor alike. Here any output that is not
    non-overlapping and dense gets a tangent of its suggested memory format (contiguous): always able
    to hold the gradient, and no copy when the gradient comes contiguous, as it mostly does."""
    try:
        from torch._functorch._aot_autograd.schemas import MemoryFormatMeta
        from torch._prims_common import suggest_memory_format
    except ImportError:  # a torch without tangent layouts: nothing to correct
        yield
        return
    original = MemoryFormatMeta.__dict__.get("from_tensor")
    if not isinstance(original, staticmethod):
        yield
        return

    def from_tensor(t: Any, *args: Any, **kwargs: Any) -> Any:
        plain = (isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter)
                 or type(t).__name__ == "FakeTensor")
        if (plain and t.layout == torch.strided and not t._has_symbolic_sizes_strides
                and not is_non_overlapping_and_dense(t)):
            return MemoryFormatMeta(memory_format=suggest_memory_format(t))
        return original.__func__(t, *args, **kwargs)

    MemoryFormatMeta.from_tensor = staticmethod(from_tensor)
    try:
        yield
    finally:
        MemoryFormatMeta.from_tensor = original


def set_autograd_kernel(op: torch._ops.OpOverload, kernel: Optional[Callable]) -> Optional[Callable]:
    """Install `kernel` as the Python kernel `op` runs at the Autograd key (None removes it), as
    torch's own `py_impl(DispatchKey.Autograd)` references are installed; returns the one it had.
    The operator's dispatch cache is cleared so the next call sees it."""
    from torch._C import DispatchKey

    previous = op.py_kernels.get(DispatchKey.Autograd)
    if kernel is None:
        op.py_kernels.pop(DispatchKey.Autograd, None)
    else:
        op.py_kernels[DispatchKey.Autograd] = kernel
    cache = getattr(op, "_dispatch_cache", None)
    if cache is not None:
        cache.clear()
    return previous


def can_compile_backward_eagerly() -> bool:
    """Whether AOTAutograd can be told to compile a backward graph in the forward's compilation
    (torch._functorch.config.force_non_lazy_backward_lowering), rather than at the first backward."""
    from torch._functorch import config

    return hasattr(config, "force_non_lazy_backward_lowering")


def backward_compiled_eagerly() -> Any:
    """A context in which AOTAutograd compiles the backward with the forward and lets its errors
    through (instead of retrying at the first backward, after Dynamo has installed its guards)."""
    from torch._functorch import config

    if not can_compile_backward_eagerly():
        return contextlib.nullcontext()
    return config.patch(force_non_lazy_backward_lowering=True)


def dynamo_restart_exceptions() -> tuple[type[BaseException], ...]:
    """Exceptions Dynamo raises through a backend to steer its own analysis (restart it with a
    float specialized, skip the frame): a backend must let them through, never treat them as its
    own failure. Dynamo's own aot_autograd backend re-raises TensorifyScalarRestartAnalysis the same way."""
    from torch._dynamo import exc

    names = ("RestartAnalysis", "TensorifyScalarRestartAnalysis", "SkipFrame")
    return tuple(cls for cls in (getattr(exc, n, None) for n in names) if isinstance(cls, type))


def default_partition(joint_module: torch.fx.GraphModule, joint_inputs: Any, num_fwd_outputs: int,
                      **kwargs: Any) -> tuple:
    """AOTAutograd's default partition (forward as traced, everything it computed saved)."""
    from torch._functorch.partitioners import default_partition as _default

    return _default(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)


def functorch_min_cut_partition(joint_module: torch.fx.GraphModule, joint_inputs: Any, num_fwd_outputs: int,
                                **kwargs: Any) -> tuple:
    """functorch's min-cut partitioner, for comparisons only (tests, benchmarks). It edits
    `joint_module` in place (dead code, CSE): pass a copy if the joint is needed afterwards."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                               **kwargs)


def extract_forward_backward(joint_module: torch.fx.GraphModule, saved_values: list, saved_symints: list,
                             num_fwd_outputs: int) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """Cut a joint graph into the forward and backward graph modules AOTAutograd expects, given the
    values to save (our decision): forward outputs = real outputs + saved tensors + saved symints,
    backward inputs = saved symints + saved tensors + tangents. Saved values the backward does not
    use are removed from the lists (in place). Same signature on torch 2.11 - 2.14."""
    from torch._functorch.partitioners import _extract_fwd_bwd_modules

    return _extract_fwd_bwd_modules(joint_module, saved_values, saved_sym_nodes=saved_symints,
                                    num_fwd_outputs=num_fwd_outputs)


def mutated_primal_indices(joint_module: torch.fx.GraphModule) -> list[int]:
    """Indices of the joint graph's primals that the forward mutates (their new values are forward
    outputs that AOTAutograd copies back after the forward), read from the output descriptors
    AOTAutograd attaches (InputMutationAOTOutput); empty where this torch version has none."""
    try:
        output = next(iter(joint_module.graph.find_nodes(op="output")))
        descs = output.meta.get("desc") or []
        return [d.mutated_input.idx for d in descs
                if type(d).__name__ == "InputMutationAOTOutput" and hasattr(d.mutated_input, "idx")]
    except Exception:  # noqa: BLE001 - a private structure: no information is the safe answer
        return []


def inference_input_updates(gm: torch.fx.GraphModule) -> tuple[tuple[str, int], ...]:
    """(placeholder name, output index) of each graph input whose data AOTAutograd updates after an
    inference graph runs, `input.copy_(output)` (keep_inference_input_mutations=False): the mutated
    inputs' new values are the graph's first outputs, in input order. Named, not numbered: a graph
    with symbolic sizes has SymInt placeholders that are no tensor buffer, and an index counted over
    one list and read in the other wrote a kernel's result into the wrong input. Read from the forward metadata
    AOTAutograd keeps in the tracing context while it calls the compiler; empty when it is missing or
    does not line up with the graph (synthetic bases for aliased inputs, metadata mutations)."""
    try:
        context = torch._guards.TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None)
        if meta is None:
            return ()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        outputs = next(iter(gm.graph.find_nodes(op="output"))).args[0]
        mutated = list(meta.mutated_inp_runtime_indices)
        if len(meta.input_info) != len(placeholders) or len(outputs) < len(mutated):
            return ()
        pairs = []
        for k, i in enumerate(mutated):
            info = meta.input_info[i]
            if info.mutates_data and not info.mutates_metadata:
                pairs.append((placeholders[i].name, k))
        return tuple(pairs)
    except Exception:  # noqa: BLE001 - a private structure: no information is the safe answer
        return ()


def traced_as_graph_input(tensor: Any) -> bool:
    """Whether `tensor`, met by a decomposition while AOTAutograd traces, is one of the graph's inputs
    itself (a placeholder of the graph being built), not a value computed in it or a view of one.
    Read from the proxy tracer's private tensor table; False wherever that cannot be read."""
    try:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot

        mode = get_proxy_mode()
        if mode is None or not isinstance(tensor, torch.Tensor):
            return False
        slot = get_proxy_slot(tensor, mode.tracer, None)
        return slot is not None and slot.proxy.node.op == "placeholder"
    except Exception:  # noqa: BLE001 - a private structure: no information is the safe answer
        return False


class _FloatsSpecialized:
    """Sets the option for the block and puts back what was there: where Dynamo has no compile
    callbacks. Not `config.patch`: that builds a class on every use (24 µs of a 54 µs warm call on the
    2-core CPU machine, 2026-12-05)."""

    __slots__ = ("_old",)

    def __enter__(self) -> None:
        config = torch._dynamo.config
        self._old = config.specialize_float
        if not self._old:
            config.specialize_float = True

    def __exit__(self, *exc: Any) -> None:
        if not self._old:
            torch._dynamo.config.specialize_float = self._old


class _OurCalls(threading.local):
    depth = 0  # calls of our compiled functions under way on this thread (a compiled fn may call another)

    def __init__(self) -> None:
        self.saved: list[Optional[bool]] = []  # per compile Dynamo started: the option to put back


_our_calls = _OurCalls()


def _specialize_while_ours(_args: Any) -> None:
    """Dynamo starts compiling a frame: inside one of our calls, floats are specialized for it."""
    config = torch._dynamo.config
    if _our_calls.depth:
        _our_calls.saved.append(config.specialize_float)
        config.specialize_float = True
    else:
        _our_calls.saved.append(None)


def _put_back_after_compile(_args: Any) -> None:
    saved = _our_calls.saved.pop() if _our_calls.saved else None
    if saved is not None:
        torch._dynamo.config.specialize_float = saved


class _FloatsSpecializedWhileCompiling:
    """Marks the block as one of our calls; Dynamo's compile callbacks set the option only while a
    compile runs inside it. The option's reads and writes (Dynamo's config module: 9.5 µs of a 37 µs
    warm call on the quiet 2-core CPU, 2026-12-06) then cost nothing on the calls that compile nothing,
    almost all of them. `torch._dynamo.reset()` clears the callbacks: checked when a call begins."""

    __slots__ = ()

    def __enter__(self) -> None:
        if _our_calls.depth == 0 and _ON_START[0] not in _CALLBACKS.start_callbacks:
            _CALLBACKS.register_start_callback(_ON_START[0])
            _CALLBACKS.register_end_callback(_ON_END[0])
        _our_calls.depth += 1

    def __exit__(self, *exc: Any) -> None:
        _our_calls.depth -= 1


def _compile_callbacks() -> Any:
    """Dynamo's handler of compile start/end callbacks, where it runs them around each frame's compile."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return None
    needed = ("register_start_callback", "register_end_callback", "start_callbacks", "install_callbacks")
    return callback_handler if all(hasattr(callback_handler, n) for n in needed) else None


def floats_specialized() -> Any:
    """Dynamo config for dynamic=True: Python floats (an Embedding's norm_type, a learning rate) stay
    constants guarded by value, as without dynamic shapes. Left symbolic, Dynamo passes them as 0-d
    tensors read back with .item(), which a graph traced again at concrete sizes (per_size.py) cannot
    do without a symbolic shape environment."""
    global _HAS_SPECIALIZE_FLOAT, _CALLBACKS
    if _HAS_SPECIALIZE_FLOAT is None:  # asked once: the config's attribute lookup is not free either
        _HAS_SPECIALIZE_FLOAT = hasattr(torch._dynamo.config, "specialize_float")
        _CALLBACKS = _compile_callbacks()
        # Not traced themselves: a backward compiled lazily inside a compiled call runs the callbacks
        # with Dynamo's frame hook on, and Dynamo compiling them would wait on the callbacks' own lock.
        _ON_START[:] = [torch._dynamo.disable(_specialize_while_ours)]
        _ON_END[:] = [torch._dynamo.disable(_put_back_after_compile)]
    if not _HAS_SPECIALIZE_FLOAT:  # a torch without the option specializes
        return contextlib.nullcontext()
    return _WHILE_COMPILING if _CALLBACKS is not None else _FloatsSpecialized()


_HAS_SPECIALIZE_FLOAT: Optional[bool] = None
_CALLBACKS: Any = None
_ON_START: list[Callable[[Any], None]] = []
_ON_END: list[Callable[[Any], None]] = []
_WHILE_COMPILING = _FloatsSpecializedWhileCompiling()


def size_hint(value: Any) -> int:
    """An int for a size that may be symbolic (its example value under dynamic shapes)."""
    if isinstance(value, int):
        return value
    node = getattr(value, "node", None)
    hint = getattr(node, "_hint", None)  # a backed size's example value, read without any call
    if isinstance(hint, int):
        return hint
    from torch.fx.experimental import symbolic_shapes

    # torch 2.13 renamed hint_int to optimization_hint; a missing one must not turn every symbolic
    # size into 1 (the partitioner then saw every activation as 4 bytes and recomputed batch norms).
    # hint_int first: torch 2.11 has both, and its optimization_hint warns on every call.
    read = getattr(symbolic_shapes, "hint_int", None) or getattr(symbolic_shapes, "optimization_hint", None)
    if read is None:
        raise RuntimeError("torch.fx.experimental.symbolic_shapes has neither optimization_hint nor hint_int")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return int(read(value, fallback=1))
    except Exception:  # noqa: BLE001 - an unbacked size with no hint: sizes only rank costs here
        return 1


def boxed(fn: Callable[[list], Any]) -> Callable:
    """Mark a callable as taking its arguments as one list (AOTAutograd's boxed calling convention)."""
    fn._boxed_call = True  # type: ignore[attr-defined]
    return fn


def get_decompositions(ops: list) -> dict:
    from torch._decomp import get_decompositions as _get

    return _get(ops)


def graph_break_reasons() -> list:
    """Dynamo's running list of GraphCompileReason (reason text + user stack)."""
    return torch._dynamo.utils.graph_break_reasons


def recompile_logger_names() -> list[str]:
    # Dynamo logs recompile reasons on the "recompiles" logging artifact of this module.
    return ["torch._dynamo.guards.__recompiles"]


def recompile_limit_logger_name() -> str:
    # Dynamo warns here, once per code object, when it stops compiling a function (recompile limit).
    return "torch._dynamo.convert_frame"


def enable_recompile_reasons() -> None:
    """Dynamo words a recompile's failed guard only while its "recompiles" log artifact is on."""
    from torch._logging import _internal

    _internal.log_state.enable_artifact("recompiles")


def forget_compiled_code(fn: Callable) -> None:
    """Drop Dynamo's cached compilations of fn's code so repeated explain() calls do not hit the
    recompile limit (after which Dynamo silently runs eager)."""
    code = getattr(getattr(fn, "forward", fn), "__code__", None)
    reset_code = getattr(torch._dynamo, "reset_code", None)
    if code is not None and reset_code is not None:
        try:
            reset_code(code)
        except Exception:  # noqa: BLE001 - best effort: worst case Dynamo keeps its cache
            pass


def forget_automatic_dynamic(fn: Callable) -> None:
    """Drop what Dynamo's automatic dynamic shapes learnt about fn's sizes in earlier compilations.

    Dynamo keeps which inputs changed size per (file, first line, name) of a code object, across
    torch.compile calls: a second `compile()` of the same function (a notebook cell run again, a test
    parametrized over sizes) would trace its first call symbolic because an earlier compilation saw
    another size. Each compile() starts from static sizes, as its first graph does under torch.compile;
    frames Dynamo resumes after fn's graph breaks are keyed by fn's name too and go with it."""
    code = getattr(getattr(fn, "forward", fn), "__code__", None)
    try:
        from torch._dynamo import pgo

        state = pgo._CODE_STATE
    except (ImportError, AttributeError):  # a torch without automatic-dynamic state: nothing to forget
        return
    if code is None or not state:
        return
    resumed = f"torch_dynamo_resume_in_{code.co_name}_at_"
    for key in [k for k in state if k.filename == code.co_filename
                and ((k.name == code.co_name and k.firstlineno == code.co_firstlineno) or k.name.startswith(resumed))]:
        del state[key]


def dynamo_guards() -> list[tuple[str, str]]:
    """(guard kind, guarded expression) for the graph Dynamo is compiling now, e.g.
    ("TENSOR_MATCH", "L['x']"); empty where Dynamo does not expose them."""
    try:
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        guards = context.guards_context.dynamo_guards if context is not None else ()
        return sorted({(g.create_fn_name(), g.name) for g in guards}, key=lambda t: (t[1] == "", t[1], t[0]))
    except Exception:  # noqa: BLE001 - a private API: guards are informative only
        return []


def placeholder_source(node: torch.fx.Node) -> str:
    """The guarded expression ("L['x']") a captured graph's placeholder was read from, if known."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", "")  # a method in some torch versions, a property in others
    try:
        return str(name() if callable(name) else name)
    except Exception:  # noqa: BLE001 - informative only
        return ""


def fake_value(node: torch.fx.Node) -> Any:
    return node.meta.get("val", node.meta.get("example_value"))


@contextlib.contextmanager
def without_custom_op_alias_check() -> Any:
    """Run without AOTAutograd's custom-op aliasing check where it is the innermost dispatch mode (it
    wraps a compiled program's first call). Inside its handler every op runs with the Conjugate and
    Negative keys excluded, so a composite op on complex values (linalg.pinv's conjugate transpose)
    computes a wrong answer on that first call: eager ops of a graph that fell back run without it."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode_temporarily

    mode = _get_current_dispatch_mode()
    if type(mode).__name__ == "_AnalyzeCustomOpInputOutputMode":
        with _pop_mode_temporarily():
            yield
    else:
        yield


def conjugate_views_dispatched() -> Any:
    """A context in which ops honour lazily conjugated and negated views (the Conjugate and Negative
    dispatch keys), wherever it is entered. Inside a TorchDispatchMode's handler (AOTAutograd wraps a
    compiled program's first call in one that checks custom ops for aliasing) those keys are excluded,
    so an op made of other ops (linalg.pinv's `mH`) reads a conjugated view as unconjugated."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    lazy = torch._C.DispatchKeySet(torch._C.DispatchKey.Conjugate) | torch._C.DispatchKeySet(
        torch._C.DispatchKey.Negative)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude - lazy)


def is_non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """Whether `t`'s elements fill its storage span exactly once (empty_like then keeps its strides);
    False where symbolic sizes leave it unknown."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    return bool(is_non_overlapping_and_dense_or_false(t))


def is_alias_of(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors share storage (real or fake tensors alike)."""
    return bool(torch._C._is_alias_of(a, b))


def fake_mode_of(gm: torch.fx.GraphModule) -> Any:
    """The FakeTensorMode an AOT graph's values were traced in (None if it has no fake values): new
    nodes get their values computed in it, sharing its shape environment."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch._subclasses.FakeTensor):
            return val.fake_mode
    return None


def exec_triton_module(source: str, filename: str, interpret: bool) -> dict[str, Any]:
    """exec generated Triton source; return its namespace (jitted kernels), in interpreter mode if asked.

    Triton reads the interpreter switch when a kernel is decorated, so it is set around the exec.
    """
    import linecache

    import triton

    knobs = getattr(triton, "knobs", None)
    if interpret and type(triton.language.standard.sum).__name__ != "InterpretedFunction":
        raise RuntimeError("Triton was imported before compiler_core on a machine without a GPU, so its "
                           "interpreter is off: set TRITON_INTERPRET=1 before starting Python, or import "
                           "compiler_core first")
    old_env = os.environ.get("TRITON_INTERPRET")
    old_knob = knobs.runtime.interpret if knobs is not None else None
    try:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
            if knobs is not None:
                knobs.runtime.interpret = True
        else:
            eager_libdevice.install()
        # Triton's JIT reads kernel source through inspect/linecache: register the text.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"__name__": "fcompile_triton_kernels"}
        exec(compile(source, filename, "exec"), namespace)
        if interpret:
            interpreter_folds.claim(namespace)
        else:
            eager_libdevice.claim(namespace)
        return namespace
    finally:
        if old_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old_env
        if knobs is not None:
            knobs.runtime.interpret = old_knob


def triton_exact_float_options() -> dict:
    """Compile options under which Triton computes floats as eager's CUDA kernels do: every multiply and
    add rounded (it contracts them into FMAs by default: `enable_fp_fusion`), and libdevice's float32
    functions keeping subnormal values (it links libdevice in flush-to-zero mode by default:
    `enable_reflect_ftz`; atan2(1e-40, 0) gave 0, not pi/2, and sin(1e-40) gave 0). Each where this
    Triton knows it."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions

        fields = set(CUDAOptions.__dataclass_fields__)
    except Exception:  # noqa: BLE001 - no CUDA backend: nothing is compiled for a GPU
        return {}
    wanted = {"enable_fp_fusion": False, "enable_reflect_ftz": False}
    return {name: value for name, value in wanted.items() if name in fields}


def triton_assert_options() -> dict:
    """Compile options under which Triton keeps `tl.device_assert` (it drops them otherwise), without
    its integer-overflow checks where this Triton can turn those off separately: 3.x has `debug`
    (asserts and overflow checks) and `sanitize_overflow`; newer versions also `enable_assertions`.
    Passed as launch keywords, which Triton rejects when it does not know them."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions

        fields = set(CUDAOptions.__dataclass_fields__)
    except Exception:  # noqa: BLE001 - no CUDA backend (a CPU-only Triton, or none): the kernel never launches
        return {"debug": True}
    if "enable_assertions" in fields:
        return {"enable_assertions": True, **({"sanitize_overflow": False} if "sanitize_overflow" in fields else {})}
    return {"debug": True, **({"sanitize_overflow": False} if "sanitize_overflow" in fields else {})}


def libdevice_import() -> str:
    """The import line for libdevice (compiled GPU kernels only)."""
    return "from triton.language.extra import libdevice"


def real_tensors() -> Any:
    """A context in which torch makes real tensors: compilers run under AOTAutograd's FakeTensorMode,
    and autotuning needs real memory to time kernels on."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def die_with_parent() -> None:
    """For a child process (`preexec_fn`): Linux sends it SIGKILL when its parent dies, so a killed test
    run does not leave its background sweeps (each its own session, out of reach of the terminal's
    signals) computing for the rest of their 45 minutes. Elsewhere nothing happens."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

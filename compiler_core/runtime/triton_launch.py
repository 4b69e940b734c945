"""Launching our Triton kernels on the GPU without Triton's per-launch Python: after a kernel's first launch
through `fn[grid](...)`, later launches with the same specialization call its compiled binary directly.

    k = FastKernel(jit_fn)
    k[(blocks,)](x, out, n, XBLOCK=1024, num_warps=4)   # first: Triton's JIT path, which compiles
    k[(blocks,)](x, out, n, XBLOCK=1024, num_warps=4)   # then: the binary's launcher, a few µs less

Why: Triton's `JITFunction.run` binds the arguments, recomputes the specialization key and looks the
kernel up on every launch: about 20 µs of Python each on the H200's host. A training step of ours
launches some 30 kernels, so a `gpt_block` step spent more time launching than its kernels ran
(ours 3.03 ms a step against 1.52 ms of kernel time). Inductor launches through the binary too.

What keeps this correct: Triton compiles one binary per *specialization* — each tensor's dtype and
whether its address is 16-byte aligned, each integer's value class (1, divisible by 16) — so the binary
of one launch is reused only for a launch with the same key, computed here from the same properties
(integers by their width and class, the launch's meta-parameters by value, which is stricter). Any other
launch goes through Triton's JIT path, as does every launch while a launch hook is set (a profiler) and
every launch on a Triton older than 3.3, whose binaries take the arguments in another order.

The leanest path, where torch has its C++ launcher for Triton binaries (`torch._C._StaticCudaLauncher`,
which Inductor launches through): a launch site whose arguments are all tensors, all 16-byte aligned,
calls the binary's CUDA function straight from C++ with the tensors' addresses. Triton's own launcher
object runs some Python per launch (scratch allocation, hooks, argument unpacking); this path checks
each tensor's dtype and alignment against the binary's (about 0.2 µs a tensor) and does nothing else.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

import torch

from compiler_core.runtime import eager_libdevice

# Triton 3.3 and later pass every parameter, constexprs included, to the binary's launcher in the
# kernel's parameter order (earlier versions left the constexprs out).
MIN_TRITON = (3, 3)


def fast_launch_supported() -> bool:
    try:
        import triton
    except ImportError:
        return False
    parts = []
    for part in triton.__version__.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts) >= MIN_TRITON


@functools.lru_cache(maxsize=None)
def eager_libdevice_path() -> Optional[str]:
    """The libdevice eager's kernels were built with, where its CUDA toolkit is installed (None: Triton's
    copy): runtime/eager_libdevice.py."""
    return eager_libdevice.toolkit_libdevice(torch.version.cuda) if torch.cuda.is_available() else None


def compile_options() -> dict[str, Any]:
    """The compile options every launch and warm-up of our GPU kernels adds (Triton keys binaries by them)."""
    return eager_libdevice.compile_options(eager_libdevice_path())


class JitKernel:
    """A Triton JITFunction launched through Triton's JIT path each time (FCOMPILE_TRITON_LAUNCH=jit), with
    the compile options our kernels take."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.options = compile_options()

    def __getitem__(self, grid: Any) -> Any:
        launch = self.fn[grid]
        return functools.partial(launch, **self.options) if self.options else launch

    def warmup(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn.warmup(*args, **kwargs, **self.options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fn, name)


MAX_GRIDS = 64  # grid launch objects kept per kernel (each a few attributes; the binaries are the kernel's)


class FastKernel:
    """Stands in for a Triton JITFunction in a host program's `k` namespace; `k.name[grid](...)`."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.arg_names: tuple[str, ...] = tuple(fn.arg_names)
        self.options = compile_options()  # given to Triton's JIT path, which compiles
        self._by_grid: dict[Any, GridLaunch] = {}
        # Shared by every grid: a grid over symbolic sizes is new at each size (a decode step's cache grows
        # a row a call), and a binary does not depend on the grid it is launched on.
        self.binaries: dict[tuple, Optional[tuple]] = {}  # specialization key -> (runner, handles, tail)
        self.proven: set[tuple] = set()  # keys whose binary launched once without refusing its arguments
        # meta-parameters -> the all-aligned, all-tensor binary launched from C++ (None: not possible)
        self.direct: dict[tuple, Optional[DirectLaunch]] = {}

    def __getitem__(self, grid: Any) -> "GridLaunch":
        launch = self._by_grid.get(grid)
        if launch is None:
            if len(self._by_grid) >= MAX_GRIDS:  # symbolic grids: one per size seen, forgotten in bulk
                self._by_grid.clear()
            launch = self._by_grid[grid] = GridLaunch(self, tuple(grid))
        return launch

    def warmup(self, *args: Any, **kwargs: Any) -> Any:  # compiles ahead (runtime/parallel_compile.py)
        return self.fn.warmup(*args, **kwargs, **self.options)

    def __getattr__(self, name: str) -> Any:  # everything else (autotuning, source) is the JITFunction's
        return getattr(self.fn, name)


class GridLaunch:
    def __init__(self, kernel: FastKernel, grid: tuple):
        self.kernel = kernel
        self.grid = grid
        self.dims = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self._binaries, self._proven, self._direct = kernel.binaries, kernel.proven, kernel.direct

    def __call__(self, *args: Any, **meta: Any) -> Any:
        direct = self._direct.get(tuple(meta.items()))
        if direct is not None and direct.launch(self.dims, args):
            return None
        key = specialization_key(args, meta)
        binary = self._binaries.get(key)
        if binary is None or _hooks_set():
            compiled = self.kernel.fn[self.grid](*args, **meta, **self.kernel.options)
            if key not in self._binaries and compiled is not None:
                found = self._binary_of(compiled, args, meta)
                if found is not None:
                    self._binaries[key] = found
                    meta_key = tuple(meta.items())
                    if meta_key not in self._direct:
                        self._direct[meta_key] = DirectLaunch.of(compiled, args, found[3], self.kernel.fn)
            return compiled
        runner, function, metadata, tail = binary
        stream = _stream()
        if key in self._proven:
            runner(*self.dims, stream, function, metadata, None, None, None, *args, *(meta[n] for n in tail))
            return None
        try:  # the first launch through a binary: a launcher that takes its arguments otherwise refuses them
            runner(*self.dims, stream, function, metadata, None, None, None, *args, *(meta[n] for n in tail))
        except (TypeError, ValueError, SystemError):
            self._binaries[key] = None  # never again through this binary; this launch through the JIT
            return self.kernel.fn[self.grid](*args, **meta, **self.kernel.options)
        self._proven.add(key)
        return None

    def _binary_of(self, compiled: Any, args: tuple, meta: dict) -> Optional[tuple]:
        """The compiled kernel's launcher and handles, and the names of the parameters given by keyword
        in launch order; None where this launch cannot be repeated through them."""
        names = self.kernel.arg_names
        tail = names[len(args):]
        if len(args) > len(names) or any(n not in meta for n in tail):
            return None  # a parameter left to its default: Triton fills it in, we would not
        try:
            runner, function = compiled.run, compiled.function
            metadata = getattr(compiled, "packed_metadata", None) or compiled.metadata
        except AttributeError:
            return None
        if runner is None or function is None:
            return None
        return runner, function, metadata, tail


class DirectLaunch:
    """One binary launched through torch's C++ launcher: for the launches whose tensors have the dtypes of
    the launch it was made from, sit on its device and are all 16-byte aligned (the specialization Triton
    compiled it for), which is every launch of a host program whose inputs are aligned."""

    def __init__(self, launcher: Any, function: int, num_warps: int, shared: int, dtypes: tuple,
                 device: int, scratch: int):
        self.launcher = launcher  # torch._C._StaticCudaLauncher._launch_kernel
        self.function = function  # the CUfunction Triton loaded: its shared-memory limit is already set
        self.num_warps = num_warps
        self.shared = shared
        self.dtypes = dtypes
        self.device = device
        self.scratch = (None,) * scratch  # Triton's trailing scratch pointers, unused at size 0
        self.arg_types = "O" * (len(dtypes) + scratch)  # "O": a pointer, given here as an int
        self.stream_of = _raw_stream_function()
        self.proven = False  # set by the first launch that the launcher accepted

    @staticmethod
    def of(compiled: Any, args: tuple, tail: tuple, fn: Any) -> Optional["DirectLaunch"]:
        """The direct launch of `compiled` (just launched with `args`), or None where it cannot be one:
        no C++ launcher in this torch, a non-tensor argument, a misaligned tensor, a parameter given by
        keyword that is not a constexpr, or a binary that needs scratch memory or several CTAs."""
        launcher = getattr(getattr(torch._C, "_StaticCudaLauncher", None), "_launch_kernel", None)
        if os.environ.get("FCOMPILE_TRITON_LAUNCH", "direct") != "direct":  # "binary": Triton's launcher only
            return None
        if launcher is None or _raw_stream_function() is None or not args:
            return None
        if not all(isinstance(a, torch.Tensor) and a.data_ptr() % 16 == 0 for a in args):
            return None
        devices = {a.get_device() for a in args}
        constexpr = {p.name for p in getattr(fn, "params", ()) if getattr(p, "is_constexpr", False)}
        if len(devices) != 1 or any(n not in constexpr for n in tail):
            return None
        metadata = getattr(compiled, "metadata", None)
        function = getattr(compiled, "function", None)
        if metadata is None or not isinstance(function, int):
            return None
        if getattr(metadata, "num_ctas", 1) != 1 or getattr(metadata, "launch_cooperative_grid", False) \
                or getattr(metadata, "launch_pdl", False):
            return None
        scratch = 0
        for name in ("global_scratch_size", "profile_scratch_size"):  # Triton 3.3+ and 3.5+ add one each
            if hasattr(metadata, name):
                if getattr(metadata, name):
                    return None
                scratch += 1
        return DirectLaunch(launcher, function, metadata.num_warps, metadata.shared,
                            tuple(a.dtype for a in args), devices.pop(), scratch)

    def launch(self, dims: tuple, args: tuple) -> bool:
        """Launches and returns True, or returns False (nothing launched) where this binary does not fit
        these arguments or a launch hook is set; the caller then takes the general path."""
        if len(args) != len(self.dtypes) or _hooks_set():
            return False
        addresses = []
        bits = 0
        for a, dtype in zip(args, self.dtypes):
            if a.dtype is not dtype:
                return False
            address = a.data_ptr()
            bits |= address
            addresses.append(address)
        # The first tensor's device stands for all: a host program's tensors all live on its one device.
        if bits & 15 or args[0].get_device() != self.device:
            return False
        launch_args = (self.function, dims[0], dims[1], dims[2], self.num_warps, self.shared, self.arg_types,
                       (*addresses, *self.scratch), self.stream_of(self.device))
        if self.proven:
            self.launcher(*launch_args)
            return True
        try:  # the first launch: a torch whose launcher takes its arguments otherwise refuses them unlaunched
            self.launcher(*launch_args)
        except TypeError:
            self.dtypes = ()  # never again through this path
            return False
        self.proven = True
        return True


def _raw_stream_function() -> Any:
    """torch's current raw CUDA stream for a device index (the stream Triton's JIT path launches on)."""
    return getattr(torch._C, "_cuda_getCurrentRawStream", None)


def specialization_key(args: tuple, meta: dict) -> tuple:
    """What Triton specializes a binary on, per argument: a tensor's dtype and 16-byte alignment (and its
    device, whose context the binary is loaded in); an int's class (`int_class`); any other argument's
    value; and the meta-parameters (block sizes, warps) by value. Never coarser than Triton's own key, so
    the binary found under it is the one Triton's JIT would pick for these arguments."""
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, a.data_ptr() % 16 == 0, a.get_device()))  # a binary is loaded per device
        elif type(a) is int:
            key.append(int_class(a))
        else:
            key.append(a)
    key.extend(meta.items())
    return tuple(key)


def int_class(value: int) -> tuple:
    """How Triton specializes an int argument (a symbolic size): its width (i32, u64 or i64 by range),
    whether it is 1 (compiled in as a constant) and whether 16 divides it (a divisibility hint); the
    value itself is passed at launch. Keyed by value, a decode step whose cache grows by a row each call
    missed every binary and took Triton's JIT path for each launch with a size in it (Llama with a
    dynamic cache on an H100: 25 of 50 launches a step, 2026-12-06)."""
    width = "i32" if -(1 << 31) <= value < (1 << 31) else "u64" if (1 << 63) <= value < (1 << 64) else "i64"
    return ("int", width, value == 1, value % 16 == 0)


def _hooks_set() -> bool:
    """A launch hook (Triton's profiler, proton) sees only launches through the JIT path. Triton 3.4 and
    later keep hooks in chains that are never None, only empty."""
    runtime = _triton_knobs()
    if runtime is not None:
        return _is_hook(runtime.launch_enter_hook) or _is_hook(runtime.launch_exit_hook)
    from triton.compiler import CompiledKernel

    return _is_hook(getattr(CompiledKernel, "launch_enter_hook", None)) \
        or _is_hook(getattr(CompiledKernel, "launch_exit_hook", None))


def _is_hook(hook: Any) -> bool:
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)  # a HookChain: set when it holds a hook
    return bool(calls) if calls is not None else True


def _triton_knobs() -> Any:
    if "knobs" not in _RESOLVED:
        try:
            from triton import knobs

            _RESOLVED["knobs"] = knobs.runtime
        except ImportError:
            _RESOLVED["knobs"] = None
    return _RESOLVED["knobs"]


def _stream() -> Any:
    """The current device's current stream, asked of Triton's driver as its JIT path asks it."""
    driver = _RESOLVED.get("driver")
    if driver is None:
        from triton.runtime.driver import driver as triton_driver

        driver = _RESOLVED["driver"] = triton_driver.active
    return driver.get_current_stream(driver.get_current_device())


_RESOLVED: dict[str, Any] = {}

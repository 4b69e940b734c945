"""Everything the explorer shows about one compiled program, gathered once, rendered by the views.

    exp = explore_function(lambda x: torch.softmax(x, -1), (torch.randn(64, 128),))
    exp.session.stats["kernel_count"], exp.timing.speedup, exp.traffic["fused_bytes"]

Gathering runs the program (compile; time eager against compiled, interleaved; time our kernels one by
one and profile eager's ops; measure the device's ceilings; optionally compile again for the other
backend just to show its kernels); the views only read this object.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

import compiler_core as cc
from compiler_core.analysis.traffic import bytes_moved
from compiler_core.api import Options, training_loss
from compiler_core.bench.timing import peak_cpu_bytes, peak_cuda_bytes
from compiler_core.codegen.artifacts import KernelSource
from compiler_core.compare.inductor import private_copy
from compiler_core.session import CompileSession
from explorer.ceilings import Ceilings, device_ceilings
from explorer.comparing import InductorProgram, capture_inductor, missing_compiler, with_kernel_times
from explorer.measuring import TimingResult, time_programs
from explorer.profiling import OursProfile, StepCost, host_namespace, profile_eager, profile_ours


@dataclass(frozen=True)
class Exploration:
    title: str
    session: CompileSession = field(compare=False)
    backend: str  # the backend the session's kernels were generated for ("cpp" or "triton")
    timing: Optional[TimingResult]  # eager, ours (and a comparison) measured interleaved; None: not timed
    traffic: dict  # compiler_core.analysis.traffic.bytes_moved(session)
    kernels: dict[str, tuple[KernelSource, ...]] = field(compare=False)  # backend -> kernels
    kernel_notes: dict[str, str] = field(default_factory=dict)  # backend -> why it has no kernels
    train: bool = False
    measured: Optional["Measured"] = None  # per-kernel costs and ceilings (None: not timed)
    inductor: Optional[InductorProgram] = None  # Inductor's program for the same code (None: not compared)
    program: Optional["Program"] = field(default=None, compare=False)  # what to compile again (What-if tab)


@dataclass(frozen=True)
class Program:
    """The user's program as the explorer compiled it, kept so the What-if tab can compile it again
    with other options and time it beside this one."""

    fn: Callable  # the user's function or module (the cell, for %%fcompile)
    args: tuple  # the inputs it was explored on
    options: Options  # compiler_core's options of this compilation
    run: Callable  # this compilation as timed: the compiled function, or a training step through it
    train: bool = False


@dataclass(frozen=True)
class Measured:
    """What the roofline, the memory view and the timing breakdown read besides the artifacts."""

    device: str  # "cpu" or "cuda"
    ours: OursProfile  # our kernels and extern calls, one by one
    eager_ops: tuple[StepCost, ...]  # eager PyTorch's ATen ops, from torch.profiler
    ceilings: Optional[Ceilings]  # measured copy bandwidth and matmul throughput of the device
    peak_bytes: Optional[int] = None  # allocated above the start during one call (measured_peak_bytes)
    notes: tuple[str, ...] = ()  # what could not be measured, and why


def explore_function(fn: Callable, args: Sequence[Any], *, backend: str = "auto", mode: str = "default",
                     train: bool = False, compare: Any = None, kernels_for: Optional[Sequence[str]] = None,
                     repeats: int = 10, title: Optional[str] = None, check: bool = False) -> Exploration:
    """Compile `fn` like `compiler_core.explain` does, time it against eager, and gather the views' data.

    `check`: compile in the check mode (every kernel compared with eager after its launch); the
    Kernels view then marks each kernel with its verdict.
    `compare`: None, "inductor" (torch.compile with Inductor, timed beside ours) or any callable.
    `kernels_for`: backends whose kernel sources to show; default both on CPU, Triton on CUDA.
    """
    args = tuple(args)
    if train:  # the same inputs explain(train=True) uses: leaves that require grad
        args = tuple(a.detach().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
                     for a in args)
    options = Options(backend, mode, debug="check" if check else "")
    compiled = cc.compile(fn, backend=backend, mode=mode, check=check)
    run_compiled = training_step(compiled) if train else compiled
    run_compiled(*args)  # compiles; `compiled.session` now holds every stage's artifact
    session = compiled.session
    eager = training_step(fn) if train else fn
    timing, measured = None, None
    others, inductor = {}, None
    if compare == "inductor":
        inductor, run_inductor = compare_with_inductor(fn, args, mode, train, repeats)
        if run_inductor is not None:
            others["inductor"] = run_inductor
    elif compare is not None:
        name, other = _comparison(fn, compare, mode)
        others[name] = training_step(other) if train else other
    if repeats:
        timing, measured = measure_program(eager, run_compiled, args, session, repeats, others)
    return gather(session, title or getattr(fn, "__name__", type(fn).__name__), timing,
                  other_backends_of(fn, args, session, kernels_for, mode), train=train, measured=measured,
                  inductor=inductor, program=Program(fn, args, options, run_compiled, train))


def compare_with_inductor(fn: Callable, args: Sequence[Any], mode: str = "default", train: bool = False,
                          repeats: int = 5) -> tuple[InductorProgram, Optional[Callable]]:
    """Inductor's program for fn (its kernels' source, and their times where the profiler sees them),
    and the compiled callable to time beside ours (None when Inductor cannot run here)."""
    why_not = missing_compiler(args)
    if why_not:
        return InductorProgram((), (), (), note=why_not), None
    from compiler_core.compare.inductor import compile_with_inductor

    compiled = compile_with_inductor(fn, mode=mode)
    run = training_step(compiled) if train else compiled
    program = capture_inductor(run, args)  # the first call compiles
    if not program.modules:
        return program, None
    if repeats:
        program = with_kernel_times(program, run, args, repeats=max(3, min(repeats, 10)))
    return program, run


def gather(session: CompileSession, title: str, timing: Optional[TimingResult],
           other: tuple[dict, dict] = ({}, {}), train: bool = False,
           measured: Optional[Measured] = None, inductor: Optional[InductorProgram] = None,
           program: Optional[Program] = None) -> Exploration:
    """An Exploration from a session already made (the %%fcompile magic compiles on its own)."""
    main = session_backend(session)
    kernels = {main: tuple(session.kernels), **other[0]}
    notes = dict(other[1])
    if not session.kernels:
        notes[main] = _why_no_kernels(session)
    return Exploration(title=title, session=session, backend=main, timing=timing, traffic=bytes_moved(session),
                       kernels=kernels, kernel_notes=notes, train=train, measured=measured, inductor=inductor,
                       program=program)


def measure_program(eager: Callable, compiled: Callable, args: Sequence[Any], session: CompileSession,
                    repeats: int, others: Optional[dict[str, Callable]] = None) -> tuple[TimingResult, Measured]:
    """Time eager, ours and `others` interleaved, then our kernels one by one, eager's ops under
    torch.profiler, the peak memory of one call and the device's ceilings."""
    device = "cuda" if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args) else "cpu"
    programs = {"eager": lambda: eager(*args), "ours": lambda: compiled(*args)}
    threads: dict[str, Optional[int]] = {"eager": torch.get_num_threads(), "ours": ours_threads(session)}
    for name, fn in (others or {}).items():
        programs[name] = (lambda f: lambda: f(*args))(fn)
        threads[name] = torch.get_num_threads() if device == "cpu" else None
    if device == "cuda":
        threads = {}  # GPU kernels do not run on the host's intra-op threads
    timing = time_programs(programs, device, repeats, threads)
    notes = []
    steps = max(3, min(repeats, 10))
    try:
        ours = profile_ours(programs["ours"], session, device, repeats=steps)
    except Exception as exc:  # noqa: BLE001 - a view's extra must not sink the measurement
        ours = OursProfile((), None, f"per-kernel times failed: {type(exc).__name__}: {exc}")
    try:
        eager_ops = profile_eager(programs["eager"], session, device, repeats=3)
    except Exception as exc:  # noqa: BLE001
        eager_ops = ()
        notes.append(f"torch.profiler failed on eager: {type(exc).__name__}: {exc}")
    try:
        ceilings = device_ceilings(device)
    except Exception as exc:  # noqa: BLE001
        ceilings = None
        notes.append(f"measuring the device's ceilings failed: {type(exc).__name__}: {exc}")
    return timing, Measured(device=device, ours=ours, eager_ops=eager_ops, ceilings=ceilings,
                            peak_bytes=measured_peak_bytes(programs["ours"], device),
                            notes=tuple(notes))


def measured_peak_bytes(fn: Callable[[], object], device: str) -> Optional[int]:
    """Bytes allocated above the starting level at the peak of one call, outputs included: from the CUDA
    allocator, or on the CPU from PyTorch's CPU allocator as torch.profiler reports it (None where this
    torch's profiler does not say). The bench measures eager, Inductor and ours the same way."""
    return peak_cuda_bytes(fn) if device == "cuda" else peak_cpu_bytes(fn)


def ours_threads(session: CompileSession) -> Optional[int]:
    """The thread count our C++ kernels were built to use (NTHREADS of the host programs)."""
    for record in session.all_records():
        if record.artifact is not None and record.artifact.backend == "cpp":
            scope = host_namespace(record.artifact.call)
            if scope is not None and "NTHREADS" in scope:
                return int(scope["NTHREADS"])
    return torch.get_num_threads() if session.kernels else None


def other_backends_of(fn: Callable, args: Sequence[Any], session: CompileSession,
                      kernels_for: Optional[Sequence[str]], mode: str = "default") -> tuple[dict, dict]:
    """({backend: kernels}, {backend: note}) for the backends in kernels_for other than the session's."""
    main = session_backend(session)
    wanted = kernels_for if kernels_for is not None else default_kernels_for(args)
    kernels: dict[str, tuple[KernelSource, ...]] = {}
    notes: dict[str, str] = {}
    for backend in wanted:
        if backend == main:
            continue
        try:
            # A private copy of the code: compiling it must not reset the cache of the compiled original.
            other = cc.explain(private_copy(fn), *args, backend=backend, mode=mode)
        except Exception as exc:  # noqa: BLE001 - an optional extra view must not sink the main one
            notes[backend] = f"compiling for {backend} failed: {type(exc).__name__}: {_first_line(exc)}"
            continue
        kernels[backend] = tuple(other.kernels)
        if not other.kernels:
            notes[backend] = _why_no_kernels(other)
    return kernels, notes


def default_kernels_for(args: Sequence[Any]) -> tuple[str, ...]:
    """Both backends on CPU (Triton runs in its interpreter there, where it is installed: Binder has
    none); Triton alone for CUDA inputs."""
    on_cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    if on_cuda:
        return ("triton",)
    return ("cpp", "triton") if importlib.util.find_spec("triton") is not None else ("cpp",)


def session_backend(session: CompileSession) -> str:
    for kernel in session.kernels:
        return kernel.backend
    for record in session.all_records():
        if record.artifact is not None:
            return record.artifact.backend
        if record.wrapper is not None:
            return record.wrapper.backend
    if session.backend != "auto":
        return session.backend
    on_cuda = any(i.device.startswith("cuda") for g in session.graphs for i in g.captured.inputs)
    return "triton" if on_cuda else "cpp"


def training_step(f: Callable) -> Callable:
    """f followed by backward of the loss explain(train=True) uses: sum of mean squares of the outputs."""
    def step(*args: Any) -> Any:
        out = f(*args)
        loss = training_loss(out)
        if loss is not None:
            loss.backward()
        return out

    return step


def _comparison(fn: Callable, compare: Any, mode: str) -> tuple[str, Callable]:
    if compare == "inductor":
        from compiler_core.compare.inductor import compile_with_inductor

        return "inductor", compile_with_inductor(fn, mode=mode)
    if callable(compare):
        name = getattr(compare, "__name__", "compare")
        return ("compare" if name in ("eager", "ours") else name), compare
    raise ValueError(f"compare={compare!r}: use None, 'inductor' or a callable to time beside ours")


def _why_no_kernels(session: CompileSession) -> str:
    reasons = [r.fallback_reason for r in session.all_records() if r.fallback_reason]
    if reasons:
        return "no kernels: the program ran in eager PyTorch: " + "; ".join(reasons)
    if not session.graphs:
        return "no kernels: nothing was captured (the function ran no tensor operations Dynamo could trace)"
    return "no kernels: every operation is an extern call or a view"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


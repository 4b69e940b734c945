"""Inductor's generated program for the same code, read from the output code it logs: for the Compare view.

    program = capture_inductor(run, args)    # run: torch.compile(fn) (through compiler_core.compare)
    program.kernels[0].name, program.kernels[0].source, program.extern_calls

The output code is the Python module Inductor writes per graph: kernels defined as
`name = async_compile.cpp_pybinding(..., r'''<C++>''')` or `async_compile.triton('name', '''<Triton>''')`,
and a `call()` that allocates, calls kernels and extern kernels, each call preceded by a comment naming
its source nodes. Parsing that text is all we rely on; what we cannot find we say.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

_KERNEL = re.compile(r"^(\w+) = async_compile\.(\w+)\((.*?)'''(.*?)'''", re.M | re.S)
_SOURCE_NODES = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes:\s*\[([^\]]*)\]"
                           r"(?:, Original ATen:\s*\[([^\]]*)\])?")
_EXTERN = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.[\w.]+)\(")


@dataclass(frozen=True)
class InductorKernel:
    name: str
    backend: str  # "cpp" or "triton" (or Inductor's word for it)
    source: str
    source_nodes: str = ""  # Inductor's comment at the call: the FX nodes it computes
    aten: str = ""  # the ATen ops those nodes were
    seconds: Optional[float] = None  # median per call, where torch.profiler sees the kernel


@dataclass(frozen=True)
class InductorProgram:
    kernels: tuple[InductorKernel, ...]
    extern_calls: tuple[str, ...]  # extern kernels (mm, addmm...) and ATen ops called from the wrapper
    modules: tuple[str, ...]  # the whole output code, one module per graph (forward, backward)
    note: str = ""  # why something is missing (no C++ compiler, Inductor failed, times not visible)


def missing_compiler(args: Sequence[Any]) -> str:
    """Why Inductor cannot run here, or "": on CPU it builds its kernels with a C++ compiler."""
    on_cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    if on_cuda:
        return ""
    compilers = [os.environ.get("CXX", ""), "g++", "c++", "clang++"]
    if any(c and shutil.which(c) for c in compilers):
        return ""
    return ("Inductor was not run: on CPU it compiles C++ kernels and no C++ compiler was found "
            "(install g++, or set CXX).")


def capture_inductor(run: Callable, args: Sequence[Any]) -> InductorProgram:
    """Call `run(*args)` once (it compiles) while collecting Inductor's output code, then parse it."""
    from compiler_core.compare.inductor import inductor_output_code

    try:
        with inductor_output_code() as modules:
            run(*args)
    except Exception as exc:  # noqa: BLE001 - the comparison is optional; say why it is missing
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return InductorProgram((), (), (), note=f"Inductor failed: {type(exc).__name__}: {first}")
    program = parse_output_code(modules)
    if not modules:
        return InductorProgram((), (), (), note="Inductor ran, but its output code was not logged "
                               "(this torch version names the output_code log differently).")
    return program


def parse_output_code(modules: Sequence[str]) -> InductorProgram:
    kernels, externs = [], []
    for module in modules:
        defined = {m.group(1): m for m in _KERNEL.finditer(module)}
        calls = _call_sites(module)
        for name, match in defined.items():
            nodes, aten = calls.get(name, ("", ""))
            kind = match.group(2)
            backend = "cpp" if "cpp" in kind else "triton" if "triton" in kind else kind
            kernels.append(InductorKernel(name=name, backend=backend, source=match.group(4).strip("\n"),
                                          source_nodes=nodes, aten=aten))
        body = module.split("def call(", 1)[1] if "def call(" in module else ""
        externs += [m.group(1) for m in _EXTERN.finditer(body)]
    return InductorProgram(tuple(kernels), tuple(externs), tuple(modules))


def _call_sites(module: str) -> dict[str, tuple[str, str]]:
    """Kernel name -> (source nodes, ATen ops) from the comment above its call in the wrapper."""
    found: dict[str, tuple[str, str]] = {}
    comment = ("", "")
    for line in module.splitlines():
        match = _SOURCE_NODES.search(line)
        if match:
            comment = (match.group(1).strip(), (match.group(2) or "").strip())
            continue
        call = re.match(r"\s*([\w.]+)\(", line)
        if call:  # a comment describes the one call below it
            name = call.group(1).removesuffix(".run")
            if "." not in name and name not in found and comment[0]:
                found[name] = comment
            comment = ("", "")
    return found


def with_kernel_times(program: InductorProgram, run: Callable, args: Sequence[Any],
                      repeats: int = 5) -> InductorProgram:
    """Median time per kernel from torch.profiler, for the kernels it shows by name (Triton kernels on
    CUDA); Inductor's C++ kernels carry no profiler record, so on CPU only the totals are timed."""
    if not program.kernels:
        return program
    from torch.profiler import ProfilerActivity, profile

    on_cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    try:
        with profile(activities=activities) as prof:
            for _ in range(repeats):
                run(*args)
            if on_cuda:
                torch.cuda.synchronize()
        averages = {e.key: e for e in prof.key_averages()}
    except Exception as exc:  # noqa: BLE001
        return _with_note(program, f"torch.profiler failed on Inductor: {type(exc).__name__}: {exc}")
    kernels, seen = [], 0
    for kernel in program.kernels:
        event = averages.get(kernel.name)
        seconds = None
        if event is not None and event.count:
            total_us = getattr(event, "device_time_total", 0) if on_cuda else event.cpu_time_total
            seconds = total_us / event.count / 1e6
            seen += 1
        kernels.append(InductorKernel(kernel.name, kernel.backend, kernel.source, kernel.source_nodes, kernel.aten,
                                      seconds))
    program = InductorProgram(tuple(kernels), program.extern_calls, program.modules, program.note)
    if not seen:
        program = _with_note(program, "Inductor's kernels are not visible to torch.profiler here (its C++ kernels "
                                      "carry no profiler record): only its whole call is timed.")
    return program


def _with_note(program: InductorProgram, note: str) -> InductorProgram:
    joined = "; ".join(n for n in (program.note, note) if n)
    return InductorProgram(program.kernels, program.extern_calls, program.modules, joined)

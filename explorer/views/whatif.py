"""What-if view: compile the user's program again with other options and compare with this compilation.

    result = what_if(view.exploration, fusion=False)          # compiles, checks against eager, times
    for what, before, after, change in result.rows(): print(what, before, after, change)
    result.matches_eager                                      # the recompiled outputs agree with eager

The toggles (fusion, backend, mode, dynamic, activation_budget) apply only on the Recompile button
(explorer/view.py): compiling takes seconds, a slider drag must not start one per step. A combination
that cannot work (the C++ backend for CUDA tensors, CUDA graphs on a CPU, an activation budget for a
program that does not train) is refused with one line saying why, before anything is compiled.
The static HTML cannot compile: it says so and shows the current options and figures.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_leaves

import compiler_core as cc
from compiler_core.analysis.traffic import fused_graph_bytes
from compiler_core.api import MODES, Options
from compiler_core.compare.inductor import private_copy
from compiler_core.runtime.check import compare
from compiler_core.session import CompileSession
from explorer.exploration import Exploration, Program, measured_peak_bytes, session_backend, training_step
from explorer.measuring import TimingResult, time_programs
from explorer.render.html import esc, message, table

TOGGLES = ("fusion", "backend", "mode", "dynamic", "activation_budget")


class WhatIfRefused(Exception):
    """A combination of options that cannot compile this program; the message is one line, for users."""


@dataclass(frozen=True)
class Figures:
    """What one compilation of the program costs."""

    kernels: int
    extern_calls: int
    fallback_graphs: int  # graphs that ran in eager PyTorch
    bytes_moved: int  # planned: bytes our kernels and extern calls read and write, every graph (backward too)
    planned_peak: int  # the memory plan's peak bytes, largest over the graphs
    measured_peak: Optional[int] = None  # allocated above the start during one call (measured_peak_bytes)
    seconds: Optional[float] = None  # median seconds per call (None: not timed)


@dataclass(frozen=True)
class WhatIf:
    before_options: Options
    after_options: Options
    before: Figures
    after: Figures
    session: CompileSession  # the recompiled program's session
    matches_eager: bool  # the recompiled program's outputs (and input gradients, training) match eager's
    max_abs_error: float
    timing: Optional[TimingResult] = None  # eager, "ours" (before) and "what-if" (after), interleaved

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(what, before, after, change) for the options that changed, then every figure."""
        rows = [(f"option {name}", _show(getattr(self.before_options, name)),
                 _show(getattr(self.after_options, name)), "changed")
                for name in TOGGLES if getattr(self.before_options, name) != getattr(self.after_options, name)]
        b, a = self.before, self.after
        for label, x, y, unit in (("kernels", b.kernels, a.kernels, ""),
                                  ("extern calls", b.extern_calls, a.extern_calls, ""),
                                  ("graphs run in eager", b.fallback_graphs, a.fallback_graphs, ""),
                                  ("bytes moved (planned)", b.bytes_moved, a.bytes_moved, "B"),
                                  ("planned peak memory (largest graph)", b.planned_peak, a.planned_peak, "B"),
                                  ("measured peak memory (one call)", b.measured_peak, a.measured_peak, "B"),
                                  ("time per call (median)", b.seconds, a.seconds, "s")):
            if x is not None or y is not None:
                rows.append((label, _amount(x, unit), _amount(y, unit), _change(x, y, unit)))
        rows.append(("outputs match eager", "yes", "yes" if self.matches_eager else
                     f"NO (max abs error {self.max_abs_error:.3g})", ""))
        return rows


def available_modes(device: str) -> tuple[str, ...]:
    """reduce-overhead replays CUDA graphs and max-autotune tunes GPU launch configs: GPU only."""
    return MODES if device == "cuda" else ("default",)


def available_backends(device: str) -> tuple[str, ...]:
    triton = importlib.util.find_spec("triton") is not None
    if device == "cuda":
        return ("triton",) if triton else ()
    return ("cpp", "triton") if triton else ("cpp",)


def program_device(program: Program) -> str:
    return "cuda" if any(isinstance(a, torch.Tensor) and a.is_cuda for a in tree_leaves(program.args)) else "cpu"


def current_options(exp: Exploration) -> Options:
    """This compilation's options, its backend resolved ("auto" -> the backend its kernels use)."""
    base = exp.program.options if exp.program is not None else Options(exp.session.backend, exp.session.mode)
    return dataclasses.replace(base, backend=session_backend(exp.session))


def refusal(exp: Exploration, options: Options) -> str:
    """Why `options` cannot compile this program ("" when they can): one line."""
    if exp.program is None:
        return "this view was not made from a program it can compile again (use explore() or %%fcompile)"
    device = program_device(exp.program)
    where = "CUDA" if device == "cuda" else "the CPU"
    if options.backend not in available_backends(device):
        if options.backend == "cpp":
            return "backend cpp generates C++ for the CPU, but this program's tensors are on CUDA: pick triton"
        if options.backend == "triton":
            return "Triton is not installed here: pick cpp"
        return f"backend {options.backend!r}: pick one of {', '.join(available_backends(device))}"
    if options.mode not in available_modes(device):
        return (f"mode {options.mode} needs a GPU (CUDA graphs, GPU launch configs), but this program runs on "
                f"{where}: keep mode default")
    if options.activation_budget != 1.0 and not exp.program.train:
        return ("activation_budget changes what a training step saves for the backward, but this program was "
                "explored without training: explore it with train=True (or %%fcompile --train) to try it")
    return ""


def what_if(exp: Exploration, repeats: int = 5, **changes: Any) -> WhatIf:
    """Compile the explored program again with `changes` (fusion, backend, mode, dynamic,
    activation_budget), check its outputs against eager PyTorch and time it beside this compilation.
    Raises WhatIfRefused, with one line saying why, for a combination that cannot work here."""
    unknown = set(changes) - set(TOGGLES)
    if unknown:
        raise WhatIfRefused(f"unknown option {', '.join(sorted(unknown))}: the toggles are {', '.join(TOGGLES)}")
    before = current_options(exp)
    try:
        after = dataclasses.replace(before, **changes)  # Options checks each value
    except cc.CompileError as exc:
        raise WhatIfRefused(str(exc)) from None
    why = refusal(exp, after)
    if why:
        raise WhatIfRefused(why)
    program = exp.program
    try:
        compiled = cc.compile(private_copy(program.fn), backend=after.backend, mode=after.mode,
                              dynamic=after.dynamic, activation_budget=after.activation_budget, fusion=after.fusion)
        run = training_step(compiled) if program.train else compiled
        max_error, ok = _check_against_eager(program, run)
    except Exception as exc:  # noqa: BLE001 - said in one line in the tab, never a traceback
        raise WhatIfRefused(f"recompiling failed: {type(exc).__name__}: {_first_line(exc)}") from None
    session = compiled.session
    timing, device = None, program_device(program)
    if repeats:
        eager = training_step(program.fn) if program.train else program.fn
        args = program.args
        timing = time_programs({"eager": lambda: eager(*args), "ours": lambda: program.run(*args),
                                "what-if": lambda: run(*args)}, device, repeats, recheck=False)

    def figures(s: CompileSession, name: str, fn: Callable) -> Figures:
        peak = measured_peak_bytes(lambda: fn(*program.args), device)
        return _figures(s, peak, timing.median(name) if timing is not None else None)

    return WhatIf(before, after, figures(exp.session, "ours", program.run), figures(session, "what-if", run),
                  session, ok, max_error, timing)


def _figures(session: CompileSession, measured_peak: Optional[int], seconds: Optional[float]) -> Figures:
    compiled = [r for r in session.all_records() if not r.fell_back and r.loops is not None and r.schedule is not None]
    stats = session.stats
    return Figures(kernels=stats["kernel_count"], extern_calls=stats["extern_calls"],
                   fallback_graphs=stats["fallback_graphs"],
                   bytes_moved=sum(fused_graph_bytes(r.loops, r.schedule) for r in compiled),
                   planned_peak=max((r.memory.peak_bytes_planned for r in compiled if r.memory is not None), default=0),
                   measured_peak=measured_peak, seconds=seconds)


def _check_against_eager(program: Program, run: Callable) -> tuple[float, bool]:
    """Run eager and the recompiled program on fresh copies of the inputs; compare outputs and, for a
    training step, the inputs' gradients. (max abs error, all within compiler_core's tolerances)."""
    def copies() -> tuple:
        return tuple(a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                     for a in program.args)

    eager_args, our_args = copies(), copies()
    eager = training_step(program.fn) if program.train else program.fn
    expected, actual = tree_leaves(eager(*eager_args)), tree_leaves(run(*our_args))
    if program.train:
        expected += [a.grad for a in eager_args if isinstance(a, torch.Tensor) and a.grad is not None]
        actual += [a.grad for a in our_args if isinstance(a, torch.Tensor) and a.grad is not None]
    pairs = [(a, e) for a, e in zip(actual, expected) if isinstance(e, torch.Tensor)]
    if len(actual) != len(expected) or any(not isinstance(a, torch.Tensor) for a, _ in pairs):
        return float("inf"), False
    results = [compare(a, e) for a, e in pairs]
    return max((err for err, _ in results), default=0.0), all(ok for _, ok in results)


def render(exp: Exploration) -> str:
    """The static tab: the toggles need a live kernel; here are the current options and figures."""
    options = current_options(exp)
    figures = _figures(exp.session, exp.measured.peak_bytes if exp.measured else None,
                       exp.timing.median("ours") if exp.timing else None)
    live = ('<p class="fxe-note">The What-if toggles (fusion, backend, mode, dynamic, activation_budget) compile '
            "your program again, so they need a live Python kernel: run this notebook, or in Python "
            "<code>explorer.views.whatif.what_if(view.exploration, fusion=False)</code>. This compilation:</p>")
    if exp.program is None:
        live += message("This view was not made from a program it can compile again.", "fxe-note")
    rows = [(name, _show(getattr(options, name))) for name in TOGGLES]
    rows += [("kernels", figures.kernels), ("extern calls", figures.extern_calls),
             ("bytes moved (planned)", _amount(figures.bytes_moved, "B")),
             ("planned peak memory (largest graph)", _amount(figures.planned_peak, "B")),
             ("time per call (median)", _amount(figures.seconds, "s"))]
    return live + table(["option or figure", "now"], rows)


def result_html(result: WhatIf) -> str:
    verdict = ('<p class="fxe-good">The recompiled program\'s outputs match eager PyTorch.</p>' if result.matches_eager
               else message(f"The recompiled program's outputs differ from eager PyTorch (max abs error "
                            f"{result.max_abs_error:.3g}): a compiler bug; please report it with these options."))
    noisy = ""
    if result.timing is not None and result.timing.noisy:
        noisy = f'<p class="fxe-note">Timing noisy: {esc("; ".join(result.timing.reasons))}.</p>'
    notes = "".join(f'<p class="fxe-note">{esc(m)}</p>' for m in result.session.messages)
    return verdict + table(["option or figure", "before", "after", "change"], result.rows()) + noisy + notes


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:  # dynamic=None: sizes static until one changes between calls
        return "auto"
    return str(value)


def _amount(value: Optional[float], unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:.3f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} µs"
    if unit == "B":
        return f"{value:,} B"
    return str(value)


def _change(before: Optional[float], after: Optional[float], unit: str) -> str:
    """"same", "+7" for counts, "2.25×" for bytes and seconds."""
    if before is None or after is None:
        return ""
    if before == after:
        return "same"
    if not unit:
        return f"{after - before:+,}"
    return f"{after / before:.2f}×" if before else "new"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else ""

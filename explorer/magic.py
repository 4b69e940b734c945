"""%%fcompile: compile a notebook cell with compiler_core, keep its names, show the explorer below.

    %load_ext explorer

    %%fcompile --backend cpp
    y = torch.softmax(x, -1)      # x: a tensor from an earlier cell -> an input of the compiled graph
    y.sum()                       # y stays defined afterwards; this value is the cell's result

The cell becomes a function (explorer/cell.py), compiled with compiler_core.compile and called once;
it runs in a copy of the notebook namespace and writes back only when it succeeds, so a failing cell
leaves the notebook's names as they were.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import re
import traceback
from typing import Any, Iterator, Optional

import torch
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

import compiler_core as cc
from explorer.cell import FUNCTION_NAME, UNSET, UNSET_NAME, CellError, CellProgram, cell_program
from explorer.exploration import gather, measure_program, other_backends_of
from explorer.view import ExplorerView

_VALUE_OPTIONS = ("--backend", "--mode", "--repeats", "--kernels-for")


class FcompileError(Exception):
    """A cell %%fcompile could not compile or run: one short message, no traceback from the compiler."""

    def _render_traceback_(self) -> list[str]:  # IPython prints this instead of a traceback
        return [f"FcompileError: {self}"]


@magics_class
class FcompileMagics(Magics):
    def __init__(self, shell: Any):
        super().__init__(shell)
        self.last_view: Optional[ExplorerView] = None
        # (code, backend, mode, inputs, carried) -> (globals, function, compiled): a cell run again reuses it.
        self._compiled: dict[tuple, tuple[dict, Any, Any]] = {}

    @magic_arguments()
    @argument("--backend", choices=("auto", "cpp", "triton"), default="auto",
              help="code generator: cpp (C++/OpenMP), triton (GPU; the interpreter on CPU), "
                   "auto (Triton for CUDA tensors, C++ otherwise). Default: auto.")
    @argument("--mode", choices=("default", "reduce-overhead", "max-autotune"), default="default",
              help="compile mode, as in compiler_core.compile. Default: default.")
    @argument("--no-view", action="store_true", help="run compiled, but do not time it or show the explorer.")
    @argument("--repeats", type=int, default=5, help="timed runs of eager and compiled for the view. Default: 5.")
    @argument("--kernels-for", default=None, metavar="BACKENDS",
              help="comma-separated backends whose kernel source the view shows, e.g. cpp,triton "
                   "(the others are compiled only to show their source). Default: the backend that runs.")
    @line_cell_magic
    def fcompile(self, line: str, cell: Optional[str] = None) -> Any:
        """Compile the cell with compiler_core; tensors it reads become the inputs of the compiled graph.

        Cell magic (the usual form)::

            %%fcompile [--backend cpp|triton|auto] [--no-view] [--repeats N] [--kernels-for cpp,triton]
            y = torch.nn.functional.gelu(x @ w)
            y.mean()

        Names the cell assigns stay defined in the notebook; the value of the last expression is the
        cell's result, with the explorer (graph, fusion, kernels, timing, summary) shown below it.
        Line magic: ``%fcompile [options] y = torch.relu(x)`` compiles one statement.
        """
        options, code = _split_options(line) if cell is None else (line, cell)
        args = parse_argstring(self.fcompile, options)
        if not code.strip():
            raise FcompileError("nothing to compile: put the code in the cell below %%fcompile "
                                "(or after the options of %fcompile)")
        ns = self.shell.user_ns
        program, fn, compiled = self._compile(code, args, ns)
        values = [ns[name] for name in program.inputs + program.carried]
        try:
            with _quiet_fake_tensor_log():
                value, outputs = compiled(*values)
        except cc.CompileError as exc:
            raise FcompileError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - reported in one line, where in the cell it happened
            raise FcompileError(_describe_failure(exc, program, fn.__code__.co_filename)) from None
        for name, result in zip(program.outputs, outputs):
            if result is not UNSET:
                ns[name] = result
        if not args.no_view:
            self._show_view_after_cell(fn, compiled, program, values, args)
        return value

    def _compile(self, code: str, args: Any, ns: dict) -> tuple[CellProgram, Any, Any]:
        # The file name names the cell's text, so tracebacks and graph breaks say "<fcompile cell 1a2b3c4d>".
        filename = f"<fcompile cell {hashlib.sha1(code.encode()).hexdigest()[:8]}>"
        try:
            program = cell_program(self.shell.transform_cell(code), ns, filename)
        except CellError as exc:
            raise FcompileError(str(exc)) from None
        key = (code, args.backend, args.mode, program.inputs, program.carried)
        if key in self._compiled:
            scope, fn, compiled = self._compiled[key]
            scope.update(ns)  # globals the cell reads may have changed; Dynamo's guards notice and recompile
            return program, fn, compiled
        scope = {**ns, UNSET_NAME: UNSET}
        exec(program.code, scope)  # defines the cell function in a copy of the notebook namespace
        fn = scope.pop(FUNCTION_NAME)
        fn.__qualname__ = fn.__name__ = "cell"
        try:
            compiled = cc.compile(fn, backend=args.backend, mode=args.mode)
        except cc.CompileError as exc:
            raise FcompileError(str(exc)) from None
        self._compiled[key] = (scope, fn, compiled)
        return program, fn, compiled

    def _show_view_after_cell(self, fn: Any, compiled: Any, program: CellProgram, values: list, args: Any) -> None:
        try:
            # Time on copies: a cell that updates its inputs in place must not change the notebook's tensors.
            copies = tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in values)
            kernels_for = tuple(b.strip() for b in args.kernels_for.split(",")) if args.kernels_for else ()
            with contextlib.redirect_stdout(io.StringIO()):  # the cell's prints, once per extra run
                timing, measured = (measure_program(fn, compiled, copies, compiled.session, args.repeats)
                                    if args.repeats else (None, None))
                other = other_backends_of(fn, copies, compiled.session, kernels_for, args.mode)
            view = ExplorerView(gather(compiled.session, "this cell", timing, other, measured=measured))
        except Exception as exc:  # noqa: BLE001 - the cell's results are in; the view is a bonus
            print(f"(%%fcompile: the cell ran compiled, but its view failed: {type(exc).__name__}: {exc})")
            return
        self.last_view = view
        events = self.shell.events

        # Shown after the cell's result (post_execute runs after IPython displays the cell's value).
        def show(*_: Any) -> None:
            events.unregister("post_execute", show)
            display(view)

        events.register("post_execute", show)


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """FakeTensor logs a full traceback when a cell has a shape error; the FcompileError says it in a line."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _split_options(line: str) -> tuple[str, str]:
    """'%fcompile --backend cpp y = f(x)' -> ('--backend cpp', 'y = f(x)')."""
    tokens = line.split()
    taken = 0
    while taken < len(tokens) and tokens[taken].startswith("-") and tokens[taken] not in ("-", "--"):
        flag = tokens[taken].split("=")[0]
        taken += 2 if flag in _VALUE_OPTIONS and "=" not in tokens[taken] else 1
    options = " ".join(tokens[:taken])
    rest = line.strip()
    for token in tokens[:taken]:
        rest = rest[rest.index(token) + len(token):]
    return options, rest.strip()


def _describe_failure(exc: BaseException, program: CellProgram, filename: str) -> str:
    """'line 2 of the cell raised RuntimeError: ...', plus what to do; never the compiler's traceback."""
    cause = exc
    while type(cause).__module__.startswith("torch._dynamo"):  # Dynamo wraps the user's error; show that
        inner = cause.__cause__ or cause.__context__
        if inner is None:
            break
        cause = inner
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            line = frame.lineno
    match = re.search(rf'File "{re.escape(filename)}", line (\d+)', str(exc))
    if match:
        line = int(match.group(1))
    message = (str(cause).strip().splitlines() or [""])[0].rstrip(".")
    if len(message) > 300:
        message = message[:300] + "..."
    where = f"line {line} of the cell" if line else "the cell"
    return (f"{where} raised {type(cause).__name__}: {message}. Nothing was written back to the notebook. "
            "Run the cell without %%fcompile to check that it works in eager PyTorch; if it does, the compiler "
            "is at fault: please report it with this cell.")

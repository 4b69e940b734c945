"""%%fcompile: compile a notebook cell with compiler_core, keep its names, show the explorer below.

    %load_ext explorer

    %%fcompile --backend cpp
    y = torch.softmax(x, -1)      # x: a tensor from an earlier cell -> an input of the compiled graph
    y.sum()                       # y stays defined afterwards; this value is the cell's result

The cell becomes a function (explorer/cell.py), compiled with compiler_core.compile and called once;
it runs in a copy of the notebook namespace and writes back only when it succeeds, so a failing cell
leaves the notebook's names as they were. Compilations and views are cached by a hash of the cell, its
options, the versions of torch and Triton and a hash of the compiler's own source (an editable install
edited in place, reloaded by %autoreload, keeps its version number): running a cell again reuses them
(Dynamo's guards still recompile when an input changes shape); `--force` compiles and measures afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import keyword
import logging
import platform
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Enum, Int, Unicode

import compiler_core as cc
from compiler_core.api import training_loss
from explorer.cell import FUNCTION_NAME, UNSET, UNSET_NAME, CellError, CellProgram, cell_program
from explorer.exploration import (
    Program,
    compare_with_inductor,
    gather,
    measure_program,
    other_backends_of,
    training_step,
)
from explorer.view import ExplorerView

_VALUE_OPTIONS = ("--backend", "--mode", "--repeats", "--kernels-for", "--compare", "-o", "--output")
KNOWN_BACKENDS = ("cpp", "triton")


class FcompileError(Exception):
    """A cell %%fcompile could not compile or run: one short message, no traceback from the compiler
    (unless --debug asked for it: then the traceback follows the message)."""

    def __init__(self, message: str, debug_traceback: str = ""):
        super().__init__(message)
        self.debug_traceback = debug_traceback

    def _render_traceback_(self) -> list[str]:  # IPython prints this instead of a traceback
        lines = [f"FcompileError: {self}"]
        if self.debug_traceback:
            lines += ["", "--debug: the traceback behind it:", *self.debug_traceback.rstrip().splitlines()]
        return lines


@dataclass
class CachedCell:
    """What running a cell again with the same options reuses."""

    scope: dict  # the namespace copy the cell function runs in
    fn: Any  # the cell as a function
    compiled: Any  # compiler_core.compile(fn)
    view: Optional[ExplorerView] = None
    view_signature: tuple = ()  # the inputs (shapes, dtypes) and graph count the view was measured on


@magics_class
class FcompileMagics(Magics):
    """Defaults for every cell, set with `%config FcompileMagics.backend = "cpp"` (or in an IPython
    profile's config); an option on the cell's own line wins."""

    backend = Enum(("auto", "cpp", "triton"), "auto", help="default --backend").tag(config=True)
    mode = Enum(("default", "reduce-overhead", "max-autotune"), "default", help="default --mode").tag(config=True)
    repeats = Int(5, help="default --repeats: timed runs of eager and compiled for the view").tag(config=True)
    kernels_for = Unicode("", help="default --kernels-for (comma-separated backends; empty: the one that runs)"
                          ).tag(config=True)

    def __init__(self, shell: Any):
        super().__init__(shell)
        self.last_view: Optional[ExplorerView] = None
        # cache_key(cell, options, versions, our source) -> the compiled cell and its view, for a rerun.
        self._compiled: dict[str, CachedCell] = {}

    @magic_arguments()
    @argument("--backend", choices=("auto", "cpp", "triton"), default=None,
              help="code generator: cpp (C++/OpenMP), triton (GPU; the interpreter on CPU), "
                   "auto (Triton for CUDA tensors, C++ otherwise). Default: auto (%%config FcompileMagics.backend).")
    @argument("--mode", choices=("default", "reduce-overhead", "max-autotune"), default=None,
              help="compile mode, as in compiler_core.compile. Default: default (%%config FcompileMagics.mode).")
    @argument("--train", action="store_true",
              help="a training step: the cell's floating-point input tensors require grad (on copies), and after "
                   "the cell the sum of mean squares of its results is backpropagated through the compiled backward.")
    @argument("--dynamic", action="store_true", help="compile with dynamic shapes (symbolic sizes), as "
                                                    "compiler_core.compile(dynamic=True).")
    @argument("--compare", choices=("inductor",), default=None,
              help="also compile with torch.compile (Inductor): its kernels beside ours (Compare tab), timed too.")
    @argument("--no-view", action="store_true", help="run compiled, but do not time it or show the explorer.")
    @argument("--force", action="store_true",
              help="compile and measure afresh, ignoring the cache of this cell (same text and options).")
    @argument("--debug", action="store_true", help="on an error, show the compiler's traceback after the message.")
    @argument("-o", "--output", default=None, metavar="VAR",
              help="store the CompileSession in the notebook variable VAR (stages, kernels, breaks, recompiles).")
    @argument("--repeats", type=int, default=None,
              help="timed runs of eager and compiled for the view. Default: 5 (%%config FcompileMagics.repeats).")
    @argument("--kernels-for", default=None, metavar="BACKENDS",
              help="comma-separated backends whose kernel source the view shows, e.g. cpp,triton "
                   "(the others are compiled only to show their source). Default: the backend that runs "
                   "(%%config FcompileMagics.kernels_for).")
    @line_cell_magic
    def fcompile(self, line: str, cell: Optional[str] = None) -> Any:
        """Compile the cell with compiler_core; tensors it reads become the inputs of the compiled graph.

        Cell magic (the usual form)::

            %%fcompile [--backend cpp|triton|auto] [--mode M] [--train] [--dynamic] [--compare inductor]
                       [--no-view] [--force] [--debug] [-o VAR] [--repeats N] [--kernels-for cpp,triton]
            y = torch.nn.functional.gelu(x @ w)
            y.mean()

        Names the cell assigns stay defined in the notebook; the value of the last expression is the
        cell's result, with the explorer (capture, graph, fusion, kernels, compare, memory, roofline,
        timing, summary) shown below it. Running the cell again with the same text and options reuses
        its compilation and view (`--force` redoes both). Line magic: ``%fcompile [options] y = torch.relu(x)``
        compiles one statement.
        """
        options, code = _split_options(line) if cell is None else (line, cell)
        args = self._with_settings(parse_argstring(self.fcompile, options))
        _check_options(args)
        if not code.strip():
            raise FcompileError("nothing to compile: put the code in the cell below %%fcompile "
                                "(or after the options of %fcompile)")
        ns = self.shell.user_ns
        program, entry = self._compile(code, args, ns)
        fn, compiled = entry.fn, entry.compiled
        values = [ns[name] for name in program.inputs + program.carried]
        if args.train:  # leaves that require grad, so the backward reaches the inputs too
            values = [v.detach().requires_grad_(v.is_floating_point()) if isinstance(v, torch.Tensor) else v
                      for v in values]
        try:
            with _quiet_fake_tensor_log():
                value, outputs = compiled(*values)
                if args.train:
                    loss = training_loss((value, outputs))
                    if loss is not None:
                        loss.backward()
        except cc.CompileError as exc:
            raise FcompileError(str(exc), _debug_text(exc, args)) from None
        except Exception as exc:  # noqa: BLE001 - reported in one line, where in the cell it happened
            message = _describe_failure(exc, program, fn.__code__.co_filename)
            raise FcompileError(message, _debug_text(exc, args)) from None
        for name, result in zip(program.outputs, outputs):
            if result is not UNSET:
                ns[name] = result
        if args.output:
            ns[args.output] = compiled.session
        if args.debug:
            for record in compiled.session.all_records():
                if record.error_traceback:
                    print(f"(--debug: graph {record.captured.index} fell back to eager; the compiler's traceback)\n"
                          f"{record.error_traceback}")
        if not args.no_view:
            self._show_view_after_cell(entry, program, values, args)
        return value

    def _with_settings(self, args: Any) -> Any:
        """Options the cell's line leaves out take the %config settings."""
        for name in ("backend", "mode", "repeats"):
            if getattr(args, name) is None:
                setattr(args, name, getattr(self, name))
        if args.kernels_for is None:
            args.kernels_for = self.kernels_for or None
        return args

    def _compile(self, code: str, args: Any, ns: dict) -> tuple[CellProgram, CachedCell]:
        # The file name names the cell's text, so tracebacks and graph breaks say "<fcompile cell 1a2b3c4d>".
        filename = f"<fcompile cell {hashlib.sha1(code.encode()).hexdigest()[:8]}>"
        try:
            program = cell_program(self.shell.transform_cell(code), ns, filename)
        except CellError as exc:
            raise FcompileError(str(exc)) from None
        key = cache_key(code, args, program)
        if key in self._compiled and not args.force:
            entry = self._compiled[key]
            entry.scope.update(ns)  # globals the cell reads may have changed; Dynamo's guards notice and recompile
            return program, entry
        scope = {**ns, UNSET_NAME: UNSET}
        exec(program.code, scope)  # defines the cell function in a copy of the notebook namespace
        fn = scope.pop(FUNCTION_NAME)
        fn.__qualname__ = fn.__name__ = "cell"
        try:
            # Without --dynamic, the library's default (None): a cell's one call compiles static sizes.
            compiled = cc.compile(fn, backend=args.backend, mode=args.mode, dynamic=True if args.dynamic else None)
        except cc.CompileError as exc:
            raise FcompileError(str(exc), _debug_text(exc, args)) from None
        entry = self._compiled[key] = CachedCell(scope, fn, compiled)
        return program, entry

    def _show_view_after_cell(self, entry: CachedCell, program: CellProgram, values: list, args: Any) -> None:
        fn, compiled = entry.fn, entry.compiled
        signature = _view_signature(values, compiled.session)
        view = entry.view if entry.view is not None and entry.view_signature == signature else None
        if view is None:
            try:
                # Timing a training step runs backward many times: the notebook's gradients stay as the cell left them.
                with _gradients_kept(entry.scope.values()):
                    view = self._measure_view(fn, compiled, values, args)
            except Exception as exc:  # noqa: BLE001 - the cell's results are in; the view is a bonus
                print(f"(%%fcompile: the cell ran compiled, but its view failed: {type(exc).__name__}: {exc})")
                if args.debug:
                    print(traceback.format_exc())
                return
            entry.view, entry.view_signature = view, signature
        self.last_view = view
        events = self.shell.events

        # Shown after the cell's result (post_execute runs after IPython displays the cell's value).
        def show(*_: Any) -> None:
            events.unregister("post_execute", show)
            display(view)

        events.register("post_execute", show)

    def _measure_view(self, fn: Any, compiled: Any, values: list, args: Any) -> ExplorerView:
        # Time on copies: a cell that updates its inputs in place must not change the notebook's tensors.
        copies = tuple(v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
                       for v in values)
        kernels_for = tuple(b.strip() for b in args.kernels_for.split(",")) if args.kernels_for else ()
        eager, ours = fn, compiled
        if args.train:
            eager, ours = training_step(eager), training_step(ours)
        inductor, others = None, {}
        with contextlib.redirect_stdout(io.StringIO()):  # the cell's prints, once per extra run
            if args.compare == "inductor":
                inductor, run = compare_with_inductor(fn, copies, args.mode, args.train, args.repeats)
                if run is not None:
                    others["inductor"] = run
            timing, measured = (measure_program(eager, ours, copies, compiled.session, args.repeats, others)
                                if args.repeats else (None, None))
            other = other_backends_of(fn, copies, compiled.session, kernels_for, args.mode)
        program = Program(fn, copies, compiled.options, ours, args.train)
        return ExplorerView(gather(compiled.session, "this cell", timing, other, train=args.train,
                                   measured=measured, inductor=inductor, program=program))


def cache_key(code: str, args: Any, program: CellProgram) -> str:
    """sha256 of the cell, the options that change what is compiled or shown, the versions and our source."""
    options = (args.backend, args.mode, args.train, args.dynamic, args.compare, args.repeats, args.kernels_for)
    text = repr((code, options, program.inputs, program.carried, _versions(), source_hash()))
    return hashlib.sha256(text.encode()).hexdigest()


def _versions() -> tuple[str, ...]:
    from importlib import metadata

    try:
        ours = metadata.version("fcompile")
    except metadata.PackageNotFoundError:
        ours = "unknown"
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - Triton is optional on CPU
        triton_version = "none"
    return (ours, torch.__version__, triton_version, platform.python_version())


SOURCE_ROOTS = tuple(Path(__file__).resolve().parents[1] / name for name in ("compiler_core", "explorer"))
SOURCE_SUFFIXES = (".py", ".h", ".hpp", ".cpp", ".js", ".css")  # what the compiler and explorer are made of
_source_hashes: dict[tuple, str] = {}  # the files' (path, mtime, size) -> the hash of their contents


def source_hash(roots: tuple[Path, ...] = SOURCE_ROOTS) -> str:
    """sha256 of the source files of compiler_core/ and explorer/. An editable install keeps its version
    number while its files change, so a cell rerun after an edit (and %autoreload) must not find the old
    compilation. Each call only lists and stats the files (about 140: 3 ms on the 2-core CI machine,
    against a cell's hundreds); their contents are read again only when a size or mtime changed."""
    files = sorted((f.relative_to(root.parent), f) for root in roots for f in root.rglob("*")
                   if f.suffix in SOURCE_SUFFIXES and f.is_file())
    stats = tuple((str(name), f.stat().st_mtime_ns, f.stat().st_size) for name, f in files)
    if stats not in _source_hashes:
        digest = hashlib.sha256()
        for name, f in files:
            digest.update(str(name).encode() + b"\0" + f.read_bytes() + b"\0")
        _source_hashes.clear()  # only the current state of the files matters
        _source_hashes[stats] = digest.hexdigest()
    return _source_hashes[stats]


def _view_signature(values: list, session: Any) -> tuple:
    """A view stays valid while the inputs keep their shapes and dtypes and nothing recompiled."""
    metas = tuple((tuple(v.shape), str(v.dtype), str(v.device)) if isinstance(v, torch.Tensor) else type(v).__name__
                  for v in values)
    return metas, len(session.graphs), len(session.recompiles)


@contextlib.contextmanager
def _gradients_kept(values: Any) -> Iterator[None]:
    """Restore the .grad of every parameter of the modules (and every leaf tensor) among `values`."""
    leaves: dict[int, torch.Tensor] = {}
    for value in list(values):
        if isinstance(value, torch.nn.Module):
            leaves.update((id(p), p) for p in value.parameters())
        elif isinstance(value, torch.Tensor) and value.requires_grad and value.is_leaf:
            leaves[id(value)] = value
    saved = [(t, None if t.grad is None else t.grad.clone()) for t in leaves.values()]
    try:
        yield
    finally:
        for tensor, grad in saved:
            tensor.grad = grad


def _check_options(args: Any) -> None:
    if args.output is not None and (not args.output.isidentifier() or keyword.iskeyword(args.output)):
        raise FcompileError(f"-o {args.output}: give a Python name to store the session under, e.g. -o session")
    if args.repeats < 0:
        raise FcompileError(f"--repeats {args.repeats}: give 0 (do not time) or a positive number of timed runs")
    if args.kernels_for:
        unknown = [b.strip() for b in args.kernels_for.split(",") if b.strip() not in KNOWN_BACKENDS]
        if unknown:
            raise FcompileError(f"--kernels-for {args.kernels_for}: unknown backend {', '.join(unknown)}; "
                                f"use {' or '.join(KNOWN_BACKENDS)}, comma-separated")


def _debug_text(exc: BaseException, args: Any) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) if args.debug else ""


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

"""A notebook cell as a function: tensors it reads become parameters, names it assigns are returned.

    program = cell_program("y = torch.relu(x)\\ny * 2", user_ns, "<fcompile cell 1>")
    program.inputs     # ('x',)          tensors read from the notebook namespace
    program.outputs    # ('y',)          names the cell assigns, written back after the call
    program.carried    # ()              assigned names the cell also reads: passed in, so `n = n + 1` works
    program.source     # def __fcompile_cell(x): y = torch.relu(x); return (y * 2, (y,))

The function keeps the cell's line numbers, so errors and graph breaks point at lines of the cell. It
returns (the value of the last expression or None, the assigned names): the value is computed in the
return itself, so no helper name of ours becomes a node of the user's graph.
"""

from __future__ import annotations

import ast
import linecache
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

import torch

FUNCTION_NAME = "__fcompile_cell"
UNSET_NAME = "__fcompile_unset"


class Unset:
    """The value of a name the cell may leave unassigned (an `if` branch not taken): not written back."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = Unset()


# FunctionDef.type_params exists (and is required by compile()) from Python 3.12 on.
_TYPE_PARAMS = {"type_params": []} if sys.version_info >= (3, 12) else {}


class CellError(Exception):
    """The cell cannot be turned into a compilable function; the message says what to change."""


@dataclass(frozen=True)
class CellProgram:
    inputs: tuple[str, ...]  # tensors read from the notebook, in order of first use
    outputs: tuple[str, ...]  # names the cell assigns (at its top level), in order of first assignment
    carried: tuple[str, ...]  # non-tensor names the cell reads and assigns (`n = n + 1`): passed in too
    has_value: bool  # the cell ends with an expression, whose value is the cell's result
    source: str  # the generated function, as Python (for display)
    code: CodeType  # that function's definition, compiled with the cell's file name and line numbers


def cell_program(cell: str, user_ns: dict[str, Any], filename: str) -> CellProgram:
    """Parse `cell` and build the function that computes it; raises CellError for cells it cannot take."""
    try:
        module = ast.parse(cell, filename=filename)
    except SyntaxError as exc:
        raise CellError(f"line {exc.lineno} of the cell has a syntax error ({exc.msg}); "
                        "fix it and run the cell again") from None
    _reject_unsupported(module)
    body = list(module.body)
    if not body:
        raise CellError("the cell is empty: write the tensor code to compile below %%fcompile")
    has_value = isinstance(body[-1], ast.Expr)
    value: ast.expr = ast.Constant(None)
    if has_value:
        value = body.pop().value  # evaluated first in the return, as it would be before the names are read
    outputs = assigned_names(module)
    loaded = loaded_names(module)
    inputs = tuple(name for name in loaded if isinstance(user_ns.get(name), torch.Tensor))
    if not inputs:
        raise CellError("the cell reads no tensors from the notebook, so there is nothing to compile; create the "
                        "inputs in an earlier cell (e.g. x = torch.randn(64, 128)) and use them here")
    # An assigned name is local to the function: one the cell also reads (`n = n + 1`) must come in as
    # an argument; the others start as UNSET, so a branch not taken leaves the notebook's value alone.
    carried = tuple(n for n in outputs if n in loaded and n in user_ns and n not in inputs)
    prelude = [ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Name(UNSET_NAME, ast.Load()), lineno=1,
                          end_lineno=1, col_offset=0) for n in outputs if n not in inputs + carried]
    returned = ast.Tuple([value, ast.Tuple([ast.Name(n, ast.Load()) for n in outputs], ast.Load())], ast.Load())
    last_line = max(getattr(node, "end_lineno", 1) or 1 for node in [*body, value] if hasattr(node, "lineno"))
    function = ast.FunctionDef(
        name=FUNCTION_NAME,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in inputs + carried], kwonlyargs=[],
                           kw_defaults=[], defaults=[]),
        body=prelude + body + [_returning(returned, value if has_value else None, last_line)],
        decorator_list=[], returns=None, lineno=1, end_lineno=last_line, col_offset=0, **_TYPE_PARAMS)
    tree = ast.fix_missing_locations(ast.Module([function], type_ignores=[]))
    # linecache lets tracebacks, Dynamo's graph-break messages and inspect show the cell's lines.
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    return CellProgram(inputs=inputs, outputs=outputs, carried=carried, has_value=has_value, source=ast.unparse(tree),
                       code=compile(tree, filename, "exec"))


def assigned_names(module: ast.Module) -> tuple[str, ...]:
    """Names bound at the cell's top level (not inside functions, classes or comprehensions)."""
    names: dict[str, None] = {}
    for node in _walk_scope(module):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names[node.id] = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
    return tuple(names)


def _returning(returned: ast.expr, value: ast.expr | None, last_line: int) -> ast.Return:
    """The return statement, on the lines of the cell's last expression when there is one (errors in it
    name those lines)."""
    if value is not None:
        return ast.Return(returned, lineno=value.lineno, end_lineno=value.end_lineno, col_offset=value.col_offset,
                          end_col_offset=value.end_col_offset)
    return ast.Return(returned, lineno=last_line, end_lineno=last_line, col_offset=0)


def loaded_names(module: ast.Module) -> tuple[str, ...]:
    """Every name the cell reads, anywhere (a nested function's reads count: it may use a tensor too)."""
    loads = (n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    return tuple(dict.fromkeys(loads))


def _walk_scope(module: ast.Module):
    """ast.walk that does not enter nested scopes (their names are not the cell's)."""
    todo = list(module.body)
    while todo:
        node = todo.pop(0)
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(node.decorator_list)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _reject_unsupported(module: ast.Module) -> None:
    for node in _walk_scope(module):
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            raise CellError(f"line {node.lineno}: a cell cannot `return` or `yield`; end the cell with the "
                            "expression whose value you want instead")
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            raise CellError(f"line {node.lineno}: %%fcompile cannot compile async code; run this cell without it")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise CellError(f"line {node.lineno}: `global`/`nonlocal` is not needed: names the cell assigns "
                            "are written back to the notebook anyway; remove the statement")

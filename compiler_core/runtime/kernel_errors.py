"""Errors raised inside kernels, reported the way eager PyTorch reports them.

A generated kernel cannot raise. Where eager raises (an integer division or remainder by zero on
the CPU, RuntimeError("ZeroDivisionError"); a position out of range read from an index tensor), the
kernels set their library's error flag and the graph's call reads and clears it afterwards
(`fc_take_error`, in the C++ prelude and in the Triton interpreter's helpers) and raises eager's
error. Only graphs whose kernels can set the flag (KernelSource.checks_int_div) are wrapped.
"""

from __future__ import annotations

from typing import Any, Callable

from compiler_core.ir.values import GATHER_ERROR, INDEX_ERROR, SCATTER_ERROR, TARGET_ERROR

# fc_take_error() codes -> the exception eager PyTorch raises for the same input.
ERRORS = {
    1: lambda: RuntimeError("ZeroDivisionError"),
    # A position read from an index tensor lies outside the dimension it indexes (ir.values.IndirectIndex).
    INDEX_ERROR: lambda: IndexError("index out of range in self"),  # index, index_select, embedding, take
    GATHER_ERROR: lambda: RuntimeError("index out of bounds for the dimension it gathers from"),  # gather
    SCATTER_ERROR: lambda: RuntimeError("index out of bounds for the dimension it scatters into"),  # scatter_add
    # nll_loss / cross_entropy: the pick at the labels is a gather, but eager names the target
    TARGET_ERROR: lambda: IndexError("Target is out of bounds (a class index below 0 or not below the number "
                                     "of classes)"),
}


def error_check(take_error: Callable[[], int]) -> Callable[[], None]:
    """A check that raises eager's error when a kernel flagged one since the last check."""

    def check() -> None:
        code = int(take_error())
        if code:
            raise ERRORS[code]()

    return check


def raising_kernel_errors(call: Callable[[list], Any], check: Callable[[], None]) -> Callable[[list], Any]:
    """`call` (a graph's boxed host program) followed by `check`. Outputs of a failed call are dropped,
    as eager produces none; the flag is read even when `call` raises, so it never leaks into the next."""

    def checked(args: list) -> Any:
        try:
            out = call(args)
        except BaseException:
            check_quietly(check)
            raise
        check()
        return out

    return checked


def check_quietly(check: Callable[[], None]) -> None:
    try:
        check()
    except RuntimeError:
        pass  # the error the call already raised wins

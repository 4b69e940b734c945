"""What a warm call of a compiled function costs on the host, beyond Dynamo's own guard check and the
kernels: a launch-bound program (the bench's tiny_chain) pays it on every call. Counted in Python
calls, not in microseconds, so the test holds on a loaded CI machine."""

import sys

import pytest
import torch

import compiler_core as cc
from compiler_core import _compat


def _calls_into(path_part: str, fn, *args) -> tuple[list[str], object]:
    """The functions under a file path containing path_part that one call of fn enters, and its result."""
    entered: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and path_part in frame.f_code.co_filename:
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = fn(*args)
    finally:
        sys.setprofile(None)
    return entered, out


def _chain(x):
    return torch.sin(x) * 1.01 + 0.1


def test_a_warm_call_patches_no_torch_config():
    """torch's `config.patch` builds a class on each use: 24 µs of a 54 µs warm call of an 8-element
    program on the 2-core CPU machine (2026-12-05), where Inductor's whole call took 17 µs. Reading and
    setting Dynamo's one option (floats specialized) around each call still cost 9.5 µs of 37
    (2026-12-06): a warm call now touches no config; Dynamo's compile callbacks set it only while a
    compile runs inside one of our calls (the next test)."""
    x = torch.randn(8)
    compiled = cc.compile(_chain)
    compiled(x)  # compiles
    entered, out = _calls_into("_config_module.py", compiled, x)
    torch.testing.assert_close(out, _chain(x), rtol=0, atol=1e-6)
    if _compat._compile_callbacks() is not None:
        assert entered == [], entered
    else:  # a torch without compile callbacks: the option is set and put back around each call
        assert "patch" not in entered and "ConfigPatch" not in entered, entered
        assert entered.count("__getattr__") <= 1 and entered.count("__setattr__") <= 2, entered
    assert torch._dynamo.config.specialize_float is False  # put back after the call


@pytest.mark.parametrize("reset_between", [False, True])
def test_floats_are_specialized_while_our_calls_compile_and_only_then(reset_between):
    """Under dynamic shapes a float argument stays a constant guarded by value (each new value compiles
    again, no 0-d tensor input), also after `torch._dynamo.reset()` (which clears Dynamo's callbacks);
    the option is False again after each call, and a plain torch.compile in between is not touched."""
    seen_inputs: list[list[str]] = []

    def scale(x, factor):
        return x * factor + 1

    compiled = cc.compile(scale, dynamic=True)
    for factor in (1.5, 2.5, 3.5):
        if reset_between:
            torch._dynamo.reset()
        x = torch.randn(6)
        torch.testing.assert_close(compiled(x, factor), scale(x, factor))
        assert torch._dynamo.config.specialize_float is False
        captured = compiled.session.graphs[-1].captured
        seen_inputs.append([i.name for i in captured.inputs if i.dtype != "int size (symbolic)"])
        assert str(factor) in captured.graph_module.code  # a constant of the graph
    assert seen_inputs == [["l_x_"]] * 3, seen_inputs  # x only: no input for the float

    seen = []

    def backend(gm, example_inputs):
        seen.append(len(example_inputs))
        return gm.forward
    theirs = torch.compile(lambda a, f: a * f + 1, backend=backend, dynamic=True)
    x = torch.randn(6)
    for factor in (4.5, 5.5):
        torch.testing.assert_close(theirs(x, factor), x * factor + 1)
    # Dynamo's own default for a compile that is not ours: one graph for both values, whose inputs are
    # the size, x and the float
    assert seen == [3], seen
    assert torch._dynamo.config.specialize_float is False


def test_a_warm_call_runs_few_functions_of_ours():
    """Our layer around Dynamo's compiled code: the call wrapper, the break and recompile bookkeeping,
    the host program. A per-call scan or rebuild would show up here first."""
    x = torch.randn(8)
    compiled = cc.compile(_chain)
    compiled(x)
    entered, out = _calls_into("compiler_core", compiled, x)
    torch.testing.assert_close(out, _chain(x), rtol=0, atol=1e-6)
    assert len(entered) <= 16, entered

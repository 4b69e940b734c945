"""What a warm call of a compiled function costs on the host, beyond Dynamo's own guard check and the
kernels: a launch-bound program (the bench's tiny_chain) pays it on every call. Counted in Python
calls, not in microseconds, so the test holds on a loaded CI machine."""

import sys

import torch

import compiler_core as cc


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
    program on the 2-core CPU machine (2026-12-05), where Inductor's whole call took 17 µs. A warm call
    now sets Dynamo's one option (floats specialized) and puts it back: a read and two writes."""
    x = torch.randn(8)
    compiled = cc.compile(_chain)
    compiled(x)  # compiles
    entered, out = _calls_into("_config_module.py", compiled, x)
    torch.testing.assert_close(out, _chain(x), rtol=0, atol=1e-6)
    assert "patch" not in entered and "ConfigPatch" not in entered, entered
    assert entered.count("__getattr__") <= 1 and entered.count("__setattr__") <= 2, entered
    assert torch._dynamo.config.specialize_float is False  # put back after the call


def test_a_warm_call_runs_few_functions_of_ours():
    """Our layer around Dynamo's compiled code: the call wrapper, the break and recompile bookkeeping,
    the host program. A per-call scan or rebuild would show up here first."""
    x = torch.randn(8)
    compiled = cc.compile(_chain)
    compiled(x)
    entered, out = _calls_into("compiler_core", compiled, x)
    torch.testing.assert_close(out, _chain(x), rtol=0, atol=1e-6)
    assert len(entered) <= 16, entered

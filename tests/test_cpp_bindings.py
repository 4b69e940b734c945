"""The C++ kernels' Python entry points (runtime/cpp_bindings.py): FASTCALL functions in the kernels'
own shared object where Python.h is installed, ctypes otherwise; values checked either way."""

import ctypes

import pytest
import torch

import compiler_core as cc
from compiler_core.runtime import cpp_bindings, cpp_build
from compiler_core.runtime.build import load_kernels


def _program(x, w):
    return torch.softmax(x @ w, -1) * 2 + torch.tanh(x).sum()


def _session():
    torch._dynamo.reset()
    x, w = torch.randn(64, 32), torch.randn(32, 48)
    compiled = cc.compile(_program, backend="cpp")
    torch.testing.assert_close(compiled(x, w), _program(x, w))
    return compiled.session


@pytest.mark.skipif(cpp_bindings.python_include() is None, reason="no Python.h: the kernels are called through ctypes")
def test_kernels_are_called_through_fastcall_entry_points():
    session = _session()
    record = session.graphs[0]
    loaded = load_kernels(tuple(session.kernels), "cpp", record.loops)
    for name, fn in loaded.functions.items():
        assert not isinstance(fn, ctypes._CFuncPtr), f"{name} is still a ctypes function"
        assert fn.__name__ == name
    some = next(iter(loaded.functions.values()))
    with pytest.raises(TypeError, match="takes"):
        some(1)  # a wrong argument count is a Python error, not a crash


def test_without_python_headers_the_kernels_run_through_ctypes(monkeypatch, tmp_path):
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(tmp_path))  # a fresh build, not the cached object
    monkeypatch.setattr(cpp_build, "python_include", lambda: None)
    session = _session()  # values checked inside
    loaded = load_kernels(tuple(session.kernels), "cpp", session.graphs[0].loops)
    assert all(isinstance(fn, ctypes._CFuncPtr) for fn in loaded.functions.values())

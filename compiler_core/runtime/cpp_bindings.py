"""Python entry points for the C++ kernels, compiled into the same shared object.

A kernel called through ctypes costs about 0.9 us of argument conversion per launch (measured on the
2-core CPU machine: 1.39 us a call of a 4-pointer kernel through ctypes, 0.57 us through a METH_FASTCALL
entry point, 0.46 us of which is the host program's `.data_ptr()` calls). A 12-kernel graph of small
tensors pays that on every call: about 5% of a small GPT-2's forward. So the translation unit also
defines a CPython extension module (`fc_kernels`) with one FASTCALL function per kernel, which reads
the pointers as Python ints, releases the GIL as ctypes does, and calls the kernel.

Only where the interpreter's headers are installed (`Python.h`); without them the kernels are called
through ctypes as before. The module is keyed to the interpreter it was built for: its version is
part of the source, so of the cache key.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
import sysconfig
from types import ModuleType
from typing import Optional

from compiler_core.codegen.artifacts import KernelSource

MODULE = "fc_kernels"
_HEADER = re.compile(r'^extern "C" void (\w+)\((.*)\) \{$', re.MULTILINE)


def python_include() -> Optional[str]:
    """The folder holding this interpreter's Python.h, or None (no development headers installed)."""
    folder = sysconfig.get_paths().get("include")
    return folder if folder and os.path.exists(os.path.join(folder, "Python.h")) else None


def bindings_source(kernels: tuple[KernelSource, ...]) -> str:
    """The extension module's C++ source: one FASTCALL function per kernel function."""
    functions = []
    for k in kernels:
        for name, params in _HEADER.findall(k.source):
            if name in k.function_names:
                functions.append((name, [_param_type(p) for p in params.split(", ")]))
    # Python.h itself is included after the prelude (cpp_build.py), before the kernels.
    lines = [f"// Python {sys.version_info.major}.{sys.version_info.minor} entry points (runtime/cpp_bindings.py)", ""]
    for name, types in functions:
        lines += _entry_point(name, types)
    table = [f'    {{"{name}", (PyCFunction)(void (*)(void))fcpy_{name}, METH_FASTCALL, nullptr}},'
             for name, _ in functions]
    lines += ["static PyMethodDef fc_methods[] = {", *table, "    {nullptr, nullptr, 0, nullptr}", "};",
              f'static struct PyModuleDef fc_module = {{PyModuleDef_HEAD_INIT, "{MODULE}", nullptr, -1, fc_methods}};',
              f'extern "C" PyMODINIT_FUNC PyInit_{MODULE}(void) {{ return PyModule_Create(&fc_module); }}']
    return "\n".join(lines) + "\n"


def _param_type(param: str) -> str:
    """`const float* __restrict__ in_ptr0` -> `const float*`; `int nthreads` -> `int`."""
    words = [w for w in param.split() if w != "__restrict__"]
    return " ".join(words[:-1])


def _entry_point(name: str, types: list[str]) -> list[str]:
    count = len(types)
    reads = []
    for i, t in enumerate(types):
        if t.endswith("*"):
            reads.append(f"    {t} a{i} = static_cast<{t}>(PyLong_AsVoidPtr(args[{i}]));")
        else:
            reads.append(f"    {t} a{i} = static_cast<{t}>(PyLong_AsLong(args[{i}]));")
    call = ", ".join(f"a{i}" for i in range(count))
    return [f"static PyObject* fcpy_{name}(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{",
            f"    if (nargs != {count}) {{",
            f'        PyErr_Format(PyExc_TypeError, "{name} takes {count} arguments (%zd given)", nargs);',
            "        return nullptr;", "    }", *reads,
            "    if (PyErr_Occurred()) return nullptr;",
            f"    Py_BEGIN_ALLOW_THREADS {name}({call}); Py_END_ALLOW_THREADS",
            "    Py_RETURN_NONE;", "}", ""]


def load_module(library: str) -> Optional[ModuleType]:
    """The extension module of a built shared object, or None when it was built without one."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, library)
    spec = importlib.util.spec_from_file_location(MODULE, library, loader=loader)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module

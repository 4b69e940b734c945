"""The C++ backend's build: all kernels of a graph in one translation unit, compiled once by the system
compiler into a shared object cached on disk by content hash and toolchain (cache.py), so a warm
compile is a file lookup and a changed or planted object is never loaded.

Every unit starts with the same text (the prelude, then Python.h for the entry points), and parsing it
was most of a small unit's build: 0.23 s of a 13 kB unit's 0.29 s on the 2-core CPU machine. So that
text is a header, precompiled once per toolchain and interpreter (GCC's `.gch`, found beside the header
when the unit includes it), and a unit is built in 0.08 s. The key of a unit is still its whole text,
prelude included; where the precompiled header cannot be made or used (another compiler, other
flags), the compiler reads the header's text instead: same source, slower build."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

from compiler_core.codegen.artifacts import KernelSource
from compiler_core.codegen.cpp.prelude import PRELUDE
from compiler_core.runtime import cache
from compiler_core.runtime.cpp_bindings import bindings_source, python_include


class BuildError(Exception):
    """The generated code did not compile; the graph falls back to eager PyTorch."""


# -ffp-contract=off: every operation rounds, as eager's separate ops do. GCC otherwise contracts a
# multiply and an add of one fused expression into an FMA (one rounding), differently in a kernel's
# vector and scalar loops: a value recomputed in two loops then differed in its last bit, and
# truncating it (antialiased resizing's window start, 2.6 * 3.5 - 2.6 + 0.5 -> 6 or 7) changed the result.
# -fno-ivopts: GCC 12.2 (Debian's) miscompiled GPT-J's rotary kernel with its induction-variable
# optimisation on: a horizontal kernel's masked load of cos[8*x1 + x3], inside `omp simd` over x3 and
# with 512-bit vectors, read cos[8*x1 + 2*x2 + x3] for heads x2 > 0. -O0, -fno-ivopts, 256-bit vectors or
# the kernel without its key half each gave the right values (tests/test_model_ops.py has the model).
CXX_FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno",
             "-ffp-contract=off", "-fno-ivopts"]
if platform.machine() in ("x86_64", "AMD64"):
    # GCC defaults to 256-bit vectors even where AVX-512 exists; full width measured 1.4x faster on
    # softmax (2048x1024, 2-core Xeon). Harmless on CPUs without AVX-512.
    CXX_FLAGS.append("-mprefer-vector-width=512")

PRELUDE_HEADER = "fc_prelude.h"


def cpp_translation_unit(kernels: tuple[KernelSource, ...], bindings: bool = False) -> str:
    """The prelude and every kernel; with `bindings`, also their Python entry points (cpp_bindings.py)."""
    return _prelude_text(bindings) + _kernels_text(kernels, bindings)


def _prelude_text(bindings: bool) -> str:
    # With bindings, Python.h is read before the kernels, so that it belongs to the precompiled part.
    return PRELUDE + ("\n#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n" if bindings else "")


def _kernels_text(kernels: tuple[KernelSource, ...], bindings: bool) -> str:
    unit = "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"
    return unit + "\n" + bindings_source(kernels) if bindings else unit


def build_cpp(kernels: tuple[KernelSource, ...]) -> tuple[Path, bool]:
    """Compile (or find in the cache) the shared object for these kernels: (path, cache_hit).

    A cached object is returned only when its bytes match the SHA-256 recorded when it was built
    (cache.py): a changed one is rebuilt, never loaded."""
    include = python_include()
    prelude, body = _prelude_text(include is not None), _kernels_text(kernels, include is not None)
    source = prelude + body  # cpp_translation_unit's text: the key covers the prelude
    folder = cache.cache_subdir("cpp", cache.cpp_key(source, _toolchain()))
    target = folder / "kernels.so"
    if target.exists():
        state = cache.digest_state(target)
        if state == "ok":
            return target, True
        if state == "mismatch":
            warnings.warn(f"fcompile: {target} no longer matches the SHA-256 recorded when it was built; "
                          "it was not loaded and is being rebuilt", cache.CacheWarning, stacklevel=2)
    header = precompiled_prelude(include)
    # With the precompiled header, the same text as `source`: the header holds the prelude.
    written = f'#include "{PRELUDE_HEADER}"\n' + body if header is not None else source
    cache.write_atomic(folder / "kernels.cpp", written.encode())
    # Build beside the target and rename atomically: parallel processes may race on one key.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    includes = [f"-I{path}" for path in (header, include) if path is not None]
    cmd = [_compiler(), *CXX_FLAGS, *includes, "-o", tmp, str(folder / "kernels.cpp")]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp)
        raise BuildError("the C++ compiler rejected the generated code:\n" + result.stderr[-3000:])
    # Record first, then rename: a process racing on this key sees either no object or a recorded one.
    cache.write_atomic(cache.digest_record(target), cache.sha256_of(Path(tmp)).encode())
    os.replace(tmp, target)
    return target, False


# folder -> the folder once its precompiled header is usable, None where it could not be built
_PRECOMPILED: dict[str, Path | None] = {}
_BUILDING: dict[str, threading.Thread] = {}
_PRECOMPILED_LOCK = threading.Lock()


def precompiled_prelude(include: str | None, wait: bool = False) -> Path | None:
    """The folder holding the prelude header and its precompiled form for this toolchain and Python
    headers, or None while there is none to use.

    Where the cache lacks it, the first call starts building it in the background (0.6 s of GCC on
    the 2-core CPU machine) and returns None: the units built until it is ready read the prelude's
    text, so a cold first compile does not wait for it. `wait` waits for that build (tests). Its
    SHA-256 is checked once per process, as for a shared object: a changed one is built again."""
    text = f"#ifndef FC_PRELUDE_H\n#define FC_PRELUDE_H\n{_prelude_text(include is not None)}\n#endif\n"
    folder = cache.cache_subdir("cpp-prelude", cache.cpp_key(text + f"\0{include}", _toolchain()))
    key = str(folder)
    with _PRECOMPILED_LOCK:
        if key in _PRECOMPILED:
            known = _PRECOMPILED[key]
            if known is None or (known / PRELUDE_HEADER).exists():
                return known
            del _PRECOMPILED[key]  # the cache was emptied under this process
        thread = _BUILDING.get(key)
        if thread is None:
            if _usable(folder):
                _PRECOMPILED[key] = folder
                return folder
            thread = _BUILDING[key] = threading.Thread(target=_build_in_background, args=(key, folder, text, include),
                                                       daemon=True, name="fcompile-prelude")
            thread.start()
    if not wait:
        return None
    thread.join()
    return _PRECOMPILED.get(key)


def _usable(folder: Path) -> bool:
    compiled = folder / (PRELUDE_HEADER + ".gch")
    return (folder / PRELUDE_HEADER).exists() and compiled.exists() and cache.digest_state(compiled) == "ok"


def _build_in_background(key: str, folder: Path, text: str, include: str | None) -> None:
    try:
        built = _build_precompiled(folder, text, include)
    except Exception:  # noqa: BLE001 - a cache folder gone or unwritable: units keep the prelude's text
        built = None
    with _PRECOMPILED_LOCK:
        _PRECOMPILED[key] = built
        _BUILDING.pop(key, None)


def _build_precompiled(folder: Path, text: str, include: str | None) -> Path | None:
    header, compiled = folder / PRELUDE_HEADER, folder / (PRELUDE_HEADER + ".gch")
    cache.write_atomic(header, text.encode())
    fd, tmp = tempfile.mkstemp(suffix=".gch", dir=folder)
    os.close(fd)
    # The flags a unit is built with, less the linker's: GCC uses a .gch only for the same options.
    flags = [f for f in CXX_FLAGS if f != "-shared"]
    cmd = [_compiler(), *flags, *([f"-I{include}"] if include else []), "-x", "c++-header", str(header), "-o", tmp]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
    except OSError:
        result = None
    if result is None or result.returncode != 0:
        os.unlink(tmp)
        return None  # units then start with the prelude's text, as before
    cache.write_atomic(cache.digest_record(compiled), cache.sha256_of(Path(tmp)).encode())
    os.replace(tmp, compiled)
    return folder


def _toolchain() -> cache.Toolchain:
    compiler = _compiler()
    return cache.Toolchain(compiler=cache.resolve_compiler(compiler), version=_compiler_version(),
                           flags=tuple(CXX_FLAGS), native_target=cache.native_target(compiler),
                           machine=platform.machine())


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


_VERSION: dict[str, str] = {}


def _compiler_version() -> str:
    if "v" not in _VERSION:
        try:
            _VERSION["v"] = subprocess.run([_compiler(), "--version"], capture_output=True, text=True).stdout
        except OSError as exc:
            raise BuildError(f"no C++ compiler found ({_compiler()}): install g++ (apt-get install g++) "
                             "or use backend='triton'") from exc
    return _VERSION["v"]

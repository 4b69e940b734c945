"""The C++ backend's build: all kernels of a graph in one translation unit, compiled once by the system
compiler into a shared object cached on disk by content hash and toolchain (cache.py), so a warm
compile is a file lookup and a changed or planted object is never loaded."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
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

def cpp_translation_unit(kernels: tuple[KernelSource, ...], bindings: bool = False) -> str:
    """The prelude and every kernel; with `bindings`, also their Python entry points (cpp_bindings.py)."""
    unit = PRELUDE + "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"
    return unit + "\n" + bindings_source(kernels) if bindings else unit


def build_cpp(kernels: tuple[KernelSource, ...]) -> tuple[Path, bool]:
    """Compile (or find in the cache) the shared object for these kernels: (path, cache_hit).

    A cached object is returned only when its bytes match the SHA-256 recorded when it was built
    (cache.py): a changed one is rebuilt, never loaded."""
    include = python_include()
    source = cpp_translation_unit(kernels, bindings=include is not None)
    folder = cache.cache_subdir("cpp", cache.cpp_key(source, _toolchain()))
    target = folder / "kernels.so"
    if target.exists():
        state = cache.digest_state(target)
        if state == "ok":
            return target, True
        if state == "mismatch":
            warnings.warn(f"fcompile: {target} no longer matches the SHA-256 recorded when it was built; "
                          "it was not loaded and is being rebuilt", cache.CacheWarning, stacklevel=2)
    cache.write_atomic(folder / "kernels.cpp", source.encode())
    # Build beside the target and rename atomically: parallel processes may race on one key.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    cmd = [_compiler(), *CXX_FLAGS, *([f"-I{include}"] if include else []), "-o", tmp, str(folder / "kernels.cpp")]
    result = subprocess.run(cmd + ["-lmvec"], capture_output=True, text=True)
    if result.returncode != 0:
        # Without glibc's libmvec (musl, macOS, old glibc) the math stays scalar.
        result = subprocess.run(cmd + ["-DFC_NO_LIBMVEC"], capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp)
        raise BuildError("the C++ compiler rejected the generated code:\n" + result.stderr[-3000:])
    # Record first, then rename: a process racing on this key sees either no object or a recorded one.
    cache.write_atomic(cache.digest_record(target), cache.sha256_of(Path(tmp)).encode())
    os.replace(tmp, target)
    return target, False


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

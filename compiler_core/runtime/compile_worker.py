"""A compile worker: a child process that compiles Triton launches into Triton's on-disk cache.

`python -m compiler_core.runtime.compile_worker` reads one JSON job per line on stdin and answers one
JSON line on stdout: {"ok": true} or {"ok": false, "error": "..."}; it says {"ready": true} once its
imports are done, and exits at the end of its input (its parent closed the pipe or died). A job:

    {"key": "<module digest>", "source": "<module text, sent once per worker>", "function": "name",
     "args": [["dtype", "float32"], ["int", 4096]], "grid": [32], "meta": {"XBLOCK": 1024, ...},
     "cache_dir": "<TRITON_CACHE_DIR of the parent, or null>"}

It compiles by `fn.warmup(...)` on the same module text and the same arguments the parent launches
with, so the binary is filed under the key the parent's own compile of that launch looks up: the
parent then loads it from disk instead of running the compiler. Why processes and not only threads:
Triton's front end (Python AST -> TTIR) holds the GIL, so threads in one process compile about 1.5x
faster than one, where 16 processes compile about as many kernels at once.

Its own entry point, run as a file (not multiprocessing, whose spawned child imports the parent's
__main__ and so re-runs a user's script that compiles at top level; nor `-m`, which would import the
whole compiler and torch first). It imports Triton only: about 0.3 s to start.
"""

from __future__ import annotations

import functools
import json
import linecache
import os
import sys
from typing import Any


class TorchDtype:
    """A torch dtype as Triton's warm-up reads one (`torch.<name>`: its class name, module and text), so
    the worker need not import torch: 2 s of start-up, and torch's CUDA calls would make a context."""

    __module__ = "torch"

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))


TorchDtype.__name__ = TorchDtype.__qualname__ = "dtype"  # what triton.runtime.jit.MockTensor looks for


def _namespace(job: dict, modules: dict[str, dict]) -> dict[str, Any]:
    key = job["key"]
    if key not in modules:
        if job.get("source") is None:
            raise RuntimeError(f"no module text for {key}")
        source, filename = job["source"], f"<fcompile kernels {key}>"
        # Triton's JIT reads kernel source through inspect/linecache: register the text under its name.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"__name__": "fcompile_triton_kernels"}  # as the parent execs it
        _eager_libdevice().install()  # as the parent compiles: libdevice's square roots as eager's
        exec(compile(source, filename, "exec"), namespace)  # our generated kernels
        _eager_libdevice().claim(namespace)
        modules[key] = namespace
    return modules[key]


@functools.lru_cache(maxsize=None)
def _eager_libdevice() -> Any:
    """runtime/eager_libdevice.py, loaded by path: importing it as compiler_core's would import torch."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fcompile_eager_libdevice",
                                                  os.path.join(os.path.dirname(__file__), "eager_libdevice.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(job: dict, modules: dict[str, dict]) -> None:
    if job.get("cache_dir"):
        os.environ["TRITON_CACHE_DIR"] = job["cache_dir"]
    fn = _namespace(job, modules)[job["function"]]
    args = [TorchDtype(value) if kind == "dtype" else value for kind, value in job["args"]]
    # the compile options the parent's launches add (runtime/triton_launch.py): the same binary, found on disk
    fn.warmup(*args, grid=tuple(job["grid"]), **job["meta"], **_eager_libdevice().compile_options(job.get("libdevice")))


class CompileOnlyDriver:
    """Triton's driver as far as a warm-up asks it (device, stream, target), answered without touching
    the GPU: Triton's own driver asks torch, which makes a CUDA context, ~500 MiB of device memory in
    each worker. The target is the parent's GPU (FCOMPILE_WORKER_TARGET: backend, arch, warp size)."""

    def __init__(self, backend: str, arch: Any, warp_size: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget(backend, arch, warp_size)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"a compile worker's driver has no {name}: it compiles, never launches")


WARM_UP = ("import triton\nimport triton.language as tl\n\n@triton.jit\n"
           "def fcompile_warm_up(x, XBLOCK: tl.constexpr):\n    tl.store(x + tl.arange(0, XBLOCK), 0.0)\n")


def _warm_up() -> None:
    """One tiny compile, into a folder thrown away, before saying ready: Triton imports most of its
    compiler and asks ptxas its version at a process's first compile, which would otherwise fall on the
    first real job."""
    import tempfile

    before = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["TRITON_CACHE_DIR"] = scratch
        try:
            fn = _namespace({"key": "warm-up", "source": WARM_UP}, {})["fcompile_warm_up"]
            fn.warmup(TorchDtype("float32"), grid=(1,), XBLOCK=32)
        except Exception:  # noqa: BLE001 - only a head start; the jobs say what fails
            pass
        finally:
            if before is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = before


def main() -> None:
    # Run as a file, Python put this folder first on the path, where our runtime modules (cache.py,
    # build.py, ...) would stand in for any library's module of the same name.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    os.environ["TRITON_INTERPRET"] = "0"  # real GPU binaries, whatever the parent runs
    try:
        os.nice(10)  # the parent's own compile stages come first while this one starts and waits
    except OSError:
        pass
    out = sys.stdout
    try:
        import triton.language  # noqa: F401 - imported before answering ready: a job is then only compiling
        from triton.runtime.driver import driver

        driver.set_active(CompileOnlyDriver(*json.loads(os.environ["FCOMPILE_WORKER_TARGET"])))
    except Exception as exc:  # noqa: BLE001 - the parent compiles everything itself
        out.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return
    _warm_up()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    modules: dict[str, dict] = {}
    for line in sys.stdin:
        try:
            _compile(json.loads(line), modules)
            answer = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - the parent compiles this launch itself and sees the error
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

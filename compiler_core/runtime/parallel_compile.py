"""Compile many Triton launches at once, before any of them runs: on worker processes, then on threads.

A kernel compiles at its first launch, one after another: on the H200 a cold training step spent most
of its compile time there (gpt_block: 6.4 s of autotuning, ~5 s of first launches; each candidate config
of each kernel is a full TTIR -> LLVM -> PTX -> cubin pipeline of 50-300 ms).

Two steps. First, compile workers (runtime/compile_worker.py, started in the background when the first
CUDA graph compiles) run the launches' compiles, many at once, and file the binaries in Triton's disk
cache. Then this process warms the same launches inside `triton.AsyncCompileMode` (Triton 3.5+): each
`fn.warmup(...)` submits its compile to a thread pool, which finds the worker's binary on disk (or, for
a launch no worker reached, compiles it: MLIR, LLVM and ptxas release the GIL, Triton's Python front
end does not, so threads alone gain about 1.5x); leaving the mode files every binary in the function's
in-process cache under the key the real launch computes. The timing loop's launches and the host
program's then find their binary ready. Compiling never waits for a worker to start: a graph compiled
before any is ready is compiled on this process's threads alone.

The key (PITFALLS.md: a binary per specialization) holds each tensor's dtype and 16-byte alignment and
each integer's value class. Warm-up passes torch dtypes, which Triton wraps as tensors at address 0
(aligned), and the very integers the launch passes: the same key as a launch on fresh allocations. A
launch on a misaligned view compiles its own binary at launch, as it did before.

Nothing here changes what runs: a warm-up that fails (a config the compiler rejects) is forgotten, and
that launch compiles, or fails, in line exactly as without this module.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import torch

from compiler_core.runtime import compile_worker
from compiler_core.runtime.triton_launch import eager_libdevice_path

# FCOMPILE_COMPILE_THREADS: compile workers and threads; 1 compiles every launch in line, at its launch.
DEFAULT_THREADS = 16


@dataclass(frozen=True)
class WarmLaunch:
    """One launch to compile ahead: the JIT function (and its name in the module), its grid, its
    positional arguments as the launch passes them (tensors given by dtype) and its meta-parameters
    and compile options."""

    fn: Any
    function: str
    grid: tuple
    args: tuple
    meta: tuple[tuple[str, Any], ...]

    def job(self, key: str) -> dict:
        args = [["dtype", str(a).rsplit(".", 1)[-1]] if isinstance(a, torch.dtype) else ["int", int(a)]
                for a in self.args]
        return {"key": key, "function": self.function, "args": args, "grid": [int(g) for g in self.grid],
                "meta": dict(self.meta), "cache_dir": os.environ.get("TRITON_CACHE_DIR"),
                "libdevice": eager_libdevice_path()}  # the worker links the libdevice the parent links


def compile_threads() -> int:
    try:
        requested = int(os.environ.get("FCOMPILE_COMPILE_THREADS", DEFAULT_THREADS))
    except ValueError:
        requested = DEFAULT_THREADS
    return max(1, min(requested, os.cpu_count() or 1))


def _async_mode() -> Optional[type]:
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # Triton before 3.5: launches compile in line
        return None
    return AsyncCompileMode


class _Worker:
    """One compile worker process and what it has been sent."""

    def __init__(self, target: list) -> None:
        env = {**os.environ, "TRITON_INTERPRET": "0", "FCOMPILE_WORKER_TARGET": json.dumps(target)}
        self.process = subprocess.Popen([sys.executable, compile_worker.__file__],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=env)
        self.modules: set[str] = set()  # module digests whose text it holds
        self.ready = threading.Event()  # set once it said it is ready (or is gone: then alive is False)
        self.alive = True
        self.lock = threading.Lock()  # one job at a time on its pipe
        threading.Thread(target=self._await_ready, daemon=True, name="fcompile-worker-start").start()

    def _await_ready(self) -> None:
        answer = self._answer()
        self.alive = answer is not None and bool(answer.get("ready"))
        self.ready.set()

    def wait_ready(self, timeout: float = 120) -> bool:
        """Waits for its start-up (tests); compiling never waits: it takes the workers ready by then."""
        return self.ready.wait(timeout) and self.alive

    def compile(self, job: dict, source: str) -> bool:
        """Sends one job and waits for its answer; False where it failed or the worker is gone."""
        with self.lock:
            return self._compile(job, source)

    def _compile(self, job: dict, source: str) -> bool:
        if job["key"] not in self.modules:
            job = {**job, "source": source}
        try:
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
        except (OSError, ValueError):
            self.alive = False
            return False
        self.modules.add(job["key"])
        answer = self._answer()
        if answer is None:
            self.alive = False
            return False
        return bool(answer.get("ok"))

    def _answer(self) -> Optional[dict]:
        while True:  # a line some library printed is not an answer
            line = self.process.stdout.readline()
            if not line:
                return None
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if isinstance(answer, dict) and ("ok" in answer or "ready" in answer):
                return answer

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass


_WORKERS: list[_Worker] = []
_WORKERS_LOCK = threading.Lock()


def start_workers() -> None:
    """Starts the compile workers in the background (each imports Triton and compiles a tiny kernel
    before it says ready), once per process, where there is a GPU and more than one thread is allowed,
    unless FCOMPILE_COMPILE_WORKERS=0. Measured on the H200 (bench, empty caches, 2026-12-04): the GPT-2
    training step's cold compile 16.2 s on threads alone, 10.3 s with workers (Inductor: 12.7 and 12.2 s
    in the same runs); a process's first graph, compiled while they start, 8.4 s and 9.1 s."""
    if os.environ.get("FCOMPILE_COMPILE_WORKERS", "1") == "0" or compile_threads() < 2:
        return
    if not torch.cuda.is_available() or _async_mode() is None:
        return
    with _WORKERS_LOCK:
        if _WORKERS:
            return
        try:
            _WORKERS.extend(_Worker(_gpu_target()) for _ in range(compile_threads()))
        except Exception:  # noqa: BLE001 - no processes to be had, or no target to name: threads only
            return
        atexit.register(_stop_workers)


def _gpu_target() -> list:
    """This process's Triton target (backend, arch, warp size): what the workers compile for."""
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    return [target.backend, target.arch, target.warp_size]


def _stop_workers() -> None:
    for w in _WORKERS:
        w.close()


def _ready_workers() -> list[_Worker]:
    return [w for w in _WORKERS if w.ready.is_set() and w.alive]


def _on_workers(workers: list[_Worker], launches: list[WarmLaunch], key: str, source: str) -> tuple[int, int]:
    """Runs the launches' compiles on the (ready) workers, and on two threads of this process for those
    no worker has taken while they are free. Returns (compiled by workers, compiled here)."""
    jobs: queue.Queue = queue.Queue()
    for launch in launches:
        jobs.put(launch)
    counts = {"workers": 0, "here": 0}
    lock = threading.Lock()

    def drain(worker: Optional[_Worker]) -> None:
        while True:
            try:
                launch = jobs.get_nowait()
            except queue.Empty:
                return
            if worker is None:
                try:
                    launch.fn.warmup(*launch.args, grid=launch.grid, **dict(launch.meta))
                except Exception:  # noqa: BLE001 - the launch compiles, or fails, in line later
                    pass
                else:
                    with lock:
                        counts["here"] += 1
            elif worker.compile(launch.job(key), source):
                with lock:
                    counts["workers"] += 1
            elif not worker.alive:
                return

    # Two threads of this process compile too (more gain little: Triton's front end holds the GIL).
    threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in [*workers, None, None]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts["workers"], counts["here"]


def compile_ahead(launches: list[WarmLaunch], module: tuple[str, str]) -> str:
    """Compiles the launches (module: the kernels' module digest and text); returns one line for the
    tuning log ("" when nothing ran)."""
    distinct = list(dict.fromkeys(launches))
    mode_class = _async_mode()
    threads = compile_threads()
    if not distinct or mode_class is None or threads < 2 or not torch.cuda.is_available():
        return ""
    start = time.perf_counter()
    on_workers = ""
    workers = _ready_workers()  # none yet (still starting): all of it on this process's threads
    if workers:
        by_workers, here = _on_workers(workers, distinct, *module)
        on_workers = f" ({by_workers} by {len(workers)} workers, {here} here)"
    failed = 0
    # Into this process's kernel caches: the workers' binaries load from disk; any other compiles here.
    with ThreadPoolExecutor(threads, thread_name_prefix="fcompile-triton") as pool:
        try:
            mode = mode_class(pool, ignore_errors=True)
        except TypeError:  # an AsyncCompileMode without ignore_errors: a failure stops the wait below
            mode = mode_class(pool)
        try:
            with mode:
                for launch in distinct:
                    try:
                        launch.fn.warmup(*launch.args, grid=launch.grid, **dict(launch.meta))
                    except Exception:  # noqa: BLE001 - rejected before compiling; the launch says why
                        failed += 1
        except Exception as exc:  # noqa: BLE001 - a failed compile: the rest compile at their launches
            return (f"compiled ahead on {threads} threads: stopped after {time.perf_counter() - start:.2f} s "
                    f"({type(exc).__name__}); the other launches compile in line")
    note = f", {failed} refused" if failed else ""
    return (f"compiled ahead: {len(distinct)} kernel binaries{on_workers} on {threads} threads in "
            f"{time.perf_counter() - start:.2f} s{note}")

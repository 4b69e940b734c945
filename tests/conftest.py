"""Every test runs with the memory checking mode on (README: FCOMPILE_DEBUG=memory): freed storages
are poisoned with NaN and each new tensor is checked against the live ones, so a memory-planning
bug fails the test that meets it instead of passing by luck.

The OpInfo sweeps (tests/test_opinfo.py, tests/test_complex_opinfo.py) are the suite's longest tests:
thousands of compilations in processes of their own, about 12 minutes of one of the CI machine's 2
cores with the kernel cache cold. In a full run each test marked `sweep` has its sweep started as the
session starts, at low priority (nice 10), one kernel thread per process, beside the other tests; the
test, moved to the end, collects what its sweep found. Run alone (`pytest tests/test_opinfo.py`) a
sweep runs in the foreground.

`make test` runs the suite in two pytest-xdist processes (`-n 2 --dist load`): the rest of the suite
is mostly one Python thread per process (Dynamo tracing, our scheduler), so two of them and the
sweeps share the two cores. There every process collects every test: the first to claim a sweep (a
directory made in the run's shared folder, which the controlling process creates) starts it, and the
sweep's test, last in the order `--dist load` hands tests out, reads its files from whichever process
runs it. A sweep runs under tests/sweep_runner.py, which outlives the process that started it (that
one may finish its share first) and stops when the controlling process is gone."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import pytest

os.environ.setdefault("FCOMPILE_DEBUG", "memory")

SWEEP = Path(__file__).with_name("opinfo_sweep.py")
RUNNER = Path(__file__).with_name("sweep_runner.py")
# 10 minutes with the kernel cache warm on its own; with it cold (a new machine, or a change to the C++
# prelude or bindings) every kernel is built again: 25 minutes were not enough on the 2-core CPU
# machine beside another job (2026-12-02). CI's limit is 90 minutes.
SWEEP_TIMEOUT_S = 2700


class _SweepRun:
    """One run of the sweep script under tests/sweep_runner.py, its output in files in `directory` (a pipe
    would fill while nobody reads it). `start=False`: another pytest process started this run
    (pytest-xdist); this one only reads it."""

    def __init__(self, args: tuple[str, ...], background: bool, gpu_source: bool = False,
                 directory: Optional[Path] = None, owner: Optional[int] = None, start: bool = True):
        from compiler_core.codegen.triton.ahead import nvidia_target_available

        # With gpu_source, also compile each op's Triton kernels for the H200 (no GPU needed): source
        # only Triton's interpreter accepts would otherwise first fail on the GPU machine.
        self.gpu_source = gpu_source and nvidia_target_available()
        self.args, self.private = args, directory is None  # private: removed once read or stopped
        self.directory = directory or Path(tempfile.mkdtemp(prefix="fcompile-sweep-"))
        self.started = time.monotonic()
        if not start:
            return
        command = [sys.executable, str(SWEEP), *args] + (["--gpu-source"] if self.gpu_source else [])
        env = dict(os.environ)
        if background and shutil.which("nice"):
            # The foreground tests keep their cores (timing tests among them); the sweep takes what is idle.
            command = ["nice", "-n", "10", *command]
            env["OMP_NUM_THREADS"] = "1"
        runner = [sys.executable, str(RUNNER), str(owner or os.getpid()), str(self.directory), *command]
        process = subprocess.Popen(runner, env=env, cwd=SWEEP.parents[1], start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (self.directory / "group").write_text(str(process.pid))  # its session: the runner and the sweep

    def wait(self) -> subprocess.CompletedProcess:
        rc = self.directory / "rc"
        while not rc.exists():
            if time.monotonic() - self.started > SWEEP_TIMEOUT_S:
                self.stop()
                raise TimeoutError(f"the OpInfo sweep took over {SWEEP_TIMEOUT_S} s ({self.directory})")
            if not self._running():
                break
            time.sleep(1)
        if not rc.exists():
            raise RuntimeError(f"the sweep's runner ended without an exit status:\n{self._read('err')[-3000:]}")
        done = subprocess.CompletedProcess(self.args, int(rc.read_text()), self._read("out"), self._read("err"))
        if self.private:
            shutil.rmtree(self.directory, ignore_errors=True)
        return done

    def _read(self, name: str) -> str:
        path = self.directory / name
        return path.read_text() if path.exists() else ""

    def _running(self) -> bool:
        group = self._read("group")
        if not group:
            return True  # the starting process has not written it yet
        try:
            os.killpg(int(group), 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        group = self._read("group")
        if group:
            try:
                os.killpg(int(group), 9)
            except ProcessLookupError:
                pass
        if self.private:
            shutil.rmtree(self.directory, ignore_errors=True)


_SWEEPS: dict[str, _SweepRun] = {}  # a sweep test's node id -> its run, started at collection
SHARED_DIRECTORY = "FCOMPILE_SWEEP_DIR"  # set by pytest-xdist's controlling process for its workers
OWNER = "FCOMPILE_SWEEP_OWNER"


def _sweep_of(item) -> Optional[pytest.Mark]:
    return item.get_closest_marker("sweep")


def _is_xdist_controller(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config):
    if _is_xdist_controller(config):
        # Before the workers start (they inherit the environment): the folder their sweeps share.
        os.environ[SHARED_DIRECTORY] = tempfile.mkdtemp(prefix="fcompile-sweeps-")
        os.environ[OWNER] = str(os.getpid())


def pytest_unconfigure(config):
    shared = os.environ.get(SHARED_DIRECTORY)
    if shared and _is_xdist_controller(config):
        for run in Path(shared).iterdir():
            _SweepRun((), False, directory=run, start=False).stop()
        shutil.rmtree(shared, ignore_errors=True)


INTERPRETER_OFF = ("backend='triton' on CPU tensors runs in Triton's interpreter, which is off on a machine with a "
                   "GPU (Triton decides at import): there such a graph runs in eager PyTorch and the session says "
                   "so; the gpu-marked tests run our Triton kernels on the GPU")


def pytest_collection_modifyitems(session, config, items):
    _skip_interpreted_triton_where_a_gpu_is(items)
    _start_sweeps(items)


def _skip_interpreted_triton_where_a_gpu_is(items) -> None:
    """A test not marked `gpu` that takes backend="triton" compiles CPU tensors for the interpreter."""
    import torch

    if not torch.cuda.is_available():
        return
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("backend") == "triton" and item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.skip(reason=INTERPRETER_OFF))


def _start_sweeps(items) -> None:
    sweeps = [item for item in items if _sweep_of(item) is not None]
    if not sweeps or len(items) == len(sweeps) or importlib.util.find_spec("expecttest") is None:
        return
    shared = os.environ.get(SHARED_DIRECTORY) if "PYTEST_XDIST_WORKER" in os.environ else None
    for item in sweeps:  # last: by then the other tests are done and the sweep has had the whole run
        items.remove(item)
        items.append(item)
        mark = _sweep_of(item)
        if shared is None:
            _SWEEPS[item.nodeid] = _SweepRun(tuple(mark.args), background=True, **mark.kwargs)
            continue
        directory = Path(shared) / "".join(c if c.isalnum() else "_" for c in item.nodeid)
        try:
            directory.mkdir()  # the claim: one process makes it, the others read what it starts
            first = True
        except FileExistsError:
            first = False
        _SWEEPS[item.nodeid] = _SweepRun(tuple(mark.args), background=True, directory=directory,
                                         owner=int(os.environ[OWNER]), start=first, **mark.kwargs)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(SHARED_DIRECTORY) is None:  # under xdist the controlling process stops them
        for run in _SWEEPS.values():
            run.stop()  # -x, a keyboard interrupt or a failure before the sweep's test: not left running
    _SWEEPS.clear()


@pytest.fixture
def opinfo_sweep(request):
    """The run of the test's sweep (`@pytest.mark.sweep(*arguments of tests/opinfo_sweep.py,
    gpu_source=...)`): started in the background at collection (a full suite), else here."""
    mark = _sweep_of(request.node)
    assert mark is not None, "a test using opinfo_sweep is marked @pytest.mark.sweep(...)"
    return _SWEEPS.get(request.node.nodeid) or _SweepRun(tuple(mark.args), background=False, **mark.kwargs)

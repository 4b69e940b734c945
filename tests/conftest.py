"""Every test runs with the memory checking mode on (README: FCOMPILE_DEBUG=memory): freed storages
are poisoned with NaN and each new tensor is checked against the live ones, so a memory-planning
bug fails the test that meets it instead of passing by luck.

The OpInfo sweeps (tests/test_opinfo.py, tests/test_complex_opinfo.py) are the suite's longest tests:
thousands of compilations in processes of their own, about 12 minutes of the CI machine's 2 cores with
the kernel cache cold. The rest of the suite is mostly one Python thread (Dynamo tracing, our
scheduler), so in a full run each test marked `sweep` has its sweep started as the session starts, at
low priority (nice 10), one kernel thread per process, beside the other tests; the test, moved to the
end, collects what its sweep found. Run alone (`pytest tests/test_opinfo.py`) a sweep runs in the
foreground. Under pytest-xdist (`pytest -n 2 --dist worksteal`) each sweep test starts one process's
share of the suite instead and runs its sweep, niced, while that process's other tests wait and the
other process runs its own share (not faster than one process yet: README.md)."""

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

from compiler_core import _compat

os.environ.setdefault("FCOMPILE_DEBUG", "memory")

SWEEP = Path(__file__).with_name("opinfo_sweep.py")
# 10 minutes with the kernel cache warm on its own; with it cold (a new machine, or a change to the C++
# prelude or bindings) every kernel is built again: 25 minutes were not enough on the 2-core CPU
# machine beside another job (2026-12-02). CI's limit is 90 minutes.
SWEEP_TIMEOUT_S = 2700


class _SweepRun:
    """One run of the sweep script, its output in files (a pipe would fill while nobody reads it)."""

    def __init__(self, args: tuple[str, ...], background: bool, gpu_source: bool = False):
        from compiler_core.codegen.triton.ahead import nvidia_target_available

        # With gpu_source, also compile each op's Triton kernels for the H200 (no GPU needed): source
        # only Triton's interpreter accepts would otherwise first fail on the GPU machine.
        self.gpu_source = gpu_source and nvidia_target_available()
        self.background = background
        command = [sys.executable, str(SWEEP), *args] + (["--gpu-source"] if self.gpu_source else [])
        env = dict(os.environ)
        if background and shutil.which("nice"):
            # The foreground tests keep their core (timing tests among them); the sweep takes what is idle.
            command = ["nice", "-n", "10", *command]
            env["OMP_NUM_THREADS"] = "1"
        self._out = tempfile.TemporaryFile(mode="w+")
        self._err = tempfile.TemporaryFile(mode="w+")
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, stdout=self._out, stderr=self._err, text=True, env=env,
                                        cwd=SWEEP.parents[1], start_new_session=True,
                                        preexec_fn=_compat.die_with_parent)

    def wait(self) -> subprocess.CompletedProcess:
        left = SWEEP_TIMEOUT_S - (time.monotonic() - self.started)
        try:
            self.process.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self._out.seek(0)
        self._err.seek(0)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, self._out.read(),
                                           self._err.read())

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait()


_SWEEPS: dict[str, _SweepRun] = {}  # a sweep test's node id -> its run, started at collection


def _sweep_of(item) -> Optional[pytest.Mark]:
    return item.get_closest_marker("sweep")


def _in_xdist_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def pytest_collection_modifyitems(session, config, items):
    sweeps = [item for item in items if _sweep_of(item) is not None]
    if not sweeps or len(items) == len(sweeps) or importlib.util.find_spec("expecttest") is None:
        return
    if _in_xdist_worker():
        # Under pytest-xdist (`-n 2 --dist worksteal`) each process collects every test, so each would
        # start every sweep. There the sweep tests run their sweeps themselves
        # (niced, as in the background), each placed where a process's first share of the suite starts:
        # xdist hands each process a contiguous share (the first half, the second half) and the idle one
        # steals from the other's end, so a sweep starts at once and the other tests go on around it.
        total = len(items)
        slots = {k * total // len(sweeps): item for k, item in enumerate(sweeps)}
        rest = iter([item for item in items if _sweep_of(item) is None])
        items[:] = [slots[i] if i in slots else next(rest) for i in range(total)]
        return
    for item in sweeps:  # last: by then the other tests are done and the sweep has had the whole run
        items.remove(item)
        items.append(item)
        mark = _sweep_of(item)
        _SWEEPS[item.nodeid] = _SweepRun(tuple(mark.args), background=True, **mark.kwargs)


def pytest_sessionfinish(session, exitstatus):
    for run in _SWEEPS.values():
        run.stop()  # -x, a keyboard interrupt or a failure before the sweep's test: not left running
    _SWEEPS.clear()


@pytest.fixture
def opinfo_sweep(request):
    """The run of the test's sweep (`@pytest.mark.sweep(*arguments of tests/opinfo_sweep.py,
    gpu_source=...)`): started in the background at collection (a full suite), else here."""
    mark = _sweep_of(request.node)
    assert mark is not None, "a test using opinfo_sweep is marked @pytest.mark.sweep(...)"
    return _SWEEPS.get(request.node.nodeid) or _SweepRun(tuple(mark.args), background=_in_xdist_worker(),
                                                         **mark.kwargs)

"""The roofline's ceilings, measured on this device: copy bandwidth and matmul throughput.

    c = device_ceilings("cpu")      # measured once per process (and kept on disk, keyed by the device)
    c.copy_GBps, c.matmul_GFLOPs, c.device_name

Copy bandwidth is bytes read + written per second of one large tensor copy (compiler_core.bench.timing);
matmul throughput the FLOPs per second of one large fp32 `torch.mm`. Both take the best sample: a
ceiling is what the device can do, and a busy machine only ever lowers it. Each is measured in two
rounds; only when the rounds agree is the result kept on disk (else the next process measures again,
and the view says the ceilings may be low). The disk copy is a small JSON
file in the kernel cache folder (compiler_core/runtime/cache.py: private folders, atomic writes,
nothing unpickled), keyed by the device's name, the thread count and the torch version.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass
from datetime import date
from typing import Optional

import torch

from compiler_core.bench.timing import copy_bandwidth_GBps, time_interleaved
from compiler_core.runtime import cache

MATMUL_N = {"cpu": 1024, "cuda": 8192}  # square fp32 matmul sizes: past the caches, seconds at most
AGREEMENT = 0.15  # the two rounds' results may differ by this fraction of the larger


@dataclass(frozen=True)
class Ceilings:
    device: str  # "cpu" or "cuda"
    device_name: str  # the CPU's model name, or the GPU's
    threads: int  # intra-op threads the measurement ran with (CPU)
    copy_GBps: float
    matmul_GFLOPs: float
    matmul_n: int
    measured_on: str  # the date it was measured
    from_disk: bool = False
    stable: bool = True  # the two measuring rounds agreed (within AGREEMENT)

    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte where the two ceilings meet: below it a kernel is bound by memory."""
        return self.matmul_GFLOPs / self.copy_GBps

    def attainable_GFLOPs(self, intensity: float) -> float:
        return min(self.matmul_GFLOPs, self.copy_GBps * intensity)


_MEASURED: dict[tuple[str, str, int], Ceilings] = {}


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_ceilings(device: str, use_disk: bool = True) -> Ceilings:
    """The ceilings of `device` ("cpu" or "cuda"), measured at most once per process and device."""
    name, threads = device_name(device), torch.get_num_threads()
    key = (device, name, threads)
    if key in _MEASURED:
        return _MEASURED[key]
    found = _read_disk(device, name, threads) if use_disk else None
    if found is None:
        found = measure_ceilings(device, name, threads)
        if use_disk and found.stable:
            _write_disk(found)
    _MEASURED[key] = found
    return found


def measure_ceilings(device: str, name: str, threads: int, repeats: int = 8) -> Ceilings:
    n = MATMUL_N[device]
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    out = torch.empty(n, n, device=device)
    rounds = []
    for _ in range(2):
        copy = copy_bandwidth_GBps(device, repeats=repeats)
        ms = time_interleaved({"mm": lambda: torch.mm(a, b, out=out)}, device, repeats, reduce=min)["mm"]
        rounds.append((copy, 2 * n**3 / (ms * 1e-3) / 1e9))
    (copy1, mm1), (copy2, mm2) = rounds
    stable = all(abs(x - y) <= AGREEMENT * max(x, y) for x, y in ((copy1, copy2), (mm1, mm2)))
    return Ceilings(device=device, device_name=name, threads=threads, copy_GBps=max(copy1, copy2),
                    matmul_GFLOPs=max(mm1, mm2), matmul_n=n, measured_on=date.today().isoformat(), stable=stable)


def _path(device: str, name: str, threads: int):
    key = cache.digest(device, name, str(threads), torch.__version__)
    return cache.cache_subdir("ceilings") / f"{key}.json"


def _read_disk(device: str, name: str, threads: int) -> Optional[Ceilings]:
    try:
        data = json.loads(_path(device, name, threads).read_text())
        found = Ceilings(device=str(data["device"]), device_name=str(data["device_name"]),
                         threads=int(data["threads"]), copy_GBps=float(data["copy_GBps"]),
                         matmul_GFLOPs=float(data["matmul_GFLOPs"]), matmul_n=int(data["matmul_n"]),
                         measured_on=str(data["measured_on"]), from_disk=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # A file that does not describe this device, or holds nonsense, is measured again.
    if (found.device, found.device_name, found.threads) != (device, name, threads):
        return None
    if not (found.copy_GBps > 0 and found.matmul_GFLOPs > 0):
        return None
    return found


def _write_disk(found: Ceilings) -> None:
    data = {k: v for k, v in asdict(found).items() if k != "from_disk"}
    try:
        cache.write_atomic(_path(found.device, found.device_name, found.threads), json.dumps(data).encode())
    except OSError:
        pass  # the in-memory copy serves this process; the next one measures again

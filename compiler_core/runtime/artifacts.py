"""Runtime artifact: the loaded program for one graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass(frozen=True)
class CompiledArtifact:
    call: Callable = field(compare=False, repr=False)  # call(list_of_tensors) -> tuple of outputs
    backend: str
    kernel_names: tuple[str, ...]
    chosen_configs: dict = field(default_factory=dict, compare=False)  # kernel -> launch config
    tuning_log: tuple[str, ...] = ()
    cache_hit: bool = False
    library_path: Optional[str] = None  # the C++ shared object, when backend == "cpp"
    cudagraph: str = "not used: mode is default"
    checker: object = field(default=None, compare=False, repr=False)  # KernelChecker in the check mode

    def pretty(self) -> str:
        lines = [f"# backend {self.backend}, cache {'hit' if self.cache_hit else 'miss'}, cudagraph: {self.cudagraph}"]
        if self.library_path:
            lines.append(f"# library {self.library_path}")
        for k in self.kernel_names:
            lines.append(f"{k}: {self.chosen_configs.get(k, {})}")
        lines += [f"# {t}" for t in self.tuning_log]
        return "\n".join(lines)


@dataclass(frozen=True)
class KernelCheck:
    """The check mode's verdict on one kernel (`cc.compile(fn, check=True)`): its outputs against the
    same FX nodes run in eager PyTorch on the inputs the kernel read."""

    kernel: str
    nodes: tuple[str, ...]  # the kernel's FX nodes (its origins)
    max_abs_error: float  # over every output compared (0.0 when nothing could be compared)
    ok: bool
    source_line: str  # the user's line of the first wrong node, else of the kernel's first node
    graph: str = ""  # e.g. "graph 0 (forward)"
    node: str = ""  # the first FX node whose value disagreed ("" when all agree)
    note: str = ""  # why the kernel could not be checked, when it could not
    # Outputs outside the fp32 tolerance of eager's value but no further from the exact (fp64) result
    # than eager's own rounding: a sum with cancellation, where both are off by about as much.
    rounding: str = ""

    def pretty(self) -> str:
        verdict = "ok  " if self.ok else "FAIL"
        what = f"max abs error {self.max_abs_error:.3g}" if not self.note else f"not checked: {self.note}"
        what += f" ({self.rounding})" if self.rounding else ""
        wrong = f", first wrong node {self.node}" if self.node else ""
        line = f"  # {self.source_line}" if self.source_line else ""
        return f"{verdict} {self.kernel} ({', '.join(self.nodes)}): {what}{wrong}{line}"

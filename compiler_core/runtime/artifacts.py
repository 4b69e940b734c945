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

    def pretty(self) -> str:
        lines = [f"# backend {self.backend}, cache {'hit' if self.cache_hit else 'miss'}, cudagraph: {self.cudagraph}"]
        if self.library_path:
            lines.append(f"# library {self.library_path}")
        for k in self.kernel_names:
            lines.append(f"{k}: {self.chosen_configs.get(k, {})}")
        lines += [f"# {t}" for t in self.tuning_log]
        return "\n".join(lines)

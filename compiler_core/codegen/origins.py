"""Line-level provenance of generated kernels: which FX nodes each emitted line computes.

A code generator appends `marked(line, origins)` instead of `line`; indenting and nesting the lines
(prefixes) keeps the mark at the end. `split_origins` then removes every mark and returns the source
and `((line number, FX nodes), ...)`, the tuple KernelSource.line_origins holds:

    source, origins = split_origins(["def k():", marked("    t0 = tl.exp(x)", ("exp",))])
    # source == "def k():\\n    t0 = tl.exp(x)", origins == ((2, ("exp",)),)
"""

from __future__ import annotations

from typing import Iterable

# ASCII unit separator: never in generated Triton or C++ source.
MARK = "\x1f"


def marked(line: str, origins: Iterable[str]) -> str:
    names = ",".join(origins)
    return f"{line}{MARK}{names}" if names else line


def split_origins(lines: Iterable[str]) -> tuple[str, tuple[tuple[int, tuple[str, ...]], ...]]:
    """(source without marks, ((1-based line number, FX node names), ...) for every marked line)."""
    text, origins = [], []
    for number, line in enumerate(lines, 1):
        code, mark, names = line.partition(MARK)
        text.append(code)
        if mark:
            origins.append((number, tuple(dict.fromkeys(names.split(",")))))
    return "\n".join(text), tuple(origins)

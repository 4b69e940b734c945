"""The set-up promise: README starts with `make demo` and `make test`; CI runs exactly `make test`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """Shell commands in README.md's fenced code blocks, in order, comments stripped."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang in ("", "bash", "sh", "shell", "console"):
            commands += [line.split("#", 1)[0].strip().lstrip("$ ") for line in body.splitlines()]
    return [c for c in commands if c]


def test_readme_starts_with_make_demo_and_make_test():
    assert readme_commands()[:2] == ["make demo", "make test"]


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK)
    lines = [line.strip() for line in ci.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert "set -euo pipefail" in lines
    assert lines[-1] == "make test"


def test_makefile_targets_and_cpu_torch_pin():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("venv", "demo", "test", "lab", "bench", "clean"):
        assert re.search(rf"^{target}:", makefile, flags=re.M), target
    # An unpinned torch resolves to a multi-GB CUDA build on CPU machines.
    assert "torch==2.13.0" in makefile


def test_pyproject_metadata():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["name"] == "fcompile"
    torch_req = next(d for d in config["project"]["dependencies"] if d.startswith("torch"))
    assert "<" in torch_req  # bounded: an open range admits a newer (CUDA) torch
    markers = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert {"gpu", "slow", "e2e", "notebook"} <= markers


def test_binder_is_cpu_only_and_installs_the_repo():
    requirements = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    entries = [line.strip() for line in requirements if line.strip() and not line.startswith("#")]
    assert "." in entries  # a binder/ folder makes repo2docker ignore the root pyproject.toml
    assert any(e.startswith("torch==") and "+cpu" in e for e in entries)
    assert not any(e.startswith("triton") for e in entries)
    apt = (ROOT / "binder" / "apt.txt").read_text().split()
    assert {"graphviz", "g++"} <= set(apt)

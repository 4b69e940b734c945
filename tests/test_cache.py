"""The kernel cache cannot be turned against its user (runtime/cache.py): private folders, verified
shared objects, keys that cover the toolchain and the CPU, nothing unpickled.  Every test that
compiles also checks the values against eager PyTorch."""

import ast
import dataclasses
import os
import shutil
import stat
import warnings
from pathlib import Path

import pytest
import torch

import compiler_core as cc
from compiler_core.runtime import autotune, cache, cpp_build, triton_load

X = torch.randn(64)


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "fcompile"
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(root))
    return root


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _compile_and_check(fn, backend="cpp"):
    """Compile fn, run it on X, compare with eager; return the session."""
    session = cc.explain(fn, X, backend=backend)
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(X), fn(X))
    assert session.stats["fallback_graphs"] == 0, session.messages
    return session


def _no_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, cache.CacheWarning)] == []


# ---- 1. private folders --------------------------------------------------------------------------
def test_cache_and_its_folders_are_created_private(cache_root):
    s = _compile_and_check(lambda x: x * 2 + 1)
    library = Path(s.graphs[0].artifact.library_path)
    assert library.is_relative_to(cache_root)
    for folder in (cache_root, cache_root / "cpp", library.parent):
        assert _mode(folder) == 0o700, folder
    assert cc.explain(lambda x: x * 2 + 1, X, backend="cpp").graphs[0].artifact.cache_hit


@pytest.mark.parametrize("mode", [0o770, 0o707], ids=["group-writable", "world-writable"])
def test_writable_cache_is_refused_and_compiling_goes_on_in_a_private_one(cache_root, mode):
    cache_root.mkdir()
    os.chmod(cache_root, mode)
    with pytest.warns(cache.CacheWarning, match=f"chmod 700 {cache_root}.*private temporary cache"):
        s = _compile_and_check(lambda x: x * 4 - 1)
    assert os.listdir(cache_root) == []  # nothing written where others could reach it
    fallback = Path(s.graphs[0].artifact.library_path).parents[2]
    assert fallback != cache_root and _mode(fallback) == 0o700
    # said once: the next compile in this process uses the fallback silently
    assert _no_warnings(lambda: _compile_and_check(lambda x: x * 5 - 1))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_cache_owned_by_another_user_is_refused(cache_root):
    cache_root.mkdir(mode=0o700)
    os.chown(cache_root, 12345, 12345)
    with pytest.warns(cache.CacheWarning, match="owned by uid 12345.*FCOMPILE_CACHE_DIR"):
        _compile_and_check(lambda x: x * 6 + 2)
    assert os.listdir(cache_root) == []


def test_writable_subfolder_is_refused(cache_root):
    (cache_root / "cpp").mkdir(parents=True)
    os.chmod(cache_root / "cpp", 0o777)
    with pytest.warns(cache.CacheWarning, match="cpp is writable by its group or by everyone"):
        _compile_and_check(lambda x: x * 7 + 2)
    assert os.listdir(cache_root / "cpp") == []


def test_a_parent_others_can_write_is_refused_unless_sticky(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(shared / "fcompile"))
    with pytest.warns(cache.CacheWarning, match=f"chmod go-w {shared}"):
        _compile_and_check(lambda x: x * 8 + 2)
    # like /tmp: others may create entries but not rename or delete ours
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(sticky / "fcompile"))
    assert _no_warnings(lambda: _compile_and_check(lambda x: x * 9 + 2))
    assert (sticky / "fcompile" / "cpp").is_dir()


# ---- 2. verified shared objects ----------------------------------------------------------------
def _library(fn) -> Path:
    return Path(cc.explain(fn, X, backend="cpp").graphs[0].artifact.library_path)


def test_swapped_shared_object_is_not_loaded(tmp_path, monkeypatch):
    double = lambda x: x * 2 + 1  # noqa: E731
    triple = lambda x: x * 3 + 1  # noqa: E731
    # Build both in one cache: one kernel each, same name and signature, different constants.
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(tmp_path / "build"))
    genuine, other = _library(double), _library(triple)
    assert genuine != other
    # A fresh cache (a path this process never loaded) holding the other program's object under
    # the genuine key, beside the genuine record: loaded blindly it would compute x * 3 + 1.
    planted = tmp_path / "planted"
    target = planted / genuine.relative_to(tmp_path / "build")
    target.parent.mkdir(mode=0o700, parents=True)
    shutil.copy(other, target)
    shutil.copy(cache.digest_record(genuine), cache.digest_record(target))
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(planted))
    with pytest.warns(cache.CacheWarning, match="no longer matches the SHA-256.*not loaded"):
        s = _compile_and_check(double)
    assert not s.graphs[0].artifact.cache_hit
    assert target.read_bytes() != other.read_bytes()
    assert cache.digest_state(target) == "ok"


# ---- 2b. the precompiled prelude -------------------------------------------------------------------
def _prelude_folder() -> Path:
    from compiler_core.runtime.cpp_bindings import python_include

    return cpp_build.precompiled_prelude(python_include(), wait=True)


def _unit(session) -> str:
    return Path(session.graphs[0].artifact.library_path).with_name("kernels.cpp").read_text()


def test_a_cold_cache_builds_the_prelude_in_the_background_and_later_units_use_it(cache_root):
    from compiler_core.codegen.cpp.prelude import PRELUDE

    first = _compile_and_check(lambda x: x * 6 + 1)
    assert _unit(first).startswith(PRELUDE)  # it did not wait for the header
    folder = _prelude_folder()
    assert folder.is_relative_to(cache_root) and cache.digest_state(folder / "fc_prelude.h.gch") == "ok"
    assert _unit(_compile_and_check(lambda x: x * 6 + 2)).startswith(f'#include "{cpp_build.PRELUDE_HEADER}"')


def test_units_are_built_against_the_precompiled_prelude(cache_root):
    import subprocess

    from compiler_core.runtime.cpp_bindings import python_include

    folder = _prelude_folder()
    s = _compile_and_check(lambda x: torch.tanh(x) * 2)
    unit = Path(s.graphs[0].artifact.library_path).with_name("kernels.cpp")
    assert unit.read_text().startswith(f'#include "{cpp_build.PRELUDE_HEADER}"')
    # GCC's -H lists every header it reads and marks with '!' a precompiled one it used: a .gch it
    # found but rejected (other flags) would be listed as 'x' and its text read instead.
    flags = [f for f in cpp_build.CXX_FLAGS if f != "-shared"]
    include = python_include()
    run = subprocess.run([cpp_build._compiler(), *flags, f"-I{folder}", *([f"-I{include}"] if include else []),
                          "-H", "-c", str(unit), "-o", os.devnull], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"! {folder / 'fc_prelude.h.gch'}" in run.stderr.splitlines(), run.stderr[:2000]


def test_a_changed_precompiled_prelude_is_rebuilt_never_used(cache_root, monkeypatch):
    compiled = _prelude_folder() / "fc_prelude.h.gch"
    compiled.write_bytes(b"not a precompiled header")
    monkeypatch.setattr(cpp_build, "_PRECOMPILED", {})  # a new process: it checks the digest again
    s = _compile_and_check(lambda x: x * 4 - 1)
    assert not _unit(s).startswith("#include")  # not used while it is built again
    assert _prelude_folder() is not None and cache.digest_state(compiled) == "ok"


def test_without_a_precompiled_prelude_a_unit_holds_the_prelude_text(cache_root, monkeypatch):
    from compiler_core.codegen.cpp.prelude import PRELUDE

    monkeypatch.setattr(cpp_build, "_PRECOMPILED", {})
    monkeypatch.setattr(cpp_build, "_build_precompiled", lambda folder, text, include: None)
    assert _prelude_folder() is None
    assert _unit(_compile_and_check(lambda x: x * 5 + 1)).startswith(PRELUDE)


def test_changed_record_means_rebuild(cache_root):
    fn = lambda x: x * 2 - 3  # noqa: E731
    library = _library(fn)
    cache.digest_record(library).write_text("0" * 64)
    with pytest.warns(cache.CacheWarning, match="rebuilt"):
        s = _compile_and_check(fn)
    assert not s.graphs[0].artifact.cache_hit and cache.digest_state(library) == "ok"


def test_triton_source_on_disk_is_rewritten_never_run(cache_root, monkeypatch):
    fn = lambda x: torch.sin(x) + 2  # noqa: E731
    _compile_and_check(fn, backend="triton")
    (path,) = (cache_root / "triton").glob("*.py")
    genuine = path.read_text()
    path.write_text("raise SystemExit('planted')\n")
    monkeypatch.setattr(triton_load, "_LOADED_TRITON", {})  # as in a new process
    _compile_and_check(fn, backend="triton")
    assert path.read_text() == genuine


# ---- 3. what a key covers ---------------------------------------------------------------------
TOOLCHAIN = cache.Toolchain(compiler="/usr/bin/g++-12", version="g++ (Debian 12.2.0-14) 12.2.0",
                            flags=("-O3", "-march=native"), native_target="-march= znver3\n-mavx2 [enabled]",
                            machine="x86_64")


@pytest.mark.parametrize("change", [
    {"compiler": "/usr/bin/clang++"},
    {"version": "g++ (Debian 13.1.0) 13.1.0"},
    {"flags": ("-O2", "-march=native")},
    {"native_target": "-march= znver4\n-mavx2 [enabled]\n-mavx512f [enabled]"},
    {"machine": "aarch64"},
])
def test_cpp_key_changes_with_each_part_of_the_toolchain(change):
    assert cache.cpp_key("src", dataclasses.replace(TOOLCHAIN, **change)) != cache.cpp_key("src", TOOLCHAIN)
    assert cache.cpp_key("src", TOOLCHAIN) == cache.cpp_key("src", dataclasses.replace(TOOLCHAIN))


class _Run:
    def __init__(self, stdout):
        self.stdout = stdout


def test_native_target_reads_what_march_native_enables(monkeypatch):
    help_text = ("The following options are target specific:\n  -march=                     \t\tznver3\n"
                 "  -mavx2                      \t\t[enabled]\n  -mavx512f                   \t\t[disabled]\n"
                 "  Known valid arguments for -march= option:\n    i386 i486\n")
    monkeypatch.setattr(cache.subprocess, "run", lambda *a, **k: _Run(help_text))
    assert cache.native_target("fake-gcc-a") == "-march= znver3\n-mavx2 [enabled]"
    monkeypatch.setattr(cache.subprocess, "run", lambda *a, **k: _Run(help_text.replace("[disabled]", "[enabled]")))
    assert "-mavx512f [enabled]" in cache.native_target("fake-gcc-b")


def test_native_target_falls_back_to_cpu_features(monkeypatch):
    def missing(*a, **k):
        raise FileNotFoundError("no such compiler")

    monkeypatch.setattr(cache.subprocess, "run", missing)
    monkeypatch.setattr(cache, "cpu_features", lambda: "avx2 fma sse4_2")
    assert cache.native_target("fake-clang") == "avx2 fma sse4_2"


@pytest.mark.parametrize("change", ["isa", "compiler_version", "flags"])
def test_a_different_cpu_compiler_or_flags_builds_anew(cache_root, monkeypatch, change):
    fn = lambda x: x * 2 + 5  # noqa: E731
    before = _library(fn)
    if change == "isa":
        monkeypatch.setattr(cache, "native_target", lambda compiler: "-march= some-other-cpu")
    elif change == "compiler_version":
        monkeypatch.setattr(cpp_build, "_compiler_version", lambda: "g++ 99.0")
    else:
        monkeypatch.setattr(cpp_build, "CXX_FLAGS", [*cpp_build.CXX_FLAGS, "-DFC_SOME_FLAG"])
    s = _compile_and_check(fn)
    assert not s.graphs[0].artifact.cache_hit
    assert Path(s.graphs[0].artifact.library_path) != before


def test_runtime_identity_names_versions_and_device(monkeypatch):
    import triton

    identity = cache.runtime_identity("cpu")
    for part in (torch.__version__, triton.__version__, f"cuda {torch.version.cuda}", "python", "device cpu"):
        assert part in identity
    cache._runtime_identity.cache_clear()
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    try:
        assert cache.runtime_identity("cpu") != identity
    finally:
        cache._runtime_identity.cache_clear()


# ---- 4. nothing read from the cache runs as code -----------------------------------------------
def test_autotune_ignores_a_planted_config(cache_root, monkeypatch):
    monkeypatch.setattr(cache, "runtime_identity", lambda device: "test")
    kernel = cc.explain(lambda x: x + 1, X, backend="triton").graphs[0].kernels[0]
    kernel = dataclasses.replace(kernel, config_space=({"XBLOCK": 64, "num_warps": 4},
                                                       {"XBLOCK": 128, "num_warps": 8}))
    autotune._write_cache(kernel, {"XBLOCK": 64, "num_warps": "__import__('os').system('id')"})
    assert autotune._read_cache(kernel) is None
    autotune._cache_path(kernel).write_text('{"XBLOCK": 128.0, "num_warps": 8}')
    assert autotune._read_cache(kernel) == {"XBLOCK": 128, "num_warps": 8}
    assert repr(autotune._read_cache(kernel)["XBLOCK"]) == "128"


UNSAFE_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve"}


def _unsafe_loads(source: str) -> list[str]:
    """Imports of unpickling modules and torch.load calls in source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append(node.module)
        elif (isinstance(node, ast.Attribute) and node.attr == "load" and isinstance(node.value, ast.Name)
              and node.value.id == "torch"):
            found.append("torch.load")
    return found


def test_unsafe_load_finder_finds_them():
    assert _unsafe_loads("import pickle\nfrom marshal import loads\ny = torch.load(f)\n") == \
        ["pickle", "marshal", "torch.load"]
    assert _unsafe_loads("import json\ny = json.load(f)\n") == []


def test_compiler_core_never_unpickles():
    package = Path(cc.__file__).parent
    offenders = {str(p.relative_to(package)): found for p in sorted(package.rglob("*.py"))
                 if (found := _unsafe_loads(p.read_text()))}
    assert offenders == {}


def test_autotune_keeps_the_heuristic_config_unless_another_is_clearly_faster():
    # Noise on a busy GPU must not flip a reduction's config (another config is another summation
    # order, so results would change from run to run for nothing).
    heuristic, other = {"XBLOCK": 8, "num_warps": 16}, {"XBLOCK": 1, "num_warps": 4}
    assert autotune.pick_config([(heuristic, 1.00), (other, 0.97)], heuristic) == heuristic
    assert autotune.pick_config([(heuristic, 1.00), (other, 0.80)], heuristic) == other
    assert autotune.pick_config([(other, 0.90)], heuristic) == other  # the heuristic one did not compile

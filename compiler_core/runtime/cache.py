"""The on-disk kernel cache: where it lives, when it can be trusted, what a key covers, verified files.

Whatever sits in the cache is loaded into the process (a shared object through ctypes) or turned into
code (tuned launch configs end up in the host program), so anyone who can write the cache can run code
as its user.  Four rules keep it the user's own:

1. The cache (``FCOMPILE_CACHE_DIR``, else ``~/.cache/fcompile``) and every folder made in it are created
   with mode 0700.  A cache that is owned by another user or group/world-writable, or that lies under a
   folder another user could rename it out of (writable by others without the sticky bit, or owned by a
   user other than you or root), is refused: this process then uses a private temporary cache
   (``tempfile.mkdtemp``, 0700, removed at exit) and says so once with a ``CacheWarning`` naming the
   reason and what to do.  Compiling keeps working, only cold; failing the user's compile over a
   cache would punish them for something the compiler can route around.
2. A shared object is loaded only when its bytes hash to the SHA-256 recorded beside it
   (``kernels.so.sha256``, written before the object is renamed into place).  A mismatch is rebuilt,
   with a warning, and never loaded.  The record catches corruption and a swapped file; an attacker
   who could rewrite both files could write the cache at all, which rule 1 is there to prevent.
   Triton sources are written for people to read and never read back: what runs is the in-memory text.
3. A key covers everything the binary depends on: the source, the compiler (path and version), the
   flags, the instruction-set extensions ``-march=native`` turns on for this CPU, and for Triton and
   tuning results the torch, Triton, CUDA and Python versions and the GPU's name.  Each is computed
   once per process.
4. Nothing read from the cache is unpickled: tuning results are JSON, and a cached config is used only
   when it is one of the candidates the code generator offered.

    folder = cache_subdir("cpp", cpp_key(source, toolchain))  # 0700 and checked, or the private fallback
    digest_state(folder / "kernels.so")                        # "ok", "missing" or "mismatch"
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
from dataclasses import astuple, dataclass
from pathlib import Path


class CacheWarning(UserWarning):
    """The kernel cache was not used as asked (refused folder, tampered file); compiling went on."""


class UntrustedCache(Exception):
    """A cache folder that someone other than the user could write; the message says what to do."""


def requested_root() -> Path:
    """The cache folder the user asked for: FCOMPILE_CACHE_DIR, else ~/.cache/fcompile."""
    return Path(os.environ.get("FCOMPILE_CACHE_DIR") or Path.home() / ".cache" / "fcompile")


# requested root -> the private temporary cache this process uses instead (decided once, warned once)
_FALLBACK: dict[str, Path] = {}


def cache_root() -> Path:
    """The cache folder to use: the requested one when it is private to the user, else a private
    temporary one for the rest of the process (rule 1 of the module docstring)."""
    requested = requested_root()
    if str(requested) in _FALLBACK:
        return _FALLBACK[str(requested)]
    try:
        make_private_dir(requested)
        check_parents(requested)
    except (UntrustedCache, OSError) as exc:
        return _fall_back(requested, exc)
    return requested


def cache_subdir(*parts: str) -> Path:
    """root/parts..., each folder created 0700 and checked; a refused one moves the process to the
    private fallback, like a refused root."""
    root = cache_root()
    try:
        return _private_tree(root, parts)
    except (UntrustedCache, OSError) as exc:
        if root in _FALLBACK.values():
            raise
        return _private_tree(_fall_back(requested_root(), exc), parts)


def _private_tree(root: Path, parts: tuple[str, ...]) -> Path:
    path = root
    for part in parts:
        path = path / part
        make_private_dir(path)
    return path


def make_private_dir(path: Path) -> None:
    """Create path with mode 0700 if missing; raise UntrustedCache if it is not the user's alone."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # mkdir's mode passes through the umask, which could clear our own bits
    check_private(path)


def check_private(path: Path) -> None:
    """Raise UntrustedCache unless path is a folder owned by this user that no one else can write."""
    if not hasattr(os, "geteuid"):  # Windows: ACLs, not mode bits; nothing to check here
        return
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UntrustedCache(f"the kernel cache {path} is not a folder: remove it, or set FCOMPILE_CACHE_DIR "
                             "to a folder of your own")
    if info.st_uid != os.geteuid():
        raise UntrustedCache(f"the kernel cache {path} is owned by uid {info.st_uid}, not by you (uid "
                             f"{os.geteuid()}), so its owner could plant code that this process would run: "
                             "set FCOMPILE_CACHE_DIR to a folder of your own")
    if info.st_mode & 0o022:
        raise UntrustedCache(f"the kernel cache {path} is writable by its group or by everyone (mode "
                             f"{stat.S_IMODE(info.st_mode):o}), so another user could plant code that this "
                             f"process would run: run `chmod 700 {path}`, or set FCOMPILE_CACHE_DIR to a "
                             "private folder")


def check_parents(path: Path) -> None:
    """Raise UntrustedCache when another user could rename the cache away and put their own in its
    place: a parent writable by others without the sticky bit (/tmp has it), or owned by another user
    than this one or root."""
    if not hasattr(os, "geteuid"):
        return
    me = os.geteuid()
    for parent in path.resolve().parents:
        info = os.stat(parent)
        if info.st_uid not in (me, 0):
            raise UntrustedCache(f"the kernel cache {path} lies in {parent}, owned by uid {info.st_uid}, who "
                                 "could replace it: set FCOMPILE_CACHE_DIR to a folder of your own")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise UntrustedCache(f"the kernel cache {path} lies in {parent}, which others can write (mode "
                                 f"{stat.S_IMODE(info.st_mode):o}), so they could replace it: run "
                                 f"`chmod go-w {parent}`, or set FCOMPILE_CACHE_DIR to a private folder")


def _fall_back(requested: Path, reason: Exception) -> Path:
    fallback = Path(tempfile.mkdtemp(prefix="fcompile-private-"))  # 0700 by definition
    atexit.register(shutil.rmtree, fallback, ignore_errors=True)
    _FALLBACK[str(requested)] = fallback
    warnings.warn(f"fcompile: not using the kernel cache: {reason}. This process uses a private temporary "
                  f"cache instead ({fallback}), so every compile is cold until that is fixed.",
                  CacheWarning, stacklevel=3)
    return fallback


# ---- files in the cache ---------------------------------------------------------------------------
def write_atomic(path: Path, data: bytes) -> None:
    """Write into a new file beside path and rename it over path: readers in other processes never see
    half a file, and a link planted at path is replaced, not followed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def digest_record(path: Path) -> Path:
    """Where the SHA-256 of path is recorded: kernels.so -> kernels.so.sha256."""
    return path.with_name(path.name + ".sha256")


def digest_state(path: Path) -> str:
    """"ok" when path's bytes hash to its record, "missing" when there is no record (an entry from
    before records, or a build cut short), "mismatch" when the file changed after it was recorded."""
    try:
        recorded = digest_record(path).read_text().strip()
    except OSError:
        return "missing"
    return "ok" if sha256_of(path) == recorded else "mismatch"


# ---- what a key covers ------------------------------------------------------------------------------
def digest(*parts: str) -> str:
    """A short hash of parts (separated, so ("ab", "c") and ("a", "bc") differ)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Toolchain:
    """Everything a C++ shared object depends on besides its source."""

    compiler: str  # resolved path of the executable
    version: str  # its `--version` output
    flags: tuple[str, ...]
    native_target: str  # the -m options -march=native turns on for this CPU (see native_target)
    machine: str  # platform.machine()


def cpp_key(source: str, toolchain: Toolchain) -> str:
    return digest(source, *map(str, astuple(toolchain)))


def resolve_compiler(compiler: str) -> str:
    found = shutil.which(compiler)
    return os.path.realpath(found) if found else compiler


@functools.lru_cache(maxsize=None)
def native_target(compiler: str) -> str:
    """What -march=native means on this CPU, as the compiler sees it: the CPU name and the enabled -m
    options of `compiler -march=native -Q --help=target` (GCC).  Compilers without that query
    (clang) fall back to the kernel's list of CPU features.  Once per compiler per process."""
    try:
        out = subprocess.run([compiler, "-march=native", "-Q", "--help=target"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    lines = [" ".join(ln.split()) for ln in out.splitlines()
             if ln.strip().endswith("[enabled]") or re.match(r"\s*-m(arch|tune|cpu)=\s+\S", ln)]
    return "\n".join(lines) if lines else cpu_features()


def cpu_features() -> str:
    """The CPU's feature flags from /proc/cpuinfo (Linux: "flags" on x86, "Features" on Arm), else the
    processor's name."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() in ("flags", "Features"):
                    return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return platform.processor() or platform.machine()


def runtime_identity(device: str) -> str:
    """The versions Triton kernels and tuning results depend on: torch, Triton, CUDA, Python, and the
    GPU's name when device is "cuda".  Once per process per GPU."""
    import torch

    gpu = torch.cuda.current_device() if device == "cuda" else None
    return _runtime_identity(gpu)


@functools.lru_cache(maxsize=None)
def _runtime_identity(gpu: int | None) -> str:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    name = "cpu" if gpu is None else f"{torch.cuda.get_device_name(gpu)} sm{torch.cuda.get_device_capability(gpu)}"
    return (f"torch {torch.__version__}; triton {triton_version}; cuda {torch.version.cuda}; "
            f"python {sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]}; device {name}")

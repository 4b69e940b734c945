"""Which libdevice files this machine holds, and whether compiling our kernels with each makes asinh,
acosh, atan2, erf and pow eager's bit for bit (Triton links its own copy by default)."""
import glob
import hashlib
import os
import subprocess
import sys

paths = sorted({os.path.realpath(p) for pattern in ("/usr/local/cuda*/nvvm/libdevice/*.bc", "/usr/**/libdevice*.bc",
                                                        "/opt/**/libdevice*.bc", "/root/**/libdevice*.bc")
                for p in glob.glob(pattern, recursive=True)})
for p in paths:
    print(p, os.path.getsize(p), hashlib.sha1(open(p, "rb").read()).hexdigest()[:12])
sys.stdout.flush()
if sys.argv[1:] != ["--try"]:
    sys.exit(0)
for p in paths:
    env = {**os.environ, "FCOMPILE_CACHE_DIR": "/tmp/fc-" + hashlib.sha1(p.encode()).hexdigest()[:8]}
    code = f"""
import triton.backends.nvidia.compiler as c
original = c.CUDABackend.parse_options
def parse_options(self, opts):
    options = original(self, opts)
    import dataclasses
    return dataclasses.replace(options, extern_libs=(("libdevice", {p!r}),))
c.CUDABackend.parse_options = parse_options
import runpy, sys
sys.argv = ["probe"]
runpy.run_path("scripts/probe_libdevice_gpu.py", run_name="__main__")
"""
    print("==", p)
    sys.stdout.flush()
    subprocess.run([sys.executable, "-c", code], env=env, timeout=150)

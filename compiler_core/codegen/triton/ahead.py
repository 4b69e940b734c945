"""Compile our GPU Triton source on a machine without a GPU, to catch source only the interpreter accepts.

On the CPU our Triton kernels run in Triton's interpreter, which executes the Python text with numpy
and accepts things the GPU compiler rejects (`(0).to(tl.int64)`: a Python int has no `.to` there).
Triton's compiler itself needs no GPU: given a target it lowers a kernel to TTIR, LLVM IR and PTX on
any machine. `compile_for_gpu` prints kernel plans as GPU source (interpret=False) and compiles them
for an NVIDIA target, so the CPU test suite checks the source an H200 will compile.

The compiling runs in a child process: Triton decides at import whether its own library functions
(`tl.sum`, ...) are interpreted, and a process that runs interpreted kernels cannot compile real ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import torch

from compiler_core.schedule.kernel_plan import KernelPlan

# torch dtype -> Triton's name for a pointer to it (bool tensors are bytes; Triton reads them as i1).
POINTER_TYPES = {
    torch.float32: "*fp32", torch.float64: "*fp64", torch.float16: "*fp16", torch.bfloat16: "*bf16",
    torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8",
    torch.bool: "*i1",
}
H200 = 90  # compute capability of the GPU we run on (Hopper)
# PTX that rounds float32 results differently from eager's CUDA kernels: Triton's `/` and `tl.sqrt`
# (on an H100, 1,205,557 of 4,194,304 random quotients differed from eager's). Our printer writes the
# IEEE forms (div_rn, sqrt_rn); a GPU compile that meets one of these is reported as an error.
# (libdevice's own functions may use approximate steps inside, as eager's do: fmodf, for one, has a
# div.approx.f32 that it corrects; only the two forms Triton emits for `/` and tl.sqrt are looked for.)
INEXACT_INSTRUCTIONS = ("div.full.f32", "sqrt.approx.f32", "sqrt.approx.ftz.f32")


def nvidia_target_available() -> bool:
    """Whether this Triton can compile for NVIDIA GPUs without one (its CUDA backend is installed)."""
    try:
        from triton.backends import backends

        return "nvidia" in backends
    except Exception:  # noqa: BLE001 - an old or partial Triton: nothing to compile with
        return False


def gpu_job(plan: KernelPlan) -> dict:
    """What the child compiles for one plan: its GPU module source and, per function, the types of
    its parameters, its constexprs and its warps."""
    from compiler_core.codegen.triton.kernel import generate_triton_kernel
    from compiler_core.runtime.triton_load import triton_module_source

    kernel = generate_triton_kernel(plan, interpret=False)
    pointers = {name: POINTER_TYPES[dtype] for name, dtype in (*plan.inputs, *plan.outputs)}
    # A split reduction's stages take the workspaces after the kernel's parameters, in this order.
    workspaces = [POINTER_TYPES[dtype] for _, dtype in kernel.split.workspaces] if kernel.split else []
    kinds = dict(kernel.split.stages) if kernel.split else {}
    functions = []
    for function in kernel.function_names:
        config = kernel.split.row_config if kinds.get(function) == "rows" else kernel.config_space[0]
        functions.append({"name": function, "pointers": pointers, "workspaces": workspaces,
                          "constants": {k: v for k, v in config.items() if k.isupper()},
                          # compile options: warps, and debug where the kernel has device asserts
                          "options": {k: v for k, v in config.items() if not k.isupper()}})
    return {"kernel": plan.name, "source": triton_module_source((kernel,), interpret=False), "functions": functions}


def compile_for_gpu(plans: list[KernelPlan], capability: int = H200, timeout: float = 600) -> list[str | None]:
    """Compile the plans' GPU source for an NVIDIA target (90: Hopper) through Triton's whole pipeline
    (TTIR, LLVM IR, PTX, and cubin where Triton bundles ptxas). Returns, for each plan in order, None
    or the compiler's error."""
    jobs: list[dict] = []
    printed: list[str | None] = []  # per plan: None, or why its GPU source could not be printed
    for plan in plans:
        try:
            jobs.append(gpu_job(plan))
            printed.append(None)
        except Exception as exc:  # noqa: BLE001 - the printer's failure is this plan's result
            printed.append(f"printing the GPU source failed: {type(exc).__name__}: {exc}")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-m", "compiler_core.codegen.triton.ahead", str(capability)],
                          input=json.dumps(jobs), capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the Triton compile child failed:\n{done.stderr[-3000:]}")
    compiled = iter(json.loads(done.stdout.strip().splitlines()[-1]))
    return [error if error else next(compiled) for error in printed]


def _compile_jobs(jobs: list[dict], capability: int) -> list[str | None]:
    """In the child: exec each module and compile its functions; per job None or the error text."""
    import linecache

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from compiler_core.runtime import eager_libdevice

    eager_libdevice.install()  # as the runtime compiles: libdevice's square roots as eager's
    errors: list[str | None] = []
    for job in jobs:
        filename = f"<gpu source of {job['kernel']}>"
        linecache.cache[filename] = (len(job["source"]), None, job["source"].splitlines(True), filename)
        try:
            namespace: dict = {"__name__": "fcompile_gpu_check"}
            exec(compile(job["source"], filename, "exec"), namespace)  # our generated kernels
            eager_libdevice.claim(namespace)
            for f in job["functions"]:
                fn = namespace[f["name"]]
                extra = iter(f["workspaces"])
                signature = {n: "constexpr" if n in f["constants"] else f["pointers"].get(n) or next(extra)
                             for n in fn.arg_names}
                binary = triton.compile(ASTSource(fn, signature, constexprs=f["constants"]),
                                        target=GPUTarget("cuda", capability, 32), options=f["options"])
                ptx = binary.asm.get("ptx", "")
                inexact = sorted({i for i in INEXACT_INSTRUCTIONS if re.search(rf"(?<![\w.]){re.escape(i)}\b", ptx)})
                if inexact:
                    raise ValueError(f"{f['name']} rounds differently from eager: {', '.join(inexact)} in its PTX "
                                     "(Triton's approximate float32 division or square root; eager's are IEEE)")
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - the compiler's message is the result
            errors.append(_short_error(f"{type(exc).__name__}: {exc}"))
    return errors


def _short_error(text: str) -> str:
    """Triton's CompilationError quotes the kernel up to the failing line, then a caret, then why: keep
    the position, the failing line, the caret and why (callers print a few hundred characters)."""
    lines = text.splitlines()
    caret = next((i for i, line in enumerate(lines) if line.strip() == "^"), None)
    if caret is None or caret < 2:
        return text
    return "\n".join([lines[0], lines[caret - 1], *lines[caret:]])


if __name__ == "__main__":
    print(json.dumps(_compile_jobs(json.loads(sys.stdin.read()), int(sys.argv[1]))))

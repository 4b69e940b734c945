"""fcompile's compiler core: a real torch.compile-style compiler whose every stage is inspectable.

    import compiler_core as cc
    fast = cc.compile(fn)              # also usable as @cc.compile
    m2 = cc.compile(model)             # an nn.Module (CompiledModule) sharing model's parameters
    session = cc.explain(fn, x)        # compile + run once, return the CompileSession
"""

from compiler_core.api import CompiledFunction, CompileError, compile, explain
from compiler_core.compiled_module import CompiledModule
from compiler_core.runtime.artifacts import KernelCheck
from compiler_core.runtime.check import KernelCheckError
from compiler_core.session import CompileSession, GraphRecord

__all__ = ["compile", "explain", "CompiledFunction", "CompiledModule", "CompileError", "CompileSession", "GraphRecord",
           "KernelCheck", "KernelCheckError"]

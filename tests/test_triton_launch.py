"""The Triton fast launch (runtime/triton_launch.py) without a GPU: a stand-in JIT function and binary record
which path each launch took and what the binary was given. On the GPU, tests/test_gpu.py runs the real one."""

import pytest
import torch

from compiler_core.runtime import triton_launch
from compiler_core.runtime.triton_launch import FastKernel, specialization_key


class Binary:
    def __init__(self, calls):
        self.calls, self.function, self.packed_metadata = calls, "fn-handle", "meta-handle"

    def run(self, *a):
        self.calls.append(("binary", a))


class Jit:
    arg_names = ["x", "out", "n", "XBLOCK"]

    def __init__(self):
        self.calls = []
        self.binaries = 0

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.calls.append(("jit", grid, args, meta))
            self.binaries += 1
            return Binary(self.calls)
        return launch


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr(triton_launch, "_stream", lambda: "stream")
    monkeypatch.setattr(triton_launch, "_hooks_set", lambda: False)


def kinds(jit):
    return [c[0] for c in jit.calls]


def test_later_launches_go_through_the_binary_with_every_parameter_in_order():
    jit = Jit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for _ in range(3):
        k[(4,)](x, out, 64, XBLOCK=16, num_warps=4)
    assert kinds(jit) == ["jit", "binary", "binary"]
    _, args = jit.calls[1]
    assert args[:4] == (4, 1, 1, "stream") and args[4:6] == ("fn-handle", "meta-handle")
    assert args[6:9] == (None, None, None)  # launch metadata and hooks: none are set
    assert args[9] is x and args[10] is out and args[11:] == (64, 16)  # constexprs too; num_warps is not one


def test_a_misaligned_tensor_other_dtype_meta_or_int_goes_through_the_jit():
    jit = Jit()
    k = FastKernel(jit)
    base, out = torch.randn(65), torch.empty(64)
    k[(4,)](base[:64], out, 64, XBLOCK=16)
    k[(4,)](base[1:], out, 64, XBLOCK=16)  # 4 bytes past a 16-byte boundary: another binary in Triton
    k[(4,)](base[:64].double(), out, 64, XBLOCK=16)
    k[(4,)](base[:64], out, 64, XBLOCK=32)
    k[(4,)](base[:64], out, 33, XBLOCK=16)  # an int 16 does not divide: Triton drops a divisibility hint
    assert kinds(jit) == ["jit"] * 5
    k[(4,)](base[1:], out, 64, XBLOCK=16)
    k[(4,)](base[:64], out, 64, XBLOCK=16)
    assert kinds(jit)[5:] == ["binary", "binary"]
    assert specialization_key((base[:64],), {}) != specialization_key((base[1:],), {})


def test_an_int_argument_is_keyed_by_triton_s_class_of_it_not_by_value():
    """A symbolic size passed to a kernel changes every call in a decode step (the cache grows by one
    row): values of one class share a binary, each class (1, multiples of 16, others; widths) has its own."""
    jit = Jit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for n in (33, 34, 35, 47):  # one class: i32, not 1, not a multiple of 16
        k[(4,)](x, out, n, XBLOCK=16)
    assert kinds(jit) == ["jit", "binary", "binary", "binary"]
    assert [c[1][-2] for c in jit.calls[1:]] == [34, 35, 47]  # each launch gets its own value
    for n in (48, 1, 1 << 40, 64, 1, (1 << 40) + 1):
        k[(4,)](x, out, n, XBLOCK=16)
    assert kinds(jit)[4:] == ["jit", "jit", "jit", "binary", "binary", "jit"]
    assert len({triton_launch.int_class(n) for n in (16, 32, 1, 2, 3, -16, 1 << 31, 1 << 63)}) == 5
    assert specialization_key((x, True), {}) != specialization_key((x, 1), {})  # a bool is not an int


def test_every_grid_launches_the_kernels_binary_with_its_own_dimensions():
    """A grid over symbolic sizes is new at each size (a decode step's cache grows a row a call): the
    binary is the kernel's, whatever grid it is launched on, and the grids kept are bounded."""
    jit = Jit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    k[(4,)](x, out, 64, XBLOCK=16)
    k[(2, 3)](x, out, 64, XBLOCK=16)
    k[(2, 3)](x, out, 64, XBLOCK=16)
    assert kinds(jit) == ["jit", "binary", "binary"]
    assert jit.calls[1][1][:3] == (2, 3, 1)
    for blocks in range(5, 5 + 2 * triton_launch.MAX_GRIDS):
        k[(blocks,)](x, out, 64, XBLOCK=16)
    assert kinds(jit)[3:] == ["binary"] * (2 * triton_launch.MAX_GRIDS)
    assert jit.calls[-1][1][:3] == (4 + 2 * triton_launch.MAX_GRIDS, 1, 1)
    assert len(k._by_grid) <= triton_launch.MAX_GRIDS


def test_a_parameter_left_to_its_default_or_a_hook_keeps_the_jit_path(monkeypatch):
    jit = Jit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for _ in range(2):
        k[(4,)](x, out, 64)  # XBLOCK not given: Triton would fill in its default
    assert kinds(jit) == ["jit", "jit"]
    k[(4,)](x, out, 64, XBLOCK=16)
    monkeypatch.setattr(triton_launch, "_hooks_set", lambda: True)  # a profiler watches launches
    k[(4,)](x, out, 64, XBLOCK=16)
    assert kinds(jit)[2:] == ["jit", "jit"]


@pytest.mark.parametrize("version,supported", [("3.2.0", False), ("3.3.1", True), ("3.6.0", True),
                                               ("3.10.0+git1234", True), ("2.3.1", False)])
def test_the_fast_launch_needs_triton_3_3(monkeypatch, version, supported):
    import triton

    monkeypatch.setattr(triton, "__version__", version)
    assert triton_launch.fast_launch_supported() is supported


def test_a_binary_that_refuses_its_arguments_is_dropped_for_the_jit():
    class Refusing(Binary):
        def run(self, *a):
            raise TypeError("function takes exactly 12 arguments")

    class RefusingJit(Jit):
        def __getitem__(self, grid):
            def launch(*args, **meta):
                self.calls.append(("jit", grid, args, meta))
                return Refusing(self.calls)
            return launch

    jit = RefusingJit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for _ in range(3):
        k[(4,)](x, out, 64, XBLOCK=16)
    assert kinds(jit) == ["jit", "jit", "jit"]  # the second tried the binary, was refused, and ran through the JIT


def test_an_empty_hook_chain_is_no_hook():
    from triton.knobs import HookChain

    chain = HookChain()
    assert not triton_launch._is_hook(None) and not triton_launch._is_hook(chain)
    chain.add(print)
    assert triton_launch._is_hook(chain) and triton_launch._is_hook(print)


# ---- the direct path: torch's C++ launcher ------------------------------------------------------------
class Param:
    def __init__(self, name, is_constexpr):
        self.name, self.is_constexpr = name, is_constexpr


class Metadata:
    num_warps, shared, num_ctas = 4, 1024, 1
    global_scratch_size = profile_scratch_size = 0


class CompiledKernel(Binary):
    def __init__(self, calls):
        super().__init__(calls)
        self.function, self.metadata = 0xF00D, Metadata()


class TensorJit(Jit):
    """A kernel of two tensors and one constexpr, as every kernel of ours is: tensors, then block sizes."""
    arg_names = ["x", "out", "XBLOCK"]
    params = [Param("x", False), Param("out", False), Param("XBLOCK", True)]

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.calls.append(("jit", grid, args, meta))
            return CompiledKernel(self.calls)
        return launch


@pytest.fixture
def cpp_launcher(monkeypatch):
    """torch's C++ launcher and raw stream, recording what they are given (the CPU build has neither)."""
    calls = []

    class Launcher:
        @staticmethod
        def _launch_kernel(*a):
            calls.append(("direct", a))

    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", Launcher, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: ("raw-stream", device), raising=False)
    return calls


def test_aligned_tensor_launches_go_through_torchs_launcher_with_addresses(cpp_launcher):
    jit = TensorJit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for _ in range(3):
        k[(4, 2)](x, out, XBLOCK=16, num_warps=4)
    assert kinds(jit) == ["jit"] and len(cpp_launcher) == 2
    function, gx, gy, gz, warps, shared, types, args, stream = cpp_launcher[0][1]
    assert (function, gx, gy, gz, warps, shared) == (0xF00D, 4, 2, 1, 4, 1024)
    assert types == "OOOO" and args == (x.data_ptr(), out.data_ptr(), None, None)  # two scratch pointers, null
    assert stream == ("raw-stream", x.get_device())


def test_a_misaligned_tensor_another_dtype_or_a_hook_leaves_the_direct_path(cpp_launcher, monkeypatch):
    jit = TensorJit()
    k = FastKernel(jit)
    base, out = torch.randn(65), torch.empty(64)
    k[(4,)](base[:64], out, XBLOCK=16)
    k[(4,)](base[1:], out, XBLOCK=16)  # misaligned: Triton's JIT compiles another binary
    k[(4,)](base[:64].double(), out, XBLOCK=16)  # another dtype: another binary
    assert kinds(jit) == ["jit"] * 3 and cpp_launcher == []
    k[(4,)](base[1:], out, XBLOCK=16)  # the misaligned binary, through Triton's launcher
    assert kinds(jit)[3:] == ["binary"] and cpp_launcher == []
    k[(4,)](base[:64], out, XBLOCK=16)
    assert len(cpp_launcher) == 1
    monkeypatch.setattr(triton_launch, "_hooks_set", lambda: True)
    k[(4,)](base[:64], out, XBLOCK=16)
    assert kinds(jit)[4:] == ["jit"] and len(cpp_launcher) == 1
    k[(4,)](base[:64], out, XBLOCK=32)  # other meta-parameters: their own first launch
    assert kinds(jit)[5:] == ["jit"]


def test_no_direct_path_for_an_integer_argument_a_keyword_parameter_or_scratch_memory(cpp_launcher):
    jit = Jit()  # x, out, n (an int), XBLOCK
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for _ in range(2):
        k[(4,)](x, out, 64, XBLOCK=16)
    assert cpp_launcher == [] and kinds(jit) == ["jit", "binary"]

    class NeedsScratch(Metadata):
        global_scratch_size = 128

    compiled = CompiledKernel([])
    compiled.metadata = NeedsScratch()
    assert triton_launch.DirectLaunch.of(compiled, (x, out), ("XBLOCK",), TensorJit()) is None
    assert triton_launch.DirectLaunch.of(CompiledKernel([]), (x, out), ("XBLOCK",), TensorJit()) is not None
    assert triton_launch.DirectLaunch.of(CompiledKernel([]), (x, out), ("out",), TensorJit()) is None


def test_a_launcher_that_refuses_its_arguments_is_dropped_for_tritons(monkeypatch):
    class Refusing:
        @staticmethod
        def _launch_kernel(*a):
            raise TypeError("function takes exactly 10 arguments (9 given)")

    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", Refusing, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    jit = TensorJit()
    k = FastKernel(jit)
    x, out = torch.randn(64), torch.empty(64)
    for _ in range(3):
        k[(4,)](x, out, XBLOCK=16)
    assert kinds(jit) == ["jit", "binary", "binary"]


def test_kernels_over_symbolic_sizes_leave_the_sizes_unspecialized():
    """Triton compiles a kernel again for an int argument of 1 and for multiples of 16 unless told not to:
    mid-decode, each kernel taking the cache's length stalled ~0.3 s when the length first reached a
    multiple of 16. Our kernels' size arguments are `do_not_specialize`: one binary for every size."""
    import compiler_core as cc

    def f(x):
        return torch.softmax(x * 2, -1) + 1

    compiled = cc.compile(f, backend="triton", dynamic=True)
    for rows in (3, 16, 1):
        x = torch.randn(rows, 24)
        torch.testing.assert_close(compiled(x), f(x))
    kernels = compiled.session.kernels
    sized = [k for k in kernels if k.size_args]
    assert sized, [k.source for k in kernels]
    for k in sized:
        assert f"@triton.jit(do_not_specialize={list(k.size_args)!r})" in k.source, k.source

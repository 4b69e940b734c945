"""Two GPU probes (session 54): why a direct launch with int arguments never proved itself on the GPU,
and which Triton formulation keeps a -0.0 selected against a constant."""
import traceback

import torch
import triton
import triton.language as tl

import compiler_core as cc
from compiler_core.runtime import triton_launch as tlaunch

print("== direct launch with ints")
calls = []
real_launch = tlaunch.DirectLaunch.launch


def logged_launch(self, dims, args):
    if self.has_ints and len(calls) < 40:
        info = [(type(a).__name__, a if type(a) is int else (a.dtype, a.data_ptr() % 16, a.get_device())) for a in args]
        calls.append(("args", self.arg_types, self.kinds, self.device, info))
    try:
        ok = real_launch(self, dims, args)
    except Exception as e:
        calls.append(("raised", repr(e)))
        raise
    if self.has_ints and len(calls) < 40:
        calls.append(("returned", ok, self.proven, self.kinds == ()))
    return ok


tlaunch.DirectLaunch.launch = logged_launch
real_init = tlaunch.DirectLaunch.__init__


def logged_init(self, launcher, *rest):
    def wrapped(*a):
        try:
            return launcher(*a)
        except Exception as e:
            calls.append(("launcher raised", repr(e), a[6], [type(v).__name__ for v in a[7]]))
            raise
    real_init(self, wrapped, *rest)


tlaunch.DirectLaunch.__init__ = logged_init


def f(x):
    return torch.softmax(x * 2, -1) + x.mean(0)


compiled = cc.compile(f, dynamic=True)
for rows in (3, 5, 16, 1, 33, 5, 64):
    x = torch.randn(rows, 96, device="cuda")
    torch.testing.assert_close(compiled(x), f(x))
for c in calls:
    print(c)

print("== -0.0 selected against a constant")


@triton.jit
def k(x_ptr, o_ptr, n, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, m, other=0)
    negz = tl.full([1], -2147483648, tl.int32).to(tl.float32, bitcast=True)
    if VARIANT == 0:
        y = tl.where(x > 0, negz, 1.0)
    elif VARIANT == 1:
        y = tl.where(x > 0, tl.full([1], -2147483648, tl.int32), tl.full([1], 0x3F800000, tl.int32)).to(
            tl.float32, bitcast=True)
    elif VARIANT == 2:
        y = tl.where(x > 0, negz, 2.5)
    elif VARIANT == 3:
        y = tl.where(x > 0, 1.0, negz)
    elif VARIANT == 4:
        y = tl.where(x > 0, negz, x)
    elif VARIANT == 5:
        y = tl.where(x > 0, negz, tl.full([1], 1.0, tl.float32))
    elif VARIANT == 6:
        y = tl.where(x > 0, negz, 0.0)
    elif VARIANT == 7:  # the select in PTX of our own, on the bits
        c = (x > 0).to(tl.int32)
        y = tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.s32 p, $3, 0; selp.b32 $0, $1, $2, p; }", "=r,r,r,r",
                                      [tl.full([BLOCK], -2147483648, tl.int32), tl.full([BLOCK], 0x3F800000, tl.int32),
                                       c], dtype=tl.int32, is_pure=True, pack=1).to(tl.float32, bitcast=True)
    elif VARIANT == 8:  # -0.0 made by PTX of our own, the select Triton's
        z = tl.inline_asm_elementwise("mov.b32 $0, 0x80000000;", "=r,r", [i], dtype=tl.int32, is_pure=True,
                                      pack=1).to(tl.float32, bitcast=True)
        y = tl.where(x > 0, z, 1.0)
    elif VARIANT == 9:  # both products of selects
        y = tl.where(x > 0, -1.0, 1.0) * tl.where(x > 0, 0.0, 1.0)
    else:  # negated select of +0 and -1
        y = -tl.where(x > 0, 0.0, -1.0)
    tl.store(o_ptr + i, y, m)


x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), 3.0], device="cuda")
for variant in range(11):
    o = torch.empty_like(x)
    try:
        ck = k[(1,)](x, o, 7, VARIANT=variant, BLOCK=8)
        print(variant, o.tolist(), o.signbit().tolist())
        if variant in (0, 7, 8):
            for stage in ("llir", "ptx", "sass"):
                try:
                    text = ck.asm[stage]
                except Exception as e:  # noqa: BLE001
                    text = repr(e)
                words = ("select", "selp", "SEL", "cst", "constant", "0x8", "0f8", "uitofp", "cvt", "-0.0",
                         "mov.f32", "mov.b32", "MOV", "I2F", "STG")
                lines = [ln for ln in text.splitlines() if any(w in ln for w in words)]
                print("--", stage, len(text))
                print("\n".join(lines[:40]))
    except Exception:
        traceback.print_exc()

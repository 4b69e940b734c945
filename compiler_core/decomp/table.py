"""Decomposition to the primitive set.

AOTAutograd applies `decomposition_table()` while tracing, so composite ops (softmax, layer_norm,
gelu, var...) arrive already broken into simple ATen ops.  `to_prim_graph` then names the
primitive every remaining ATen op maps to (see primitives.py), or marks it extern with a reason.
The list is pinned here rather than taken from `core_aten_decompositions()`, whose size changes
between torch versions (PITFALLS.md).
"""

from __future__ import annotations

import functools

import torch

from compiler_core import _compat
from compiler_core.decomp import complex_calls
from compiler_core.decomp.arg_reductions import ARG_REDUCTIONS
from compiler_core.decomp.artifacts import PrimGraph
from compiler_core.decomp.asserts import ASSERTS
from compiler_core.decomp.bessel import BESSEL
from compiler_core.decomp.divisors import DIVISORS
from compiler_core.decomp.foreach import foreach_decompositions
from compiler_core.decomp.fused_multiply_add import fused_multiply_add  # noqa: F401 - registers the op
from compiler_core.decomp.grid_sample import GRID_SAMPLE
from compiler_core.decomp.histograms import HISTOGRAMS
from compiler_core.decomp.losses import LOSSES
from compiler_core.decomp.lu_unpack import LU_UNPACK
from compiler_core.decomp.meta_check import checked_against_meta
from compiler_core.decomp.moments import MOMENTS
from compiler_core.decomp.orthogonal import ORTHOGONAL
from compiler_core.decomp.padding import PADDING
from compiler_core.decomp.pairwise import PAIRWISE
from compiler_core.decomp.pooling import POOLING
from compiler_core.decomp.scans import SCANS
from compiler_core.decomp.scatter_family import SCATTER_FAMILY
from compiler_core.decomp.scatters import SCATTERS, WRITE_BACK_SCATTERS, keeping_input_layout
from compiler_core.decomp.segments import SEGMENTS
from compiler_core.decomp.sorting import SORTING
from compiler_core.decomp.special import SPECIAL
from compiler_core.decomp.special_float64 import SPECIAL_FLOAT64
from compiler_core.decomp.upsample_aa import UPSAMPLE_AA
from compiler_core.decomp.weight_norm import WEIGHT_NORM

aten = torch.ops.aten
prims = torch.ops.prims

# Composite ops we break up during tracing, so their pieces can fuse with their neighbours.
DECOMPOSE = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.var, aten.var_mean, aten.std,
    aten.std_mean, aten.gelu, aten.silu, aten.mish, aten.hardtanh, aten.hardsigmoid, aten.hardswish,
    aten.leaky_relu, aten.elu, aten.softplus, aten.logsumexp, aten.addcmul, aten.addcdiv,
    aten.lerp, aten.rsub, aten.masked_fill, aten.clamp_min, aten.clamp_max, aten.square, aten.xlogy,
    aten.logaddexp, aten.frac, aten.threshold, aten.native_dropout, aten.sinc, aten.sgn, aten.linalg_vector_norm,
    aten.norm, aten.mse_loss,
    aten._log_softmax_backward_data, aten._softmax_backward_data, aten.native_layer_norm_backward,
    aten.gelu_backward, aten.silu_backward, aten.sigmoid_backward, aten.tanh_backward,
    aten.threshold_backward, aten.where.ScalarOther, aten.where.ScalarSelf, aten.full_like,
    aten.zeros_like, aten.ones_like, aten.new_zeros, aten.new_ones, aten.new_full, aten.mean.default,
    aten.transpose, aten.t, aten.dot, aten.mv,
    # pointwise compositions of primitives we lower (torch's references, checked by the OpInfo sweep)
    aten.deg2rad, aten.rad2deg, aten.logit, aten.nan_to_num, aten.celu, aten.glu, aten.huber_loss,
    aten.smooth_l1_loss, aten.soft_margin_loss, aten.binary_cross_entropy, aten.binary_cross_entropy_with_logits,
    aten.logaddexp2, aten.heaviside, aten.special_entr, aten.special_xlog1py, aten.log_sigmoid_forward,
    aten._safe_softmax, aten.ldexp, aten.native_dropout_backward,
    # index arithmetic (iota, compare, where) and views plus one copy
    aten.tril, aten.triu, aten.trace, aten.diag_embed, aten.eye, aten.linspace, aten.logspace, aten.repeat,
    aten.rot90, aten.pixel_shuffle, aten.pixel_unshuffle, aten.channel_shuffle, aten._prelu_kernel,
    aten.alias_copy, aten.permute_copy, aten.squeeze_copy, aten.t_copy, aten.transpose_copy, aten.unsqueeze_copy,
    aten.view_copy, aten.unbind_copy, aten.stack, aten.unfold_copy, aten.diagonal_copy, aten.as_strided_copy,
    aten.split_with_sizes_copy, aten.expand_copy, aten.narrow_copy,
    # reductions and normalisations over the reductions we lower
    aten.count_nonzero, aten.all, aten.any, aten.aminmax, aten.nansum, aten._native_batch_norm_legit_functional,
    aten.native_batch_norm, aten.native_group_norm, aten.addmv, aten.addr, aten.vdot, aten.dist, aten.renorm,
    # group norm's backward (HuBERT's feature encoder) and weight norm's forward (wav2vec2's positional
    # convolution; its backward is ours: weight_norm.py): per-group and per-channel sums, pointwise math
    aten.native_group_norm_backward, aten._weight_norm_interface,
    # torch's references over what we lower (views, index arithmetic, pointwise math), each checked on
    # every OpInfo sample by the sweep; none appears in the model zoo's graphs
    aten.linalg_cross, aten.block_diag, aten.reflection_pad1d, aten.reflection_pad2d,
    aten.reflection_pad3d, aten.replication_pad1d, aten.replication_pad2d, aten.replication_pad3d,
    aten._chunk_cat,
    # F.rms_norm: composite on the CPU, one fused ATen kernel on CUDA (torch >= 2.10); its reference
    # is the same mean-of-squares arithmetic, which then fuses like any norm
    aten._fused_rms_norm, aten._fused_rms_norm_backward,
    # Adaptive average pooling through torch's reference (window sums). Max-, average and adaptive max
    # pooling and the first two's backwards are ours (pooling.py), as torch 2.11 lacks some references.
    aten._adaptive_avg_pool2d,
    # cross-entropy's nll: the forward as a gather of each row's target; the backward is ours (losses.py)
    aten.nll_loss_forward,
    # a slice's or select's backward: zeros, then the scatter (slice_scatter is ours: scatters.py)
    aten.slice_backward, aten.select_scatter, aten.select_backward,
    # batch norm's backward (training and eval mode: two per-channel sums and pointwise math, in fp32 for
    # bf16/fp16) and the functional form of its training forward that F.batch_norm may trace to
    aten.native_batch_norm_backward, aten._batch_norm_with_update_functional,
    # torch's references over index arithmetic, gathers and compares: F.unfold's windows (im2col), a
    # grid sample's bilinear/nearest gathers, isin as a broadcast compare and any
    aten.im2col, aten.grid_sampler_2d, aten.isin,
    # F.fold (and so F.unfold's backward): the patches added back where they overlap, through index_put
    # with accumulate (our scatter family); the Hann window (audio front ends) as cos of an iota
    aten.col2im, aten.hann_window,
    # F.affine_grid (spatial transformers) as a matmul of a base grid; instance norm's batch norm without
    # running statistics (the mutating overload with them is AOTAutograd's to functionalize)
    aten.affine_grid_generator, aten._native_batch_norm_legit.no_stats,
    # regression losses' backwards (pointwise) and Tensor.unfold's backward (framing, as in an STFT)
    aten.mse_loss_backward, aten.smooth_l1_loss_backward, aten.huber_loss_backward, aten.unfold_backward,
    # the backwards of the activations and losses above whose forwards we decompose: their autograd
    # formulas are ATen ops of their own, which ran in PyTorch in every training step that used them
    # (ReLU6 and hardswish in MobileNets, leaky ReLU, ELU, softplus, mish, GLU, BCE...); torch's
    # references, pointwise math, plus a diagonal's backward (zeros and a diagonal scatter)
    aten.elu_backward, aten.leaky_relu_backward, aten.hardtanh_backward, aten.hardswish_backward,
    aten.hardsigmoid_backward, aten.softplus_backward, aten.mish_backward, aten.log_sigmoid_backward,
    aten.glu_backward, aten.logit_backward, aten._prelu_kernel_backward, aten.binary_cross_entropy_backward,
    aten.soft_margin_loss_backward, aten.diagonal_backward,
    # reflection padding's backward (image generators' ReflectionPad2d); replication's is ours (padding.py)
    aten.reflection_pad1d_backward, aten.reflection_pad2d_backward, aten.reflection_pad3d_backward,
    # torch's references onto index_put and index (the scatter family, scatter_family.py, and our gathers)
    aten._unsafe_masked_index, aten._unsafe_masked_index_put_accumulate, aten.max_unpool2d, aten.max_unpool3d,
    # the lower/upper triangle's (row, col) pairs (DLRM's feature interactions, pairwise losses): torch's
    # references compute each pair from its position (a square root inverts the triangle's row starts)
    aten.tril_indices, aten.triu_indices,
]


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    table = {**_compat.get_decompositions(DECOMPOSE), **MATMUL_WITH_EPILOGUE, **foreach_decompositions(),
             **ARG_REDUCTIONS, **POOLING, **LOSSES, **SCATTERS, **SCATTER_FAMILY, **SCANS, **SPECIAL,
             **SORTING, **PAIRWISE, **ORTHOGONAL, **LU_UNPACK, **UPSAMPLE_AA, **GRID_SAMPLE,
             **BESSEL, **SPECIAL_FLOAT64, **SEGMENTS, **HISTOGRAMS, **WEIGHT_NORM, **ASSERTS, **PADDING,
             **DIVISORS, **MOMENTS}
    # torch's own decomposition of inference batch norm calls the mutating `_native_batch_norm_legit`,
    # which AOTAutograd refuses in a functional graph: ours is pointwise, so it fuses with what follows.
    table[aten._native_batch_norm_legit_no_training.default] = _batch_norm_inference
    for op in WRITE_BACK_SCATTERS:
        if op in table:
            table[op] = keeping_input_layout(table[op])
    # Each decomposition's results are held to the op's own shapes and dtypes (decomp/meta_check.py).
    return {op: checked_against_meta(op, fn) for op, fn in table.items()}


def _batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    """(x - mean) / sqrt(var + eps) * weight + bias over dim 1, computed in fp32 for bf16/fp16 and rounded
    once. The saved statistics are what ATen returns in inference: empty on the CPU; elsewhere the
    running mean and 1 / sqrt(var + eps), in the computation dtype (CUDA's kernel, and the op's meta)."""
    shape = [1, -1] + [1] * (x.dim() - 2)
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    out = (x.to(compute) - running_mean.to(compute).view(shape)) * torch.rsqrt(
        running_var.to(compute).view(shape) + eps)
    if weight is not None:
        out = out * weight.to(compute).view(shape)
    if bias is not None:
        out = out + bias.to(compute).view(shape)
    if x.device.type == "cpu":
        return out.to(x.dtype), x.new_zeros((0,)), x.new_zeros((0,))
    return out.to(x.dtype), running_mean.to(compute, copy=True), torch.rsqrt(running_var.to(compute) + eps)


# baddbmm: the batched matmul stays one extern call in the inputs' own dtype and the scaling and
# bias become pointwise ops that fuse into the next kernel. torch's own decomposition upcasts every
# input to fp32 first (`pw_cast_for_opmath`): for bf16 that is a conversion kernel per operand and an
# fp32 matmul without bf16 tensor cores, several times slower than eager. (addmm is not decomposed at
# all: schedule/epilogues.py splits it only where its bias add fuses, in the operands' dtype too.)

def _baddbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta=1,
             alpha=1) -> torch.Tensor:
    return _scale_and_add(aten.bmm.default(batch1, batch2), self, beta, alpha)


def _scale_and_add(product: torch.Tensor, self: torch.Tensor, beta, alpha) -> torch.Tensor:
    if not product.is_floating_point() and not product.is_complex():
        beta, alpha = int(beta), int(alpha)
    out = product if alpha == 1 else product * alpha
    if beta == 0:  # `self` is ignored, NaNs included, as in eager
        return out
    # The product first: the result takes its (contiguous) layout, as eager's addmm returns.
    return out + (self if beta == 1 else self * beta)


def _addbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta=1, alpha=1) -> torch.Tensor:
    """The sum of the batch's products is one matmul over the batch and inner dims together:
    [n, b*m] @ [b*m, p], with no [b, n, p] intermediate."""
    b, n, m = batch1.shape
    p = batch2.shape[2]
    product = aten.mm.default(batch1.permute(1, 0, 2).reshape(n, b * m), batch2.reshape(b * m, p))
    return _scale_and_add(product, self, beta, alpha)


MATMUL_WITH_EPILOGUE = {aten.baddbmm.default: _baddbmm, aten.addbmm.default: _addbmm}


# ATen op (overload packet) -> primitive name.  Anything else is an extern call.
POINTWISE_OPS = {
    aten.add: "add", aten.sub: "sub", aten.mul: "mul", aten.div: "truediv", aten.neg: "neg",
    aten.abs: "abs", aten.reciprocal: "reciprocal", aten.maximum: "maximum", aten.minimum: "minimum",
    aten.exp: "exp", aten.log: "log", aten.log1p: "log1p", aten.expm1: "expm1", aten.sqrt: "sqrt",
    aten.rsqrt: "rsqrt", aten.sin: "sin", aten.cos: "cos", aten.tanh: "tanh", aten.erf: "erf",
    aten.sigmoid: "sigmoid", aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc",
    aten.round: "round", aten.sign: "sign", aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le",
    aten.gt: "gt", aten.ge: "ge", aten.isnan: "isnan", aten.logical_not: "logical_not",
    aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.where: "where",
    aten.relu: "maximum", aten.clamp: "clamp", aten.pow: "pow", aten.remainder: "remainder",
    aten.floor_divide: "floordiv", aten.bitwise_not: "bitwise_not", aten.bitwise_and: "bitwise_and",
    aten.bitwise_or: "bitwise_or", aten.bitwise_xor: "bitwise_xor", aten.logical_xor: "logical_xor",
    aten.bitwise_left_shift: "lshift", aten.bitwise_right_shift: "rshift", aten.__lshift__: "lshift",
    aten.__rshift__: "rshift",
    aten._to_copy: "cast", aten.clone: "copy", aten.copy: "copy",
    aten.alias: "view", aten.lift_fresh_copy: "copy", aten.fill: "fill", aten.full: "fill",
    aten.scalar_tensor: "fill", aten.zeros: "fill", aten.ones: "fill", aten.arange: "index",
    aten.full_like: "fill", aten.empty_like: "fill", aten.empty: "fill", aten.new_empty: "fill", aten.zero: "fill",
    aten.empty_strided: "fill", aten.new_empty_strided: "fill",
    prims.convert_element_type: "cast",
    aten.tan: "tan", aten.asin: "asin", aten.acos: "acos", aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh",
    aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh", aten.log2: "log2", aten.log10: "log10",
    aten.exp2: "exp2", aten.erfc: "erfc", aten.atan2: "atan2", aten.arctan2: "atan2", aten.hypot: "hypot",
    aten.fmod: "fmod", aten.gcd: "gcd", aten.copysign: "copysign", aten.signbit: "signbit", aten.isinf: "isinf",
    aten.isposinf: "isposinf", aten.isneginf: "isneginf", aten.fmax: "fmax", aten.fmin: "fmin",
    # index arithmetic: each output element reads one input element (masked where it may not exist)
    aten.cat: "cat", aten.constant_pad_nd: "constant_pad", aten.flip: "flip", aten.roll: "roll",
    # indirect loads: each output element reads one input element at a position read from an index tensor
    aten.gather: "gather", aten.index: "index_tensor", aten._unsafe_index: "index_tensor",
    aten.index_select: "index_select", aten.embedding: "embedding", aten.take: "take",
    # a loop per element (decomp/orthogonal.py: the orthogonal polynomials' recurrences)
    torch.ops.fcompile.three_term_recurrence: "recurrence",
    # an accumulating indirect store (decomp/atomic_scatter.py): a loop over the source with atomic adds
    torch.ops.fcompile.scatter_add: "scatter_add",
    # an overwriting indirect store (decomp/store_scatter.py): a loop over the source with plain stores
    torch.ops.fcompile.scatter_store: "scatter_store",
    # a * b + c rounded once (decomp/fused_multiply_add.py: eager CUDA's contracted complex product)
    torch.ops.fcompile.fused_multiply_add: "fused_multiply_add",
}
REDUCTION_OPS = {aten.sum: "sum", aten.mean: "mean", aten.amax: "amax", aten.amin: "amin", aten.prod: "prod",
                 prims.sum: "sum", prims.var: "var", prims.amax: "amax", prims.amin: "amin", prims.prod: "prod"}
# x.max() and x.min() without a dim: amax/amin over every element (same NaN rule). By overload, not by
# packet: aten.max.other is the elementwise maximum, aten.max.dim also returns indices.
FULL_REDUCTION_OVERLOADS = {aten.max.default: "amax", aten.min.default: "amin"}
# Some decompositions emit prims.* ops; these are views (or plain pointwise ops) too.
PRIMS_VIEWS = {prims.broadcast_in_dim, prims.squeeze, prims.transpose, prims.collapse_view, prims.split_dim,
               prims.view_of}
# ATen ops that return a view of their input although their schema has no alias annotation
# (PITFALLS.md: 3-D matmuls and SDPA's math path end in `_unsafe_view`).  Treating one as a fresh
# buffer lets the memory planner hand its storage to another tensor while the view is alive.
# unsafe_split and unsafe_chunk likewise return views of their input (found by the OpInfo sweep
# under the memory checking mode).
UNANNOTATED_VIEWS = {aten._unsafe_view, aten.unsafe_split, aten.unsafe_split_with_sizes, aten.unsafe_chunk}
# prims.* ops that torch's reference decompositions emit; same semantics as our primitive of that name
# (prims.div of integers truncates: see classify).
PRIMS_POINTWISE = {
    **{getattr(prims, name): name for name in (
        "add", "sub", "mul", "neg", "abs", "reciprocal", "maximum", "minimum", "exp", "log", "log1p", "expm1",
        "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "floor", "ceil", "trunc", "sign", "eq", "ne", "lt", "le",
        "gt", "ge", "where", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2",
        "log10", "exp2", "erfc", "atan2", "hypot", "pow", "fmod", "remainder", "signbit", "bitwise_and",
        "bitwise_or", "bitwise_xor", "bitwise_not", "fmax", "fmin")},
    prims.div: "truediv", prims.clone: "copy", prims.iota: "index", prims.rev: "flip", prims.cat: "cat",
}
# prims that exist only once torch._inductor is imported (Dynamo imports it for torch.optim's foreach
# steps, whose addcmul and lerp become prims.fma): matched by name, as `prims.fma` may not resolve here.
# prims.fma is not our fused_multiply_add primitive: lowering (ir/lowering/pointwise.py) computes it as a
# multiply and an add, rounded twice, as eager's CPU kernels do.
PRIMS_BY_NAME = {"prims.fma": "fma"}

# Extern calls we make on purpose (vendor libraries are the right tool), with the reason shown.
LIBRARY_OPS = {
    aten.mm: "matmul runs in cuBLAS/oneDNN (extern call)",
    # Not decomposed: one library call adds the bias as it writes the product (as eager does).
    # schedule/epilogues.py splits it into mm + a bias add where that add fuses with what follows.
    aten.addmm: "matmul with bias runs in cuBLAS/oneDNN (extern call)",
    aten.bmm: "batched matmul runs in cuBLAS/oneDNN (extern call)",
    aten.convolution: "convolution runs in cuDNN/oneDNN (extern call)",
    aten._scaled_dot_product_flash_attention: "attention runs in PyTorch's SDPA kernel (extern call)",
    aten._scaled_dot_product_efficient_attention: "attention runs in PyTorch's SDPA kernel (extern call)",
    aten._scaled_dot_product_flash_attention_for_cpu: "attention runs in PyTorch's SDPA kernel (extern call)",
    aten._scaled_dot_product_cudnn_attention: "attention runs in PyTorch's SDPA kernel (extern call)",
    aten.convolution_backward: "convolution backward runs in cuDNN/oneDNN (extern call)",
    aten._scaled_dot_product_flash_attention_backward: "attention backward runs in PyTorch's SDPA kernel (extern call)",
    aten._scaled_dot_product_efficient_attention_backward:
        "attention backward runs in PyTorch's SDPA kernel (extern call)",
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        "attention backward runs in PyTorch's SDPA kernel (extern call)",
    aten._scaled_dot_product_cudnn_attention_backward:
        "attention backward runs in PyTorch's SDPA kernel (extern call)",
}

# Dense linear algebra (factorizations, solves, eigen- and singular values): LAPACK on the CPU, cuSOLVER
# or MAGMA on the GPU, which is where these belong; no compiler writes its own pivoted LU. They are
# library calls by design, like matmul, and the pointwise work around them still fuses.
_LINALG = ("_linalg_svd", "_linalg_eigh", "linalg_eig", "_linalg_eigvals", "_linalg_solve_ex", "linalg_inv_ex",
           "linalg_lu_factor_ex", "linalg_lu", "linalg_lu_solve", "linalg_cholesky_ex", "linalg_qr",
           "linalg_ldl_factor_ex", "linalg_ldl_solve", "_linalg_slogdet", "_linalg_det",
           "linalg_solve_triangular", "linalg_householder_product", "linalg_pinv", "cholesky",
           "cholesky_solve", "cholesky_inverse", "geqrf", "ormqr", "triangular_solve")
LIBRARY_OPS.update({getattr(aten, name): "dense linear algebra runs in LAPACK/cuSOLVER (extern call)"
                    for name in _LINALG if hasattr(aten, name)})
# A data-dependent assertion (one_hot's class range, torch._assert_async in user code): our kernels
# compute the condition, eager's own check raises eager's error from the host program (decomp/asserts.py).
LIBRARY_OPS[torch.ops.fcompile.assert_async] = "a data-dependent assertion: eager's check, called by the host program"

_INTEGER_ONLY_DIVISION = {"Tensor_mode", "Scalar_mode"}


def classify(node: torch.fx.Node) -> tuple[str, str]:
    """(primitive name, reason when extern) for one call_function node."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if _is_view(target) or packet in PRIMS_VIEWS or packet in UNANNOTATED_VIEWS:
        return "view", ""
    if packet in PRIMS_POINTWISE:
        prim = PRIMS_POINTWISE[packet]
        if prim == "truediv" and not _is_floating(node):
            prim = "truncdiv"  # prims.div rounds integer quotients toward zero
        return prim, ""
    if str(packet) in PRIMS_BY_NAME:
        return PRIMS_BY_NAME[str(packet)], ""
    if packet in REDUCTION_OPS:
        return REDUCTION_OPS[packet], ""
    if target in FULL_REDUCTION_OVERLOADS:
        return FULL_REDUCTION_OVERLOADS[target], ""
    refused = _refused_by_eager(node)
    if refused:
        return "extern", refused
    if packet in POINTWISE_OPS:
        prim = POINTWISE_OPS[packet]
        if packet is aten.div and getattr(target, "_overloadname", "") in _INTEGER_ONLY_DIVISION:
            mode = node.kwargs.get("rounding_mode")
            prim = {"floor": "floordiv", "trunc": "truncdiv", None: "truediv"}[mode]
        return prim, ""
    if packet in LIBRARY_OPS:
        return "extern", LIBRARY_OPS[packet]
    if target is __import__("operator").getitem:
        return "getitem", ""
    complex_call = complex_calls.reason(target)
    if complex_call is not None:
        return "extern", complex_call
    if _is_linalg_error_check(node):
        return "extern", "linear-algebra error check (raises eager's error on a singular input) runs in PyTorch"
    return "extern", f"no lowering for {target}: runs in PyTorch"


def _is_linalg_error_check(node: torch.fx.Node) -> bool:
    """`with_effects(token, aten._linalg_check_errors, info, ...)`: the error check after a
    factorization, kept in program order by an effect token; part of the library call before it."""
    return (str(node.target) == "with_effects" and len(node.args) > 1
            and getattr(node.args[1], "overloadpacket", None) is aten._linalg_check_errors)


def _refused_by_eager(node: torch.fx.Node) -> str:
    """Why eager PyTorch raises on this call although tracing accepted it, or "".

    FakeTensor metadata comes from torch's reference `sub`, which refuses only two bool tensors, so
    `x - True` or `x - mask` reach us, and a kernel would compute `x - 1`. As an extern call the op
    runs in PyTorch and raises eager's own error at the same point of the program."""
    packet = getattr(node.target, "overloadpacket", None)
    if packet in (aten.sub, aten.add) and isinstance(node.kwargs.get("alpha"), bool) and not _is_bool(node):
        return "a bool alpha with a non-bool result raises in eager PyTorch: runs there, raising its error"
    if packet is aten.sub and any(_is_bool(a) for a in node.args[:2]):
        return "subtraction with a bool operand raises in eager PyTorch: runs there, raising its error"
    return ""


def _is_bool(value: object) -> bool:
    """A Python bool, or an FX node whose tensor is bool."""
    if isinstance(value, bool):
        return True
    meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    return isinstance(meta, torch.Tensor) and meta.dtype == torch.bool


def _is_floating(node: torch.fx.Node) -> bool:
    meta = node.meta.get("val")
    return isinstance(meta, torch.Tensor) and (meta.is_floating_point() or meta.is_complex())


def _is_view(target: object) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def to_prim_graph(gm: torch.fx.GraphModule) -> PrimGraph:
    node_prims: dict[str, str] = {}
    externs: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        prim, reason = classify(node)
        node_prims[node.name] = prim
        if prim == "extern":
            externs[node.name] = reason
    return PrimGraph(graph_module=gm, node_prims=node_prims, externs=externs)

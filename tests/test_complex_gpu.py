"""The complex-tensor tests of tests/test_complex.py on CUDA: the same programs, inputs made on the GPU
(`torch.device("cuda")` as the default device), so the rewrite's kernels are Triton compiled for the
card (not the interpreter) and the FFTs are cuFFT's, through the same custom ops. Run with
`python -m pytest -m gpu tests/test_complex_gpu.py`; skipped without CUDA."""

import pytest
import test_complex as on_cpu
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (test in test_complex.py, its arguments). The first-call aliasing test is left out: it monkeypatches
# the api and uses a CPU generator; the bug it guards is in CPU and CUDA dispatch alike.
CASES = [
    ("test_meta_rotary_embedding_is_one_kernel_and_trains", {"backend": "triton"}),
    ("test_complex_arithmetic_matches_eager", {"backend": "triton"}),
    ("test_complex_roots_and_logarithms_match_c_at_their_edges", {"backend": "triton"}),
    ("test_complex_exponential_trigonometric_and_hyperbolic_functions_match_c_at_their_edges", {"backend": "triton"}),
    ("test_complex_exp2_is_atens_exp_of_the_scaled_parts", {"backend": "triton"}),
    ("test_complex_atanh_and_atan_match_c_at_their_edges", {"backend": "triton"}),
    ("test_complex_log1p_and_expm1_match_eager_near_zero_and_at_their_edges", {"backend": "triton"}),
    ("test_complex_sigmoid_and_reciprocal_keep_eagers_zeros_and_edges", {"backend": "triton"}),
    ("test_complex_powers_match_eager_with_atens_shortcuts_and_cs_products", {"backend": "triton"}),
    ("test_complex_matmul_is_four_real_products", {"backend": "triton"}),
    ("test_complex128_and_a_lazily_conjugated_input", {}),
    ("test_views_of_a_complex_input_stay_views", {}),
    ("test_a_complex_op_without_a_rule_is_pytorchs_call_on_pairs_and_counted", {"backend": "triton"}),
    ("test_fourier_transforms_are_library_calls_between_our_kernels", {"backend": "triton"}),
    ("test_rotary_embedding_with_dynamic_sequence_length", {}),
    ("test_outputs_keep_their_traced_strides_so_a_backward_reads_its_saved_tensors_right", {"backend": "triton"}),
]


@pytest.fixture(autouse=True)
def _on_the_gpu():
    torch._dynamo.reset()
    with torch.device("cuda"):
        yield


@pytest.mark.parametrize("name,kwargs", CASES, ids=[c[0].removeprefix("test_") for c in CASES])
def test_complex_on_cuda(name, kwargs):
    getattr(on_cpu, name)(**kwargs)

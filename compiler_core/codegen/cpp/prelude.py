"""The C++ helpers every generated translation unit starts with.

Why helpers rather than operators: PyTorch's max/min propagate NaN (std::max does not), integer
floor division and remainder round toward -inf (C++ truncates), integer division by zero must not
kill the process with SIGFPE, and bf16 has no native C++ type.

Integer division by zero: eager PyTorch on the CPU raises RuntimeError("ZeroDivisionError"). A kernel
cannot raise, so the helpers return 0 and set this library's error flag; the runtime reads and
clears it with `fc_take_error()` after each call of a graph whose kernels divide integers or read
positions from an index tensor (KernelSource.checks_int_div) and raises eager's error; an index out of
range (gather, index, embedding) is flagged the same way, and nothing outside the buffer is read.
"""

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <algorithm>
#include <omp.h>

// No vector variants of libm (glibc's libmvec), though they would vectorise loops calling sin or log:
// a vectorised loop calls them and its scalar tail, or a scalar loop elsewhere, libm's, and the two
// differ in the last bit. A value computed twice must be the same bits, as eager's is: with libmvec,
// `x.exp() == x.exp().amax(1, keepdim=True)` found no maximum in one row of three, a training step's max
// backward indexed past its row, and minimum's backward split a tie between m and m.diagonal() of a
// sin one way in the forward and another in the backward (tests/test_fuzz.py). exp, tanh, sigmoid and
// erf for float, the functions of softmax, GELU and SiLU, are ours below: plain arithmetic that
// vectorises and rounds the same in every loop. The others call libm, the same code everywhere, and
// their loops stay scalar (slower: 20 sins over 1,024 floats take 0.31 ms instead of 0.06 ms).

namespace fc {
template <typename T> static inline T maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
  return a > b ? a : b;
}
template <typename T> static inline T minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
  return a < b ? a : b;
}
// Selections by a condition that is the same in every lane of the vectorised loop (a padding mask that
// depends on the outer loops only). GCC 12 turns `c ? a : b` and a load under `c` into a select or a
// masked load with a scalar mask, which its vectoriser cannot handle ("no vectype"): the whole loop
// then ran scalar (a ResNet max-pool over a padded batch norm, 30 -> 13 us once vectorised). Integer
// blends of the bits or of the addresses are not turned back into branches, and pick exactly.
template <typename A, typename B, typename T = std::common_type_t<A, B>>  // the type `c ? a : b` has
static inline T uniform_select(bool c, A a_in, B b_in) {
  const T a = static_cast<T>(a_in), b = static_cast<T>(b_in);
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t,
               std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(T) == sizeof(Bits), "uniform_select: a 1, 2, 4 or 8 byte value");
  Bits m = static_cast<Bits>(-static_cast<Bits>(c)), ba, bb, r;
  std::memcpy(&ba, &a, sizeof(T));
  std::memcpy(&bb, &b, sizeof(T));
  r = static_cast<Bits>((ba & m) | (bb & static_cast<Bits>(~m)));
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
// Zeros that a masked-off load reads instead of its buffer (`or_zeros`); the code generator uses it
// only where the load's offsets within one vector loop stay inside these bytes. Not `const`: zero-initialised
// writable data goes to .bss (no bytes in the shared object; a const array put 64 KB into every one),
// and nothing ever writes it.
alignas(64) static unsigned char zero_bytes[65536];
// `base + offset` where `c` holds, else the zeros; the address is computed as an integer, so a
// masked-off offset (outside the buffer) never forms an out-of-bounds pointer.
template <typename T> static inline const T* or_zeros(bool c, const T* base, int64_t offset) {
  uintptr_t m = static_cast<uintptr_t>(-static_cast<uintptr_t>(c));
  uintptr_t at = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset) * sizeof(T);
  return reinterpret_cast<const T*>((at & m) | (reinterpret_cast<uintptr_t>(zero_bytes) & ~m));
}
// Written by any OpenMP thread (relaxed atomic stores: no data race, no ordering needed), read and
// cleared by fc_take_error() once the graph has run.
static int error_flag = 0;
static inline void flag_zero_division() { __atomic_store_n(&error_flag, 1, __ATOMIC_RELAXED); }
// A position read from an index tensor: with `wrap` negative counts from the end (as ATen's index and
// take); out of range flags `error` and gives 0, so the load stays inside the buffer.
static inline int64_t checked_position(int64_t i, int64_t size, int error, bool wrap) {
  int64_t p = (wrap && i < 0) ? i + size : i;
  if (p < 0 || p >= size) { __atomic_store_n(&error_flag, error, __ATOMIC_RELAXED); return 0; }
  return p;
}
// The same for a masked read (a gather inside a cat's piece): where `live` is false nothing is read,
// and the position (computed there from anything, even a NaN) is neither checked nor flagged.
static inline int64_t checked_position_if(bool live, int64_t i, int64_t size, int error, bool wrap) {
  return live ? checked_position(i, size, error, wrap) : 0;
}
template <typename T> static inline T floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::floor(a / b); }
  else {
    if (b == 0) { flag_zero_division(); return 0; }
    T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q;
  }
}
template <typename T> static inline T truncdiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::trunc(a / b); }
  else { if (b == 0) { flag_zero_division(); return 0; } return a / b; }
}
template <typename T> static inline T remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  } else {
    if (b == 0) { flag_zero_division(); return 0; }
    T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  }
}
template <typename T> static inline T fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::fmod(a, b); }
  else { if (b == 0) { flag_zero_division(); return 0; } return a % b; }
}
// Shifts as ATen's: a shift amount below 0 or of the width or more is defined (0 to the left, the sign
// fill to the right) where C++ leaves it undefined; a left shift goes through the unsigned type.
template <typename T> static inline T lshift(T a, T b) {
  constexpr T width = sizeof(T) * 8;
  if (static_cast<std::make_signed_t<T>>(b) < 0 || b >= width) return 0;
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) << b);
}
template <typename T> static inline T rshift(T a, T b) {
  constexpr T max_shift = sizeof(T) * 8 - std::is_signed_v<T>;
  if (static_cast<std::make_signed_t<T>>(b) < 0 || b >= max_shift) return static_cast<T>(a >> max_shift);
  return static_cast<T>(a >> b);
}
// Integer powers by squaring in unsigned arithmetic (wraps like ATen's, without signed-overflow UB);
// a negative exponent gives 1/a rounded toward zero, as ATen computes it.
template <typename T> static inline T pow(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::pow(a, b); }
  else {
    if constexpr (std::is_signed_v<T>) {
      if (b < 0) { if (a == 1) return 1; if (a == -1) return (b & 1) ? T(-1) : T(1); return 0; }
    }
    uint64_t r = 1, x = static_cast<uint64_t>(a), e = static_cast<uint64_t>(b);
    while (e) { if (e & 1) r *= x; x *= x; e >>= 1; }
    return static_cast<T>(r);
  }
}
// As ATen's (on the CPU, torch 2.13): two comparisons, so NaN and -0.0 give 0.
template <typename T> static inline T sign(T a) {
  return static_cast<T>((T(0) < a) - (a < T(0)));
}
// erf for float, branch-free and without exp or division, so loops calling it vectorise well
// (libm's erff does not vectorise; libmvec's is 3x slower). Two polynomials fitted in double
// precision: erf(x) = x*PA(x^2) for |x| <= 1 (least squares, degree 5 in x^2), and a degree-12
// Chebyshev fit of erf on [1, 4] in u = (|x| - 2.5)/1.5; past 4, erf is +-1 in float.
// Horner steps as explicit fused multiply-adds: the kernels build with -ffp-contract=off (the same
// rounding in vector and scalar loops), which would otherwise split each step in two; std::fma is one
// instruction under -march=native and rounds identically in both loops. GELU over 1024x2048 on one
// core: 1.24 ms with separate multiplies and adds, 0.77 ms with fma (copy: 0.20 ms).
// Measured against erf in double over [-6, 6] and tiny |x|: max abs error 1.5e-7, relative 1.0e-7
// for tiny |x|; erf(-0) = -0, NaN stays NaN.
static inline float erf_f32(float x) {
  const float ax = std::fabs(x);
  const float s = x * x;
  float p = -5.696634526e-04f;
  p = std::fma(p, s, 4.934501048e-03f);
  p = std::fma(p, s, -2.672697577e-02f);
  p = std::fma(p, s, 1.128078851e-01f);
  p = std::fma(p, s, -3.761241467e-01f);
  p = std::fma(p, s, 1.128379150e+00f);
  const float small = x * p;
  const float u = ((ax < 4.0f ? ax : 4.0f) - 2.5f) * (1.0f / 1.5f);
  // Written out step by step: a loop over an initializer list of the coefficients stopped GCC from
  // vectorising the caller (GELU 10x slower).
  float m = -1.129996359e-03f;
  m = std::fma(m, u, 1.851572642e-03f);
  m = std::fma(m, u, 3.426040101e-03f);
  m = std::fma(m, u, -1.079767318e-02f);
  m = std::fma(m, u, 7.483686962e-03f);
  m = std::fma(m, u, 9.810802527e-03f);
  m = std::fma(m, u, -3.216435445e-02f);
  m = std::fma(m, u, 4.632206392e-02f);
  m = std::fma(m, u, -4.360219006e-02f);
  m = std::fma(m, u, 2.819584621e-02f);
  m = std::fma(m, u, -1.225590855e-02f);
  m = std::fma(m, u, 3.266968930e-03f);
  m = std::fma(m, u, 9.995930794e-01f);
  const float large = std::copysign(ax < 4.0f ? (m < 1.0f ? m : 1.0f) : 1.0f, x);
  const float result = ax <= 1.0f ? small : large;
  return x != x ? x : result;
}
// The `recurrence` primitive: P_n of P_0 = p, P_1 = q and P_{k+1} = (t_k P_k - c_k P_{k-1}) / d_k, with
// t_k = (a1 k + a0) x + (b1 k + b0), c_k = c1 k + c0, d_k = d1 k + d0 (the orthogonal polynomials). A loop
// per element, as eager's: its length is the element's own n. A NaN stays NaN, so it stops there.
template <typename T> static inline T recurrence(T x, int64_t n, T p, T q, T a1, T a0, T b1, T b0, T c1, T c0,
                                                 T d1, T d0) {
  if (n < 1) return p;
  for (int64_t k = 1; k < n && q == q; ++k) {
    const T kk = static_cast<T>(k);
    T r = ((a1 * kk + a0) * x + (b1 * kk + b0)) * q - (c1 * kk + c0) * p;
    r = r / (d1 * kk + d0);
    p = q;
    q = r;
  }
  return q;
}
// exp for float: x = n ln2 + r (Cody-Waite, |r| <= ln2/2), e^r by its Taylor polynomial of degree 7
// (truncation below 6e-9 relative) in fma steps, times 2^n built from the exponent bits in two halves
// (so 2^-150 and 2^128 need no special case: under- and overflow round as libm's). Branch-free, no libm
// call: a vector loop and a scalar one give the same bits. Within 1 ulp of exp in double (tests).
static inline float exp_f32(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float round_magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float shifted = xc * 1.44269504088896341f + round_magic;
  const float n = shifted - round_magic;
  float r = std::fma(n, -0.693145751953125f, xc);
  r = std::fma(n, -1.428606765330187045e-06f, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, 4);
  const int32_t ni = shifted_bits - 0x4B400000;  // n, read from the low bits of shifted (no conversion)
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return (p * s1) * s2;  // NaN: the clamps keep it, and r, p and the product stay NaN
}
// tanh for float from the same pieces: |x| < 1/8 by its series; |x| < 0.55 as e/(e + 2) with
// e = expm1(2|x|) by its Taylor polynomial (degree 11, |2x| < 1.1: no cancellation near 0); above as
// 1 - 2/(exp(2|x|) + 1) (the quotient is at most 1/2, so little cancels); the sign put back;
// tanh(-0) = -0, NaN stays NaN.
static inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float y = 2.0f * (ax < 0.55f ? ax : 0.55f);
  float q = 1.0f / 479001600.0f;  // 1/12!
  q = std::fma(q, y, 1.0f / 39916800.0f);
  q = std::fma(q, y, 1.0f / 3628800.0f);
  q = std::fma(q, y, 1.0f / 362880.0f);
  q = std::fma(q, y, 1.0f / 40320.0f);
  q = std::fma(q, y, 1.0f / 5040.0f);
  q = std::fma(q, y, 1.0f / 720.0f);
  q = std::fma(q, y, 1.0f / 120.0f);
  q = std::fma(q, y, 1.0f / 24.0f);
  q = std::fma(q, y, 1.0f / 6.0f);
  q = std::fma(q, y, 0.5f);
  q = std::fma(q, y, 1.0f);
  const float em = q * y;
  const float x2 = x * x;  // |x| < 1/8: tanh's own series, x + x^3 (-1/3 + x^2 (2/15 + ...)), within an ulp
  float t = 62.0f / 2835.0f;
  t = std::fma(t, x2, -17.0f / 315.0f);
  t = std::fma(t, x2, 2.0f / 15.0f);
  t = std::fma(t, x2, -1.0f / 3.0f);
  const float tiny = std::fma(t * x2, ax, ax);
  const float small = ax < 0.125f ? tiny : em / (em + 2.0f);
  const float large = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  const float result = std::copysign(ax < 0.55f ? small : large, x);
  return x != x ? x : result;
}
template <typename T> static inline T sigmoid(T a) {
  if constexpr (std::is_same_v<T, float>) {
    return 1.0f / (1.0f + exp_f32(-a));
  } else {
    return T(1) / (T(1) + std::exp(-a));
  }
}
template <typename T> static inline T rsqrt(T a) { return T(1) / std::sqrt(a); }

// bf16 lives in registers as float; these convert at the memory boundary (round to nearest even).
static inline float bf16_to_float(uint16_t v) {
  uint32_t u = uint32_t(v) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t float_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (f != f) return uint16_t((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
static inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
static inline float f16_to_float(_Float16 v) { return static_cast<float>(v); }
static inline _Float16 float_to_f16(float f) { return static_cast<_Float16>(f); }
static inline float round_f16(float f) { return static_cast<float>(static_cast<_Float16>(f)); }
}  // namespace fc

// 1 when a kernel divided an integer by zero since the last call; clears the flag.
extern "C" int fc_take_error() { return __atomic_exchange_n(&fc::error_flag, 0, __ATOMIC_RELAXED); }

// NaN-propagating max/min as OpenMP reductions, so reduction loops still vectorise.
"""

_REDUCTION_TYPES = ("float", "double", "int64_t", "int32_t", "int16_t", "int8_t", "uint8_t", "bool")
PRELUDE += "".join(
    f"#pragma omp declare reduction({name} : {t} : omp_out = fc::{fn}(omp_out, omp_in)) "
    "initializer(omp_priv = omp_orig)\n"
    for t in _REDUCTION_TYPES for name, fn in (("fcmax", "maximum"), ("fcmin", "minimum")))


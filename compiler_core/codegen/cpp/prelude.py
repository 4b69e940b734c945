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
// sin one way in the forward and another in the backward (tests/test_fuzz.py). exp, tanh, sigmoid, erf,
// sin and cos for float (softmax, GELU, SiLU, rotary tables) are ours below: plain arithmetic that
// vectorises and rounds the same in every loop. The others (log, log1p, expm1, float64...) call libm,
// the same code everywhere, and their loops stay scalar.

namespace fc {
// NaN wins, the first one first, as in eager. Selects, not early returns: in a long loop body (a 3x3
// max pool over a padded batch norm, nine of these) GCC 12 on AVX2 left the returns as branches
// ("control flow in loop") and ran the loop scalar; AVX-512's masks hid it.
template <typename T> static inline T maximum(T a, T b) {
  T m = a > b ? a : b;
  if constexpr (std::is_floating_point_v<T>) { m = b != b ? b : m; m = a != a ? a : m; }
  return m;
}
template <typename T> static inline T minimum(T a, T b) {
  T m = a < b ? a : b;
  if constexpr (std::is_floating_point_v<T>) { m = b != b ? b : m; m = a != a ? a : m; }
  return m;
}
// Every `where`, printed as a blend of the bits, never as `c ? a : b`. GCC 12 turns a ternary into a
// select or a branch, and in a long loop body its vectoriser gave up on either: with a condition that
// is the same in every lane (a padding mask of the outer loops) the select had a scalar mask ("no
// vectype": a ResNet max pool over a padded batch norm ran scalar, 30 us, 13 us vectorised), and with
// AVX2 one ReLU ternary per tap of that 3x3 pool (`x < 0 ? 0 : x`, which keeps -0.0 as eager does) sent
// the same loop back to scalar though each alone vectorised. Integer blends are not turned back into
// branches, vectorise either way, and pick exactly (NaN payloads, -0.0).
template <typename A, typename B, typename T = std::common_type_t<A, B>>  // the type `c ? a : b` has
static inline T select(bool c, A a_in, B b_in) {
  const T a = static_cast<T>(a_in), b = static_cast<T>(b_in);
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t,
               std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(T) == sizeof(Bits), "select: a 1, 2, 4 or 8 byte value");
  Bits m = static_cast<Bits>(-static_cast<Bits>(c)), ba, bb, r;
  std::memcpy(&ba, &a, sizeof(T));
  std::memcpy(&bb, &b, sizeof(T));
  r = static_cast<Bits>((ba & m) | (bb & static_cast<Bits>(~m)));
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
// A float converted to an integer as x86's truncating conversion converts it, which is what eager's CPU
// kernels get: NaN and values outside the range give the minimum (of int64 for 8-byte integers, else of
// int32, then wrapped to the width: eager's int8 of 300.0 is 44, of inf 0). A plain static_cast of such
// a value is undefined behaviour, and GCC used it: `(int64_t)(|x| * 5)` was taken to be >= 0, a clamp to
// 0 of it was dropped, and the conversion of inf (INT64_MIN) reached a gather as its index (random program
// 9520). Selects around a conversion that is always in range, and `&` rather than `&&` (a branch): it
// vectorises (tests/test_vector_isas.py).
template <typename T, typename F> static inline T float_to_int(F x) {
  if constexpr (sizeof(T) == 8) {
    const bool inside = (x >= F(-9223372036854775808.0)) & (x < F(9223372036854775808.0));
    const int64_t v = static_cast<int64_t>(select(inside, x, F(0)));
    return static_cast<T>(select(inside, v, std::numeric_limits<int64_t>::min()));
  } else {
    const bool inside = (x >= F(-2147483648.0)) & (x < F(2147483648.0));
    const int32_t v = static_cast<int32_t>(select(inside, x, F(0)));
    return static_cast<T>(select(inside, v, std::numeric_limits<int32_t>::min()));
  }
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
// Integer quotient and remainder for b != 0. x86's idiv traps on the most negative value divided by -1
// (the quotient overflows), and the trap ends the process: there the quotient wraps (as ATen's floor
// division gives it) and the remainder is 0 (ATen's remainder and fmod); eager's own trunc division
// traps.
template <typename T> static inline T int_quotient(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(a));
  }
  return static_cast<T>(a / b);
}
template <typename T> static inline T int_remainder(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return static_cast<T>(a % b);
}
template <typename T> static inline T floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    // ATen's floor division of floats, from the exact remainder: floor(a / b) rounds a / b first
    // (floor_divide(1.0, 0.1) is 9, as 0.1f is above 1/10, though 1.0f / 0.1f rounds to 10).
    if (b == 0) return a / b;
    const T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    const T floored = std::floor(div);
    return div - floored > T(0.5) ? floored + T(1) : floored;
  }
  else {
    if (b == 0) { flag_zero_division(); return 0; }
    T q = int_quotient(a, b); if ((int_remainder(a, b) != 0) && ((a < 0) != (b < 0))) q -= 1; return q;
  }
}
template <typename T> static inline T truncdiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::trunc(a / b); }
  else { if (b == 0) { flag_zero_division(); return 0; } return int_quotient(a, b); }
}
template <typename T> static inline T remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  } else {
    if (b == 0) { flag_zero_division(); return 0; }
    T r = int_remainder(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  }
}
template <typename T> static inline T fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::fmod(a, b); }
  else { if (b == 0) { flag_zero_division(); return 0; } return int_remainder(a, b); }
}
// ATen's calc_gcd: Euclid's algorithm on the magnitudes. Negating goes through the unsigned type: the
// most negative value stays itself (std::abs's wrap, defined here), so gcd(-128, 0) is -128 in int8.
template <typename T> static inline T gcd(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (a < 0) a = static_cast<T>(U(0) - static_cast<U>(a));
    if (b < 0) b = static_cast<T>(U(0) - static_cast<U>(b));
  }
  while (a != 0) {
    const T c = a;
    a = int_remainder(b, a);
    b = c;
  }
  return b;
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
  const float u = (select(ax < 4.0f, ax, 4.0f) - 2.5f) * (1.0f / 1.5f);
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
  const float large = std::copysign(select(ax < 4.0f, select(m < 1.0f, m, 1.0f), 1.0f), x);
  const float result = select(ax <= 1.0f, small, large);
  return select(x != x, x, result);
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
  const float xc = select(x < -104.0f, -104.0f, select(x > 89.0f, 89.0f, x));
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
  const float y = 2.0f * select(ax < 0.55f, ax, 0.55f);
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
  const float small = select(ax < 0.125f, tiny, em / (em + 2.0f));
  const float large = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  const float result = std::copysign(select(ax < 0.55f, small, large), x);
  return select(x != x, x, result);
}
// sin and cos for float: x = n pi/2 + (hi + lo), a float pair, then polynomials in float on |hi| <= pi/4
// that carry lo, eight lanes under AVX2. Up to SMALL_TRIG_ARGUMENT the reduction is in float (below);
// beyond, in double: a float of 2^24 or more is an integer m * 2^E, so x = m (2^E mod 2 pi) mod 2 pi
// with the table below (scripts/trig_reduction_table.py: two doubles an entry, about 106 bits; smaller
// floats use x itself, entry 0 being 1), and then pi/2 in three doubles. Every float, both reductions:
// within 0.65 ulp of sin and cos in double (checked over all 2^31 non-negative floats; eager's Sleef
// promises 1 ulp).
static const double TWO_POW_MOD_TWO_PI_HI[105] = {
  1.0, 2.0, 4.0, 1.7168146928204135,
  3.433629385640827, 0.5840734641020676, 1.1681469282041352, 2.3362938564082705,
  4.672587712816541, 3.0619901184534952, 6.1239802369069904, 5.964775166634395,
  5.646365026089203, 5.009544744998821, 3.7359041828180546, 1.188623058456523,
  2.377246116913046, 4.754492233826092, 3.2257991604725964, 0.1684130137656059,
  0.3368260275312118, 0.6736520550624236, 1.3473041101248473, 2.6946082202496946,
  5.389216440499389, 4.495247573819193, 2.707309840458799, 5.414619680917598,
  4.546054054655609, 2.8089228021316304, 5.617845604263261, 4.952505901346936,
  3.621826495514285, 0.960467683848984, 1.920935367697968, 3.841870735395936,
  1.400556163612285, 2.80111232722457, 5.60222465444914, 4.921264001718693,
  3.5593426962577985, 0.8355000853360102, 1.6710001706720203, 3.3420003413440407,
  0.4008153755084947, 0.8016307510169894, 1.6032615020339789, 3.2065230040679578,
  0.12986070095632937, 0.25972140191265874, 0.5194428038253175, 1.038885607650635,
  2.07777121530127, 4.15554243060254, 2.0278995540254936, 4.055799108050987,
  1.8284129089223877, 3.6568258178447755, 1.030466328509965, 2.06093265701993,
  4.12186531403986, 1.9605453209001322, 3.9210906418002645, 1.5589959764209427,
  3.1179919528418854, 6.235983905683771, 6.188782504187955, 6.094379701196324,
  5.905574095213061, 5.527962883246536, 4.772740459313485, 3.262295611447383,
  0.24140591571517903, 0.48281183143035805, 0.9656236628607161, 1.9312473257214322,
  3.8624946514428644, 1.4418039957061426, 2.883607991412285, 5.76721598282457,
  5.251246658469554, 4.219308009759521, 2.1554307123394554, 4.310861424678911,
  2.338537542178235, 4.67707508435647, 3.0709648615333527, 6.141929723066705,
  6.000674138953824, 5.718162970728061, 5.153140634276536, 4.0230959613734845,
  1.7630066155673831, 3.5260132311347663, 0.7688411550899459, 1.5376823101798918,
  3.0753646203597835, 6.150729240719567, 6.018273174259547, 5.753361041339508,
  5.223536775499429, 4.1638882438192715, 2.0445911804589567, 4.089182360917913,
  1.895179414656241,
};
static const double TWO_POW_MOD_TWO_PI_LO[105] = {
  0.0, 0.0, 0.0, -2.2884754904439327e-17,
  -4.5769509808878654e-17, -3.4014720596809827e-18, -6.802944119361965e-18, -1.360588823872393e-17,
  -2.721177647744786e-17, 1.4473629706569626e-16, 2.8947259413139253e-16, 3.3401582843331437e-16,
  4.2310229703715814e-16, -2.869031854552796e-16, 6.944268896009545e-17, -1.0604398190927974e-16,
  -2.120879638185595e-16, -4.24175927637119e-16, -2.0510279540358334e-16, 1.0998864138456587e-17,
  2.1997728276913175e-17, 4.399545655382635e-17, 8.79909131076527e-17, 1.759818262153054e-16,
  3.519636524306108e-16, -4.291804746683743e-16, -2.1511188946609392e-16, -4.3022377893218785e-16,
  -2.1719849799372113e-16, 2.0885206388321233e-16, 4.1770412776642467e-16, -2.976995239967466e-16,
  4.7850011877161456e-17, -3.820703361263207e-17, -7.641406722526414e-17, -1.5282813445052828e-16,
  -1.0649641888046457e-16, -2.1299283776092915e-16, -4.259856755218583e-16, -2.0872229117306203e-16,
  -2.1828473232553208e-16, -1.5365009705440884e-17, -3.073001941088177e-17, -6.146003882176354e-17,
  2.0728621145807084e-17, 4.145724229161417e-17, 8.291448458322833e-17, 1.6582896916645667e-16,
  3.4618516565559846e-18, 6.923703313111969e-18, 1.3847406626223939e-17, 2.7694813252447877e-17,
  5.5389626504895754e-17, 1.1077925300979151e-16, -2.337085380988763e-17, -4.674170761977526e-17,
  1.0567643478104146e-16, 2.1135286956208292e-16, -4.426822563033612e-17, -8.853645126067224e-17,
  -1.7707290252134449e-16, 6.705864990293432e-17, 1.3411729980586864e-16, 2.3305239782266665e-17,
  4.661047956453333e-17, 9.322095912906666e-17, -5.848744157133731e-17, -3.619042429721453e-16,
  -8.055942607363592e-17, -4.060482119767425e-16, -1.6884736408283038e-16, -1.3853487814506878e-16,
  5.356820577341173e-18, 1.0713641154682347e-17, 2.1427282309364693e-17, 4.2854564618729387e-17,
  8.570912923745877e-17, -7.351110135455308e-17, -1.4702220270910616e-16, -2.9404440541821233e-16,
  5.5160249034229947e-17, -1.3460886176101075e-16, -7.005787350142952e-17, -1.4011574700285904e-16,
  -8.107164398512609e-17, -1.6214328797025217e-16, -1.2512672591991234e-16, -2.502534518398247e-16,
  1.4274215619100522e-16, 4.055495255253981e-17, -1.6381945472439102e-16, 3.156101504218726e-16,
  -5.779826883578811e-17, -1.1559653767157621e-16, -3.203322532256044e-17, -6.406645064512088e-17,
  -1.2813290129024176e-16, -2.562658025804835e-16, 1.3071745470968757e-16, 1.650554958990453e-17,
  -2.1191826064966158e-16, 2.1941253857133145e-16, 1.9389571731319223e-16, 3.8779143462638446e-16,
  8.656429957323569e-17,
};
// x as a double: n pi/2 + r, |r| <= pi/4 (a little more when n rounds the other way); n mod 4 in quadrant.
static inline __attribute__((always_inline)) double reduce_pi_over_2(double x, int64_t& quadrant) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  int64_t e = static_cast<int64_t>((u >> 52) & 0x7ff) - 1046;  // a float x is m * 2^e, m an integer below 2^24
  e = e < 0 ? 0 : (e > 104 ? 104 : e);
  const int64_t scale_bits = (1023 - e) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, 8);
  const double m = x * scale;
  const double c_hi = TWO_POW_MOD_TWO_PI_HI[e], c_lo = TWO_POW_MOD_TWO_PI_LO[e];
  const double y_hi = m * c_hi;
  const double y_lo = std::fma(m, c_hi, -y_hi) + m * c_lo;
  const double round_magic = 6755399441055744.0;  // 1.5 * 2^52
  const double shifted = y_hi * 0.6366197723675814 + round_magic;
  const double n = shifted - round_magic;
  double r = std::fma(-n, 1.5707963267948966, y_hi);
  r = std::fma(-n, 6.123233995736766e-17, r);
  r = std::fma(-n, -1.4973849048591698e-33, r);
  int64_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, 8);
  quadrant = shifted_bits & 3;  // the mantissa holds 2^51 + n: n mod 4
  return r + y_lo;
}
// Up to here the float reduction is exact enough: n < 2^16, so x - n*C1 is exact (|x - n C1| < 1 on a grid
// of 2^-24) and C1 + C2 + C3 (pi/2 to ~75 bits) leaves r an absolute error below 1e-18.
constexpr float SMALL_TRIG_ARGUMENT = 65536.0f;
// ax = |x| <= SMALL_TRIG_ARGUMENT, or NaN: returns hi and sets lo, with hi + lo = ax - n pi/2, and the
// quadrant's low bits (n mod 4). always_inline here and below: with twenty sines in one loop body GCC
// stopped inlining the helpers, and a loop with a call in it is not vectorised (711 us against 46).
static inline __attribute__((always_inline)) float reduce_small(float ax, int32_t& quadrant, float& lo) {
  const float round_magic = 12582912.0f;  // 1.5 * 2^23
  const float shifted = ax * 0.636619772367581343f + round_magic;
  const float n = shifted - round_magic;
  const float c2 = -4.37113882867379300296306610107421875e-08f;  // pi/2 - C1
  const float t = std::fma(-n, 1.57079637050628662109375f, ax);  // exact (above)
  const float p = n * c2;
  const float p_err = std::fma(n, c2, -p);  // n c2 = p + p_err exactly
  const float hi = t - p;
  const float back = hi - t;  // hi + sum_err = t - p exactly (two-sum: t may be smaller than p)
  const float sum_err = (t - (hi - back)) + (-p - back);
  lo = (sum_err - p_err) - n * -1.7151245100058819e-15f;  // C3
  std::memcpy(&quadrant, &shifted, 4);  // 1.5 * 2^23 + n: n in the low bits
  return hi;
}
static inline __attribute__((always_inline)) float reduce_large(float ax, int32_t& quadrant, float& lo) {
  int64_t q;
  const double r = reduce_pi_over_2(static_cast<double>(ax), q);
  const float hi = static_cast<float>(r);
  lo = static_cast<float>(r - static_cast<double>(hi));
  quadrant = static_cast<int32_t>(q);
  return hi;
}
// sin(hi + lo) ~ hi + lo cos(hi) + hi^3 P(hi^2), with hi^3 carried as c3 + c3_err; Taylor terms to
// hi^9 (truncation below 0.03 ulp on |hi| <= pi/4).
static inline __attribute__((always_inline)) float sin_reduced(float hi, float lo, float hi2) {
  float p = 1.0f / 362880.0f;
  p = std::fma(p, hi2, -1.0f / 5040.0f);
  p = std::fma(p, hi2, 1.0f / 120.0f);
  p = std::fma(p, hi2, -1.0f / 6.0f);
  const float lo_cos = lo * std::fma(-0.5f, hi2, 1.0f);
  const float e2 = std::fma(hi, hi, -hi2);  // hi*hi = hi2 + e2
  const float c3 = hi * hi2;
  const float c3_err = std::fma(hi, hi2, -c3) + hi * e2;
  return hi + std::fma(c3, p, std::fma(c3_err, p, lo_cos));
}
// cos(hi + lo) ~ (1 - hi^2/2) + hi^4 Q(hi^2) - lo hi, the first difference with its rounding error kept.
static inline __attribute__((always_inline)) float cos_reduced(float hi, float lo, float hi2) {
  float p = -1.0f / 3628800.0f;
  p = std::fma(p, hi2, 1.0f / 40320.0f);
  p = std::fma(p, hi2, -1.0f / 720.0f);
  p = std::fma(p, hi2, 1.0f / 24.0f);
  const float e2 = std::fma(hi, hi, -hi2);
  const float h = 0.5f * hi2;
  const float w = 1.0f - h;
  const float tail = ((1.0f - w) - h) - 0.5f * e2;
  return w + (tail + std::fma(hi2 * hi2, p, -lo * hi));
}
static inline __attribute__((always_inline)) float flip_sign(float v, uint32_t sign_bit) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits ^= sign_bit;
  std::memcpy(&v, &bits, 4);
  return v;
}
// sin is odd: |x| is reduced and the sign put back by its bit (sin(-0) = -0); the quadrant picks the
// polynomial with a blend, never a branch.
static inline __attribute__((always_inline)) float sin_from(float x, float hi, float lo, int32_t q) {
  const float hi2 = hi * hi;
  const float v = select((q & 1) != 0, cos_reduced(hi, lo, hi2), sin_reduced(hi, lo, hi2));
  uint32_t x_bits;
  std::memcpy(&x_bits, &x, 4);
  return flip_sign(v, (x_bits & 0x80000000u) ^ (static_cast<uint32_t>(q & 2) << 30));
}
static inline __attribute__((always_inline)) float cos_from(float hi, float lo, int32_t q) {
  const float hi2 = hi * hi;
  const float v = select((q & 1) != 0, sin_reduced(hi, lo, hi2), cos_reduced(hi, lo, hi2));
  return flip_sign(v, static_cast<uint32_t>((q + 1) & 2) << 30);
}
// Both reductions, the one for |x| picked by a blend; inf and NaN give NaN through the factor
// 1 + (x - x), 1 for every finite x. Where |x| <= SMALL_TRIG_ARGUMENT the bits are those of the
// *_small functions, so a kernel that proves its argument small (codegen) agrees with one that does not.
static inline __attribute__((always_inline)) void reduce_any(float ax, float& hi, float& lo, int32_t& q) {
  int32_t q_small, q_large;
  float lo_small, lo_large;
  const float hi_small = reduce_small(ax, q_small, lo_small);
  const float hi_large = reduce_large(ax, q_large, lo_large);
  const bool small = ax <= SMALL_TRIG_ARGUMENT;
  hi = select(small, hi_small, hi_large);
  lo = select(small, lo_small, lo_large);
  q = select(small, q_small, q_large);
}
static inline float sin_f32(float x) {
  float hi, lo;
  int32_t q;
  reduce_any(std::fabs(x), hi, lo, q);
  return sin_from(x, hi, lo, q) * (1.0f + (x - x));
}
static inline float cos_f32(float x) {
  float hi, lo;
  int32_t q;
  reduce_any(std::fabs(x), hi, lo, q);
  return cos_from(hi, lo, q) * (1.0f + (x - x));
}
// For an argument the code generator proved at most SMALL_TRIG_ARGUMENT in magnitude, or NaN
// (ir/value_range.py): the float reduction alone, about twice as fast (20 sines of 1,024 floats: 46 us
// against 102 on the 2-core AMD EPYC, AVX2).
static inline float sin_f32_small(float x) {
  int32_t q;
  float lo;
  const float hi = reduce_small(std::fabs(x), q, lo);
  return sin_from(x, hi, lo, q);
}
static inline float cos_f32_small(float x) {
  int32_t q;
  float lo;
  const float hi = reduce_small(std::fabs(x), q, lo);
  return cos_from(hi, lo, q);
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
  uint32_t u; std::memcpy(&u, &f, 4);  // a select, not a return, for the reason maximum gives
  uint32_t rounded = u + 0x7fff + ((u >> 16) & 1), quiet = u | 0x400000u;  // a NaN stays a (quiet) NaN
  return uint16_t((f != f ? quiet : rounded) >> 16);
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


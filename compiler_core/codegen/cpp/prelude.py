"""The C++ helpers every generated translation unit starts with.

Why helpers rather than operators: PyTorch's max/min propagate NaN (std::max does not), integer
floor division and remainder round toward -inf (C++ truncates), integer division by zero must not
kill the process with SIGFPE, and bf16 has no native C++ type.
"""

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#include <omp.h>

// Vector variants of libm from glibc's libmvec (accurate to a few ulp, no fast-math): declaring
// them lets the compiler vectorise loops that call exp/erf/tanh/sin... like ATen's own kernels do.
#ifndef FC_NO_LIBMVEC
extern "C" {
#define FC_SIMD __attribute__((simd("notinbranch")))
FC_SIMD float expf(float); FC_SIMD float logf(float); FC_SIMD float log1pf(float); FC_SIMD float expm1f(float);
FC_SIMD float sinf(float); FC_SIMD float cosf(float); FC_SIMD float tanhf(float); FC_SIMD float erff(float);
FC_SIMD double exp(double); FC_SIMD double log(double); FC_SIMD double sin(double); FC_SIMD double cos(double);
FC_SIMD double tanh(double); FC_SIMD double erf(double); FC_SIMD double log1p(double); FC_SIMD double expm1(double);
}
#endif

namespace fc {
template <typename T> static inline T maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
  return a > b ? a : b;
}
template <typename T> static inline T minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
  return a < b ? a : b;
}
template <typename T> static inline T floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::floor(a / b); }
  else { if (b == 0) return 0; T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; }
}
template <typename T> static inline T truncdiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::trunc(a / b); }
  else { return b == 0 ? 0 : a / b; }
}
template <typename T> static inline T remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  } else {
    if (b == 0) return 0; T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  }
}
template <typename T> static inline T sign(T a) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; }
  return static_cast<T>((T(0) < a) - (a < T(0)));
}
template <typename T> static inline T sigmoid(T a) { return T(1) / (T(1) + std::exp(-a)); }
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

// NaN-propagating max/min as OpenMP reductions, so reduction loops still vectorise.
"""

_REDUCTION_TYPES = ("float", "double", "int64_t", "int32_t", "int16_t", "int8_t", "uint8_t", "bool")
PRELUDE += "".join(
    f"#pragma omp declare reduction({name} : {t} : omp_out = fc::{fn}(omp_out, omp_in)) "
    "initializer(omp_priv = omp_orig)\n"
    for t in _REDUCTION_TYPES for name, fn in (("fcmax", "maximum"), ("fcmin", "minimum")))


#include "hvx/kernels/cpu_ops.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "hvx/common/half.h"

namespace hvx {
namespace {

// One element of op (kSum, kMin, kMax, kProduct) on T: widened to float for float16/bfloat16 and
// rounded back once; bool's Sum and Max are OR, Min and Product AND.
// Integer sums and products wrap around, as MPI's do. They are computed in an unsigned type at
// least as wide as int: signed overflow, and that of a small type promoted to int, is undefined
// behaviour (UBSan stopped on an int32 sum), and the unsigned result has the same bits.
template <typename T, bool = std::is_integral_v<T>>
struct Arithmetic {
  using type = T;
};
template <typename T>
struct Arithmetic<T, true> {
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};

template <typename T>
struct Plain {
  using A = typename Arithmetic<T>::type;
  static T Apply(ReduceOp op, T a, T b) {
    switch (op) {
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kProduct:
        return static_cast<T>(static_cast<A>(a) * static_cast<A>(b));
      default:
        return static_cast<T>(static_cast<A>(a) + static_cast<A>(b));
    }
  }
};

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct Half {
  static uint16_t Apply(ReduceOp op, uint16_t a, uint16_t b) {
    return FromFloat(Plain<float>::Apply(op, ToFloat(a), ToFloat(b)));
  }
};

struct Bool {
  static uint8_t Apply(ReduceOp op, uint8_t a, uint8_t b) {
    return op == ReduceOp::kMin || op == ReduceOp::kProduct ? (a && b) : (a || b);
  }
};

// out[i] = a[i] op b[i]; out may be a (ReduceInto), which GCC's vectorized loop allows for. The
// switch stays outside the loops, so each loop vectorizes.
template <typename T, typename E>
void Fold(ReduceOp op, void* out_bytes, const void* a_bytes, const void* b_bytes, int64_t n) {
  T* out = static_cast<T*>(out_bytes);
  const T* a = static_cast<const T*>(a_bytes);
  const T* b = static_cast<const T*>(b_bytes);
  switch (op) {
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) out[i] = E::Apply(ReduceOp::kMin, a[i], b[i]);
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) out[i] = E::Apply(ReduceOp::kMax, a[i], b[i]);
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < n; ++i) out[i] = E::Apply(ReduceOp::kProduct, a[i], b[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = E::Apply(ReduceOp::kSum, a[i], b[i]);
      break;
  }
}

template <typename T>
void ScaleInt(T* data, int64_t n, Scale s) {
  const double f = s.factor, d = s.divisor;
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<double>(data[i]) * f / d);
}

// float32(x * f) / divisor, rounded once: see cpu_ops.h.
inline float DivideOnce(float x, double reciprocal) {
  return static_cast<float>(static_cast<double>(x) * reciprocal);
}

void ScaleFloat(float* d, int64_t n, Scale s) {
  const float f = static_cast<float>(s.factor);
  if (s.divisor == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] *= f;
    return;
  }
  const double r = 1.0 / s.divisor;
  for (int64_t i = 0; i < n; ++i) d[i] = DivideOnce(d[i] * f, r);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalf(uint16_t* data, int64_t n, Scale s) {
  const float f = static_cast<float>(s.factor);
  if (s.divisor == 1) {
    for (int64_t i = 0; i < n; ++i) data[i] = FromFloat(ToFloat(data[i]) * f);
    return;
  }
  const double r = 1.0 / s.divisor;
  for (int64_t i = 0; i < n; ++i) data[i] = FromFloat(DivideOnce(ToFloat(data[i]) * f, r));
}

template <typename T, typename Load, typename Store>
void Adasum(T* a, const T* b, int64_t n, Load load, Store store) {
  double dot = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = load(a[i]), y = load(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa < tiny ? 1.0 : 1.0 - dot / (2 * aa);
  const double cb = bb < tiny ? 1.0 : 1.0 - dot / (2 * bb);
  for (int64_t i = 0; i < n; ++i) a[i] = store(ca * load(a[i]) + cb * load(b[i]));
}

}  // namespace

void ReduceInto(DataType dtype, ReduceOp op, void* acc, const void* in, int64_t n) {
  ReduceTo(dtype, op, acc, acc, in, n);
}

void ReduceTo(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, int64_t n) {
  using HalfOp = Half<HalfToFloat, FloatToHalf>;
  using Bfloat16Op = Half<Bfloat16ToFloat, FloatToBfloat16>;
  switch (dtype) {
    case DataType::kUint8:
      return Fold<uint8_t, Plain<uint8_t>>(op, out, a, b, n);
    case DataType::kInt8:
      return Fold<int8_t, Plain<int8_t>>(op, out, a, b, n);
    case DataType::kInt16:
      return Fold<int16_t, Plain<int16_t>>(op, out, a, b, n);
    case DataType::kInt32:
      return Fold<int32_t, Plain<int32_t>>(op, out, a, b, n);
    case DataType::kInt64:
      return Fold<int64_t, Plain<int64_t>>(op, out, a, b, n);
    case DataType::kFloat32:
      return Fold<float, Plain<float>>(op, out, a, b, n);
    case DataType::kFloat64:
      return Fold<double, Plain<double>>(op, out, a, b, n);
    case DataType::kFloat16:
      return Fold<uint16_t, HalfOp>(op, out, a, b, n);
    case DataType::kBfloat16:
      return Fold<uint16_t, Bfloat16Op>(op, out, a, b, n);
    case DataType::kBool:
      return Fold<uint8_t, Bool>(op, out, a, b, n);
  }
}

void ScaleInPlace(DataType dtype, void* data, int64_t n, Scale scale) {
  if (scale.is_identity()) return;
  switch (dtype) {
    case DataType::kUint8:
      return ScaleInt(static_cast<uint8_t*>(data), n, scale);
    case DataType::kInt8:
      return ScaleInt(static_cast<int8_t*>(data), n, scale);
    case DataType::kInt16:
      return ScaleInt(static_cast<int16_t*>(data), n, scale);
    case DataType::kInt32:
      return ScaleInt(static_cast<int32_t*>(data), n, scale);
    case DataType::kInt64:
      return ScaleInt(static_cast<int64_t*>(data), n, scale);
    case DataType::kFloat32:
      return ScaleFloat(static_cast<float*>(data), n, scale);
    case DataType::kFloat64: {
      double* d = static_cast<double*>(data);
      const double f = scale.factor, divisor = scale.divisor;
      if (scale.divisor == 1) {
        for (int64_t i = 0; i < n; ++i) d[i] *= f;
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = d[i] * f / divisor;
      }
      return;
    }
    case DataType::kFloat16:
      return ScaleHalf<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(data), n, scale);
    case DataType::kBfloat16:
      return ScaleHalf<Bfloat16ToFloat, FloatToBfloat16>(static_cast<uint16_t*>(data), n, scale);
    case DataType::kBool:
      return;
  }
}

void AdasumCombine(DataType dtype, void* a, const void* b, int64_t n) {
  switch (dtype) {
    case DataType::kFloat32:
      return Adasum(
          static_cast<float*>(a), static_cast<const float*>(b), n,
          [](float x) { return static_cast<double>(x); },
          [](double x) { return static_cast<float>(x); });
    case DataType::kFloat64:
      return Adasum(
          static_cast<double*>(a), static_cast<const double*>(b), n, [](double x) { return x; },
          [](double x) { return x; });
    case DataType::kFloat16:
      return Adasum(
          static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b), n,
          [](uint16_t x) { return static_cast<double>(HalfToFloat(x)); },
          [](double x) { return FloatToHalf(static_cast<float>(x)); });
    case DataType::kBfloat16:
      return Adasum(
          static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b), n,
          [](uint16_t x) { return static_cast<double>(Bfloat16ToFloat(x)); },
          [](double x) { return FloatToBfloat16(static_cast<float>(x)); });
    default:
      return;
  }
}

}  // namespace hvx

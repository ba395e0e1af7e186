#include "hvx/core/cpu_ops.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "hvx/common/half.h"

namespace hvx {
namespace {

template <typename T>
void ReduceTyped(ReduceOp op, T* acc, const T* in, int64_t n) {
  switch (op) {
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], in[i]);
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] * in[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] + in[i]);
      break;
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ReduceHalf(ReduceOp op, uint16_t* acc, const uint16_t* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = ToFloat(acc[i]), b = ToFloat(in[i]);
    float r;
    switch (op) {
      case ReduceOp::kMin:
        r = std::min(a, b);
        break;
      case ReduceOp::kMax:
        r = std::max(a, b);
        break;
      case ReduceOp::kProduct:
        r = a * b;
        break;
      default:
        r = a + b;
        break;
    }
    acc[i] = FromFloat(r);
  }
}

void ReduceBool(ReduceOp op, uint8_t* acc, const uint8_t* in, int64_t n) {
  const bool use_and = op == ReduceOp::kMin || op == ReduceOp::kProduct;
  for (int64_t i = 0; i < n; ++i) {
    acc[i] = use_and ? (acc[i] && in[i]) : (acc[i] || in[i]);
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
  switch (dtype) {
    case DataType::kUint8:
      return ReduceTyped(op, static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), n);
    case DataType::kInt8:
      return ReduceTyped(op, static_cast<int8_t*>(acc), static_cast<const int8_t*>(in), n);
    case DataType::kInt16:
      return ReduceTyped(op, static_cast<int16_t*>(acc), static_cast<const int16_t*>(in), n);
    case DataType::kInt32:
      return ReduceTyped(op, static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), n);
    case DataType::kInt64:
      return ReduceTyped(op, static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), n);
    case DataType::kFloat32:
      return ReduceTyped(op, static_cast<float*>(acc), static_cast<const float*>(in), n);
    case DataType::kFloat64:
      return ReduceTyped(op, static_cast<double*>(acc), static_cast<const double*>(in), n);
    case DataType::kFloat16:
      return ReduceHalf<HalfToFloat, FloatToHalf>(op, static_cast<uint16_t*>(acc),
                                                  static_cast<const uint16_t*>(in), n);
    case DataType::kBfloat16:
      return ReduceHalf<Bfloat16ToFloat, FloatToBfloat16>(op, static_cast<uint16_t*>(acc),
                                                          static_cast<const uint16_t*>(in), n);
    case DataType::kBool:
      return ReduceBool(op, static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), n);
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

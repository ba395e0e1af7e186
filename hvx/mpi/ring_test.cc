// RingAllreduce on its own (no engine), with pieces far smaller than the segments so that every
// reduce-scatter and allgather step runs many pieces, over spans of odd sizes whose boundaries
// fall anywhere inside pieces and segments.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/common/half.h"
#include "hvx/mpi/mpi_collectives.h"

namespace hvx {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int Size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Small integers, so sums are exact in every float type.
double Value(int rank, int64_t i) { return static_cast<double>((i * 7 + rank * 3) % 11) - 5; }

const std::vector<int64_t> kSizes = {1, 1000, 3, 5000, 7, 40000, 2};

template <typename T, typename FromDouble, typename ToDouble>
void CheckRing(DataType dtype, ReduceOp op, double postscale, int64_t piece_bytes, FromDouble from,
               ToDouble to) {
  std::vector<std::vector<T>> tensors;
  std::vector<Span> spans;
  for (int64_t n : kSizes) {
    tensors.emplace_back(n);
    for (int64_t i = 0; i < n; ++i) tensors.back()[i] = from(Value(Rank(), i + n));
  }
  for (auto& t : tensors)
    spans.push_back(Span{reinterpret_cast<char*>(t.data()), static_cast<int64_t>(t.size())});
  HostBuffer scratch;
  ASSERT_TRUE(
      RingAllreduce(MPI_COMM_WORLD, spans, dtype, op, postscale, piece_bytes, &scratch).ok());
  for (size_t k = 0; k < kSizes.size(); ++k) {
    const int64_t n = kSizes[k];
    for (int64_t i = 0; i < n; ++i) {
      double want = Value(0, i + n);
      for (int r = 1; r < Size(); ++r) {
        const double v = Value(r, i + n);
        want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
      }
      ASSERT_EQ(to(tensors[k][i]), want * postscale)
          << "tensor " << k << " element " << i << ", pieces of " << piece_bytes << " bytes";
    }
  }
}

TEST(RingTest, ManyPiecesPerStepFloat32) {
  auto id = [](double v) { return static_cast<float>(v); };
  auto back = [](float v) { return static_cast<double>(v); };
  for (int64_t piece : std::vector<int64_t>{1000, 4096, 65536, int64_t{16} << 20}) {
    CheckRing<float>(DataType::kFloat32, ReduceOp::kSum, 0.5, piece, id, back);
    CheckRing<float>(DataType::kFloat32, ReduceOp::kMax, 1.0, piece, id, back);
  }
}

TEST(RingTest, ManyPiecesPerStepFloat64AndHalf) {
  for (int64_t piece : std::vector<int64_t>{3000, 65536}) {
    CheckRing<double>(
        DataType::kFloat64, ReduceOp::kSum, 0.25, piece, [](double v) { return v; },
        [](double v) { return v; });
    CheckRing<uint16_t>(
        DataType::kFloat16, ReduceOp::kSum, 1.0, piece,
        [](double v) { return FloatToHalf(static_cast<float>(v)); },
        [](uint16_t v) { return static_cast<double>(HalfToFloat(v)); });
  }
}

// Values whose float sums round differently in different orders.
float Rough(int rank, int64_t i) {
  const float scale[5] = {1e-3f, 0.37f, 1.0f, 29.0f, 1e3f};
  return scale[(i + rank) % 5] * (static_cast<float>((i * 7919 + rank * 104729) % 2001) - 1000.0f) /
         997.0f;
}

// The documented order, element by element: part k of a span is x[k], then x[k+1], ..., x[k-1]
// (ranks mod size) added one at a time. RingAllreduce over PerSpanSegments and GatherAllreduce over
// the same data packed segment by segment must both produce exactly these bits.
TEST(RingTest, PerSpanRingAndGatherFollowTheDocumentedOrder) {
  const int size = Size();
  std::vector<std::vector<float>> tensors;
  std::vector<Span> spans;
  for (int64_t n : kSizes) {
    tensors.emplace_back(n);
    for (int64_t i = 0; i < n; ++i) tensors.back()[i] = Rough(Rank(), i + n);
  }
  for (auto& t : tensors)
    spans.push_back(Span{reinterpret_cast<char*>(t.data()), static_cast<int64_t>(t.size())});
  // Segment by segment: part k of every tensor, in tensor order.
  std::vector<float> packed;
  std::vector<int64_t> bounds = {0};
  for (int k = 0; k < size; ++k) {
    for (const auto& t : tensors) {
      const int64_t n = static_cast<int64_t>(t.size());
      packed.insert(packed.end(), t.begin() + PartBegin(n, k, size),
                    t.begin() + PartBegin(n, k + 1, size));
    }
    bounds.push_back(static_cast<int64_t>(packed.size()));
  }
  HostBuffer scratch, gathered;
  ASSERT_TRUE(RingAllreduce(MPI_COMM_WORLD, PerSpanSegments(spans, size, 4), DataType::kFloat32,
                            ReduceOp::kSum, 0.5, 4096, &scratch)
                  .ok());
  ASSERT_TRUE(GatherAllreduce(MPI_COMM_WORLD, reinterpret_cast<char*>(packed.data()), bounds,
                              DataType::kFloat32, ReduceOp::kSum, 0.5, &gathered)
                  .ok());
  int64_t at = 0;
  for (int k = 0; k < size; ++k) {
    for (size_t t = 0; t < kSizes.size(); ++t) {
      const int64_t n = kSizes[t];
      for (int64_t i = PartBegin(n, k, size); i < PartBegin(n, k + 1, size); ++i, ++at) {
        float want = Rough(k, i + n);
        for (int j = 1; j < size; ++j) want = want + Rough((k + j) % size, i + n);
        want = static_cast<float>(want * 0.5);
        ASSERT_EQ(tensors[t][i], want)
            << "ring: tensor " << t << " element " << i << " (part " << k << ")";
        ASSERT_EQ(packed[at], want)
            << "gather: tensor " << t << " element " << i << " (part " << k << ")";
      }
    }
  }
}

}  // namespace
}  // namespace hvx

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
void CheckRing(DataType dtype, ReduceOp op, double postscale, int64_t piece_bytes, FromDouble from, ToDouble to) {
  std::vector<std::vector<T>> tensors;
  std::vector<Span> spans;
  for (int64_t n : kSizes) {
    tensors.emplace_back(n);
    for (int64_t i = 0; i < n; ++i) tensors.back()[i] = from(Value(Rank(), i + n));
  }
  for (auto& t : tensors) spans.push_back(Span{reinterpret_cast<char*>(t.data()), static_cast<int64_t>(t.size())});
  HostBuffer scratch;
  ASSERT_TRUE(RingAllreduce(MPI_COMM_WORLD, spans, dtype, op, postscale, piece_bytes, &scratch).ok());
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
        DataType::kFloat64, ReduceOp::kSum, 0.25, piece, [](double v) { return v; }, [](double v) { return v; });
    CheckRing<uint16_t>(
        DataType::kFloat16, ReduceOp::kSum, 1.0, piece, [](double v) { return FloatToHalf(static_cast<float>(v)); },
        [](uint16_t v) { return static_cast<double>(HalfToFloat(v)); });
  }
}

}  // namespace
}  // namespace hvx

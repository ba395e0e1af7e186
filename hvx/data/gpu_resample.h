// The CUDA kernel of the GPU JPEG decoder: ResampleOne over a whole sample.
#ifndef HVX_DATA_GPU_RESAMPLE_H_
#define HVX_DATA_GPU_RESAMPLE_H_

#include "hvx/data/resample.h"

namespace hvx {
namespace data {

// Enqueues ResampleOne(p, i) for every i < ResampleCount(p) on `stream` (a cudaStream_t);
// p.image and p.dst are device memory. Returns the launch's cudaError_t (0: cudaSuccess).
int LaunchResample(const ResampleParams& p, void* stream);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_GPU_RESAMPLE_H_

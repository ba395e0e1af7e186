// ImageNet JPEG decoding on a GPU with nvJPEG: the same crop, flip and normalisation as
// ImageNetDecoder (PlanImageNetSample, ResampleOne), with the entropy decoding and IDCT done by
// nvJPEG and the crop-resize-normalise by a CUDA kernel, then the sample copied to `out` in host
// memory as the pipeline expects.
//
//   auto gpu = MakeGpuJpegDecoder(options, /*cuda_device=*/LocalRank());
//   if (!gpu.ok()) LOG(WARNING) << "decoding JPEGs on the CPU: " << gpu.status().message();
//
// The values differ from the CPU's by nvJPEG's IDCT rounding (a few levels of 255), and each image
// is decoded at full size (nvJPEG has no DCT scaling, so scaled_decode is not used). nvJPEG is
// loaded at run time (libnvjpeg.so.N from the library path, else from where the build found it),
// so a binary built with it runs where it is missing and gets the reason here.
#ifndef HVX_DATA_GPU_JPEG_H_
#define HVX_DATA_GPU_JPEG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hvx/data/jpeg.h"

namespace hvx {
namespace data {

// A decoder on CUDA device `cuda_device`, or the reason there can be none: Unavailable when this
// binary was built without --config=cuda or without nvJPEG's header, when libnvjpeg does not
// load, or when the device does not exist; Internal when nvJPEG fails to start. Decode() is safe
// from many threads (each takes its own nvJPEG state, stream and buffers). Errors of a decode name
// the nvJPEG or CUDA status; images libjpeg would call corrupt may decode without one when nvJPEG
// does not check what libjpeg checks (truncation it pads).
absl::StatusOr<std::unique_ptr<ImageNetDecoder>> MakeGpuJpegDecoder(
    const ImageNetDecoderOptions& options, int cuda_device);

// What this binary can do: "nvJPEG <version of its header>, loaded from <soname>", or why it has
// no GPU decoder (the build's reason, before any library is loaded).
std::string GpuJpegBuild();

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_GPU_JPEG_H_

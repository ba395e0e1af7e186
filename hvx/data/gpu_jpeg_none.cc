// MakeGpuJpegDecoder in a build without --config=cuda.
#include "absl/status/status.h"
#include "hvx/data/gpu_jpeg.h"

namespace hvx {
namespace data {

namespace {
constexpr char kWhy[] = "this binary was built without --config=cuda (no GPU JPEG decoder)";
}  // namespace

absl::StatusOr<std::unique_ptr<ImageNetDecoder>> MakeGpuJpegDecoder(
    const ImageNetDecoderOptions& /*options*/, int /*cuda_device*/) {
  return absl::UnavailableError(kWhy);
}

std::string GpuJpegBuild() { return kWhy; }

}  // namespace data
}  // namespace hvx

// MakeGpuJpegDecoder in a --config=cuda build: nvJPEG through dlopen, the resampling kernel.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/status.h"
#include "hvx/data/gpu_jpeg.h"
#include "hvx/data/gpu_resample.h"
#include "hvx_nvjpeg_config.h"

#if HVX_NVJPEG_FOUND
#include <nvjpeg.h>
#endif

namespace hvx {
namespace data {

#if !HVX_NVJPEG_FOUND

absl::StatusOr<std::unique_ptr<ImageNetDecoder>> MakeGpuJpegDecoder(
    const ImageNetDecoderOptions& /*options*/, int /*cuda_device*/) {
  return absl::UnavailableError(HVX_NVJPEG_MISSING);
}

std::string GpuJpegBuild() { return HVX_NVJPEG_MISSING; }

#else

namespace {

// The nvJPEG entry points hvx calls, resolved from the library at run time.
struct NvJpegApi {
  decltype(&nvjpegCreateSimple) create_simple = nullptr;
  decltype(&nvjpegDestroy) destroy = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&nvjpegDecode) decode = nullptr;
  std::string path;  // what dlopen was given
};

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

// The library by its soname (the library path, e.g. a torch environment's nvidia/cu13/lib), then
// where the build found it. Never unloaded: decoders and their threads may outlive any owner.
absl::StatusOr<NvJpegApi> OpenNvJpeg() {
  std::vector<std::string> errors;
  for (const char* path : {HVX_NVJPEG_SONAME, HVX_NVJPEG_BUILD_PATH}) {
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      errors.push_back(error != nullptr ? error : path);
      continue;
    }
    NvJpegApi api;
    api.path = path;
    if (!Resolve(library, "nvjpegCreateSimple", &api.create_simple) ||
        !Resolve(library, "nvjpegDestroy", &api.destroy) ||
        !Resolve(library, "nvjpegJpegStateCreate", &api.state_create) ||
        !Resolve(library, "nvjpegJpegStateDestroy", &api.state_destroy) ||
        !Resolve(library, "nvjpegDecode", &api.decode)) {
      errors.push_back(absl::StrCat(path, " lacks nvJPEG's decode API"));
      continue;
    }
    return api;
  }
  return absl::UnavailableError(absl::StrCat(
      "nvJPEG does not load (", absl::StrJoin(errors, "; "), "): add the folder holding ",
      HVX_NVJPEG_SONAME, " to LD_LIBRARY_PATH (PyPI's nvidia-nvjpeg wheel ships it)"));
}

absl::StatusOr<const NvJpegApi*> NvJpeg() {
  static const auto* const api = new absl::StatusOr<NvJpegApi>(OpenNvJpeg());
  if (!api->ok()) return api->status();
  return &**api;
}

const char* NvJpegStatusName(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG:
      return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
  }
  return "an unknown nvJPEG status";
}

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// A device buffer that grows to the largest size asked of it.
struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  absl::Status Reserve(size_t n, absl::string_view what) {
    if (n <= bytes) return absl::OkStatus();
    if (data != nullptr) cudaFree(data);
    data = nullptr;
    bytes = 0;
    HVX_RETURN_IF_ERROR(
        CudaError(cudaMalloc(&data, n), absl::StrCat("cudaMalloc of ", n, " bytes for ", what)));
    bytes = n;
    return absl::OkStatus();
  }
};

// What one decode in flight needs; a decode thread takes one from the pool and gives it back.
struct Worker {
  nvjpegJpegState_t state = nullptr;
  cudaStream_t stream = nullptr;
  DeviceBuffer image;   // the decoded RGB image
  DeviceBuffer sample;  // the resampled sample
};

class NvJpegDecoder final : public ImageNetDecoder {
 public:
  NvJpegDecoder(ImageNetDecoderOptions options, int device, const NvJpegApi* api,
                nvjpegHandle_t handle)
      : ImageNetDecoder(std::move(options)), device_(device), api_(api), handle_(handle) {}
  ~NvJpegDecoder() override {
    cudaSetDevice(device_);
    for (auto& w : idle_) Free(*w);
    api_->destroy(handle_);
  }

  absl::Status DecodeImage(absl::string_view jpeg, const SampleContext& context,
                           void* out) const override {
    // The dtype was checked when the decoder was made.
    HVX_ASSIGN_OR_RETURN(const JpegInfo info, ReadJpegHeader(jpeg));
    HVX_RETURN_IF_ERROR(CheckJpegSize(info, jpeg.size(), options().limits));
    const ImageNetSamplePlan plan = PlanImageNetSample(options(), info, context);
    HVX_RETURN_IF_ERROR(
        CudaError(cudaSetDevice(device_), absl::StrCat("cudaSetDevice(", device_, ")")));
    HVX_ASSIGN_OR_RETURN(std::unique_ptr<Worker> w, Take());
    absl::Status s = Run(jpeg, info, plan, *w, out);
    Give(std::move(w));
    return s;
  }

 private:
  absl::Status Run(absl::string_view jpeg, const JpegInfo& info, const ImageNetSamplePlan& plan,
                   Worker& w, void* out) const {
    const size_t pitch = static_cast<size_t>(info.width) * 3;
    HVX_RETURN_IF_ERROR(w.image.Reserve(pitch * info.height, "a decoded image"));
    nvjpegImage_t image{};
    image.channel[0] = static_cast<unsigned char*>(w.image.data);
    image.pitch[0] = pitch;
    const nvjpegStatus_t decoded =
        api_->decode(handle_, w.state, reinterpret_cast<const unsigned char*>(jpeg.data()),
                     jpeg.size(), NVJPEG_OUTPUT_RGBI, &image, w.stream);
    if (decoded != NVJPEG_STATUS_SUCCESS) {
      const bool bad = decoded == NVJPEG_STATUS_BAD_JPEG ||
                       decoded == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
                       decoded == NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
      const std::string message =
          absl::StrCat("nvJPEG could not decode the ", info.width, "x", info.height, " JPEG of ",
                       jpeg.size(), " bytes: ", NvJpegStatusName(decoded));
      return bad ? absl::InvalidArgumentError(message) : absl::InternalError(message);
    }
    ResampleParams p = ImageNetResampleParams(options(), plan, info, info.width, info.height);
    const size_t bytes = ResampleCount(p) * (p.to_uint8 ? 1 : sizeof(float));
    HVX_RETURN_IF_ERROR(w.sample.Reserve(bytes, "a sample"));
    p.image = static_cast<const uint8_t*>(w.image.data);
    p.dst = w.sample.data;
    HVX_RETURN_IF_ERROR(CudaError(static_cast<cudaError_t>(LaunchResample(p, w.stream)),
                                  "the resampling kernel's launch"));
    HVX_RETURN_IF_ERROR(
        CudaError(cudaMemcpyAsync(out, w.sample.data, bytes, cudaMemcpyDeviceToHost, w.stream),
                  "copying a sample from the GPU"));
    return CudaError(cudaStreamSynchronize(w.stream), "decoding a JPEG on the GPU");
  }

  absl::StatusOr<std::unique_ptr<Worker>> Take() const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto w = std::move(idle_.back());
        idle_.pop_back();
        return w;
      }
    }
    auto w = std::make_unique<Worker>();
    const nvjpegStatus_t s = api_->state_create(handle_, &w->state);
    if (s != NVJPEG_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("nvjpegJpegStateCreate: ", NvJpegStatusName(s)));
    }
    absl::Status stream =
        CudaError(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!stream.ok()) {
      Free(*w);
      return stream;
    }
    return w;
  }

  void Give(std::unique_ptr<Worker> w) const {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(w));
  }

  void Free(Worker& w) const {
    if (w.stream != nullptr) cudaStreamDestroy(w.stream);
    if (w.state != nullptr) api_->state_destroy(w.state);
    if (w.image.data != nullptr) cudaFree(w.image.data);
    if (w.sample.data != nullptr) cudaFree(w.sample.data);
  }

  const int device_;
  const NvJpegApi* const api_;
  const nvjpegHandle_t handle_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Worker>> idle_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ImageNetDecoder>> MakeGpuJpegDecoder(
    const ImageNetDecoderOptions& options, int cuda_device) {
  HVX_RETURN_IF_ERROR(CheckImageNetDtype(options));
  HVX_ASSIGN_OR_RETURN(const NvJpegApi* api, NvJpeg());
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(
        absl::StrCat("nvJPEG loaded from ", api->path, ", but there is no CUDA device (",
                     e != cudaSuccess ? cudaGetErrorString(e) : "none visible", ")"));
  }
  if (cuda_device < 0 || cuda_device >= count) {
    return absl::UnavailableError(absl::StrCat("CUDA device ", cuda_device,
                                               " does not exist (this process sees ", count, ")"));
  }
  HVX_RETURN_IF_ERROR(
      CudaError(cudaSetDevice(cuda_device), absl::StrCat("cudaSetDevice(", cuda_device, ")")));
  nvjpegHandle_t handle = nullptr;
  const nvjpegStatus_t s = api->create_simple(&handle);
  if (s != NVJPEG_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvjpegCreateSimple: ", NvJpegStatusName(s)));
  }
  return std::unique_ptr<ImageNetDecoder>(
      std::make_unique<NvJpegDecoder>(options, cuda_device, api, handle));
}

std::string GpuJpegBuild() {
  return absl::StrCat("nvJPEG ", NVJPEG_VER_MAJOR, ".", NVJPEG_VER_MINOR, ".", NVJPEG_VER_PATCH,
                      " (header), ", HVX_NVJPEG_SONAME, " loaded at run time");
}

#endif  // HVX_NVJPEG_FOUND

}  // namespace data
}  // namespace hvx

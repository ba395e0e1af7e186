#include "hvx/train/dataset_setup.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hvx/common/files.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/api.h"
#include "hvx/data/dataset.h"
#include "hvx/data/gpu_jpeg.h"
#include "hvx/data/idx.h"
#include "hvx/data/jpeg.h"
#include "hvx/train/config.h"

namespace hvx {
namespace train {
namespace {

// Fashion-MNIST pixel statistics over the training set, for input normalisation.
constexpr float kFashionMean = 0.2860f;
constexpr float kFashionStd = 0.3530f;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// "<dir>/<name>" or "<dir>/<name>.gz", whichever exists.
absl::StatusOr<std::string> FindIdx(const std::string& dir, const std::string& name) {
  for (const std::string& candidate :
       {absl::StrCat(dir, "/", name, ".gz"), absl::StrCat(dir, "/", name)}) {
    if (Exists(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("data.fashion_mnist_source.idx_dir: ", dir, " has no ", name,
                   "(.gz); install Debian's "
                   "dataset-fashion-mnist package or point idx_dir at the IDX files"));
}

// Converts into a private folder, then moves the files into place (index files first), so
// readers never see a shard that is half written.
absl::Status WriteFashionMnistShards(const FashionMnistSource& source) {
  const std::string& out = source.output_dir();
  const std::string tmp = absl::StrCat(out, "/.tmp-", getpid());
  HVX_LOG(INFO) << "creating Fashion-MNIST shards in " << out << " from " << source.idx_dir();
  std::vector<std::string> written;
  struct Part {
    const char* prefix;
    const char* idx_prefix;
    int shards;
  };
  for (const Part& part : {Part{"train", "train", source.num_train_shards()},
                           Part{"test", "t10k", source.num_test_shards()}}) {
    HVX_ASSIGN_OR_RETURN(
        std::string images,
        FindIdx(source.idx_dir(), absl::StrCat(part.idx_prefix, "-images-idx3-ubyte")));
    HVX_ASSIGN_OR_RETURN(
        std::string labels,
        FindIdx(source.idx_dir(), absl::StrCat(part.idx_prefix, "-labels-idx1-ubyte")));
    HVX_ASSIGN_OR_RETURN(auto shards,
                         data::WriteIdxShards(images, labels, tmp, part.prefix, part.shards));
    written.insert(written.end(), shards.begin(), shards.end());
  }
  std::vector<std::string> files;
  DIR* d = opendir(tmp.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, absl::StrCat("opendir ", tmp));
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') files.emplace_back(e->d_name);
  }
  closedir(d);
  std::stable_sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return absl::EndsWith(a, ".idx") > absl::EndsWith(b, ".idx");
  });
  for (const std::string& f : files) {
    const std::string from = absl::StrCat(tmp, "/", f), to = absl::StrCat(out, "/", f);
    if (rename(from.c_str(), to.c_str()) != 0)
      return ErrnoToStatus(errno, absl::StrCat("rename ", from, " -> ", to));
  }
  rmdir(tmp.c_str());
  return absl::OkStatus();
}

absl::Status CheckPatterns(const std::string& patterns, const std::string& field,
                           const TrainConfig& config) {
  auto files = data::ExpandFilePatterns(SplitFilePatterns(patterns));
  if (files.ok()) return absl::OkStatus();
  std::string hint = "check that the data is there, or point the config at it";
  if (config.data().format() == IMAGENET) {
    hint =
        "ImageNet is expected as TFRecord shards in the standard layout (train-00000-of-01024 ..., "
        "validation-00000-of-00128 ..., JPEG image/encoded, 1-based image/class/label); point "
        "data.train_files / data.eval_files at them with --override, or convert an image folder "
        "(root/<class>/*.JPEG) with `bazel run //tools:make_records -- --image_folder=ROOT/train "
        "--out_dir=DIR --prefix=train --shards=1024`";
  }
  return absl::Status(files.status().code(),
                      absl::StrCat(field, ": ", files.status().message(), "; ", hint));
}

}  // namespace

absl::Status PrepareDataset(const TrainConfig& config) {
  const FashionMnistSource& source = config.data().fashion_mnist_source();
  const bool can_create = config.data().format() == FASHION_MNIST && !source.output_dir().empty();
  if (can_create) {
    // Rank 0 decides and converts; the others learn the outcome through a broadcast, so a failed
    // conversion ends every rank instead of leaving them waiting.
    int64_t outcome = 0;
    if (Rank() == 0 &&
        !data::ExpandFilePatterns(SplitFilePatterns(config.data().train_files())).ok()) {
      absl::Status status = MakeDirs(source.output_dir());
      if (status.ok()) status = WriteFashionMnistShards(source);
      if (!status.ok()) {
        HVX_LOG(ERROR) << status;
        outcome = 1;
      }
    }
    TensorRef ref(DataType::kInt64, TensorShape({1}), &outcome);
    HVX_RETURN_IF_ERROR(Wait(Broadcast("data.prepare", ref, 0)));
    if (outcome != 0)
      return absl::InternalError("rank 0 could not create the Fashion-MNIST shards (see its log)");
  }
  HVX_RETURN_IF_ERROR(CheckPatterns(config.data().train_files(), "data.train_files", config));
  if (!config.data().eval_files().empty()) {
    HVX_RETURN_IF_ERROR(CheckPatterns(config.data().eval_files(), "data.eval_files", config));
  }
  return absl::OkStatus();
}

absl::StatusOr<data::ExampleDecoderOptions> DecoderSpec(const TrainConfig& config, bool train) {
  data::ExampleDecoderOptions o;
  data::ExampleInputSpec& in = o.input;
  o.label_key = "image/class/label";
  switch (config.data().format()) {
    case FASHION_MNIST:
      in.key = "image/raw";
      in.kind = data::FeatureKind::kBytes;
      in.shape = {1, 28, 28};
      in.divide_by = 255;
      in.mean = {kFashionMean};
      in.stddev = {kFashionStd};
      return o;
    case IMAGENET:
      in.key = "image/encoded";
      in.kind = data::FeatureKind::kJpeg;
      break;
    case EXAMPLE: {
      const FeatureSpec& f = config.data().example().input();
      o.label_key = config.data().example().label_key();
      in.key = f.key();
      in.shape.assign(f.shape().begin(), f.shape().end());
      in.bytes_dtype =
          f.bytes_type() == FeatureSpec::FLOAT32 ? DataType::kFloat32 : DataType::kUint8;
      in.channels_last_stored = f.channels_last_stored();
      in.divide_by = f.divide_by();
      if (!f.mean().empty()) in.mean.assign(f.mean().begin(), f.mean().end());
      if (!f.stddev().empty()) in.stddev.assign(f.stddev().begin(), f.stddev().end());
      switch (f.kind()) {
        case FeatureSpec::JPEG:
          in.kind = data::FeatureKind::kJpeg;
          break;
        case FeatureSpec::FLOAT_LIST:
          in.kind = data::FeatureKind::kFloatList;
          break;
        case FeatureSpec::INT64_LIST:
          in.kind = data::FeatureKind::kInt64List;
          break;
        case FeatureSpec::BYTES:
          in.kind = data::FeatureKind::kBytes;
          break;
        default:
          return absl::InvalidArgumentError(
              "data.example.input.kind: set JPEG, FLOAT_LIST, INT64_LIST or BYTES");
      }
      if (in.kind != data::FeatureKind::kJpeg) return o;
      break;
    }
    default:
      return absl::InvalidArgumentError("data.format: set FASHION_MNIST, IMAGENET or EXAMPLE");
  }
  in.jpeg = train ? data::ImageNetDecoderOptions::Train() : data::ImageNetDecoderOptions::Eval();
  in.jpeg.out_size = config.data().image_size();
  // Evaluation keeps the standard 224/256 ratio between the centre crop and the resized shorter
  // side.
  in.jpeg.resize_shorter = static_cast<int>(std::lround(in.jpeg.out_size * 256.0 / 224.0));
  in.jpeg.channels_last = DecodesChannelsLast(config);
  return o;
}

bool DecodesChannelsLast(const TrainConfig& config) {
  return HasJpegInput(config.data()) && config.model().channels_last();
}

data::JpegDecoderFactory GpuJpegDecoders(const TrainConfig& config, bool train, int cuda_device) {
  if (!config.data().gpu_jpeg_decode()) return nullptr;
  return
      [cuda_device, train](
          const data::ImageNetDecoderOptions& options) -> std::unique_ptr<data::ImageNetDecoder> {
        const char* what = train ? "training" : "evaluation";
        absl::StatusOr<std::unique_ptr<data::ImageNetDecoder>> gpu =
            absl::UnavailableError("this rank trains on the CPU");
        if (cuda_device >= 0) gpu = data::MakeGpuJpegDecoder(options, cuda_device);
        if (gpu.ok()) {
          HVX_LOG(INFO) << "data.gpu_jpeg_decode: " << what
                        << " JPEGs decode with nvJPEG on cuda:" << cuda_device;
          return *std::move(gpu);
        }
        HVX_LOG(WARNING) << "data.gpu_jpeg_decode: " << what
                         << " JPEGs decode on the CPU: " << gpu.status().message();
        return nullptr;
      };
}

absl::StatusOr<std::shared_ptr<const data::Decoder>> MakeDecoder(
    const TrainConfig& config, bool train, const data::JpegDecoderFactory& make_jpeg) {
  HVX_ASSIGN_OR_RETURN(data::ExampleDecoderOptions spec, DecoderSpec(config, train));
  auto decoder = data::ExampleDecoder::Create(std::move(spec), make_jpeg);
  if (!decoder.ok()) {
    return Annotate(decoder.status(), config.data().format() == EXAMPLE ? "data.example" : "data");
  }
  return std::shared_ptr<const data::Decoder>(*std::move(decoder));
}

}  // namespace train
}  // namespace hvx

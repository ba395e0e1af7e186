#include "hvx/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/data/example.h"
#include "hvx/data/record.h"

namespace hvx {
namespace data {
namespace {

size_t ElementSize(uint8_t type) {
  switch (type) {
    case 0x08:
    case 0x09:
      return 1;
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
    default:
      return 0;
  }
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // also reads uncompressed files
  if (f == nullptr) return ErrnoToStatus(errno, absl::StrCat("opening IDX file ", path));
  gzbuffer(f, 1 << 20);
  std::string bytes;
  char chunk[1 << 16];
  int n;
  while ((n = gzread(f, chunk, sizeof(chunk))) > 0) bytes.append(chunk, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string error = (n < 0 || err < 0) ? std::string(msg) : "";
  gzclose(f);
  if (!error.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": cannot decompress: ", error));
  }
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  if (bytes.size() < 4 || u8(0) != 0 || u8(1) != 0 || ElementSize(u8(2)) == 0 || u8(3) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an IDX file (expected magic 00 00 <type 08..0e> <dims>, got ",
        bytes.size() < 4 ? "fewer than 4 bytes"
                         : absl::StrFormat("%02x %02x %02x %02x", u8(0), u8(1), u8(2), u8(3)),
        ")"));
  }
  IdxArray array;
  array.type = u8(2);
  const size_t ndims = u8(3);
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated IDX header (", ndims, " dimensions)"));
  }
  uint64_t count = 1;
  for (size_t d = 0; d < ndims; ++d) {
    size_t o = 4 + 4 * d;
    int64_t dim = (int64_t{u8(o)} << 24) | (u8(o + 1) << 16) | (u8(o + 2) << 8) | u8(o + 3);
    array.dims.push_back(dim);
    // Checked: a crafted header's product could wrap around to the file's real size.
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) {
      return absl::DataLossError(
          absl::StrCat(path, ": IDX dimensions ", absl::StrJoin(array.dims, " x "), " overflow"));
    }
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(count, ElementSize(array.type), &expected)) {
    return absl::DataLossError(
        absl::StrCat(path, ": IDX dimensions ", absl::StrJoin(array.dims, " x "), " overflow"));
  }
  if (bytes.size() - header != expected) {
    return absl::DataLossError(absl::StrCat(path, ": IDX header promises ", expected,
                                            " data bytes, the file has ", bytes.size() - header));
  }
  array.data = bytes.substr(header);
  return array;
}

std::string ShardFileName(const std::string& prefix, int shard, int num_shards) {
  return absl::StrFormat("%s-%05d-of-%05d", prefix, shard, num_shards);
}

absl::StatusOr<std::vector<std::string>> WriteIdxShards(const std::string& images_path,
                                                        const std::string& labels_path,
                                                        const std::string& out_dir,
                                                        const std::string& prefix, int num_shards) {
  HVX_ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(images_path));
  HVX_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(labels_path));
  if (images.type != 0x08 || images.dims.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": expected uint8 images N x H x W, got type 0x",
                     absl::Hex(images.type), " with ", images.dims.size(), " dimensions"));
  }
  if (labels.type != 0x08 || labels.dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": expected uint8 labels of shape N"));
  }
  const int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  if (labels.dims[0] != n) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " holds ", n, " images but ",
                                                   labels_path, " holds ", labels.dims[0],
                                                   " labels"));
  }
  Example example;
  SetInt64(&example, "image/height", h);
  SetInt64(&example, "image/width", w);
  SetInt64(&example, "image/channels", 1);
  return WriteShards(out_dir, prefix, num_shards, n, [&](int64_t i) -> absl::StatusOr<std::string> {
    SetBytes(&example, "image/raw",
             absl::string_view(images.data)
                 .substr(static_cast<size_t>(i * h * w), static_cast<size_t>(h * w)));
    SetInt64(&example, "image/class/label",
             static_cast<uint8_t>(labels.data[static_cast<size_t>(i)]));
    std::string serialized;
    SerializeExample(example, &serialized);
    return serialized;
  });
}

absl::StatusOr<std::vector<std::string>> WriteShards(
    const std::string& out_dir, const std::string& prefix, int num_shards, int64_t n,
    const std::function<absl::StatusOr<std::string>(int64_t i)>& record) {
  if (num_shards < 1 || num_shards > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", n, " samples into ", num_shards, " shards"));
  }
  HVX_RETURN_IF_ERROR(MakeDirs(out_dir));
  std::vector<std::string> paths;
  for (int s = 0; s < num_shards; ++s) {
    const std::string path = absl::StrCat(out_dir, "/", ShardFileName(prefix, s, num_shards));
    RecordWriterOptions options;
    options.write_index = true;
    HVX_ASSIGN_OR_RETURN(auto writer, RecordWriter::Open(path, options));
    for (int64_t i = n * s / num_shards; i < n * (s + 1) / num_shards; ++i) {
      HVX_ASSIGN_OR_RETURN(const std::string serialized, record(i));
      HVX_RETURN_IF_ERROR(writer->Write(serialized));
    }
    HVX_RETURN_IF_ERROR(writer->Close());
    paths.push_back(path);
  }
  return paths;
}

}  // namespace data
}  // namespace hvx

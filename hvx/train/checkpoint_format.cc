#include "hvx/train/checkpoint_format.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "hvx/common/failpoint.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/data/crc32c.h"

namespace hvx {
namespace train {
namespace {

constexpr char kFormatName[] = "hvx-checkpoint";
constexpr int kFormatVersion = 1;
// A header larger than this is not one hvx wrote (nor any sane writer): safetensors' own limit.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr uint64_t kMaxIndexBytes = uint64_t{1} << 30;
// A read of blocks not yet read takes at most this many at once.
constexpr uint64_t kMaxReadBlocks = 128;

absl::Status Damaged(absl::string_view path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Elements of `shape`, or -1 when a dimension is negative or the product overflows.
int64_t ShapeElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
    n *= d;
  }
  return n;
}

absl::StatusOr<std::vector<int64_t>> ShapeFrom(const Json& json, absl::string_view what) {
  std::vector<int64_t> shape;
  if (!json.is_array()) return absl::DataLossError(absl::StrCat(what, ": shape is not a list"));
  for (const Json& d : json) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return absl::DataLossError(absl::StrCat(what, ": shape ", JsonText(json), " is not sizes"));
    }
    shape.push_back(d.get<int64_t>());
  }
  if (ShapeElements(shape) < 0) {
    return absl::DataLossError(absl::StrCat(what, ": shape ", JsonText(json), " is too large"));
  }
  return shape;
}

// The unsigned integer `json[key]`, or DataLoss naming `what`.
absl::StatusOr<uint64_t> Unsigned(const Json& json, const char* key, absl::string_view what) {
  const Json* v = JsonMember(json, key);
  if (v == nullptr || !v->is_number_unsigned()) {
    return absl::DataLossError(absl::StrCat(what, ": no whole number \"", key, "\""));
  }
  return v->get<uint64_t>();
}

// Sequential writes to a file descriptor that keep each block's CRC-32C and the whole file's.
class ChecksummedWriter {
 public:
  explicit ChecksummedWriter(int fd) : fd_(fd) {}
  bool Write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    if (!WriteFully(fd_, absl::string_view(p, n))) return false;
    file_crc_ = data::Crc32cExtend(file_crc_, p, n);
    while (n > 0) {
      if (offset_ % kChecksumBlockBytes == 0) blocks_.push_back(0);
      const uint64_t room = kChecksumBlockBytes - offset_ % kChecksumBlockBytes;
      const uint64_t take = std::min(n, room);
      blocks_.back() = data::Crc32cExtend(blocks_.back(), p, take);
      p += take;
      n -= take;
      offset_ += take;
    }
    return true;
  }
  uint64_t offset() const { return offset_; }
  uint32_t file_crc() const { return file_crc_; }
  std::vector<uint32_t> blocks() const { return blocks_; }

 private:
  const int fd_;
  uint64_t offset_ = 0;
  uint32_t file_crc_ = 0;
  std::vector<uint32_t> blocks_;
};

Json PieceToJson(const WrittenPiece& p) {
  return Json{{"tensor", p.tensor},     {"dtype", p.dtype}, {"shape", p.shape},  {"begin", p.begin},
              {"elements", p.elements}, {"key", p.key},     {"offset", p.offset}};
}

}  // namespace

int64_t SafetensorsDtypeBytes(absl::string_view dtype) {
  static const auto* sizes = new std::map<std::string, int64_t, std::less<>>{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  const auto found = sizes->find(dtype);
  return found == sizes->end() ? 0 : found->second;
}

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const SafetensorsEntry& e : entries) {
    header[e.key] =
        Json{{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = JsonText(header);
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view head,
                                                         uint64_t file_bytes,
                                                         absl::string_view path) {
  if (head.size() < 8 || file_bytes < 8) return Damaged(path, "shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(head[i])} << (8 * i);
  if (n > kMaxHeaderBytes || n > file_bytes - 8 || n > head.size() - 8) {
    return Damaged(path, absl::StrCat("a safetensors header of ", n, " bytes does not fit"));
  }
  auto parsed = ParseJson(head.substr(8, n), path);
  if (!parsed.ok() || !parsed->is_object()) {
    return Damaged(path, "its safetensors header is not a JSON object");
  }
  SafetensorsHeader header;
  header.data_begin = 8 + n;
  for (const auto& [key, value] : parsed->items()) {
    const std::string what = absl::StrCat(path, ": tensor \"", key, "\"");
    if (key == "__metadata__") {
      if (!value.is_object()) return Damaged(path, "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return Damaged(path, "__metadata__ holds a value that is not text");
        header.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e;
    e.key = key;
    const Json* dtype = JsonMember(value, "dtype");
    const Json* shape = JsonMember(value, "shape");
    const Json* offsets = JsonMember(value, "data_offsets");
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || offsets == nullptr ||
        !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return absl::DataLossError(absl::StrCat(what, " lacks dtype, shape or data_offsets"));
    }
    e.dtype = dtype->get<std::string>();
    const int64_t element_bytes = SafetensorsDtypeBytes(e.dtype);
    if (element_bytes == 0) {
      return absl::DataLossError(absl::StrCat(what, " has the unknown dtype ", e.dtype));
    }
    HVX_ASSIGN_OR_RETURN(e.shape, ShapeFrom(*shape, what));
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    const int64_t elements = ShapeElements(e.shape);
    if (e.end < e.begin || elements > INT64_MAX / element_bytes ||
        e.end - e.begin != static_cast<uint64_t>(elements * element_bytes)) {
      return absl::DataLossError(
          absl::StrCat(what, ": data_offsets [", e.begin, ", ", e.end, ") are not its size"));
    }
    header.entries.push_back(std::move(e));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::make_pair(a.begin, a.end) < std::make_pair(b.begin, b.end);
            });
  uint64_t at = 0;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.begin != at) {
      return Damaged(path, absl::StrCat("tensor \"", e.key, "\" starts at byte ", e.begin,
                                        " of the data, not ", at, " (a gap or an overlap)"));
    }
    at = e.end;
  }
  if (at != file_bytes - header.data_begin) {
    return Damaged(path, absl::StrCat("its tensors hold ", at, " bytes, the file ",
                                      file_bytes - header.data_begin, " after the header"));
  }
  return header;
}

std::string ShardFileName(absl::string_view token, int rank, int world_size) {
  return absl::StrCat(token, "-shard-", rank, "-of-", world_size, ".safetensors");
}

absl::StatusOr<WrittenShard> WriteShardFile(const std::string& dir, const std::string& name,
                                            const std::vector<PieceToWrite>& pieces,
                                            const std::map<std::string, std::string>& metadata) {
  WrittenShard shard;
  shard.name = name;
  std::vector<SafetensorsEntry> entries;
  uint64_t at = 0;
  for (const PieceToWrite& p : pieces) {
    const int64_t element_bytes = SafetensorsDtypeBytes(p.dtype);
    const int64_t whole = ShapeElements(p.shape);
    if (element_bytes == 0 || p.begin < 0 || p.elements <= 0 || p.begin + p.elements > whole) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", name, ": piece of ", p.tensor, " is not elements of its tensor"));
    }
    SafetensorsEntry e;
    e.dtype = p.dtype;
    if (p.begin == 0 && p.elements == whole) {
      e.key = p.tensor;
      e.shape = p.shape;
    } else {
      e.key = absl::StrCat(p.tensor, "[", p.begin, ":", p.begin + p.elements, "]");
      e.shape = {p.elements};
    }
    e.begin = at;
    e.end = at + p.elements * element_bytes;
    at = e.end;
    entries.push_back(e);
  }
  const std::string header = EncodeSafetensorsHeader(entries, metadata);
  const std::string path = absl::StrCat(dir, "/", name);
  HVX_ASSIGN_OR_RETURN(TempFile tmp, CreateTempFile(path, "checkpoint shard"));
  bool committed = false;
  absl::Cleanup remove_tmp = [&] {
    if (tmp.fd >= 0) close(tmp.fd);
    if (!committed) unlink(tmp.path.c_str());
  };
  ChecksummedWriter out(tmp.fd);
  auto failed = [&] {
    return ErrnoToStatus(errno, absl::StrCat("writing checkpoint shard ", path));
  };
  if (!out.Write(header.data(), header.size())) return failed();
  for (size_t i = 0; i < pieces.size(); ++i) {
    WrittenPiece w;
    w.tensor = pieces[i].tensor;
    w.dtype = pieces[i].dtype;
    w.shape = pieces[i].shape;
    w.begin = pieces[i].begin;
    w.elements = pieces[i].elements;
    w.key = entries[i].key;
    w.offset = out.offset();
    if (!out.Write(pieces[i].data, entries[i].end - entries[i].begin)) return failed();
    shard.pieces.push_back(std::move(w));
  }
  shard.bytes = out.offset();
  shard.crc32c = out.file_crc();
  shard.block_crc32c = out.blocks();
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (close(fd) != 0) return failed();
  Failpoint("checkpoint_shard");
  HVX_RETURN_IF_ERROR(CommitFile(tmp.path, path));
  committed = true;
  return shard;
}

Json ShardToJson(const WrittenShard& shard) {
  Json pieces = Json::array();
  for (const WrittenPiece& p : shard.pieces) pieces.push_back(PieceToJson(p));
  return Json{{"name", shard.name},
              {"bytes", shard.bytes},
              {"crc32c", shard.crc32c},
              {"block_crc32c", shard.block_crc32c},
              {"pieces", pieces}};
}

absl::StatusOr<WrittenShard> ShardFromJson(const Json& json, absl::string_view what) {
  WrittenShard shard;
  const Json* name = JsonMember(json, "name");
  const Json* blocks = JsonMember(json, "block_crc32c");
  if (name == nullptr || !name->is_string() || blocks == nullptr || !blocks->is_array()) {
    return absl::DataLossError(absl::StrCat(what, ": a file without name or block_crc32c"));
  }
  shard.name = name->get<std::string>();
  if (shard.name.empty() || shard.name.find('/') != std::string::npos || shard.name[0] == '.') {
    return absl::DataLossError(
        absl::StrCat(what, ": file name \"", shard.name, "\" is not a name within the checkpoint"));
  }
  HVX_ASSIGN_OR_RETURN(shard.bytes, Unsigned(json, "bytes", what));
  HVX_ASSIGN_OR_RETURN(const uint64_t crc, Unsigned(json, "crc32c", what));
  shard.crc32c = static_cast<uint32_t>(crc);
  for (const Json& b : *blocks) {
    if (!b.is_number_unsigned())
      return absl::DataLossError(absl::StrCat(what, ": a bad block crc"));
    shard.block_crc32c.push_back(b.get<uint32_t>());
  }
  const uint64_t expected_blocks =
      shard.bytes / kChecksumBlockBytes + (shard.bytes % kChecksumBlockBytes != 0 ? 1 : 0);
  if (shard.block_crc32c.size() != expected_blocks) {
    return absl::DataLossError(absl::StrCat(what, ": ", shard.name, " has ",
                                            shard.block_crc32c.size(), " block checksums for ",
                                            shard.bytes, " bytes"));
  }
  if (const Json* pieces = JsonMember(json, "pieces"); pieces != nullptr && pieces->is_array()) {
    for (const Json& p : *pieces) {
      WrittenPiece w;
      const Json* tensor = JsonMember(p, "tensor");
      const Json* dtype = JsonMember(p, "dtype");
      const Json* key = JsonMember(p, "key");
      const Json* shape = JsonMember(p, "shape");
      if (tensor == nullptr || !tensor->is_string() || dtype == nullptr || !dtype->is_string() ||
          key == nullptr || !key->is_string() || shape == nullptr) {
        return absl::DataLossError(absl::StrCat(what, ": a piece without tensor, dtype or key"));
      }
      w.tensor = tensor->get<std::string>();
      w.dtype = dtype->get<std::string>();
      w.key = key->get<std::string>();
      HVX_ASSIGN_OR_RETURN(w.shape, ShapeFrom(*shape, what));
      HVX_ASSIGN_OR_RETURN(const uint64_t begin, Unsigned(p, "begin", what));
      HVX_ASSIGN_OR_RETURN(const uint64_t elements, Unsigned(p, "elements", what));
      HVX_ASSIGN_OR_RETURN(w.offset, Unsigned(p, "offset", what));
      w.begin = static_cast<int64_t>(begin);
      w.elements = static_cast<int64_t>(elements);
      shard.pieces.push_back(std::move(w));
    }
  }
  return shard;
}

int64_t IndexTensor::Elements() const { return ShapeElements(shape); }

absl::StatusOr<CheckpointIndex> BuildIndex(int64_t step, int world_size,
                                           const std::vector<WrittenShard>& shards, Json metadata) {
  CheckpointIndex index;
  index.step = step;
  index.world_size = world_size;
  index.metadata = std::move(metadata);
  for (size_t f = 0; f < shards.size(); ++f) {
    WrittenShard file = shards[f];
    for (const WrittenPiece& p : file.pieces) {
      auto [it, added] = index.tensors.try_emplace(p.tensor);
      IndexTensor& t = it->second;
      if (added) {
        t.dtype = p.dtype;
        t.shape = p.shape;
      } else if (t.dtype != p.dtype || t.shape != p.shape) {
        return absl::InternalError(absl::StrCat("checkpoint step ", step, ": the ranks wrote ",
                                                p.tensor, " with different dtypes or shapes"));
      }
      const uint64_t end = p.offset + p.elements * SafetensorsDtypeBytes(p.dtype);
      if (end > file.bytes) {
        return absl::InternalError(
            absl::StrCat(file.name, ": a piece of ", p.tensor, " ends past the file"));
      }
      t.pieces.push_back(IndexPiece{f, p.key, p.begin, p.elements, p.offset});
    }
    file.pieces.clear();
    index.files.push_back(std::move(file));
  }
  for (auto& [name, t] : index.tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const IndexPiece& a, const IndexPiece& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const IndexPiece& p : t.pieces) {
      if (p.begin != at) {
        return absl::InternalError(
            absl::StrCat("checkpoint step ", step, ": elements ", std::min(at, p.begin), " of ",
                         name, " were written ", p.begin > at ? "by no rank" : "twice"));
      }
      at += p.elements;
    }
    if (at != t.Elements()) {
      return absl::InternalError(absl::StrCat("checkpoint step ", step, ": ", name, " has ",
                                              t.Elements(), " elements, the ranks wrote ", at));
    }
  }
  return index;
}

std::string EncodeIndex(const CheckpointIndex& index) {
  Json files = Json::array();
  for (const WrittenShard& f : index.files) {
    files.push_back(Json{{"name", f.name},
                         {"bytes", f.bytes},
                         {"crc32c", f.crc32c},
                         {"block_crc32c", f.block_crc32c}});
  }
  Json tensors = Json::object();
  for (const auto& [name, t] : index.tensors) {
    Json pieces = Json::array();
    for (const IndexPiece& p : t.pieces) {
      pieces.push_back(Json{{"file", p.file},
                            {"key", p.key},
                            {"elements", {p.begin, p.begin + p.elements}},
                            {"offset", p.offset}});
    }
    tensors[name] = Json{{"dtype", t.dtype}, {"shape", t.shape}, {"pieces", pieces}};
  }
  Json json{{"format", kFormatName},
            {"version", kFormatVersion},
            {"step", index.step},
            {"world_size", index.world_size},
            {"block_bytes", kChecksumBlockBytes},
            {"metadata", index.metadata},
            {"files", files},
            {"tensors", tensors}};
  return json.dump(1) + "\n";
}

absl::StatusOr<CheckpointIndex> DecodeIndex(absl::string_view text, absl::string_view path) {
  auto parsed = ParseJson(text, path);
  if (!parsed.ok()) return absl::DataLossError(parsed.status().message());
  const Json& json = *parsed;
  const Json* format = JsonMember(json, "format");
  if (format == nullptr || *format != kFormatName) {
    return Damaged(path, "not an hvx checkpoint index (no \"format\": \"hvx-checkpoint\")");
  }
  HVX_ASSIGN_OR_RETURN(const uint64_t version, Unsigned(json, "version", path));
  if (version > static_cast<uint64_t>(kFormatVersion)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is a checkpoint of format version ", version, "; this hvx reads up to ",
        kFormatVersion, ": resume it with the hvx that wrote it, or start over with --fresh"));
  }
  HVX_ASSIGN_OR_RETURN(const uint64_t block_bytes, Unsigned(json, "block_bytes", path));
  if (block_bytes != static_cast<uint64_t>(kChecksumBlockBytes)) {
    return Damaged(path,
                   absl::StrCat("block_bytes ", block_bytes, " is not ", kChecksumBlockBytes));
  }
  CheckpointIndex index;
  HVX_ASSIGN_OR_RETURN(const uint64_t step, Unsigned(json, "step", path));
  HVX_ASSIGN_OR_RETURN(const uint64_t world, Unsigned(json, "world_size", path));
  if (step > static_cast<uint64_t>(INT64_MAX) || world == 0 || world > (1u << 24)) {
    return Damaged(path, absl::StrCat("step ", step, " or world_size ", world, " is out of range"));
  }
  index.step = static_cast<int64_t>(step);
  index.world_size = static_cast<int>(world);
  if (const Json* metadata = JsonMember(json, "metadata"); metadata != nullptr) {
    index.metadata = *metadata;
  }
  const Json* files = JsonMember(json, "files");
  const Json* tensors = JsonMember(json, "tensors");
  if (files == nullptr || !files->is_array() || tensors == nullptr || !tensors->is_object()) {
    return Damaged(path, "no \"files\" list or \"tensors\" object");
  }
  for (const Json& f : *files) {
    HVX_ASSIGN_OR_RETURN(WrittenShard shard, ShardFromJson(f, path));
    index.files.push_back(std::move(shard));
  }
  for (const auto& [name, t] : tensors->items()) {
    const std::string what = absl::StrCat(path, ": tensor ", name);
    IndexTensor tensor;
    const Json* dtype = JsonMember(t, "dtype");
    const Json* shape = JsonMember(t, "shape");
    const Json* pieces = JsonMember(t, "pieces");
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || pieces == nullptr ||
        !pieces->is_array()) {
      return absl::DataLossError(absl::StrCat(what, " lacks dtype, shape or pieces"));
    }
    tensor.dtype = dtype->get<std::string>();
    const int64_t element_bytes = SafetensorsDtypeBytes(tensor.dtype);
    if (element_bytes == 0) return absl::DataLossError(absl::StrCat(what, ": unknown dtype"));
    HVX_ASSIGN_OR_RETURN(tensor.shape, ShapeFrom(*shape, what));
    int64_t at = 0;
    for (const Json& p : *pieces) {
      IndexPiece piece;
      const Json* key = JsonMember(p, "key");
      const Json* elements = JsonMember(p, "elements");
      if (key == nullptr || !key->is_string() || elements == nullptr || !elements->is_array() ||
          elements->size() != 2 || !(*elements)[0].is_number_unsigned() ||
          !(*elements)[1].is_number_unsigned()) {
        return absl::DataLossError(absl::StrCat(what, ": a piece without key or elements"));
      }
      HVX_ASSIGN_OR_RETURN(const uint64_t file, Unsigned(p, "file", what));
      HVX_ASSIGN_OR_RETURN(piece.offset, Unsigned(p, "offset", what));
      piece.file = file;
      piece.key = key->get<std::string>();
      // In uint64 until proven to fit: the values come from a file.
      const uint64_t begin = (*elements)[0].get<uint64_t>();
      const uint64_t end = (*elements)[1].get<uint64_t>();
      const uint64_t bytes = static_cast<uint64_t>(element_bytes);
      if (file >= index.files.size() || begin != static_cast<uint64_t>(at) || end <= begin ||
          end > static_cast<uint64_t>(tensor.Elements()) ||
          end - begin > (UINT64_MAX - piece.offset) / bytes ||
          piece.offset + (end - begin) * bytes > index.files[file].bytes) {
        return absl::DataLossError(
            absl::StrCat(what, ": its pieces do not lie in order within the files"));
      }
      piece.begin = static_cast<int64_t>(begin);
      piece.elements = static_cast<int64_t>(end - begin);
      at = static_cast<int64_t>(end);
      tensor.pieces.push_back(std::move(piece));
    }
    if (at != tensor.Elements()) {
      return absl::DataLossError(
          absl::StrCat(what, ": its pieces hold ", at, " of its ", tensor.Elements(), " elements"));
    }
    index.tensors.emplace(name, std::move(tensor));
  }
  return index;
}

absl::Status WriteIndex(const std::string& dir, const CheckpointIndex& index) {
  return WriteFileAtomically(absl::StrCat(dir, "/", kIndexFileName), EncodeIndex(index),
                             "checkpoint index", /*durable=*/true);
}

absl::StatusOr<CheckpointIndex> ReadIndex(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kIndexFileName);
  HVX_ASSIGN_OR_RETURN(ReadOnlyFile f, OpenReadOnly(path, "checkpoint index"));
  absl::Cleanup close_fd = [&f] { close(f.fd); };
  if (f.size > kMaxIndexBytes) {
    return Damaged(path, absl::StrCat(f.size, " bytes: larger than any index"));
  }
  std::string text(f.size, '\0');
  uint64_t got = 0;
  while (got < text.size()) {
    const ssize_t n = pread(f.fd, text.data() + got, text.size() - got, got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat("reading ", path));
    if (n == 0) return Damaged(path, "shorter than its size");
    got += n;
  }
  return DecodeIndex(text, path);
}

int64_t CheckpointDirStep(absl::string_view name) {
  int64_t step = 0;
  if (absl::ConsumePrefix(&name, "ckpt-") && !name.empty() &&
      std::all_of(name.begin(), name.end(), absl::ascii_isdigit) && absl::SimpleAtoi(name, &step)) {
    return step;
  }
  return -1;
}

std::vector<std::pair<int64_t, std::string>> ListCheckpointDirs(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return found;
  while (dirent* e = readdir(d)) {
    const int64_t step = CheckpointDirStep(e->d_name);
    if (step < 0) continue;
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    struct stat st;
    if (stat(absl::StrCat(path, "/", kIndexFileName).c_str(), &st) == 0) {
      found.emplace_back(step, path);
    }
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

absl::Status RemoveCheckpointDir(const std::string& path) {
  struct stat link;
  if (lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    // A checkpoint linked in from elsewhere: the link goes, what it points to stays.
    if (unlink(path.c_str()) != 0) return ErrnoToStatus(errno, absl::StrCat("removing ", path));
    return absl::OkStatus();
  }
  const std::string index = absl::StrCat(path, "/", kIndexFileName);
  if (unlink(index.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat("removing ", index));
  }
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, absl::StrCat("opening ", path));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  closedir(d);
  for (const std::string& name : names) {
    const std::string entry = absl::StrCat(path, "/", name);
    if (unlink(entry.c_str()) != 0) return ErrnoToStatus(errno, absl::StrCat("removing ", entry));
  }
  if (rmdir(path.c_str()) != 0) return ErrnoToStatus(errno, absl::StrCat("removing ", path));
  return absl::OkStatus();
}

IndexReader::IndexReader(std::string dir, const CheckpointIndex& index)
    : dir_(std::move(dir)), index_(index), fds_(index.files.size(), -1) {}

IndexReader::~IndexReader() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

const IndexTensor* IndexReader::Find(const std::string& name) const {
  const auto found = index_.tensors.find(name);
  return found == index_.tensors.end() ? nullptr : &found->second;
}

absl::Status IndexReader::Read(const std::string& name, int64_t begin, int64_t elements,
                               void* out) {
  const IndexTensor* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(dir_, " has no tensor ", name));
  }
  if (begin < 0 || elements < 0 || begin + elements > t->Elements()) {
    return absl::OutOfRangeError(absl::StrCat(dir_, ": elements [", begin, ", ", begin + elements,
                                              ") of ", name, ", which has ", t->Elements()));
  }
  const int64_t element_bytes = SafetensorsDtypeBytes(t->dtype);
  char* dst = static_cast<char*>(out);
  for (const IndexPiece& p : t->pieces) {
    const int64_t lo = std::max(begin, p.begin);
    const int64_t hi = std::min(begin + elements, p.begin + p.elements);
    if (lo >= hi) continue;
    HVX_RETURN_IF_ERROR(
        ReadPiece(p, element_bytes, lo - p.begin, hi - lo, dst + (lo - begin) * element_bytes));
  }
  return absl::OkStatus();
}

absl::Status IndexReader::ReadPiece(const IndexPiece& piece, int64_t element_bytes, int64_t from,
                                    int64_t count, char* out) {
  const WrittenShard& file = index_.files[piece.file];
  const std::string path = absl::StrCat(dir_, "/", file.name);
  int& fd = fds_[piece.file];
  if (fd < 0) {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) return Damaged(path, "missing: the index names it");
      return ErrnoToStatus(err, absl::StrCat("opening checkpoint shard ", path));
    }
  }
  const uint64_t first = piece.offset + from * element_bytes;
  const uint64_t last = first + count * element_bytes;  // one past
  const uint64_t first_block = first / kChecksumBlockBytes;
  const uint64_t end_block = (last + kChecksumBlockBytes - 1) / kChecksumBlockBytes;
  for (uint64_t block = first_block; block < end_block;) {
    auto cached = cache_.find({piece.file, block});
    if (cached == cache_.end()) {
      // Consecutive blocks not yet read, up to kMaxReadBlocks, in one read; each is checked
      // before any of it is used, and kept for the tensors that share it.
      uint64_t run = 1;
      while (block + run < end_block && run < kMaxReadBlocks &&
             cache_.count({piece.file, block + run}) == 0) {
        ++run;
      }
      const uint64_t begin = block * kChecksumBlockBytes;
      const uint64_t end = std::min<uint64_t>((block + run) * kChecksumBlockBytes, file.bytes);
      std::string buffer(end - begin, '\0');
      uint64_t got = 0;
      while (got < buffer.size()) {
        const ssize_t n = pread(fd, buffer.data() + got, buffer.size() - got, begin + got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoToStatus(errno, absl::StrCat("reading checkpoint shard ", path));
        if (n == 0) {
          return Damaged(
              path, absl::StrCat("ends at byte ", begin + got, "; the index says ", file.bytes));
        }
        got += n;
      }
      bytes_read_ += buffer.size();
      for (uint64_t b = 0; b < run; ++b) {
        const uint64_t at = b * kChecksumBlockBytes;
        const uint64_t n = std::min<uint64_t>(kChecksumBlockBytes, buffer.size() - at);
        if (data::Crc32c(buffer.data() + at, n) != file.block_crc32c[block + b]) {
          return Damaged(path, absl::StrCat("bytes ", begin + at, "..", begin + at + n - 1,
                                            " differ from what was written (checksum of block ",
                                            block + b, ")"));
        }
        if (cache_order_.size() >= kCachedBlocks) {
          cache_.erase(cache_order_.front());
          cache_order_.pop_front();
        }
        cache_[{piece.file, block + b}] = buffer.substr(at, n);
        cache_order_.push_back({piece.file, block + b});
      }
      cached = cache_.find({piece.file, block});
    }
    // Copies what this block holds of [first, last).
    const uint64_t block_begin = block * kChecksumBlockBytes;
    const uint64_t copy_begin = std::max(first, block_begin);
    const uint64_t copy_end = std::min<uint64_t>(last, block_begin + cached->second.size());
    memcpy(out + (copy_begin - first), cached->second.data() + (copy_begin - block_begin),
           copy_end - copy_begin);
    ++block;
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace hvx

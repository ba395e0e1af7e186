// The files of a sharded checkpoint, without torch or collectives: each rank's shard file in the
// safetensors format, the index that makes a directory a checkpoint, and reads of any element
// range of any tensor with every byte read checked.
//
//   HVX_ASSIGN_OR_RETURN(WrittenShard mine, WriteShardFile(dir, ShardFileName(token, r, w),
//   pieces));
//   ... rank 0, with every rank's WrittenShard:
//   HVX_ASSIGN_OR_RETURN(CheckpointIndex index, BuildIndex(step, world, shards, metadata));
//   HVX_RETURN_IF_ERROR(WriteIndex(dir, index));  // the checkpoint exists from here on
//   ... any rank, at any world size:
//   HVX_ASSIGN_OR_RETURN(CheckpointIndex index, ReadIndex(dir));
//   IndexReader reader(dir, index);
//   HVX_RETURN_IF_ERROR(reader.Read("optimizer/fc.weight/exp_avg", begin, count, out));
//
// A shard file is safetensors (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header (padded with spaces to a multiple of 8) mapping each
// key to {"dtype", "shape", "data_offsets"}, then the data. A piece holding a whole tensor is keyed
// by the tensor's name with its shape; a piece of a flattened tensor's elements [b, e) by
// "<name>[b:e]", one-dimensional. The files load with `safetensors.torch.load_file` as they are.
//
// "index.json" (written last, atomically and durably) says which pieces make each tensor:
//   {"format": "hvx-checkpoint", "version": 1, "step": S, "world_size": W,
//    "block_bytes": 65536, "metadata": {...},
//    "files": [{"name": F, "bytes": N, "crc32c": C, "block_crc32c": [c0, c1, ...]}, ...],
//    "tensors": {"<name>": {"dtype": "F32", "shape": [...],
//                           "pieces": [{"file": i, "key": K, "elements": [b, e],
//                                       "offset": byte offset in the file}, ...]}, ...]}}
// Every block of block_bytes of each file has its CRC-32C, so a reader of any byte range checks
// exactly the blocks it reads; "crc32c" is the whole file's.
#ifndef HVX_TRAIN_CHECKPOINT_FORMAT_H_
#define HVX_TRAIN_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/json.h"

namespace hvx {
namespace train {

inline constexpr char kIndexFileName[] = "index.json";
inline constexpr int64_t kChecksumBlockBytes = int64_t{1} << 16;

// Bytes per element of a safetensors dtype ("F32", "BF16", "I64", ...); 0 for a name it has not.
int64_t SafetensorsDtypeBytes(absl::string_view dtype);

// One tensor of a safetensors file: its key, dtype, shape and byte range within the data that
// follows the header.
struct SafetensorsEntry {
  std::string key;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// The header of a safetensors file (length, JSON, padding) for `entries`, whose ranges must be laid
// out in order from 0 without gaps.
std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata);

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the order of their data
  std::map<std::string, std::string> metadata;
  uint64_t data_begin = 0;  // the file offset of the data: 8 + the header's length
};

// Parses the header at the start of `head` (which holds at least its first 8 bytes and the JSON
// they announce) of a file of `file_bytes` bytes. DataLoss naming `path` for anything the format
// does not allow: a length past the file, JSON that is not an object of entries, an unknown dtype,
// a range that is not its shape's size, ranges that overlap, leave gaps or pass the end.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view head,
                                                         uint64_t file_bytes,
                                                         absl::string_view path);

// A piece of a tensor that a rank writes: elements [begin, begin + elements) of the flattened
// tensor `tensor` (of `dtype`, `shape`), read from `data`.
struct PieceToWrite {
  std::string tensor;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t elements = 0;
  const void* data = nullptr;
};

// A piece as it lies in a shard file.
struct WrittenPiece {
  std::string tensor;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t elements = 0;
  std::string key;      // its key in the safetensors header
  uint64_t offset = 0;  // its first byte in the file
};

// One shard file and what it holds.
struct WrittenShard {
  std::string name;  // the file's name within the checkpoint's directory
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<uint32_t> block_crc32c;  // of each kChecksumBlockBytes of the file
  std::vector<WrittenPiece> pieces;
};

// "<token>-shard-<rank>-of-<world>.safetensors": the token keeps the files of two saves of one
// step (a restarted job, two jobs sharing a directory) apart; only the index's are the checkpoint.
std::string ShardFileName(absl::string_view token, int rank, int world_size);

// Writes `pieces` as the safetensors file `dir`/`name`: to a temporary, synced, renamed, the
// directory synced. Errors carry the errno and name the file (ENOSPC on a full disk).
absl::StatusOr<WrittenShard> WriteShardFile(const std::string& dir, const std::string& name,
                                            const std::vector<PieceToWrite>& pieces,
                                            const std::map<std::string, std::string>& metadata);

// A shard's description as rank 0 receives it, and back.
Json ShardToJson(const WrittenShard& shard);
absl::StatusOr<WrittenShard> ShardFromJson(const Json& json, absl::string_view what);

// A tensor of the index: its pieces cover its elements exactly once.
struct IndexPiece {
  size_t file = 0;  // into CheckpointIndex::files
  std::string key;
  int64_t begin = 0, elements = 0;
  uint64_t offset = 0;
};
struct IndexTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<IndexPiece> pieces;  // by begin
  int64_t Elements() const;
};

struct CheckpointIndex {
  int64_t step = 0;
  int world_size = 0;
  Json metadata = Json::object();
  std::vector<WrittenShard> files;  // pieces of each are not kept here; see tensors
  std::map<std::string, IndexTensor> tensors;
};

// The index of `shards`: Internal naming the tensor when their pieces of it disagree on dtype or
// shape, overlap, or leave elements out (a bug in what the ranks wrote, never to be committed).
absl::StatusOr<CheckpointIndex> BuildIndex(int64_t step, int world_size,
                                           const std::vector<WrittenShard>& shards, Json metadata);

std::string EncodeIndex(const CheckpointIndex& index);
// DataLoss naming `path` when `text` is not an index this version reads (FailedPrecondition for a
// newer version's).
absl::StatusOr<CheckpointIndex> DecodeIndex(absl::string_view text, absl::string_view path);

// Writes `dir`/index.json atomically and durably: from then on `dir` is a checkpoint.
absl::Status WriteIndex(const std::string& dir, const CheckpointIndex& index);
// Reads and decodes `dir`/index.json (NotFound when there is none).
absl::StatusOr<CheckpointIndex> ReadIndex(const std::string& dir);

// The checkpoint directories in `dir`: "ckpt-<step>" holding an index, oldest first.
std::vector<std::pair<int64_t, std::string>> ListCheckpointDirs(const std::string& dir);
// The step of a checkpoint directory's name "ckpt-<step>", or -1.
int64_t CheckpointDirStep(absl::string_view name);
// Removes the checkpoint directory `path`: its index first (so that it stops being a checkpoint at
// once), then its files, then itself. Errors name the entry that could not be removed.
absl::Status RemoveCheckpointDir(const std::string& path);

// Reads element ranges of the index's tensors from their shard files, each block it reads
// checked against the index. Not thread-safe.
class IndexReader {
 public:
  IndexReader(std::string dir, const CheckpointIndex& index);
  ~IndexReader();
  IndexReader(const IndexReader&) = delete;
  IndexReader& operator=(const IndexReader&) = delete;

  // The tensor `name`, or null.
  const IndexTensor* Find(const std::string& name) const;
  // Copies elements [begin, begin + elements) of tensor `name` to `out` (elements * its dtype's
  // size bytes). NotFound when the index has no such tensor, OutOfRange past its end; DataLoss
  // naming the file and block when a file is missing, short or a block's checksum differs.
  absl::Status Read(const std::string& name, int64_t begin, int64_t elements, void* out);
  // Bytes read from files so far (whole checked blocks, each read once while it is among the
  // kCachedBlocks last read: tensors that share a block do not read it again).
  int64_t bytes_read() const { return bytes_read_; }
  static constexpr size_t kCachedBlocks = 256;

 private:
  absl::Status ReadPiece(const IndexPiece& piece, int64_t element_bytes, int64_t from,
                         int64_t count, char* out);

  const std::string dir_;
  const CheckpointIndex& index_;
  std::vector<int> fds_;  // per file, -1 until opened
  int64_t bytes_read_ = 0;
  // Checked blocks by (file, block), the oldest evicted first.
  std::map<std::pair<size_t, uint64_t>, std::string> cache_;
  std::deque<std::pair<size_t, uint64_t>> cache_order_;
};

}  // namespace train
}  // namespace hvx

#endif  // HVX_TRAIN_CHECKPOINT_FORMAT_H_

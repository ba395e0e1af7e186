// Fuzz target: hvx/train/checkpoint_format.h's parsers of what a checkpoint directory holds, which
// may be damaged or planted. With the first byte even, the rest is a shard file's start
// (ParseSafetensorsHeader); odd, an index (DecodeIndex). Either may fail, never crash or throw; a
// header that parses lays its tensors out within the file, and an index that decodes encodes to
// text that decodes to the same index.
#include <string>
#include <vector>

#include "hvx/testing/fuzz.h"
#include "hvx/train/checkpoint_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto header = hvx::train::ParseSafetensorsHeader(input, input.size(), "fuzz");
    if (header.ok()) {
      for (const auto& e : header->entries) {
        HVX_FUZZ_CHECK(header->data_begin + e.end <= input.size(), "entry within the file");
      }
    }
    return 0;
  }
  auto index = hvx::train::DecodeIndex(input, "fuzz");
  if (index.ok()) {
    const std::string encoded = hvx::train::EncodeIndex(*index);
    auto again = hvx::train::DecodeIndex(encoded, "fuzz");
    HVX_FUZZ_CHECK(again.ok(), "an encoded index decodes");
    HVX_FUZZ_CHECK(hvx::train::EncodeIndex(*again) == encoded, "round trip");
  }
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using hvx::train::SafetensorsEntry;
  const std::string header = hvx::train::EncodeSafetensorsHeader(
      {{"model/fc.weight[0:2]", "F32", {2}, 0, 8}, {"step", "I64", {}, 8, 16}}, {{"k", "v"}});
  std::string shard = std::string(1, '\0') + header + std::string(16, '\x01');
  hvx::train::CheckpointIndex index;
  index.step = 3;
  index.world_size = 2;
  index.metadata = hvx::Json{{"position", {1, 2}}};
  hvx::train::WrittenShard file;
  file.name = "t-shard-0-of-2.safetensors";
  file.bytes = header.size() + 16;
  file.block_crc32c = {123};
  index.files.push_back(file);
  hvx::train::IndexTensor t;
  t.dtype = "F32";
  t.shape = {2};
  t.pieces.push_back({0, "model/fc.weight[0:2]", 0, 2, header.size()});
  index.tensors["model/fc.weight"] = t;
  return {shard, "\x01" + hvx::train::EncodeIndex(index)};
}

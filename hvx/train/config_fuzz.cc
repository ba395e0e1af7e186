// Fuzz target: the trainer's config as users write it, a text proto and --override texts merged
// into it (TrainConfigFromText: parse, merge, defaults, home expansion, checks). The input is cut
// at NUL bytes: the file, then up to two overrides. A config that is accepted passes the checks
// again, and prints to text that is accepted as the same config (unless it still names home).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "hvx/testing/fuzz.h"
#include "hvx/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hvx;
  if (size > 1 << 16) return 0;  // protobuf's text parser is linear; long inputs only take time
  const std::vector<absl::string_view> parts = fuzz::SplitInput(fuzz::AsText(data, size), '\0', 3);
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  const absl::StatusOr<train::TrainConfig> config =
      train::TrainConfigFromText(parts[0], "fuzz.pbtxt", overrides, "/home/fuzz");
  if (!config.ok()) return 0;
  HVX_FUZZ_CHECK(train::ValidateTrainConfig(*config, "fuzz.pbtxt").ok(),
                 "an accepted config fails ValidateTrainConfig");
  std::string text;
  HVX_FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(*config, &text), "printing");
  // A path whose expansion still refers to home (the literal "~" of "~$HOME" followed by
  // "/home/fuzz") expands again when read back: home expansion is one pass, not a fixed point.
  if (absl::StrContains(text, "~") || absl::StrContains(text, "$HOME") ||
      absl::StrContains(text, "${HOME}")) {
    return 0;
  }
  const absl::StatusOr<train::TrainConfig> again =
      train::TrainConfigFromText(text, "printed.pbtxt", {}, "/home/fuzz");
  HVX_FUZZ_CHECK(again.ok(), "an accepted config, printed, is refused");
  HVX_FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*again, *config),
                 "an accepted config, printed and read back, differs");
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace std::string_literals;
  return {
      "model: \"mlp\"\nepochs: 2\ndata { format: FASHION_MNIST fashion_mnist_source { idx_dir: "
      "\"~/data\" } }\n\0epochs: 3\0checkpoint { dir: \"$HOME/ckpt\" every_steps: 10 }"s,
      "model: \"resnet50\"\0optimizer { shard: STATE }"s,
      "\0\0"s,
  };
}

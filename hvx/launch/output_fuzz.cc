// Fuzz target: what hvxrun reads from mpiexec's stdout and stderr, which carries every rank's own
// bytes (hydra's rank markers, control records a program can imitate). The first byte picks the
// stream and the tag mode, and where the input is cut into reads. A control record reaches
// hvxrun only from the rank it names (or -1, the wrapper's "not placed"), as that rank, inside
// the plan; every written line ends in exactly one newline; the kept stderr lines are bounded.
#include <string>
#include <vector>

#include "hvx/launch/output.h"
#include "hvx/launch/plan.h"
#include "hvx/testing/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hvx::launch;
  if (size == 0) return 0;
  static const Plan plan = *MakePlan(4, {{"h1", 2}, {"h2", 2}});
  const uint8_t mode = data[0];
  const absl::string_view bytes = hvx::fuzz::AsText(data + 1, size - 1);
  const TagMode tag = mode & 1 ? TagMode::kFull : (mode & 2 ? TagMode::kNone : TagMode::kRank);
  const Stream stream = mode & 4 ? Stream::kStderr : Stream::kStdout;
  const size_t chunk = 1 + (mode >> 3);  // reads of 1..32 bytes: hydra cuts anywhere
  OutputRouter router(
      plan, tag, 1, 2,
      [](int fd, absl::string_view line) {
        HVX_FUZZ_CHECK(fd == 1 || fd == 2, "a line went to another descriptor");
        HVX_FUZZ_CHECK(!line.empty() && line.back() == '\n', "a written line lacks its newline");
        HVX_FUZZ_CHECK(line.find('\n') == line.size() - 1, "one write holds two lines");
      },
      [](const ControlRecord& r) {
        HVX_FUZZ_CHECK(r.rank >= 0 && r.rank < plan.size, "a control record names no rank");
      });
  StreamDemuxer demux([&](int source, absl::string_view run) {
    HVX_FUZZ_CHECK(source == kMpiexecSource || source >= 0, "a run has a negative source");
    router.OnBytes(stream, source, run);
  });
  for (size_t at = 0; at < bytes.size(); at += chunk) demux.Feed(bytes.substr(at, chunk));
  demux.Finish();
  router.Finish();
  for (int rank = 0; rank < plan.size; ++rank) {
    HVX_FUZZ_CHECK(router.LastStderrLines(rank).size() <= OutputRouter::kKeptLines,
                   "more stderr lines kept than the bound");
  }
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace hvx::launch;
  const std::string m0 = "\x01hvx0\x02", m3 = "\x01hvx3\x02";
  return {
      std::string(1, '\x04') + m0 + "hello\n" + m3 + "world\n",
      std::string(1, '\x0c') + m0 + FormatStartRecord(0, "h1", 42) + m0 +
          FormatExitRecord(0, "h1", 3 << 8),
      std::string(1, '\x05') + m3 + FormatErrorRecord(3, "h2", "bad plan", 7) +
          "[mpiexec@h1] done\n",
      std::string(1, '\x14') + m0 + "part" + m3 + "other\n" + m0 + "ial\n",
      std::string(1, '\x04') + m3 + FormatErrorRecord(100000000, "h2", "not my rank"),
      std::string(1, '\x06') + m0 + "no newline at the end",
  };
}

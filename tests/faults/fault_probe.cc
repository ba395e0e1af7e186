// A job for the fault matrix: hvx::Init, then steps of one 16 MiB allreduce (the ring) and a few
// small ones, each checked, then hvx::Shutdown. Faults come from HVX_FAILPOINT (hvx/common/
// failpoint.h); this program adds the point "before_init".
//
//   fault_probe [--steps N] [--seconds S] [--shutdown-after-failure] [--step-names]
//               [--step-ms MS] [--big-floats N] [--fault KIND:RANK:STEP]
//
// With --seconds, the steps go on until rank 0 has run S seconds of them (on the monotonic clock;
// every rank learns it through the step's allreduce). With --shutdown-after-failure a rank whose
// step failed calls hvx::Shutdown before exiting 1, as a Python script's `finally:
// hvd.shutdown()` does, and prints what it returned and how long it took. Prints "rank R done, wall
// clock T" (T: the rank's time(), seconds since the epoch) after the last step.
//
// With --step-names the tensors are "big.S" and "small.S" at step S, as a program whose
// collectives are numbered names them; then a rank that skips one waits in the next step's while
// the others wait for it. --fault makes rank RANK at step STEP go wrong the way a program does
// (the cases hvxrun's verdict tells apart): skip (it does not submit "small"), own_code (it sleeps
// in its own code before the step's collectives), rename (it names "small" otherwise), mismatch
// (its "small" has another shape), set (ranks 1.. allreduce "set.S" in a process set of their
// own too, and it skips that one), slow (from step STEP on its steps' own work, --step-ms, takes
// 20% longer).
//
// --step-ms MS: each step first works MS ms (sleeps) before its collectives, as a training step
// computes; --big-floats: the big tensor's floats (4 Mi). Then the last line says when straggler
// detection first named a rank: "rank R: straggler named rank X at step S" (X, S: -1 if never).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "hvx/common/failpoint.h"
#include "hvx/core/api.h"

int main(int argc, char** argv) {
  int steps = 5;
  double seconds = 0;
  bool shutdown_after_failure = false;
  bool step_names = false;
  std::string fault;
  int fault_rank = -1, fault_step = -1;
  int step_ms = 0;
  size_t big_floats = 4 << 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
      steps = 1 << 30;
    } else if (!std::strcmp(argv[i], "--shutdown-after-failure")) {
      shutdown_after_failure = true;
    } else if (!std::strcmp(argv[i], "--step-names")) {
      step_names = true;
    } else if (!std::strcmp(argv[i], "--step-ms") && i + 1 < argc) {
      step_ms = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--big-floats") && i + 1 < argc) {
      big_floats = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (!std::strcmp(argv[i], "--fault") && i + 1 < argc) {
      char kind[32];
      if (std::sscanf(argv[++i], "%31[a-z_]:%d:%d", kind, &fault_rank, &fault_step) != 3) {
        std::fprintf(stderr, "--fault KIND:RANK:STEP, not '%s'\n", argv[i]);
        return 2;
      }
      fault = kind;
    } else {
      std::fprintf(stderr,
                   "usage: fault_probe [--steps N] [--seconds S] [--shutdown-after-failure] "
                   "[--step-names] [--step-ms MS] [--big-floats N] [--fault KIND:RANK:STEP]\n");
      return 2;
    }
  }
  hvx::Failpoint("before_init");
  absl::Status s = hvx::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "Init: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvx::Rank();
  const float n = static_cast<float>(hvx::Size());
  hvx::ProcessSet but_rank0;
  if (fault == "set") {
    std::vector<int> ranks;
    for (int r = 1; r < hvx::Size(); ++r) ranks.push_back(r);
    absl::StatusOr<hvx::ProcessSet> set = hvx::AddProcessSet(ranks);
    if (!set.ok()) {
      std::fprintf(stderr, "AddProcessSet: %s\n", set.status().ToString().c_str());
      return 1;
    }
    but_rank0 = *set;
  }
  std::vector<float> big(big_floats), small(64), in_set(64);
  int named = -1, named_at = -1;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    std::fill(big.begin(), big.end(), static_cast<float>(rank + 1));
    std::fill(small.begin(), small.end(), 1.0f);
    // small[63]: rank 0's 1 when the time is up.
    small[63] =
        rank == 0 && seconds > 0 &&
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >=
                    seconds
            ? 1.0f
            : 0.0f;
    hvx::AllreduceOptions sum;
    sum.op = hvx::ReduceOp::kSum;
    const bool faulty = rank == fault_rank && step == fault_step;
    const bool slow = fault == "slow" && rank == fault_rank && step >= fault_step;
    if (step_ms > 0) usleep(static_cast<useconds_t>(step_ms * (slow ? 1200 : 1000)));
    if (faulty && fault == "own_code") {
      std::fprintf(stderr, "rank %d step %d: stuck in its own code\n", rank, step);
      for (;;) sleep(1000);  // a signal (hvxrun asking for its stacks) cuts one sleep short
    }
    const std::string at = step_names ? "." + std::to_string(step) : "";
    hvx::TensorRef b(hvx::DataType::kFloat32, {static_cast<int64_t>(big.size())}, big.data());
    hvx::TensorRef t(
        hvx::DataType::kFloat32,
        {static_cast<int64_t>(small.size()) - (faulty && fault == "mismatch" ? 32 : 0)},
        small.data());
    std::vector<hvx::Handle> handles = {hvx::Allreduce("big" + at, b, b, sum)};
    if (!(faulty && fault == "skip")) {
      handles.push_back(hvx::Allreduce(
          (faulty && fault == "rename" ? "small_renamed" : "small") + at, t, t, sum));
    }
    hvx::TensorRef u(hvx::DataType::kFloat32, {static_cast<int64_t>(in_set.size())}, in_set.data());
    if (fault == "set" && rank != 0 && !faulty) {
      hvx::AllreduceOptions options = sum;
      options.process_set = but_rank0;
      handles.push_back(hvx::Allreduce("set" + at, u, u, options));
    }
    s = hvx::WaitAll(handles);
    // Its own sum of "small" never ran; the step goes on as if it had.
    if (faulty && (fault == "skip" || fault == "rename")) small[0] = n;
    if (!s.ok() || big[0] != n * (n + 1) / 2 || small[0] != n) {
      std::fprintf(stderr, "rank %d step %d: %s\n", rank, step, s.ToString().c_str());
      if (shutdown_after_failure) {
        const auto before = std::chrono::steady_clock::now();
        const absl::Status down = hvx::Shutdown();
        std::fprintf(
            stderr, "rank %d: Shutdown after the failure took %.1f s: %s\n", rank,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count(),
            down.ToString().c_str());
      }
      return 1;
    }
    if (named_at < 0 && hvx::Stragglers().rank >= 0) {
      named = hvx::Stragglers().rank;
      named_at = step;
    }
    if (small[63] != 0) break;
  }
  if (step_ms > 0) {
    std::printf("rank %d: straggler named rank %d at step %d\n", rank, named, named_at);
  }
  std::printf("rank %d done, wall clock %lld\n", rank, static_cast<long long>(std::time(nullptr)));
  std::fflush(stdout);
  s = hvx::Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: Shutdown: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}

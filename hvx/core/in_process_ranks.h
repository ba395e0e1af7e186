// Runs N engines in one process over FakeTransport, one thread per "rank", for engine tests.
//
//   RunInProcessRanks(2, [](Engine& e, int rank) { ... e.Allreduce(...) ... }, options);
#ifndef HVX_CORE_IN_PROCESS_RANKS_H_
#define HVX_CORE_IN_PROCESS_RANKS_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "hvx/core/engine.h"
#include "hvx/core/fake_transport.h"

namespace hvx {

// Options for hermetic engine tests: no launcher variables and no GPUs, whatever machine runs them.
inline InitOptions InProcessOptions() {
  static const MapEnvironment* const no_env = new MapEnvironment();
  InitOptions o;
  o.stall_check_time_s = 0;
  o.environment = no_env;
  o.nvidia_gpus_dir = "/nonexistent";
  return o;
}

// Runs fn(engine, rank) on n in-process ranks, rank r on host hosts[r] ("host" when empty),
// recording into flight_memory[r] when given (EngineOptions::flight_memory), and shuts each down
// after its fn returns.
inline void RunInProcessRanks(int n, const std::function<void(Engine&, int)>& fn,
                              InitOptions options = InProcessOptions(),
                              std::vector<std::string> hosts = {},
                              std::shared_ptr<FakeHub> hub = nullptr,
                              std::vector<void*> flight_memory = {}) {
  if (!hub) hub = std::make_shared<FakeHub>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions eo;
      eo.hostname = hosts.empty() ? "host" : hosts[r];
      eo.command_line = "prog";
      eo.exit_on_finalize_timeout = false;
      if (!flight_memory.empty()) eo.flight_memory = flight_memory[r];
      auto engine = Engine::Start(options, std::make_unique<FakeTransport>(hub, r), eo);
      ASSERT_TRUE(engine.ok()) << engine.status();
      fn(**engine, r);
      EXPECT_TRUE((*engine)->Shutdown().ok());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace hvx

#endif  // HVX_CORE_IN_PROCESS_RANKS_H_

#include "hvx/common/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "hvx/common/env.h"

namespace hvx {
namespace {

struct Armed {
  std::string point;
  std::string action;
  int rank = -1;
  int pass = 1;  // fire on this pass
};

// Parsed once; nullptr when no failpoint applies to this process.
const Armed* ArmedHere() {
  static const Armed* armed = []() -> const Armed* {
    const Environment& env = Environment::Process();
    const std::optional<std::string> spec = env.GetNonEmpty("HVX_FAILPOINT");
    if (!spec || !FailpointEnvironmentError(env).empty()) return nullptr;
    const std::vector<std::string> parts = absl::StrSplit(*spec, ':');
    int rank = -1, mine = -1, pass = 1;
    std::optional<std::string> my_rank = env.GetNonEmpty("HVX_RANK");
    if (!my_rank) my_rank = env.GetNonEmpty("PMI_RANK");
    if (parts.size() < 3 || parts.size() > 4 || !absl::SimpleAtoi(parts[1], &rank) || !my_rank ||
        !absl::SimpleAtoi(*my_rank, &mine) || rank != mine ||
        (parts.size() == 4 && (!absl::SimpleAtoi(parts[3], &pass) || pass < 1))) {
      return nullptr;
    }
    return new Armed{parts[0], parts[2], rank, pass};
  }();
  return armed;
}

struct Action {
  const char* name;
  void (*fire)();
};
// Written by static initializers only, before any failpoint can fire.
std::vector<Action>& Actions() {
  static auto* actions = new std::vector<Action>();
  return *actions;
}

}  // namespace

std::string FailpointEnvironmentError(const Environment& env) {
  const std::optional<std::string> spec = env.GetNonEmpty("HVX_FAILPOINT");
  if (!spec || env.GetNonEmpty("HVX_ALLOW_FAILPOINTS").value_or("") == "1") return "";
  return "HVX_FAILPOINT=" + *spec +
         " is set but HVX_ALLOW_FAILPOINTS=1 is not: a failpoint makes a rank fail on purpose "
         "(tests only). Unset HVX_FAILPOINT (launchers pass it on to every rank), or set "
         "HVX_ALLOW_FAILPOINTS=1 too to inject the fault.";
}

bool RegisterFailpointAction(const char* action, void (*fire)()) {
  Actions().push_back({action, fire});
  return true;
}

void Failpoint(const char* point) {
  const Armed* armed = ArmedHere();
  if (armed == nullptr || armed->point != point) return;
  static std::atomic<int> passes{0};
  if (passes.fetch_add(1) + 1 != armed->pass) return;
  const std::string line = "hvx failpoint " + armed->point + ": rank " +
                           std::to_string(armed->rank) + " " + armed->action + "\n";
  [[maybe_unused]] const ssize_t written = write(2, line.data(), line.size());
  if (armed->action == "exit") {
    std::fflush(nullptr);
    std::exit(3);
  } else if (armed->action == "kill") {
    raise(SIGKILL);
  } else if (armed->action == "stop") {
    raise(SIGSTOP);
  } else if (armed->action == "abort") {
    std::abort();
  }
  for (const Action& a : Actions()) {
    if (armed->action == a.name) a.fire();
  }
}

}  // namespace hvx

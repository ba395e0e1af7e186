#include "hvx/launch/host_wait.h"

#include <algorithm>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/launch/output.h"

namespace hvx {
namespace launch {

absl::Status WaitForHosts(const std::vector<std::string>& hosts, double wait_s,
                          const HostAnswers& answers, int err_fd,
                          std::chrono::milliseconds interval) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  std::map<std::string, std::string> waiting;  // host -> why it did not answer last time
  for (const std::string& h : hosts) waiting[h] = "";
  bool told = false;
  for (;;) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      const absl::Status s = answers(it->first);
      if (s.ok()) {
        if (told) {
          const double after = std::chrono::duration<double>(Clock::now() - start).count();
          WriteAll(err_fd,
                   absl::StrFormat("hvxrun: host %s answered after %.0f s\n", it->first, after));
        }
        it = waiting.erase(it);
      } else {
        it->second = std::string(s.message());
        ++it;
      }
    }
    if (waiting.empty()) return absl::OkStatus();
    std::vector<std::string> lines;
    for (const auto& [host, why] : waiting) lines.push_back(absl::StrCat(host, " (", why, ")"));
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          waiting.size(), " of ", hosts.size(), " hosts did not answer the remote shell within ",
          wait_s, " s (--host-wait): ", absl::StrJoin(lines, "; ")));
    }
    if (!told) {
      WriteAll(err_fd, absl::StrCat("hvxrun: waiting up to ", wait_s,
                                    " s (--host-wait) for hosts to answer the remote shell: ",
                                    absl::StrJoin(lines, "; "), "\n"));
      told = true;
    }
    // The last round asks at the deadline, so a host gets the whole bound.
    std::this_thread::sleep_for(std::min<Clock::duration>(interval, deadline - now));
  }
}

}  // namespace launch
}  // namespace hvx

#include "hvx/launch/host_wait.h"

#include <arpa/nameser.h>
#include <netdb.h>
#include <resolv.h>

#include <algorithm>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/launch/output.h"

namespace hvx {
namespace launch {

absl::Status InDns(const std::string& host) {
  struct __res_state state = {};
  if (res_ninit(&state) != 0) {
    return absl::UnavailableError("cannot read the resolver's configuration (/etc/resolv.conf)");
  }
  unsigned char answer[NS_PACKETSZ];
  std::string why;
  bool found = false;
  // A name with no IPv4 address may have an IPv6 one (an IPv6-only cluster).
  for (int type : {ns_t_a, ns_t_aaaa}) {
    if (res_nsearch(&state, host.c_str(), ns_c_in, type, answer, sizeof(answer)) >= 0) {
      found = true;
      break;
    }
    if (why.empty()) why = hstrerror(state.res_h_errno);
  }
  res_nclose(&state);
  if (found) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("not in DNS: ", why));
}

absl::Status WaitForHosts(const std::vector<std::string>& hosts, double wait_s,
                          const HostAnswers& answers, int err_fd, const char* what,
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
      return absl::DeadlineExceededError(
          absl::StrCat(waiting.size(), " of ", hosts.size(), " hosts did not ", what, " within ",
                       wait_s, " s (--host-wait): ", absl::StrJoin(lines, "; ")));
    }
    if (!told) {
      WriteAll(err_fd,
               absl::StrCat("hvxrun: waiting up to ", wait_s, " s (--host-wait) for hosts to ",
                            what, ": ", absl::StrJoin(lines, "; "), "\n"));
      told = true;
    }
    // The last round asks at the deadline, so a host gets the whole bound.
    std::this_thread::sleep_for(std::min<Clock::duration>(interval, deadline - now));
  }
}

}  // namespace launch
}  // namespace hvx

// Ends the process when a blocking call that cannot be given a deadline of its own outlives one.
// MPI has no nonblocking MPI_Comm_split, and a blocking ncclCommInitRank waits for every rank: a
// peer frozen inside such a call (a paused VM, SIGSTOP, a disk in D state) would hold this rank
// there past HVX_COLLECTIVE_TIMEOUT_S with nothing to say why. Past the deadline the watchdog
// logs `message`, flushes the output and calls _exit(exit_code): the launcher then sees a rank
// that failed, with the reason in its output, and stops the job, as it does for any other.
//
//   {
//     Watchdog dog(CollectiveTimeout(comm), "MPI_Comm_split did not complete ...", 124);
//     MPI_Comm_split(comm, color, key, &sub);
//   }  // returned in time: disarmed
//
// The call cannot be interrupted, so the process cannot go on once it is overdue: a watchdog is
// for calls that only a failed job leaves hanging. An infinite timeout starts no thread.
#ifndef HVX_COMMON_WATCHDOG_H_
#define HVX_COMMON_WATCHDOG_H_

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace hvx {

class Watchdog {
 public:
  Watchdog(absl::Duration timeout, std::string message, int exit_code);
  // Disarms the watchdog and waits for its thread.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace hvx

#endif  // HVX_COMMON_WATCHDOG_H_

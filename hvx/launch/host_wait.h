// Waiting for the other hosts of a job to come up before starting it. On SageMaker every instance
// runs the entry point as it comes up, minutes apart; a Kubeflow MPIJob's launcher pod may start
// before its workers' names resolve or their sshd listens. Without a wait the first ssh fails and
// the job with it.
//
//   HVX_RETURN_IF_ERROR(WaitForHosts({"algo-2"}, /*wait_s=*/1800, answers, /*err_fd=*/2));
#ifndef HVX_LAUNCH_HOST_WAIT_H_
#define HVX_LAUNCH_HOST_WAIT_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace hvx {
namespace launch {

// Whether `host` answers now (through the remote shell: RemoteCommand(options, host, "true")), and
// why not.
using HostAnswers = std::function<absl::Status(const std::string& host)>;

// Asks each of `hosts` (in rounds `interval` apart) until every one has answered once. The first
// round that leaves some unanswered writes one line to `err_fd` naming them, the bound and why
// (e.g. "Connection refused"); a host that answers later is reported when it does. After `wait_s`
// seconds: DeadlineExceeded naming the hosts that never answered, each with its last error.
absl::Status WaitForHosts(const std::vector<std::string>& hosts, double wait_s,
                          const HostAnswers& answers, int err_fd,
                          std::chrono::milliseconds interval = std::chrono::milliseconds(1000));

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_HOST_WAIT_H_

// Waiting for the other hosts of a job to come up before starting it. On SageMaker every instance
// runs the entry point as it comes up, minutes apart; a Kubeflow MPIJob's launcher pod may start
// before its workers' names resolve or their sshd listens, and before its own name is in the
// cluster's DNS. Without a wait the first ssh (or a proxy's connection back) fails and the job
// with it.
//
//   HVX_RETURN_IF_ERROR(WaitForHosts({"algo-2"}, /*wait_s=*/1800, answers, /*err_fd=*/2));
//   HVX_RETURN_IF_ERROR(WaitForHosts({HostName()}, 1800, InDns, 2, kResolveInDns));
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

// Whether `host` has an address (A or AAAA) in DNS now, asked of the servers in /etc/resolv.conf
// with its search domains, as another host of the cluster asks; /etc/hosts, where a Kubernetes
// pod always finds its own name, is not read. The error names the resolver's answer
// ("Unknown host" for NXDOMAIN).
absl::Status InDns(const std::string& host);

// What WaitForHosts waits for, as its messages say it: "hosts to <what>", "did not <what>".
inline constexpr char kAnswerRemoteShell[] = "answer the remote shell";
inline constexpr char kResolveInDns[] = "resolve in DNS";

// Asks each of `hosts` (in rounds `interval` apart) until every one has answered once. The first
// round that leaves some unanswered writes one line to `err_fd` naming them, the bound and why
// (e.g. "Connection refused"); a host that answers later is reported when it does. After `wait_s`
// seconds: DeadlineExceeded naming the hosts that never answered, each with its last error.
absl::Status WaitForHosts(const std::vector<std::string>& hosts, double wait_s,
                          const HostAnswers& answers, int err_fd,
                          const char* what = kAnswerRemoteShell,
                          std::chrono::milliseconds interval = std::chrono::milliseconds(1000));

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_HOST_WAIT_H_

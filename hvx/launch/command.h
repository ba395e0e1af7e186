// The mpiexec command line that starts a plan with MPICH's hydra.
//
//   std::vector<std::string> argv = MpiexecCommand(options, setup, "/path/to/hvxrun");
//   std::cout << ShellJoin(argv);   // what --dry-run prints
//
// Hydra is told everything explicitly, because its defaults change with the environment: the
// resource manager (`-rmk user`: the host list is ours, stray SLURM/PBS variables are ignored),
// the launcher (`-launcher ssh|slurm`, `-launcher-exec`), the hosts with the number of ranks each
// gets (so hydra's fill order reproduces the plan), and the output marker that lets hvxrun tag
// lines itself. The job's variables (JobEnvironment: hvxrun's and every -x) are not on the command
// line, where every local user reads them (`ps`, /proc/PID/cmdline): they go in mpiexec's own
// environment, which only its owner can read and which hydra hands to every rank on every host
// (its default, -genvall; hydra 4.0.2's `-genvlist` drops variables).
#ifndef HVX_LAUNCH_COMMAND_H_
#define HVX_LAUNCH_COMMAND_H_

#include <string>
#include <vector>

#include "hvx/launch/options.h"
#include "hvx/launch/rank_wrapper.h"

namespace hvx {
namespace launch {

// Variables set for every rank (besides the per-rank ones the wrapper sets), to be set in
// mpiexec's environment (Spawn's `env`): hvxrun's, the cluster's (JobSetup::env) and -x's, which
// win over the cluster's.
std::vector<std::pair<std::string, std::string>> JobEnvironment(const LaunchOptions& options,
                                                                const JobSetup& setup);

std::vector<std::string> MpiexecCommand(const LaunchOptions& options, const JobSetup& setup,
                                        const std::string& wrapper);

// argv that runs `command` on `host` through the remote shell, for hvxrun's own probes: the
// --launcher-exec program as given, or ssh in batch mode (a host asking for a password fails at
// once instead of waiting at a prompt nobody sees).
std::vector<std::string> RemoteCommand(const LaunchOptions& options, const std::string& host,
                                       const std::string& command);

// Quotes one word for a POSIX shell; control bytes are written as $'\001'.
std::string ShellQuote(const std::string& word);
std::string ShellJoin(const std::vector<std::string>& argv);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_COMMAND_H_

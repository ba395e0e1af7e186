// Binding each rank to CPUs of its own: the rank wrapper (rank_wrapper.h) splits the CPUs it may
// use among the host's ranks before it starts the program, as Open MPI's mpirun does by default.
// A rank's threads (training, hvx's engine, MPI's) then stay on its CPUs: a rank waiting for a
// peer, or its engine cycling, takes time from its own training thread only, not from another
// rank's, and the kernel does not move two ranks' training threads onto one CPU. Torch's and
// OpenMP's thread pools size themselves to the block.
//
//   std::vector<int> mine = CpuBlock(AllowedCpus(), local_rank, local_size);
//   if (!mine.empty()) BindToCpus(mine);
//
// hvxrun --bind-to none (HVX_BIND_TO=none in the wrapper's environment) leaves ranks unbound.
#ifndef HVX_LAUNCH_CPU_BINDING_H_
#define HVX_LAUNCH_CPU_BINDING_H_

#include <string>
#include <vector>

namespace hvx {
namespace launch {

// The wrapper's environment variable: "core" (the default) or "none".
inline constexpr char kBindToVariable[] = "HVX_BIND_TO";

// The CPUs of `allowed` (in its order) that the rank at local_rank of local_size gets: equal
// consecutive blocks, the first allowed.size() % local_size ranks one CPU more. Empty (no
// binding) when the host runs more ranks than there are CPUs, or local_rank is out of range.
std::vector<int> CpuBlock(const std::vector<int>& allowed, int local_rank, int local_size);

// The CPUs this process may run on (sched_getaffinity), ascending; empty if unknown.
std::vector<int> AllowedCpus();

// Restricts this process (threads created later inherit it) to `cpus`; false with errno set.
bool BindToCpus(const std::vector<int>& cpus);

// "0-3,8,10-11", as /proc/PID/status's Cpus_allowed_list writes it.
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_CPU_BINDING_H_

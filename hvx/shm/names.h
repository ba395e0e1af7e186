// The names of the CPU data plane's shared-memory regions: "/hvx.<tag>.<pid>.<n>" (files under
// /dev/shm).
//
//   const std::string name = RegionName(next++);        // this process's next region
//   RemoveRegionsTagged(tag);                           // the rank wrapper, after its program
//
// <tag> is HVX_SHM_TAG when hvxrun's rank wrapper set it (new random digits for every program it
// starts) and otherwise random digits drawn once per process. So two processes never share a name,
// even with equal pids in two pid namespaces over one /dev/shm, and the wrapper removes whatever
// regions its program left when it died before unlinking them (SIGKILL during the exchange).
// Plain C++ (no Abseil): the statically linked rank wrapper uses it.
#ifndef HVX_SHM_NAMES_H_
#define HVX_SHM_NAMES_H_

#include <cstdint>
#include <string>

namespace hvx {
namespace shm {

inline constexpr char kShmTagVariable[] = "HVX_SHM_TAG";

// A new tag: RandomHex() (hvx/common/random_hex.h).
std::string NewShmTag();

// This process's tag: HVX_SHM_TAG when it holds 1 to 32 lowercase letters and digits, else
// NewShmTag(), the same for the life of the process.
const std::string& ProcessShmTag();

// "/hvx.<ProcessShmTag()>.<getpid()>.<n>.<RandomHex()>": /dev/shm is listed by anyone, and a
// name another local user could foresee, they could create first and turn the plane off.
std::string RegionName(uint64_t n);

// Unlinks every region in /dev/shm whose name carries `tag`; returns how many it removed.
int RemoveRegionsTagged(const std::string& tag);

// Starts a watchdog process that removes `tag`'s regions once the caller has died and the process
// it then names with WatchProcess is gone, however they die: hydra's proxy SIGKILLs a rank
// wrapper's whole process group right after forwarding a stop signal, so the wrapper cannot be
// relied on to clean up after its program. The watchdog runs in a session of its own, holds no
// descriptor but its pipe (standard streams on /dev/null) and ends as soon as it has swept.
// Returns the pipe's write end (close-on-exec; the caller keeps it open until it exits), or -1
// when the watchdog could not be started.
int StartRegionSweeper(const std::string& tag);

// Tells the watchdog which process to outlive (the program the wrapper started).
void WatchProcess(int sweeper_fd, int pid);

}  // namespace shm
}  // namespace hvx

#endif  // HVX_SHM_NAMES_H_

// Random names for files that several processes, hosts or pid namespaces may create side by side
// (temporary files in a shared directory, shared-memory regions): digits from the kernel's
// generator, so that equal pids never mean equal names.
//
//   const std::string tmp = path + ".tmp." + hvx::RandomHex();  // "3f09c2..." (16 digits)
//
// Plain C++ (no Abseil): the statically linked rank wrapper uses it.
#ifndef HVX_COMMON_RANDOM_HEX_H_
#define HVX_COMMON_RANDOM_HEX_H_

#include <string>

namespace hvx {

// 16 lowercase hex digits from getrandom(2); where that fails (a kernel without it), from the pid
// and the clocks.
std::string RandomHex();

}  // namespace hvx

#endif  // HVX_COMMON_RANDOM_HEX_H_

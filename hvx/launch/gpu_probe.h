// How many GPUs each host has, for --slots-per-host auto.
#ifndef HVX_LAUNCH_GPU_PROBE_H_
#define HVX_LAUNCH_GPU_PROBE_H_

#include "hvx/common/env.h"
#include "hvx/launch/options.h"

namespace hvx {
namespace launch {

// The real probe for --slots-per-host auto: this host's GPUs from CUDA_VISIBLE_DEVICES or the
// driver; a remote host's through the remote shell (ssh or --launcher-exec).
HostProbe SystemHostProbe(const LaunchOptions& options, const Environment& env);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_GPU_PROBE_H_

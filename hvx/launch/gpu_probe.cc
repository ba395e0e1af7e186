#include "hvx/launch/gpu_probe.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hvx/common/cluster.h"
#include "hvx/common/files.h"
#include "hvx/common/status.h"
#include "hvx/launch/command.h"
#include "hvx/launch/subprocess.h"

namespace hvx {
namespace launch {

HostProbe SystemHostProbe(const LaunchOptions& options, const Environment& env) {
  HostProbe probe;
  const std::string self = HostName();
  probe.local_gpus = CountVisibleGpus(env);
  probe.is_local = [self](const std::string& host) {
    return host == "localhost" || host == "127.0.0.1" || host == self ||
           host == self.substr(0, self.find('.'));
  };
  const double timeout = options.start_timeout_s;
  probe.remote_gpus = [options, timeout](const std::string& host) -> absl::StatusOr<int> {
    HVX_ASSIGN_OR_RETURN(
        std::string out,
        RunCapture(RemoteCommand(options, host,
                                 "if [ -n \"${CUDA_VISIBLE_DEVICES+x}\" ]; then echo "
                                 "\"cvd=$CUDA_VISIBLE_DEVICES\"; fi; ls /proc/driver/nvidia/gpus "
                                 "2>/dev/null | wc -l"),
                   timeout));
    MapEnvironment remote;
    int dir_count = 0;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
      line = absl::StripAsciiWhitespace(line);
      if (absl::ConsumePrefix(&line, "cvd=")) {
        remote.Set("CUDA_VISIBLE_DEVICES", std::string(line));
      } else if (!absl::SimpleAtoi(line, &dir_count)) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected GPU probe output: ", out));
      }
    }
    return remote.Get("CUDA_VISIBLE_DEVICES") ? CountVisibleGpus(remote) : dir_count;
  };
  return probe;
}

}  // namespace launch
}  // namespace hvx

// The LibTorch version hvx is compiled against, for the few places where its C++ API changed
// between the versions hvx supports (Debian's 1.13 and PyPI's 2.x; tools/test builds both).
#ifndef HVX_TORCH_VERSION_H_
#define HVX_TORCH_VERSION_H_

#include <torch/version.h>

// True when the LibTorch being compiled against is major.minor or newer.
#define HVX_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#endif  // HVX_TORCH_VERSION_H_

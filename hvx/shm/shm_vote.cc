#include "hvx/shm/shm_vote.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "hvx/common/status.h"

namespace hvx {
namespace shm {

absl::Status ShmBitwiseAnd::And(std::vector<uint64_t>* bits, absl::string_view what) {
  if (!broken_.ok()) return broken_;
  const size_t n = bits->size();
  if (n > kMaxWords) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", n, " words where a shared-memory ",
                                                   "vote carries at most ", kMaxWords));
  }
  const size_t slot = static_cast<size_t>(votes_ % 2) * kMaxWords * sizeof(uint64_t);
  std::memcpy(group_->data(group_->rank()) + slot, bits->data(), n * sizeof(uint64_t));
  group_->Set(ShmGroup::kPublished, votes_ + 1);
  for (int peer = 0; peer < group_->size(); ++peer) {
    if (peer == group_->rank()) continue;
    absl::Status s =
        group_->WaitFor(peer, ShmGroup::kPublished, votes_ + 1, what, ShmGroup::Waiting::kBlock);
    if (!s.ok()) {
      group_->MarkFailed();
      broken_ = s;
      return s;
    }
    const uint64_t* theirs = reinterpret_cast<const uint64_t*>(group_->data(peer) + slot);
    for (size_t i = 0; i < n; ++i) (*bits)[i] &= theirs[i];
  }
  ++votes_;
  return absl::OkStatus();
}

}  // namespace shm
}  // namespace hvx

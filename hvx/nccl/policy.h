// Pure decisions of the GPU backend, kept free of CUDA and NCCL headers so they build and are
// tested without --config=cuda: which GPU a rank uses, when hierarchical allreduce applies (over
// the set's HostLayout, hvx/common/layout.h), how NCCL is asked to reduce, and the backend's knobs.
//
//   HostLayout layout = LayoutOf({"a", "a", "b", "b"});           // 2 hosts x 2 ranks
//   AllreducePlan plan = PlanAllreduce(/*hierarchical_requested=*/true, layout);  // kHierarchical
#ifndef HVX_NCCL_POLICY_H_
#define HVX_NCCL_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hvx/common/env.h"
#include "hvx/common/layout.h"
#include "hvx/common/types.h"
#include "hvx/core/api.h"

namespace hvx {
namespace nccl {

// The GPU backend's knobs, read by hvx::Init (InitOptions) and compared across ranks there.
struct NcclOptions {
  // HVX_HIERARCHICAL_ALLREDUCE: reduce-scatter inside each host with NCCL, allreduce across hosts
  // over the MPI control plane's transport, allgather inside each host. Applies only to process
  // sets spread over several hosts with the same number of members on each (see PlanAllreduce).
  bool hierarchical_allreduce = false;
  // HVX_NCCL_HALF_IN_FLOAT32: reduce float16/bfloat16 in float32 (cast on the device, reduce,
  // round back once), the precision the CPU plane gives, at twice the bytes on the wire.
  bool half_in_float32 = false;

  static NcclOptions From(const InitOptions& options);
};

// The GPU ordinal a rank uses: the one of its local rank. When the host shows a single GPU to a
// rank of several (each rank sees its own GPU through CUDA_VISIBLE_DEVICES, or all share one,
// which CheckDistinctGpus then catches), ordinal 0. Fails when no GPU is visible, or when the host
// runs more ranks than it shows GPUs; the message names the host and the counts.
absl::StatusOr<int> SelectDevice(int local_rank, int local_size, int visible_gpus,
                                 const std::string& host);

// What each member of a process set reports when the set's GPU plane is created.
struct MemberInfo {
  std::string host;  // gethostname()
  std::string
      gpu;  // PCI bus id of the GPU it uses ("0000:3b:00.0"); identifies it across processes
  int device = -1;    // CUDA ordinal in that process
  std::string error;  // why this member cannot take part (device selection failed); empty if fine
};
std::string EncodeMemberInfo(const MemberInfo& info);
absl::StatusOr<MemberInfo> DecodeMemberInfo(const std::string& text);

// Fails when a member reported an error, or when two members on one host use the same GPU. A
// member without a GPU and without an error (device < 0: a CPU-only host at Init) is skipped. Every
// member evaluates the same gathered list, so every member fails alike. Ranks in the message are
// global ranks (global_ranks[i] is member i).
absl::Status CheckMembers(const std::vector<MemberInfo>& members,
                          const std::vector<int>& global_ranks);

enum class AllreduceAlgorithm { kFlat, kHierarchical };
struct AllreducePlan {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kFlat;
  // Why, in a phrase for the log ("hierarchical: 2 hosts x 4 ranks").
  std::string reason;
};
// `layout` is the set's (by set rank; hvx/common/layout.h).
AllreducePlan PlanAllreduce(bool hierarchical_requested, const HostLayout& layout);

// Hierarchical allreduce reduce-scatters inside a host, which needs equal shards: the buffer is
// zero-padded to a multiple of local_size * align_elements.
struct HierarchicalShards {
  int64_t padded_elements = 0;
  int64_t shard_elements = 0;
};
HierarchicalShards ShardForHierarchical(int64_t elements, int local_size, int64_t align_elements);

// NCCL's reduction operators, named here so that this file needs no NCCL header.
enum class NcclOp { kSum, kProd, kMax, kMin, kAvg };

// How one reduction runs: the NCCL operator, which scale factors the backend still applies with its
// own kernels (1.0 = none), and whether 16-bit floats travel as float32.
struct ReductionChoice {
  NcclOp op = NcclOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  bool widen_to_float32 = false;
};

// The engine passes Average as Sum with postscale 1/size (Scale::value()). With prescale 1 and
// exactly that postscale, NCCL >= 2.10 averages itself (ncclAvg: exact integer division, no extra
// pass). bool reduces as uint8: Sum/Max are OR (max), Min/Product are AND (min), never scaled.
// Adasum and unknown dtypes are InvalidArgument. `allow_avg` is false where the reduction is split
// in steps (hierarchical), which must sum and scale at the end.
absl::StatusOr<ReductionChoice> ChooseReduction(ReduceOp op, DataType dtype, double prescale,
                                                double postscale, int set_size, int nccl_version,
                                                bool half_in_float32, bool allow_avg);

// NCCL >= 2.10 has ncclAvg and ncclBfloat16.
inline bool NcclHasAvg(int nccl_version) { return nccl_version >= 21000; }
inline bool NcclHasBfloat16(int nccl_version) { return nccl_version >= 21000; }

}  // namespace nccl
}  // namespace hvx

#endif  // HVX_NCCL_POLICY_H_

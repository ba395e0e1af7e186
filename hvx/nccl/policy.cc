#include "hvx/nccl/policy.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace hvx {
namespace nccl {

NcclOptions NcclOptions::From(const InitOptions& options) {
  NcclOptions o;
  o.hierarchical_allreduce = options.hierarchical_allreduce;
  o.half_in_float32 = options.nccl_half_in_float32;
  return o;
}

absl::StatusOr<int> SelectDevice(int local_rank, int local_size, int visible_gpus,
                                 const std::string& host) {
  if (local_rank < 0 || local_rank >= local_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local rank ", local_rank, " is outside the host's ", local_size, " ranks on ", host));
  }
  if (visible_gpus <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device is visible on host ", host, " (local rank ", local_rank,
        "); check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi), or keep tensors on the CPU"));
  }
  if (visible_gpus >= local_size) return local_rank;
  if (visible_gpus == 1) return 0;
  return absl::FailedPreconditionError(absl::StrCat(
      "host ", host, " runs ", local_size, " ranks but shows only ", visible_gpus,
      " GPUs to each; every rank needs a GPU of its own: start at most ", visible_gpus,
      " ranks on this host (hvxrun -H ", host, ":", visible_gpus, ") or make more GPUs visible"));
}

std::string EncodeMemberInfo(const MemberInfo& info) {
  return absl::StrCat(info.host, "\t", info.gpu, "\t", info.device, "\t", info.error);
}

absl::StatusOr<MemberInfo> DecodeMemberInfo(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('\t', 3));
  MemberInfo info;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[2], &info.device)) {
    return absl::DataLossError(absl::StrCat("malformed GPU member record '", text, "'"));
  }
  info.host = parts[0];
  info.gpu = parts[1];
  info.error = parts[3];
  return info;
}

absl::Status CheckMembers(const std::vector<MemberInfo>& members,
                          const std::vector<int>& global_ranks) {
  auto rank_of = [&](size_t i) {
    return i < global_ranks.size() ? global_ranks[i] : static_cast<int>(i);
  };
  for (size_t i = 0; i < members.size(); ++i) {
    if (!members[i].error.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_of(i), ": ", members[i].error));
    }
  }
  std::map<std::pair<std::string, std::string>, size_t> first_user;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].device < 0) continue;
    auto [it, inserted] = first_user.emplace(std::make_pair(members[i].host, members[i].gpu), i);
    if (!inserted) {
      const size_t j = it->second;
      return absl::FailedPreconditionError(
          absl::StrCat("ranks ", rank_of(j), " and ", rank_of(i), " on host ", members[i].host,
                       " would share the GPU at PCI ", members[i].gpu, " (cuda:", members[j].device,
                       " and cuda:", members[i].device,
                       " in their processes); each rank needs its own GPU: fewer ranks per host, "
                       "or one GPU per rank in "
                       "CUDA_VISIBLE_DEVICES"));
    }
  }
  return absl::OkStatus();
}

AllreducePlan PlanAllreduce(bool hierarchical_requested, const HostLayout& layout) {
  AllreducePlan plan;
  if (!hierarchical_requested) {
    plan.reason = "flat (HVX_HIERARCHICAL_ALLREDUCE is off)";
  } else if (layout.hosts() < 2) {
    plan.reason = "flat: hierarchical allreduce needs several hosts, the set has one";
  } else if (!layout.Homogeneous()) {
    plan.reason = absl::StrCat(
        "flat: hierarchical allreduce needs the same number of ranks on every host, the set has ",
        absl::StrJoin(layout.per_host, "/"), " over ", layout.hosts(), " hosts");
  } else {
    plan.algorithm = AllreduceAlgorithm::kHierarchical;
    plan.reason = absl::StrCat("hierarchical: ", layout.hosts(), " hosts x ",
                               layout.per_host.front(), " ranks");
  }
  return plan;
}

HierarchicalShards ShardForHierarchical(int64_t elements, int local_size, int64_t align_elements) {
  HierarchicalShards s;
  const int64_t unit = static_cast<int64_t>(local_size) * std::max<int64_t>(1, align_elements);
  s.padded_elements = (elements + unit - 1) / unit * unit;
  s.shard_elements = s.padded_elements / local_size;
  return s;
}

absl::StatusOr<ReductionChoice> ChooseReduction(ReduceOp op, DataType dtype, double prescale,
                                                double postscale, int set_size, int nccl_version,
                                                bool half_in_float32, bool allow_avg) {
  if (dtype == DataType::kInt16) {
    return absl::InvalidArgumentError(
        "NCCL has no int16 type: int16 GPU tensors cannot be reduced (cast them to int32, or "
        "reduce them on the CPU)");
  }
  ReductionChoice c;
  c.prescale = prescale;
  c.postscale = postscale;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      c.op = NcclOp::kSum;
      break;
    case ReduceOp::kMin:
      c.op = NcclOp::kMin;
      break;
    case ReduceOp::kMax:
      c.op = NcclOp::kMax;
      break;
    case ReduceOp::kProduct:
      c.op = NcclOp::kProd;
      break;
    case ReduceOp::kAdasum:
      return absl::InvalidArgumentError(
          "Adasum is not available for GPU tensors; reduce on the CPU or use Sum/Average");
  }
  if (op == ReduceOp::kAverage) c.postscale = postscale / set_size;
  if (dtype == DataType::kBool) {
    c.op = (c.op == NcclOp::kMin || c.op == NcclOp::kProd) ? NcclOp::kMin : NcclOp::kMax;
    c.prescale = 1.0;
    c.postscale = 1.0;
    return c;
  }
  if (dtype == DataType::kFloat16 || dtype == DataType::kBfloat16) {
    c.widen_to_float32 =
        half_in_float32 || (dtype == DataType::kBfloat16 && !NcclHasBfloat16(nccl_version));
  }
  if (allow_avg && c.op == NcclOp::kSum && c.prescale == 1.0 && set_size > 0 &&
      c.postscale == 1.0 / set_size && set_size > 1 && NcclHasAvg(nccl_version)) {
    c.op = NcclOp::kAvg;
    c.postscale = 1.0;
  }
  return c;
}

}  // namespace nccl
}  // namespace hvx

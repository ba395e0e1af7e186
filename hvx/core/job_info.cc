#include "hvx/core/job_info.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/common/json.h"
#include "hvx/core/api.h"

namespace hvx {
namespace {

// Each check returns "" on success or what went wrong.
std::string CheckAllreduce() {
  std::vector<double> x(1000, Rank() + 1.0);
  TensorRef t(DataType::kFloat64, {1000}, x.data());
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  absl::Status s = Wait(Allreduce("hvx_info.allreduce", t, t, o));
  if (!s.ok()) return absl::StrCat("allreduce: ", s.message());
  const double n = Size();
  for (double v : x) {
    if (v != n * (n + 1) / 2) return absl::StrCat("allreduce: got ", v, ", want ", n * (n + 1) / 2);
  }
  return "";
}

std::string CheckAllgather() {
  std::vector<int32_t> x(2, Rank());
  Handle h = Allgather("hvx_info.allgather", TensorRef(DataType::kInt32, {2}, x.data()));
  absl::Status s = Wait(h);
  if (!s.ok()) return absl::StrCat("allgather: ", s.message());
  const int32_t* out = h.output().data_as<int32_t>();
  for (int i = 0; i < 2 * Size(); ++i) {
    if (out[i] != i / 2)
      return absl::StrCat("allgather: element ", i, " is ", out[i], ", want ", i / 2);
  }
  return "";
}

std::string CheckBroadcast() {
  std::vector<int64_t> x(16, Rank() == 0 ? 42 : -1);
  absl::Status s =
      Wait(Broadcast("hvx_info.broadcast", TensorRef(DataType::kInt64, {16}, x.data()), 0));
  if (!s.ok()) return absl::StrCat("broadcast: ", s.message());
  for (int64_t v : x) {
    if (v != 42) return absl::StrCat("broadcast: got ", v, ", want 42");
  }
  return "";
}

}  // namespace

JobInfo DescribeJob(bool check) {
  JobInfo info;
  info.json = absl::StrCat(
      "{\"rank\":", Rank(), ",\"size\":", Size(), ",\"local_rank\":", LocalRank(),
      ",\"local_size\":", LocalSize(), ",\"cross_rank\":", CrossRank(),
      ",\"cross_size\":", CrossSize(), ",\"homogeneous\":", IsHomogeneous() ? "true" : "false",
      ",\"host\":", JsonQuote(Host()), ",\"pid\":", getpid(), ",\"visible_gpus\":",
      CountVisibleGpus(Environment::Process(), InitOptions().nvidia_gpus_dir));
  if (check) {
    std::vector<std::string> errors;
    for (auto* fn : {&CheckAllreduce, &CheckAllgather, &CheckBroadcast}) {
      std::string e = fn();
      if (!e.empty()) errors.push_back(JsonQuote(e));
    }
    absl::StrAppend(&info.json, ",\"check\":\"", errors.empty() ? "pass" : "fail", "\"");
    if (!errors.empty())
      absl::StrAppend(&info.json, ",\"errors\":[", absl::StrJoin(errors, ","), "]");
    info.check_failed = !errors.empty();
  }
  info.json += "}";
  return info;
}

}  // namespace hvx

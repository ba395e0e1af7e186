// hvx_info: prints where this rank sits in the job as one JSON line, and with --check proves that
// allreduce, allgather and broadcast work across all ranks.
//
//   hvxrun -np 4 -H a:2,b:2 -- hvx_info --check
//   {"rank":0,"size":4,"local_rank":0,"local_size":2,"cross_rank":0,"cross_size":2,
//    "homogeneous":true,"host":"a","pid":4242,"visible_gpus":0,"check":"pass"}
//
// Keys are documented in hvx/core/README.md. Exit status: 0, or 1 when Init or a check fails.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/cluster.h"
#include "hvx/common/env.h"
#include "hvx/core/api.h"

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out + "\"";
}

// Each check returns "" on success or what went wrong.
std::string CheckAllreduce() {
  std::vector<double> x(1000, hvx::Rank() + 1.0);
  hvx::TensorRef t(hvx::DataType::kFloat64, {1000}, x.data());
  hvx::AllreduceOptions o;
  o.op = hvx::ReduceOp::kSum;
  absl::Status s = hvx::Wait(hvx::Allreduce("hvx_info.allreduce", t, t, o));
  if (!s.ok()) return absl::StrCat("allreduce: ", s.message());
  const double n = hvx::Size();
  for (double v : x) {
    if (v != n * (n + 1) / 2) return absl::StrCat("allreduce: got ", v, ", want ", n * (n + 1) / 2);
  }
  return "";
}

std::string CheckAllgather() {
  std::vector<int32_t> x(2, hvx::Rank());
  hvx::Handle h = hvx::Allgather("hvx_info.allgather", hvx::TensorRef(hvx::DataType::kInt32, {2}, x.data()));
  absl::Status s = hvx::Wait(h);
  if (!s.ok()) return absl::StrCat("allgather: ", s.message());
  const int32_t* out = h.output().data_as<int32_t>();
  for (int i = 0; i < 2 * hvx::Size(); ++i) {
    if (out[i] != i / 2) return absl::StrCat("allgather: element ", i, " is ", out[i], ", want ", i / 2);
  }
  return "";
}

std::string CheckBroadcast() {
  std::vector<int64_t> x(16, hvx::Rank() == 0 ? 42 : -1);
  absl::Status s = hvx::Wait(hvx::Broadcast("hvx_info.broadcast", hvx::TensorRef(hvx::DataType::kInt64, {16}, x.data()), 0));
  if (!s.ok()) return absl::StrCat("broadcast: ", s.message());
  for (int64_t v : x) {
    if (v != 42) return absl::StrCat("broadcast: got ", v, ", want 42");
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else {
      std::fprintf(stderr, "usage: hvx_info [--check]\n");
      return 2;
    }
  }
  absl::Status s = hvx::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "hvx_info: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const std::string host = hvx::HostName();
  std::string line = absl::StrCat(
      "{\"rank\":", hvx::Rank(), ",\"size\":", hvx::Size(), ",\"local_rank\":", hvx::LocalRank(),
      ",\"local_size\":", hvx::LocalSize(), ",\"cross_rank\":", hvx::CrossRank(), ",\"cross_size\":", hvx::CrossSize(),
      ",\"homogeneous\":", hvx::IsHomogeneous() ? "true" : "false", ",\"host\":", JsonString(host),
      ",\"pid\":", getpid(), ",\"visible_gpus\":",
      hvx::CountVisibleGpus(hvx::Environment::Process(), hvx::InitOptions().nvidia_gpus_dir));
  int status = 0;
  if (check) {
    std::vector<std::string> errors;
    for (auto* fn : {&CheckAllreduce, &CheckAllgather, &CheckBroadcast}) {
      std::string e = fn();
      if (!e.empty()) errors.push_back(JsonString(e));
    }
    absl::StrAppend(&line, ",\"check\":\"", errors.empty() ? "pass" : "fail", "\"");
    if (!errors.empty()) {
      absl::StrAppend(&line, ",\"errors\":[", absl::StrJoin(errors, ","), "]");
      status = 1;
    }
  }
  line += "}\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  s = hvx::Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "hvx_info: %s\n", std::string(s.message()).c_str());
    status = 1;
  }
  return status;
}

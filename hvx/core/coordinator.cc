#include "hvx/core/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/logging.h"

namespace hvx {
namespace {

bool Fusible(const Response& a, const Response& b) {
  return a.type == OpType::kAllreduce && b.type == OpType::kAllreduce && a.dtype == b.dtype &&
         a.device_type == b.device_type && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale;
}

std::vector<int64_t> Tail(const std::vector<int64_t>& shape) {
  return std::vector<int64_t>(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
}

}  // namespace

std::vector<Response> FuseResponses(std::vector<Response> responses, int64_t threshold_bytes) {
  if (threshold_bytes <= 0) return responses;
  std::vector<Response> out;
  // Open fused allreduces that may still take tensors: index into out.
  std::vector<size_t> open;
  for (Response& r : responses) {
    bool merged = false;
    if (r.type == OpType::kAllreduce) {
      const int64_t bytes = r.TotalBytes();
      for (size_t i : open) {
        Response& f = out[i];
        if (Fusible(f, r) && f.TotalBytes() + bytes <= threshold_bytes) {
          f.names.insert(f.names.end(), r.names.begin(), r.names.end());
          f.shapes.insert(f.shapes.end(), r.shapes.begin(), r.shapes.end());
          merged = true;
          break;
        }
      }
      if (!merged) open.push_back(out.size());
    }
    if (!merged) out.push_back(std::move(r));
  }
  return out;
}

Coordinator::Coordinator(int size, CoordinatorOptions options)
    : size_(size), options_(std::move(options)), device_of_rank_(size) {}

std::string Coordinator::Who(int set_rank) const {
  if (set_rank < static_cast<int>(options_.global_ranks.size()) &&
      options_.global_ranks[set_rank] != set_rank) {
    return absl::StrCat("rank ", options_.global_ranks[set_rank], " (set rank ", set_rank, ")");
  }
  return absl::StrCat("rank ", set_rank);
}

std::string Coordinator::WhoOnHost(int set_rank) const {
  if (set_rank >= static_cast<int>(options_.hosts.size())) return Who(set_rank);
  return absl::StrCat(Who(set_rank), " (host ", options_.hosts[set_rank], ")");
}

void Coordinator::Add(int rank, const RequestList& list, absl::Time now) {
  if (list.shutdown) shutdown_ = true;
  for (const Request& req : list.requests) {
    const absl::Time submitted = now - absl::Seconds(std::max(0.0, req.waited_s));
    if (req.type == OpType::kJoin) {
      if (joined_.empty()) join_progress_ = submitted;
      if (joined_.insert(rank).second)
        last_joined_ = options_.global_ranks.empty() ? rank : options_.global_ranks[rank];
      continue;
    }
    auto [it, inserted] = table_.try_emplace(req.name);
    Pending& p = it->second;
    if (inserted) {
      p.by_rank.resize(size_);
      p.first_seen = submitted;
      p.arrival = next_arrival_++;
      if (options_.observer) options_.observer->NegotiationStart(req.name, req.type);
    }
    p.first_seen = std::min(p.first_seen, submitted);
    if (options_.observer) options_.observer->RankReady(req.name, rank);
    if (!req.device.is_cpu()) device_of_rank_[rank].emplace(req.device.type, req.device);
    p.by_rank[rank] = req;
  }
}

bool Coordinator::IsReady(const Pending& p) const {
  for (int r = 0; r < size_; ++r) {
    if (!p.by_rank[r].has_value() && joined_.count(r) == 0) return false;
  }
  return true;
}

bool Coordinator::FailsForJoin(const Pending& p) const {
  if (joined_.empty()) return false;
  for (const std::optional<Request>& req : p.by_rank) {
    if (req.has_value()) return req->type != OpType::kAllreduce;
  }
  return false;
}

Response Coordinator::ErrorResponse(const std::string& name, std::string message,
                                    absl::StatusCode code) const {
  Response r;
  r.type = OpType::kError;
  r.names = {name};
  r.error = std::move(message);
  r.error_code = static_cast<uint8_t>(code);
  return r;
}

// Validate's parts each return what is wrong, "" when nothing is; Validate names the tensor.

std::string Coordinator::DeviceProblem(const Pending& p) const {
  for (int r = 0; r < size_; ++r) {
    if (!p.by_rank[r].has_value() || p.by_rank[r]->device.is_cpu()) continue;
    const Device& d = p.by_rank[r]->device;
    const Device& own = device_of_rank_[r].at(d.type);
    if (d != own) {
      return absl::StrCat(WhoOnHost(r), " put it on ", d.ToString(), " but its earlier tensors on ",
                          own.ToString(),
                          "; each rank keeps all its GPU tensors on one device, its own");
    }
  }
  return "";
}

std::string Coordinator::Mismatch(int first, const Request& a, int r, const Request& b) const {
  if (b.type != a.type) {
    return absl::StrCat("mismatched operations: ", Who(first), " did ", OpTypeName(a.type), ", ",
                        Who(r), " did ", OpTypeName(b.type));
  }
  if (b.dtype != a.dtype) {
    return absl::StrCat("mismatched data types: ", Who(first), " sent ", DataTypeName(a.dtype),
                        ", ", Who(r), " sent ", DataTypeName(b.dtype));
  }
  if (b.device.type != a.device.type) {
    return absl::StrCat("mismatched devices: ", WhoOnHost(first), " used ", a.device.ToString(),
                        ", ", WhoOnHost(r), " used ", b.device.ToString());
  }
  switch (a.type) {
    case OpType::kAllreduce:
    case OpType::kReduceScatter:
    case OpType::kBroadcast:
      if (b.shape != a.shape) {
        return absl::StrCat("mismatched ", OpTypeName(a.type), " shapes: ", Who(first), " sent ",
                            ShapeString(a.shape), ", ", Who(r), " sent ", ShapeString(b.shape));
      }
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall:
      if (b.shape.size() != a.shape.size() || Tail(b.shape) != Tail(a.shape)) {
        return absl::StrCat("mismatched ", OpTypeName(a.type), " shapes: ", Who(first), " sent ",
                            ShapeString(a.shape), ", ", Who(r), " sent ", ShapeString(b.shape),
                            " (all dimensions but the first must agree)");
      }
      break;
    default:
      break;
  }
  if (a.type == OpType::kAllreduce || a.type == OpType::kReduceScatter) {
    if (b.reduce_op != a.reduce_op) {
      return absl::StrCat("mismatched reduction operations: ", Who(first), " used ",
                          ReduceOpName(a.reduce_op), ", ", Who(r), " used ",
                          ReduceOpName(b.reduce_op));
    }
    if (b.prescale != a.prescale || b.postscale != a.postscale) {
      return absl::StrCat("mismatched prescale/postscale factors: ", Who(first), " used ",
                          a.prescale, "/", a.postscale, ", ", Who(r), " used ", b.prescale, "/",
                          b.postscale);
    }
  }
  if (a.type == OpType::kBroadcast && b.root != a.root) {
    return absl::StrCat("mismatched BROADCAST root ranks: ", Who(first), " named root ", a.root,
                        ", ", Who(r), " named root ", b.root);
  }
  return "";
}

std::string Coordinator::JoinProblem(const Request& a) const {
  if (joined_.empty() || a.type == OpType::kAllreduce) return "";
  std::vector<int> who;
  for (int r : joined_) who.push_back(options_.global_ranks.empty() ? r : options_.global_ranks[r]);
  return absl::StrCat(OpTypeName(a.type), " is not supported while ranks have joined (joined: ",
                      absl::StrJoin(who, ", "), ")");
}

std::string Coordinator::AlltoallRows(const Pending& p, std::vector<int64_t>* rows) const {
  rows->assign(static_cast<size_t>(size_) * size_, 0);
  for (int r = 0; r < size_; ++r) {
    const Request& q = *p.by_rank[r];
    const int64_t dim0 = q.shape[0];
    if (q.splits.empty()) {
      if (dim0 % size_ != 0) {
        return absl::StrCat(Who(r), " asked for an equal ALLTOALL split of ", dim0,
                            " rows, which does not divide by the set size ", size_);
      }
      for (int j = 0; j < size_; ++j) (*rows)[r * size_ + j] = dim0 / size_;
      continue;
    }
    if (static_cast<int>(q.splits.size()) != size_) {
      return absl::StrCat(Who(r), " gave ", q.splits.size(), " ALLTOALL splits for a set of ",
                          size_, " ranks");
    }
    int64_t sum = 0;
    for (int64_t s : q.splits) {
      if (s < 0) return absl::StrCat(Who(r), " gave a negative ALLTOALL split ", s);
      sum += s;
    }
    if (sum != dim0) {
      return absl::StrCat(Who(r), "'s ALLTOALL splits sum to ", sum, " but its first dimension is ",
                          dim0);
    }
    for (int j = 0; j < size_; ++j) (*rows)[r * size_ + j] = q.splits[j];
  }
  return "";
}

std::string Coordinator::OpProblem(const Pending& p, const Request& a, Response* resp) const {
  switch (a.type) {
    case OpType::kAllreduce:
      if (a.reduce_op != ReduceOp::kAdasum) return "";
      if ((size_ & (size_ - 1)) != 0) {
        return absl::StrCat("Adasum needs a power-of-two number of ranks; this process set has ",
                            size_);
      }
      if (!IsFloatingPoint(a.dtype)) {
        return absl::StrCat("Adasum needs a floating-point tensor, got ", DataTypeName(a.dtype));
      }
      return "";
    case OpType::kReduceScatter:
      if (a.shape.empty())
        return "REDUCESCATTER of a rank-0 (scalar) tensor; give it a first dimension";
      if (a.reduce_op != ReduceOp::kSum && a.reduce_op != ReduceOp::kAverage) {
        return absl::StrCat("REDUCESCATTER supports sum and average, not ",
                            ReduceOpName(a.reduce_op));
      }
      return "";
    case OpType::kBroadcast:
      if (a.root < 0 || a.root >= size_) {
        return absl::StrCat("BROADCAST root rank ", a.root, " is outside the process set of size ",
                            size_);
      }
      return "";
    case OpType::kAllgather:
      if (a.shape.empty())
        return "ALLGATHER of a rank-0 (scalar) tensor; give it a first dimension";
      for (int r = 0; r < size_; ++r) resp->rows.push_back(p.by_rank[r]->shape[0]);
      return "";
    case OpType::kAlltoall:
      if (a.shape.empty()) return "ALLTOALL of a rank-0 (scalar) tensor; give it a first dimension";
      return AlltoallRows(p, &resp->rows);
    case OpType::kAddProcessSet:
      resp->rows = a.splits;
      return "";
    default:
      return "";
  }
}

Response Coordinator::Validate(const std::string& name, const Pending& p) const {
  int first = 0;
  while (!p.by_rank[first].has_value()) ++first;
  const Request& a = *p.by_rank[first];
  std::string problem = DeviceProblem(p);
  for (int r = first + 1; problem.empty() && r < size_; ++r) {
    if (p.by_rank[r].has_value()) problem = Mismatch(first, a, r, *p.by_rank[r]);
  }
  if (problem.empty()) problem = JoinProblem(a);
  Response resp;
  if (problem.empty()) problem = OpProblem(p, a, &resp);
  if (!problem.empty()) return ErrorResponse(name, absl::StrCat("tensor '", name, "': ", problem));
  resp.type = a.type;
  resp.names = {name};
  resp.dtype = a.dtype;
  resp.device_type = a.device.type;
  resp.reduce_op = a.reduce_op;
  resp.prescale = a.prescale;
  resp.postscale = a.postscale;
  resp.root = a.root;
  resp.shapes = {a.shape};
  return resp;
}

std::string Coordinator::StallReport(absl::Time now, absl::Duration older_than) const {
  std::map<int, std::vector<std::string>> missing;
  for (const auto& [name, p] : table_) {
    if (now - p.first_seen < older_than) continue;
    for (int r = 0; r < size_; ++r) {
      if (!p.by_rank[r].has_value() && joined_.count(r) == 0) missing[r].push_back(name);
    }
  }
  if (missing.empty()) return "";
  std::string out = "Missing ranks:\n";
  for (const auto& [r, names] : missing) {
    const int global = options_.global_ranks.empty() ? r : options_.global_ranks[r];
    absl::StrAppend(&out, "  ", global, ": [", absl::StrJoin(names, ", "), "]\n");
  }
  return out;
}

void Coordinator::MaybeWarnStall(absl::Time now, std::vector<Response>* errors) {
  if (options_.stall_check_time_s <= 0) return;
  const absl::Duration check = absl::Seconds(options_.stall_check_time_s);
  if (now - last_stall_warning_ >= check) {
    std::string report = StallReport(now, check);
    if (!report.empty()) {
      last_stall_warning_ = now;
      HVX_LOG(WARNING)
          << "Some tensors were submitted by only some ranks and have waited more than "
          << options_.stall_check_time_s
          << " s for the others. Different ranks may be submitting different tensors (names, "
             "conditional collectives) or some ranks stopped submitting; this job will hang "
             "unless they catch up. "
          << report;
    }
  }
  if (options_.stall_shutdown_time_s <= options_.stall_check_time_s) return;
  const absl::Duration limit = absl::Seconds(options_.stall_shutdown_time_s);
  std::string report = StallReport(now, limit);
  if (report.empty()) return;
  std::vector<std::string> stalled;
  for (const auto& [name, p] : table_) {
    if (now - p.first_seen >= limit) stalled.push_back(name);
  }
  for (const std::string& name : stalled) {
    errors->push_back(ErrorResponse(
        name,
        absl::StrCat("tensor '", name, "' stalled for more than ", options_.stall_shutdown_time_s,
                     " s (HVX_STALL_SHUTDOWN_TIME_S) waiting for other ranks. ", report),
        absl::StatusCode::kDeadlineExceeded));
    table_.erase(name);
  }
  HVX_LOG(ERROR) << "Failing " << stalled.size() << " stalled tensor(s) after "
                 << options_.stall_shutdown_time_s << " s. " << report;
}

bool Coordinator::JoinTimedOut(absl::Time now) const {
  return options_.collective_timeout_s > 0 && !joined_.empty() &&
         static_cast<int>(joined_.size()) < size_ &&
         now - join_progress_ >= absl::Seconds(options_.collective_timeout_s);
}

bool Coordinator::CheckDue(absl::Time now) const {
  if (JoinTimedOut(now)) return true;
  if (table_.empty()) return false;
  absl::Time oldest = absl::InfiniteFuture();
  for (const auto& [name, p] : table_) oldest = std::min(oldest, p.first_seen);
  const absl::Duration waited = now - oldest;
  const auto due = [&](double seconds) { return seconds > 0 && waited >= absl::Seconds(seconds); };
  return (due(options_.stall_check_time_s) &&
          now - last_stall_warning_ >= absl::Seconds(options_.stall_check_time_s)) ||
         due(options_.stall_shutdown_time_s) || due(options_.collective_timeout_s);
}

void Coordinator::FailTimedOut(absl::Time now, std::vector<Response>* errors) {
  if (options_.collective_timeout_s <= 0) return;
  if (JoinTimedOut(now)) {
    std::vector<std::string> joined, missing;
    for (int r = 0; r < size_; ++r) {
      if (joined_.count(r) != 0) {
        joined.push_back(Who(r));
      } else {
        missing.push_back(WhoOnHost(r));
      }
    }
    std::string message = absl::StrCat(
        "JOIN timed out after ", options_.collective_timeout_s,
        " s (HVX_COLLECTIVE_TIMEOUT_S): ", absl::StrJoin(missing, ", "),
        " neither joined nor ran a collective in that time (joined: ", absl::StrJoin(joined, ", "),
        "). A rank with no more data joins; one that is still training runs its allreduces, and "
        "each completed one restarts this timeout.");
    HVX_LOG(ERROR) << message;
    errors->push_back(
        ErrorResponse("join", std::move(message), absl::StatusCode::kDeadlineExceeded));
    joined_.clear();
  }
  const absl::Duration limit = absl::Seconds(options_.collective_timeout_s);
  std::vector<std::string> timed_out;
  for (const auto& [name, p] : table_) {
    if (now - p.first_seen >= limit && !IsReady(p)) timed_out.push_back(name);
  }
  for (const std::string& name : timed_out) {
    const Pending& p = table_.at(name);
    std::vector<std::string> came, missing;
    OpType type = OpType::kAllreduce;
    for (int r = 0; r < size_; ++r) {
      if (p.by_rank[r].has_value()) {
        type = p.by_rank[r]->type;
        came.push_back(Who(r));
      } else if (joined_.count(r) == 0) {
        missing.push_back(WhoOnHost(r));
      }
    }
    std::string message = absl::StrCat(
        OpTypeName(type), " '", name, "' timed out after ", options_.collective_timeout_s,
        " s (HVX_COLLECTIVE_TIMEOUT_S): ", absl::StrJoin(missing, ", "),
        " did not submit it (submitted by ", absl::StrJoin(came, ", "),
        "). Every rank must run the same collectives: a rank that skipped this one, failed "
        "before it or runs different names leaves the others waiting.");
    HVX_LOG(ERROR) << message;
    errors->push_back(ErrorResponse(name, std::move(message), absl::StatusCode::kDeadlineExceeded));
    table_.erase(name);
  }
}

ResponseList Coordinator::Build(absl::Time now) {
  std::vector<std::pair<int64_t, std::string>> ready;
  for (const auto& [name, p] : table_) {
    if (IsReady(p) || FailsForJoin(p)) ready.emplace_back(p.arrival, name);
  }
  std::sort(ready.begin(), ready.end());
  std::vector<Response> responses;
  for (const auto& [arrival, name] : ready) {
    responses.push_back(Validate(name, table_[name]));
    // The joined ranks take part in every allreduce: while they run, the join is not stalled.
    if (responses.back().type != OpType::kError) join_progress_ = now;
    if (options_.observer) options_.observer->NegotiationEnd(name);
    table_.erase(name);
  }
  MaybeWarnStall(now, &responses);
  FailTimedOut(now, &responses);
  ResponseList out;
  out.responses = FuseResponses(std::move(responses), options_.fusion_threshold_bytes);
  if (static_cast<int>(joined_.size()) == size_ && size_ > 0) {
    Response join;
    join.type = OpType::kJoin;
    join.names = {"join"};
    join.last_joined_rank = last_joined_;
    out.responses.push_back(std::move(join));
    joined_.clear();
  }
  out.shutdown = shutdown_;
  return out;
}

}  // namespace hvx

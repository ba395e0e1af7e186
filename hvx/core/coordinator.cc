#include "hvx/core/coordinator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/core/fusion.h"
#include "hvx/core/validation.h"

namespace hvx {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

uint64_t Mix(uint64_t h, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return Mix(h, bits);
}

// A name's submissions are compared in turn up to this many, then found through Pending::by_key
// (allgathers and alltoalls whose every rank sends its own sizes).
constexpr int32_t kSubmissionsScanned = 8;

// Where a Pending looks a request up: its id, or (high bit set, so never an id) a hash of what
// SameRequest compares but the name, which a Pending's requests share.
uint64_t SubmissionKey(const Request& r) {
  if (r.id != 0) return r.id;
  uint64_t h = static_cast<uint64_t>(r.type);
  h = Mix(h, static_cast<uint64_t>(r.dtype));
  h = Mix(h, static_cast<uint64_t>(r.device.type));
  h = Mix(h, static_cast<uint64_t>(r.device.is_cpu() ? 0 : r.device.index));
  h = Mix(h, static_cast<uint64_t>(r.root));
  h = Mix(h, static_cast<uint64_t>(r.reduce_op));
  h = Mix(h, r.prescale);
  h = Mix(h, r.postscale);
  for (int64_t d : r.shape) h = Mix(h, static_cast<uint64_t>(d));
  h = Mix(h, uint64_t{0x5b});  // between shape and splits
  for (int64_t d : r.splits) h = Mix(h, static_cast<uint64_t>(d));
  return h | (uint64_t{1} << 63);
}

}  // namespace

Coordinator::Coordinator(int size, CoordinatorOptions options)
    : size_(size),
      options_(std::move(options)),
      names_{options_.global_ranks, options_.hosts},
      next_id_(options_.first_tensor_id),
      joined_bits_((size + 63) / 64, 0),
      device_of_rank_(size) {}

absl::Status Coordinator::Add(int rank, const RequestList& list, absl::Time now) {
  if (list.shutdown) shutdown_ = true;
  const std::vector<int32_t> members = {rank};
  const std::vector<uint64_t> mask = {1};
  for (const Request& req : list.requests) {
    if (req.id == 0 && req.type == OpType::kJoin) {
      AddJoin(rank, now - absl::Seconds(std::max(0.0, req.waited_s)));
      continue;
    }
    HVX_RETURN_IF_ERROR(AddRequest(req, members, mask, /*from_host=*/false, now));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::Add(const HostRequestList& host, absl::Time now) {
  HVX_RETURN_IF_ERROR(AddHostHeader(host));
  for (const HostRequestList::Entry& e : host.entries) {
    HVX_RETURN_IF_ERROR(AddHostEntry(host, e.request, e.mask, now));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::AddEncodedHostList(absl::string_view bytes, size_t host, absl::Time now) {
  // The coordinator's own errors and the list's are passed on as they are; the bytes' corruption
  // is named with the host.
  absl::Status refused;
  const absl::Status read = VisitHostRequestList(
      bytes,
      [&](const HostRequestList& list) {
        refused = list.error.empty() ? AddHostHeader(list) : absl::DataLossError(list.error);
        return refused;
      },
      [&](const HostRequestList& list, const Request& request, const std::vector<uint64_t>& mask) {
        refused = AddHostEntry(list, request, mask, now);
        return refused;
      });
  if (!refused.ok() || read.ok()) return refused;
  return Annotate(read, absl::StrCat("the merged list of host ", host));
}

absl::Status Coordinator::AddHostHeader(const HostRequestList& host) {
  for (int32_t r : host.ranks) {
    if (r < 0 || r >= size_) {
      return absl::DataLossError(absl::StrCat("a host's request list names set rank ", r,
                                              ", outside the process set of size ", size_));
    }
  }
  for (uint64_t word : host.shutdown) {
    if (word != 0) shutdown_ = true;
  }
  ++host_lists_added_;
  return absl::OkStatus();
}

absl::Status Coordinator::AddHostEntry(const HostRequestList& host, const Request& request,
                                       const std::vector<uint64_t>& mask, absl::Time now) {
  if (mask.size() != (host.ranks.size() + 63) / 64) {
    return absl::DataLossError(
        "a host's request list has an entry whose rank mask does not fit "
        "the host's members");
  }
  if (request.id == 0 && request.type == OpType::kJoin) {
    for (size_t i = 0; i < host.ranks.size(); ++i) {
      if (MaskBit(mask, i)) {
        AddJoin(host.ranks[i], now - absl::Seconds(std::max(0.0, request.waited_s)));
      }
    }
    return absl::OkStatus();
  }
  return AddRequest(request, host.ranks, mask, /*from_host=*/true, now);
}

void Coordinator::ClearJoined() {
  joined_.clear();
  std::fill(joined_bits_.begin(), joined_bits_.end(), 0);
}

void Coordinator::AddJoin(int rank, absl::Time submitted) {
  if (joined_.empty()) join_progress_ = submitted;
  if (joined_.insert(rank).second) {
    last_joined_ = options_.global_ranks.empty() ? rank : options_.global_ranks[rank];
    SetMaskBit(&joined_bits_, rank);
  }
}

absl::Status Coordinator::AddRequest(const Request& request, const std::vector<int32_t>& members,
                                     const std::vector<uint64_t>& mask, bool from_host,
                                     absl::Time now) {
  const Request* content = &request;
  if (request.id != 0) {
    auto known = ids_.find(request.id);
    if (known == ids_.end()) {
      const int sender = members.empty() ? -1 : members[0];
      return absl::DataLossError(absl::StrCat(
          from_host ? absl::StrCat("the host whose first rank is set rank ", sender)
                    : absl::StrCat("set rank ", sender),
          " sent tensor id ", request.id, ", which the coordinator has not announced"));
    }
    known->second.last_used = builds_;
    content = &known->second.request;
  }
  const absl::Time submitted = now - absl::Seconds(std::max(0.0, request.waited_s));
  auto [it, inserted] = table_.try_emplace(content->name);
  Pending& p = it->second;
  if (inserted) {
    p.submitted.assign((size_ + 63) / 64, 0);
    p.first_seen = submitted;
    p.arrival = next_arrival_++;
    if (options_.observer) options_.observer->NegotiationStart(content->name, content->type);
  }
  p.first_seen = std::min(p.first_seen, submitted);
  if (request.id == 0) p.by_name = true;
  Submission* s = nullptr;
  const uint64_t key = SubmissionKey(request);
  const auto matches = [&](int32_t i) {
    const Submission& candidate = p.submissions[i];
    return candidate.key == key && candidate.id == request.id &&
           (request.id != 0 || SameRequest(candidate.request, request));
  };
  if (p.by_key.empty()) {
    // Few submissions (usually one): compared in turn, no map to build for every name.
    for (int32_t i = 0; i < static_cast<int32_t>(p.submissions.size()) && s == nullptr; ++i) {
      if (matches(i)) s = &p.submissions[i];
    }
  } else {
    for (int32_t i : p.by_key[key]) {
      if (matches(i)) {
        s = &p.submissions[i];
        break;
      }
    }
  }
  if (s == nullptr) {
    const int32_t index = static_cast<int32_t>(p.submissions.size());
    p.submissions.push_back({*content, RankSet(), size_, request.id, key});
    s = &p.submissions.back();
    if (!p.by_key.empty()) {
      p.by_key[key].push_back(index);
    } else if (index + 1 > kSubmissionsScanned) {
      for (int32_t i = 0; i <= index; ++i) p.by_key[p.submissions[i].key].push_back(i);
    }
  }
  if (from_host) {
    // A rank makes one request per name: in one host list, its bit in at most one entry.
    if (p.host_list != host_lists_added_) {
      p.host_list = host_lists_added_;
      p.host_members.assign(mask.size(), 0);
    }
    for (size_t w = 0; w < mask.size(); ++w) {
      if (const uint64_t twice = p.host_members[w] & mask[w]; twice != 0) {
        return absl::DataLossError(absl::StrCat("a host's request list names set rank ",
                                                members[w * 64 + __builtin_ctzll(twice)],
                                                " twice for tensor '", content->name, "'"));
      }
      p.host_members[w] |= mask[w];
    }
  }
  const bool record_device = request.id == 0 && !request.device.is_cpu();
  for (size_t i = 0; i < members.size(); ++i) {
    if (!MaskBit(mask, i)) continue;
    const int r = members[i];
    if (MaskBit(p.submitted, r)) continue;  // a rank's first request for a name stands
    s->ranks.Add(r, size_);
    SetMaskBit(&p.submitted, r);
    s->lowest = std::min(s->lowest, r);
    if (options_.observer) options_.observer->RankReady(content->name, r);
    if (record_device) device_of_rank_[r].emplace(request.device.type, request.device);
  }
  return absl::OkStatus();
}

void Coordinator::RankSet::Add(int rank, int size) {
  if (bits_.empty()) {
    const size_t words = (static_cast<size_t>(size) + 63) / 64;
    if (list_.size() < 2 * words) {  // 2 ranks of 4 bytes take a word's 8
      list_.push_back(rank);
      return;
    }
    bits_.assign(words, 0);
    for (int32_t r : list_) SetMaskBit(&bits_, r);
    list_.clear();
    list_.shrink_to_fit();
  }
  SetMaskBit(&bits_, rank);
}

const Coordinator::Submission& Coordinator::LowestSubmission(const Pending& p) {
  const Submission* lowest = &p.submissions[0];
  for (const Submission& s : p.submissions) {
    if (s.lowest < lowest->lowest) lowest = &s;
  }
  return *lowest;
}

std::vector<int32_t> Coordinator::SubmissionOfEachRank(const Pending& p) const {
  std::vector<int32_t> of(size_, -1);
  for (size_t i = 0; i < p.submissions.size(); ++i) {
    p.submissions[i].ranks.ForEach([&](int r) { of[r] = static_cast<int32_t>(i); });
  }
  return of;
}

Device Coordinator::DeviceOf(const Submission& s, int rank) const {
  if (s.id == 0 || s.request.device.is_cpu()) return s.request.device;
  auto it = device_of_rank_[rank].find(s.request.device.type);
  return it == device_of_rank_[rank].end() ? s.request.device : it->second;
}

bool Coordinator::IsReady(const Pending& p) const {
  for (size_t w = 0; w < p.submitted.size(); ++w) {
    const int bits = std::min(64, size_ - static_cast<int>(w) * 64);
    const uint64_t all = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    if ((p.submitted[w] | joined_bits_[w]) != all) return false;
  }
  return true;
}

bool Coordinator::FailsForJoin(const Pending& p) const {
  if (joined_.empty() || p.submissions.empty()) return false;
  return LowestSubmission(p).request.type != OpType::kAllreduce;
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
  // The lowest rank whose GPU tensor is not on its own device; tensors sent as an id are.
  int worst = size_;
  std::string problem;
  for (const Submission& s : p.submissions) {
    const Device& d = s.request.device;
    if (s.id != 0 || d.is_cpu()) continue;
    if (s.lowest >= worst) continue;
    s.ranks.ForEach([&](int r) {
      if (r >= worst) return;
      const Device& own = device_of_rank_[r].at(d.type);
      if (d != own) {
        worst = r;
        problem = absl::StrCat(names_.WhoOnHost(r), " put it on ", d.ToString(),
                               " but its earlier tensors on ", own.ToString(),
                               "; each rank keeps all its GPU tensors on one device, its own");
      }
    });
  }
  return problem;
}

std::string Coordinator::OpProblem(const Pending& p, const Request& a, Response* resp) const {
  for (const Submission& s : p.submissions) {
    std::string negative = NegativeDimension(names_, s.lowest, s.request);
    if (!negative.empty()) return negative;
  }
  std::string limits = OpLimits(names_, size_, a);
  if (!limits.empty()) return limits;
  switch (a.type) {
    case OpType::kAllgather:
      for (int32_t i : SubmissionOfEachRank(p)) {
        resp->rows.push_back(p.submissions[i].request.shape[0]);
      }
      return "";
    case OpType::kAlltoall: {
      std::vector<const Request*> of_rank;
      for (int32_t i : SubmissionOfEachRank(p)) of_rank.push_back(&p.submissions[i].request);
      return AlltoallRows(names_, of_rank, &resp->rows);
    }
    case OpType::kAddProcessSet:
      resp->rows = a.splits;
      return "";
    default:
      return "";
  }
}

Response Coordinator::Validate(const std::string& name, const Pending& p) const {
  const Submission* fs = &LowestSubmission(p);
  const int first = fs->lowest;
  Request a = fs->request;
  a.device = DeviceOf(*fs, first);
  std::string problem = DeviceProblem(p);
  // Every rank of a submission asks the same, so the lowest rank that differs from `first` is
  // the lowest of the submissions that differ.
  int differs = size_;
  std::string mismatch;
  for (const Submission& s : p.submissions) {
    if (&s == fs || s.lowest >= differs) continue;
    Request b = s.request;
    b.device = DeviceOf(s, s.lowest);
    std::string m = Mismatch(names_, first, a, s.lowest, b);
    if (!m.empty()) {
      differs = s.lowest;
      mismatch = std::move(m);
    }
  }
  if (problem.empty()) problem = std::move(mismatch);
  if (problem.empty()) problem = JoinProblem(names_, joined_, a);
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
      if (!MaskBit(p.submitted, r) && !MaskBit(joined_bits_, r)) missing[r].push_back(name);
    }
  }
  if (missing.empty()) return "";
  for (auto& [r, names] : missing) std::sort(names.begin(), names.end());
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
  std::sort(stalled.begin(), stalled.end());
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
        joined.push_back(names_.Who(r));
      } else {
        missing.push_back(names_.WhoOnHost(r));
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
    ClearJoined();
  }
  const absl::Duration limit = absl::Seconds(options_.collective_timeout_s);
  std::vector<std::string> timed_out;
  for (const auto& [name, p] : table_) {
    if (now - p.first_seen >= limit && !IsReady(p)) timed_out.push_back(name);
  }
  std::sort(timed_out.begin(), timed_out.end());
  for (const std::string& name : timed_out) {
    const Pending& p = table_.at(name);
    std::vector<std::string> came, missing;
    const OpType type = LowestSubmission(p).request.type;
    for (int r = 0; r < size_; ++r) {
      if (MaskBit(p.submitted, r)) {
        came.push_back(names_.Who(r));
      } else if (joined_.count(r) == 0) {
        missing.push_back(names_.WhoOnHost(r));
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
  std::vector<Request> agreed;
  for (const auto& [arrival, name] : ready) {
    responses.push_back(Validate(name, table_.at(name)));
    // The joined ranks take part in every allreduce: while they run, the join is not stalled.
    if (responses.back().type != OpType::kError) join_progress_ = now;
    if (options_.observer) options_.observer->NegotiationEnd(name);
    const Pending& p = table_.at(name);
    if (responses.back().type != OpType::kError && p.by_name) {
      // Validated: the lowest rank's request stands for every rank's.
      agreed.push_back(LowestSubmission(p).request);
    }
    table_.erase(name);
  }
  MaybeWarnStall(now, &responses);
  FailTimedOut(now, &responses);
  ResponseList out;
  AssignIds(std::move(agreed), &out);
  out.responses = FuseResponses(std::move(responses), options_.fusion_threshold_bytes);
  if (static_cast<int>(joined_.size()) == size_ && size_ > 0) {
    Response join;
    join.type = OpType::kJoin;
    join.names = {"join"};
    join.last_joined_rank = last_joined_;
    out.responses.push_back(std::move(join));
    ClearJoined();
  }
  out.shutdown = shutdown_;
  return out;
}

void Coordinator::AssignIds(std::vector<Request> agreed_requests, ResponseList* out) {
  for (Request& agreed : agreed_requests) {
    if (!TakesTensorId(agreed.type)) continue;
    auto [it, inserted] = id_of_name_.try_emplace(agreed.name, 0);
    if (inserted) it->second = NewTensorId();
    IdEntry& entry = ids_[it->second];
    out->assigned.push_back({it->second, agreed.name});
    entry.name = agreed.name;
    entry.request = std::move(agreed);
    entry.request.rank = 0;
    entry.request.waited_s = 0;
    entry.request.id = 0;
    entry.last_used = builds_;
  }
  if (ids_.size() > options_.max_tensor_ids) {
    // Retire down to three quarters, oldest first, so that a job with new names every step sorts
    // once per quarter of the table; never an id this cycle used or announced.
    std::vector<std::pair<int64_t, uint32_t>> by_age;
    for (const auto& [id, entry] : ids_) {
      if (entry.last_used < builds_) by_age.emplace_back(entry.last_used, id);
    }
    std::sort(by_age.begin(), by_age.end());
    const size_t keep = options_.max_tensor_ids - options_.max_tensor_ids / 4;
    for (const auto& [age, id] : by_age) {
      if (ids_.size() <= keep) break;
      id_of_name_.erase(ids_.at(id).name);
      ids_.erase(id);
      out->retired.push_back(id);
      free_ids_.push_back(id);
    }
  }
  ++builds_;
}

uint32_t Coordinator::NewTensorId() {
  while (!free_ids_.empty()) {
    const uint32_t id = free_ids_.back();
    free_ids_.pop_back();
    if (ids_.count(id) == 0) return id;
  }
  // Wraps after 2^32 - 1 ids; 0 means "by name", and an id still held stays with its name.
  while (next_id_ == 0 || ids_.count(next_id_) != 0) ++next_id_;
  return next_id_++;
}

}  // namespace hvx

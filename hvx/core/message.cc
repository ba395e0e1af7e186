#include "hvx/core/message.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hvx/common/status.h"

namespace hvx {
namespace {

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  // LEB128: 7 bits a byte, low bits first; small counts, ids and dimensions take one or two.
  void PutVarint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  // Zigzag: small magnitudes of either sign stay short.
  void PutSigned(int64_t v) {
    PutVarint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  void PutString(absl::string_view s) {
    PutVarint(s.size());
    out_.append(s.data(), s.size());
  }
  void PutInts(const std::vector<int64_t>& v) {
    PutVarint(v.size());
    for (int64_t x : v) PutSigned(x);
  }
  void PutDevice(const Device& d) {
    Put(static_cast<uint8_t>(d.type));
    PutSigned(d.index);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return Fail();
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetVarint(uint64_t* v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in_.empty()) return Fail();
      const uint8_t b = static_cast<uint8_t>(in_[0]);
      in_.remove_prefix(1);
      x |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        // The tenth byte holds bit 63 only.
        if (shift == 63 && b > 1) return Fail();
        *v = x;
        return true;
      }
    }
    return Fail();
  }
  bool GetSigned(int64_t* v) {
    uint64_t u;
    if (!GetVarint(&u)) return false;
    *v = static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
    return true;
  }
  // A varint that must fit T (an id, a rank).
  template <typename T>
  bool GetSmall(T* v) {
    int64_t x;
    if (!GetSigned(&x) || x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
      return Fail();
    *v = static_cast<T>(x);
    return true;
  }
  bool GetString(std::string* s) {
    uint64_t n;
    if (!GetVarint(&n) || n > in_.size()) return Fail();
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool GetInts(std::vector<int64_t>* v) {
    uint64_t n;
    // Each element takes at least a byte.
    if (!GetVarint(&n) || n > in_.size()) return Fail();
    v->resize(n);
    for (auto& x : *v) {
      if (!GetSigned(&x)) return false;
    }
    return true;
  }
  bool GetDevice(Device* d) {
    uint8_t t;
    int32_t i;
    if (!Get(&t) || !GetSmall(&i)) return false;
    d->type = static_cast<DeviceType>(t);
    d->index = i;
    return true;
  }
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }
  // Marks what was read as corrupt (a value out of its field's range).
  void Reject() { ok_ = false; }

 private:
  bool Fail() {
    ok_ = false;
    return false;
  }
  absl::string_view in_;
  bool ok_ = true;
};

absl::Status Corrupt(absl::string_view what, size_t bytes) {
  return absl::DataLossError(
      absl::StrCat("corrupt ", what, " of ", bytes, " bytes from a peer rank"));
}

// What an enum field of a message may hold: a peer's byte is checked before it becomes one
// (DataTypeSize of an unknown type is 0, and code sized by it divides by it).
bool KnownEnums(uint8_t type, uint8_t dtype, uint8_t op, uint8_t device_type) {
  return type <= static_cast<uint8_t>(OpType::kError) &&
         dtype <= static_cast<uint8_t>(DataType::kInt16) &&
         op <= static_cast<uint8_t>(ReduceOp::kAdasum) &&
         device_type <= static_cast<uint8_t>(DeviceType::kCuda);
}

absl::Status UnknownEnums(absl::string_view what, size_t index, uint8_t type, uint8_t dtype,
                          uint8_t op, uint8_t device_type) {
  return absl::DataLossError(absl::StrCat(
      "corrupt ", what, " from a peer rank: entry ", index, " has op type ", type, ", data type ",
      dtype, ", reduce op ", op, ", device type ", device_type, "; one of them is unknown"));
}

}  // namespace

absl::string_view OpTypeName(OpType type) {
  switch (type) {
    case OpType::kAllreduce:
      return "ALLREDUCE";
    case OpType::kAllgather:
      return "ALLGATHER";
    case OpType::kBroadcast:
      return "BROADCAST";
    case OpType::kAlltoall:
      return "ALLTOALL";
    case OpType::kReduceScatter:
      return "REDUCESCATTER";
    case OpType::kBarrier:
      return "BARRIER";
    case OpType::kJoin:
      return "JOIN";
    case OpType::kAddProcessSet:
      return "ADD_PROCESS_SET";
    case OpType::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t Response::TotalBytes() const {
  int64_t n = 0;
  for (const auto& s : shapes) n += NumElements(s);
  return n * static_cast<int64_t>(DataTypeSize(dtype));
}

namespace {

// Which of a request's scales differ from 1 and follow it.
enum ScaleBits : uint8_t { kPrescale = 1, kPostscale = 2 };

void PutRequest(Writer& w, const Request& r) {
  w.PutVarint(r.id);
  w.PutSigned(r.rank);
  w.Put(r.waited_s);
  if (r.id != 0) return;
  w.Put(static_cast<uint8_t>(r.type));
  w.PutString(r.name);
  w.Put(static_cast<uint8_t>(r.dtype));
  w.PutInts(r.shape);
  w.PutDevice(r.device);
  w.PutSigned(r.root);
  w.Put(static_cast<uint8_t>(r.reduce_op));
  const uint8_t scales =
      (r.prescale != 1.0 ? kPrescale : 0) | (r.postscale != 1.0 ? kPostscale : 0);
  w.Put(scales);
  if (scales & kPrescale) w.Put(r.prescale);
  if (scales & kPostscale) w.Put(r.postscale);
  w.PutInts(r.splits);
}

// Reads one request into *r; an unknown enum value fails with what, naming entry `index`.
absl::Status GetRequest(Reader& rd, absl::string_view what, size_t index, Request* r) {
  uint64_t id = 0;
  if (rd.GetVarint(&id) && id > std::numeric_limits<uint32_t>::max()) rd.Reject();
  r->id = static_cast<uint32_t>(id);
  rd.GetSmall(&r->rank);
  rd.Get(&r->waited_s);
  if (r->id != 0) return absl::OkStatus();
  uint8_t type = 0, dtype = 0, op = 0, scales = 0;
  rd.Get(&type);
  rd.GetString(&r->name);
  rd.Get(&dtype);
  rd.GetInts(&r->shape);
  rd.GetDevice(&r->device);
  rd.GetSmall(&r->root);
  rd.Get(&op);
  rd.Get(&scales);
  if ((scales & ~(kPrescale | kPostscale)) != 0) rd.Reject();
  r->prescale = r->postscale = 1.0;
  if (scales & kPrescale) rd.Get(&r->prescale);
  if (scales & kPostscale) rd.Get(&r->postscale);
  rd.GetInts(&r->splits);
  const uint8_t device_type = static_cast<uint8_t>(r->device.type);
  if (rd.ok() && !KnownEnums(type, dtype, op, device_type)) {
    return UnknownEnums(what, index, type, dtype, op, device_type);
  }
  r->type = static_cast<OpType>(type);
  r->dtype = static_cast<DataType>(dtype);
  r->reduce_op = static_cast<ReduceOp>(op);
  return absl::OkStatus();
}

// *r as a new Request, its string and vectors keeping their capacity.
void ResetKeepingCapacity(Request* r) {
  std::string name = std::move(r->name);
  std::vector<int64_t> shape = std::move(r->shape), splits = std::move(r->splits);
  *r = Request();
  name.clear();
  shape.clear();
  splits.clear();
  r->name = std::move(name);
  r->shape = std::move(shape);
  r->splits = std::move(splits);
}

size_t MaskWords(size_t members) { return (members + 63) / 64; }

void PutMask(Writer& w, const std::vector<uint64_t>& mask) {
  for (uint64_t word : mask) w.Put(word);
}

// A mask of `members` bits: fails on a bit beyond them.
bool GetMask(Reader& rd, size_t members, std::vector<uint64_t>* mask) {
  mask->assign(MaskWords(members), 0);
  for (uint64_t& word : *mask) {
    if (!rd.Get(&word)) return false;
  }
  const size_t tail = members % 64;
  return tail == 0 || mask->empty() || (mask->back() >> tail) == 0;
}

}  // namespace

bool SameRequest(const Request& a, const Request& b) {
  return a.type == b.type && a.dtype == b.dtype && a.device == b.device && a.root == b.root &&
         a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.shape == b.shape && a.splits == b.splits && a.name == b.name;
}

bool TakesTensorId(OpType type) {
  return type == OpType::kAllreduce || type == OpType::kBroadcast || type == OpType::kReduceScatter;
}

std::string EncodeRequestList(const RequestList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
  w.Put<uint8_t>(list.joined);
  w.Put<uint64_t>(list.requests.size());
  for (const Request& r : list.requests) PutRequest(w, r);
  return w.Take();
}

absl::StatusOr<RequestList> DecodeRequestList(absl::string_view bytes) {
  Reader rd(bytes);
  RequestList list;
  uint8_t shutdown = 0, joined = 0;
  uint64_t n = 0;
  rd.Get(&shutdown);
  rd.Get(&joined);
  rd.Get(&n);
  list.shutdown = shutdown != 0;
  list.joined = joined != 0;
  for (uint64_t i = 0; i < n && rd.ok(); ++i) {
    Request r;
    if (absl::Status s = GetRequest(rd, "request list", i, &r); !s.ok()) return s;
    list.requests.push_back(std::move(r));
  }
  if (!rd.ok() || !rd.done()) return Corrupt("request list", bytes.size());
  return list;
}

absl::StatusOr<HostRequestList> MergeHostRequests(const std::vector<int32_t>& ranks,
                                                  const std::vector<RequestList>& lists) {
  if (lists.size() != ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("merging ", lists.size(),
                                                   " request lists for a host of ", ranks.size(),
                                                   " ranks; each rank sends one"));
  }
  HostRequestList out;
  out.ranks = ranks;
  const size_t words = MaskWords(ranks.size());
  out.shutdown.assign(words, 0);
  // Entries by id, and by name (a name may have several differing entries).
  std::unordered_map<uint32_t, size_t> by_id;
  std::unordered_map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < lists.size(); ++i) {
    if (lists[i].shutdown) SetMaskBit(&out.shutdown, i);
    for (const Request& r : lists[i].requests) {
      size_t at = out.entries.size();
      if (r.id != 0) {
        at = by_id.try_emplace(r.id, at).first->second;
      } else {
        std::vector<size_t>& same_name = by_name[r.name];
        auto it = std::find_if(same_name.begin(), same_name.end(),
                               [&](size_t e) { return SameRequest(out.entries[e].request, r); });
        if (it != same_name.end()) {
          at = *it;
        } else {
          same_name.push_back(at);
        }
      }
      if (at == out.entries.size()) {
        out.entries.push_back({r, std::vector<uint64_t>(words, 0)});
        out.entries.back().request.rank = 0;
      }
      HostRequestList::Entry& e = out.entries[at];
      e.request.waited_s = std::max(e.request.waited_s, r.waited_s);
      SetMaskBit(&e.mask, i);
    }
  }
  return out;
}

std::string EncodeHostRequestList(const HostRequestList& list) {
  Writer w;
  w.Put<uint64_t>(list.ranks.size());
  for (int32_t r : list.ranks) w.Put(r);
  PutMask(w, list.shutdown);
  w.PutString(list.error);
  w.Put<uint64_t>(list.entries.size());
  for (const HostRequestList::Entry& e : list.entries) {
    PutRequest(w, e.request);
    PutMask(w, e.mask);
  }
  return w.Take();
}

absl::Status VisitHostRequestList(
    absl::string_view bytes, absl::FunctionRef<absl::Status(const HostRequestList&)> header,
    absl::FunctionRef<absl::Status(const HostRequestList&, const Request&,
                                   const std::vector<uint64_t>&)>
        entry) {
  Reader rd(bytes);
  HostRequestList list;
  uint64_t n = 0;
  if (!rd.Get(&n) || n > bytes.size() / sizeof(int32_t))
    return Corrupt("host request list", bytes.size());
  list.ranks.resize(n);
  for (size_t i = 0; i < n; ++i) {
    rd.Get(&list.ranks[i]);
    if (list.ranks[i] < 0 || (i > 0 && list.ranks[i] <= list.ranks[i - 1])) {
      return Corrupt("host request list", bytes.size());
    }
  }
  if (!GetMask(rd, n, &list.shutdown) || !rd.GetString(&list.error) || !rd.Get(&n)) {
    return Corrupt("host request list", bytes.size());
  }
  HVX_RETURN_IF_ERROR(header(list));
  Request r;
  std::vector<uint64_t> mask;
  uint64_t i = 0;
  for (; i < n && rd.ok(); ++i) {
    ResetKeepingCapacity(&r);
    if (absl::Status s = GetRequest(rd, "host request list", i, &r); !s.ok()) return s;
    // An entry stands for at least one member; one naming none would be a request of no rank.
    if (!GetMask(rd, list.ranks.size(), &mask) ||
        std::all_of(mask.begin(), mask.end(), [](uint64_t w) { return w == 0; })) {
      break;
    }
    HVX_RETURN_IF_ERROR(entry(list, r, mask));
  }
  if (!rd.ok() || !rd.done() || i != n) return Corrupt("host request list", bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<HostRequestList> DecodeHostRequestList(absl::string_view bytes) {
  HostRequestList out;
  HVX_RETURN_IF_ERROR(VisitHostRequestList(
      bytes,
      [&](const HostRequestList& header) {
        out = header;
        return absl::OkStatus();
      },
      [&](const HostRequestList&, const Request& r, const std::vector<uint64_t>& mask) {
        out.entries.push_back({r, mask});
        return absl::OkStatus();
      }));
  return out;
}

std::string EncodeResponseList(const ResponseList& list) {
  Writer w;
  w.Put<uint8_t>((list.shutdown ? 1 : 0) | (list.stats_due ? 2 : 0));
  w.Put<uint64_t>(list.responses.size());
  for (const Response& r : list.responses) {
    w.Put(static_cast<uint8_t>(r.type));
    w.Put<uint64_t>(r.names.size());
    for (const auto& name : r.names) w.PutString(name);
    w.PutString(r.error);
    w.Put(r.error_code);
    w.Put(static_cast<uint8_t>(r.dtype));
    w.Put(static_cast<uint8_t>(r.device_type));
    w.Put(static_cast<uint8_t>(r.reduce_op));
    w.Put(r.prescale);
    w.Put(r.postscale);
    w.Put(r.root);
    w.Put<uint64_t>(r.shapes.size());
    for (const auto& s : r.shapes) w.PutInts(s);
    w.PutInts(r.rows);
    w.Put(r.last_joined_rank);
  }
  w.Put<uint64_t>(list.assigned.size());
  for (const TensorId& t : list.assigned) {
    w.Put(t.id);
    w.PutString(t.name);
  }
  w.Put<uint64_t>(list.retired.size());
  for (uint32_t id : list.retired) w.Put(id);
  w.PutString(list.error);
  return w.Take();
}

absl::StatusOr<ResponseList> DecodeResponseList(absl::string_view bytes) {
  Reader rd(bytes);
  ResponseList list;
  uint8_t shutdown = 0, type = 0, dtype = 0, op = 0, device_type = 0;
  uint64_t n = 0;
  rd.Get(&shutdown);
  rd.Get(&n);
  list.shutdown = (shutdown & 1) != 0;
  list.stats_due = (shutdown & 2) != 0;
  for (uint64_t i = 0; i < n && rd.ok(); ++i) {
    Response r;
    uint64_t count = 0;
    rd.Get(&type);
    rd.Get(&count);
    for (uint64_t j = 0; j < count && rd.ok(); ++j) {
      std::string name;
      rd.GetString(&name);
      r.names.push_back(std::move(name));
    }
    rd.GetString(&r.error);
    rd.Get(&r.error_code);
    rd.Get(&dtype);
    rd.Get(&device_type);
    r.device_type = static_cast<DeviceType>(device_type);
    rd.Get(&op);
    rd.Get(&r.prescale);
    rd.Get(&r.postscale);
    rd.Get(&r.root);
    rd.Get(&count);
    for (uint64_t j = 0; j < count && rd.ok(); ++j) {
      std::vector<int64_t> s;
      rd.GetInts(&s);
      r.shapes.push_back(std::move(s));
    }
    rd.GetInts(&r.rows);
    rd.Get(&r.last_joined_rank);
    if (rd.ok() && !KnownEnums(type, dtype, op, device_type)) {
      return UnknownEnums("response list", i, type, dtype, op, device_type);
    }
    r.type = static_cast<OpType>(type);
    r.dtype = static_cast<DataType>(dtype);
    r.reduce_op = static_cast<ReduceOp>(op);
    list.responses.push_back(std::move(r));
  }
  rd.Get(&n);
  std::unordered_set<uint32_t> assigned;
  for (uint64_t i = 0; i < n && rd.ok(); ++i) {
    TensorId t;
    rd.Get(&t.id);
    rd.GetString(&t.name);
    // 0 means "by name", and one id stands for one name.
    if (rd.ok() && (t.id == 0 || !assigned.insert(t.id).second)) {
      return Corrupt("response list", bytes.size());
    }
    list.assigned.push_back(std::move(t));
  }
  rd.Get(&n);
  for (uint64_t i = 0; i < n && rd.ok(); ++i) {
    uint32_t id = 0;
    rd.Get(&id);
    if (rd.ok() && id == 0) return Corrupt("response list", bytes.size());
    list.retired.push_back(id);
  }
  rd.GetString(&list.error);
  if (!rd.ok() || !rd.done()) return Corrupt("response list", bytes.size());
  return list;
}

}  // namespace hvx

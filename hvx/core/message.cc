#include "hvx/core/message.h"

#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hvx {
namespace {

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void PutString(absl::string_view s) {
    Put<uint64_t>(s.size());
    out_.append(s.data(), s.size());
  }
  void PutInts(const std::vector<int64_t>& v) {
    Put<uint64_t>(v.size());
    for (int64_t x : v) Put(x);
  }
  void PutDevice(const Device& d) {
    Put(static_cast<uint8_t>(d.type));
    Put<int32_t>(d.index);
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
  bool GetString(std::string* s) {
    uint64_t n;
    if (!Get(&n) || n > in_.size()) return Fail();
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool GetInts(std::vector<int64_t>* v) {
    uint64_t n;
    if (!Get(&n) || n > in_.size() / sizeof(int64_t)) return Fail();
    v->resize(n);
    for (auto& x : *v) Get(&x);
    return true;
  }
  bool GetDevice(Device* d) {
    uint8_t t;
    int32_t i;
    if (!Get(&t) || !Get(&i)) return false;
    d->type = static_cast<DeviceType>(t);
    d->index = i;
    return true;
  }
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }

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

std::string EncodeRequestList(const RequestList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
  w.Put<uint8_t>(list.joined);
  w.Put<uint64_t>(list.requests.size());
  for (const Request& r : list.requests) {
    w.Put(r.rank);
    w.Put(static_cast<uint8_t>(r.type));
    w.PutString(r.name);
    w.Put(static_cast<uint8_t>(r.dtype));
    w.PutInts(r.shape);
    w.PutDevice(r.device);
    w.Put(r.root);
    w.Put(static_cast<uint8_t>(r.reduce_op));
    w.Put(r.prescale);
    w.Put(r.postscale);
    w.PutInts(r.splits);
    w.Put(r.waited_s);
  }
  return w.Take();
}

absl::StatusOr<RequestList> DecodeRequestList(absl::string_view bytes) {
  Reader rd(bytes);
  RequestList list;
  uint8_t shutdown = 0, joined = 0, type = 0, dtype = 0, op = 0;
  uint64_t n = 0;
  rd.Get(&shutdown);
  rd.Get(&joined);
  rd.Get(&n);
  list.shutdown = shutdown != 0;
  list.joined = joined != 0;
  for (uint64_t i = 0; i < n && rd.ok(); ++i) {
    Request r;
    rd.Get(&r.rank);
    rd.Get(&type);
    rd.GetString(&r.name);
    rd.Get(&dtype);
    rd.GetInts(&r.shape);
    rd.GetDevice(&r.device);
    rd.Get(&r.root);
    rd.Get(&op);
    rd.Get(&r.prescale);
    rd.Get(&r.postscale);
    rd.GetInts(&r.splits);
    rd.Get(&r.waited_s);
    const uint8_t device_type = static_cast<uint8_t>(r.device.type);
    if (rd.ok() && !KnownEnums(type, dtype, op, device_type)) {
      return UnknownEnums("request list", i, type, dtype, op, device_type);
    }
    r.type = static_cast<OpType>(type);
    r.dtype = static_cast<DataType>(dtype);
    r.reduce_op = static_cast<ReduceOp>(op);
    list.requests.push_back(std::move(r));
  }
  if (!rd.ok() || !rd.done()) return Corrupt("request list", bytes.size());
  return list;
}

std::string EncodeResponseList(const ResponseList& list) {
  Writer w;
  w.Put<uint8_t>(list.shutdown);
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
  return w.Take();
}

absl::StatusOr<ResponseList> DecodeResponseList(absl::string_view bytes) {
  Reader rd(bytes);
  ResponseList list;
  uint8_t shutdown = 0, type = 0, dtype = 0, op = 0, device_type = 0;
  uint64_t n = 0;
  rd.Get(&shutdown);
  rd.Get(&n);
  list.shutdown = shutdown != 0;
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
  if (!rd.ok() || !rd.done()) return Corrupt("response list", bytes.size());
  return list;
}

}  // namespace hvx

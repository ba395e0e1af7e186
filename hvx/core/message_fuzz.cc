// Fuzz target: the negotiation wire format (message.h) as a peer rank's bytes. The first byte
// picks request list, response list or host request list (its value modulo 3). Whatever decodes
// must hold only known op types, data types, reduce ops and device types, host entries that name
// at least one member, tensor ids that are nonzero and assigned once, and must encode back to bytes
// that decode to the same encoding.
#include <set>
#include <string>
#include <vector>

#include "hvx/core/message.h"
#include "hvx/testing/fuzz.h"

namespace hvx {
namespace {

bool Known(OpType t) { return static_cast<uint8_t>(t) <= static_cast<uint8_t>(OpType::kError); }
bool Known(DataType t) { return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DataType::kInt16); }
bool Known(ReduceOp t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(ReduceOp::kAdasum);
}
bool Known(DeviceType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DeviceType::kCuda);
}

void CheckRequests(absl::string_view bytes) {
  const absl::StatusOr<RequestList> list = DecodeRequestList(bytes);
  if (!list.ok()) return;
  for (const Request& r : list->requests) {
    HVX_FUZZ_CHECK(Known(r.type) && Known(r.dtype) && Known(r.reduce_op) && Known(r.device.type),
                   "a decoded request holds an unknown enum value");
  }
  const std::string again = EncodeRequestList(*list);
  const absl::StatusOr<RequestList> back = DecodeRequestList(again);
  HVX_FUZZ_CHECK(back.ok(), "a request list's own encoding does not decode");
  HVX_FUZZ_CHECK(EncodeRequestList(*back) == again, "a request list does not round-trip");
}

void CheckHostRequests(absl::string_view bytes) {
  const absl::StatusOr<HostRequestList> list = DecodeHostRequestList(bytes);
  if (!list.ok()) return;
  for (const HostRequestList::Entry& e : list->entries) {
    const Request& r = e.request;
    HVX_FUZZ_CHECK(Known(r.type) && Known(r.dtype) && Known(r.reduce_op) && Known(r.device.type),
                   "a decoded host request holds an unknown enum value");
    HVX_FUZZ_CHECK(e.mask.size() == (list->ranks.size() + 63) / 64,
                   "a decoded host entry's rank mask does not fit the host's members");
    bool any = false;
    for (uint64_t w : e.mask) any = any || w != 0;
    HVX_FUZZ_CHECK(any, "a decoded host entry names no member");
  }
  for (size_t i = 1; i < list->ranks.size(); ++i) {
    HVX_FUZZ_CHECK(list->ranks[i - 1] < list->ranks[i], "decoded host members are not ascending");
  }
  const std::string again = EncodeHostRequestList(*list);
  const absl::StatusOr<HostRequestList> back = DecodeHostRequestList(again);
  HVX_FUZZ_CHECK(back.ok(), "a host request list's own encoding does not decode");
  HVX_FUZZ_CHECK(EncodeHostRequestList(*back) == again, "a host request list does not round-trip");
}

void CheckResponses(absl::string_view bytes) {
  const absl::StatusOr<ResponseList> list = DecodeResponseList(bytes);
  if (!list.ok()) return;
  for (const Response& r : list->responses) {
    HVX_FUZZ_CHECK(Known(r.type) && Known(r.dtype) && Known(r.reduce_op) && Known(r.device_type),
                   "a decoded response holds an unknown enum value");
  }
  std::set<uint32_t> ids;
  for (const TensorId& t : list->assigned) {
    HVX_FUZZ_CHECK(t.id != 0, "a decoded response list assigns tensor id 0");
    HVX_FUZZ_CHECK(ids.insert(t.id).second, "a decoded response list assigns an id twice");
  }
  for (uint32_t id : list->retired) {
    HVX_FUZZ_CHECK(id != 0, "a decoded response list retires tensor id 0");
  }
  const std::string again = EncodeResponseList(*list);
  const absl::StatusOr<ResponseList> back = DecodeResponseList(again);
  HVX_FUZZ_CHECK(back.ok(), "a response list's own encoding does not decode");
  HVX_FUZZ_CHECK(EncodeResponseList(*back) == again, "a response list does not round-trip");
}

}  // namespace
}  // namespace hvx

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view bytes = hvx::fuzz::AsText(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      hvx::CheckRequests(bytes);
      break;
    case 1:
      hvx::CheckResponses(bytes);
      break;
    default:
      hvx::CheckHostRequests(bytes);
  }
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace hvx;
  RequestList requests;
  Request a;
  a.rank = 1;
  a.name = "grad/conv1.weight";
  a.dtype = DataType::kFloat16;
  a.shape = {64, 3, 7, 7};
  a.reduce_op = ReduceOp::kAverage;
  a.prescale = 0.5;
  Request b;
  b.type = OpType::kAlltoall;
  b.name = "a2a";
  b.dtype = DataType::kInt64;
  b.shape = {8, 2};
  b.device = Device::Cuda(3);
  b.splits = {3, 5};
  b.waited_s = 1.5;
  Request c;
  c.id = 12;
  c.waited_s = 0.25;
  requests.requests = {a, b, c};
  requests.joined = true;
  RequestList other;
  other.requests = {b, c};
  other.shutdown = true;
  const HostRequestList host = MergeHostRequests({3, 5}, {requests, other}).value();
  ResponseList responses;
  Response r;
  r.names = {"grad/conv1.weight", "grad/fc.bias"};
  r.shapes = {{64, 3, 7, 7}, {10}};
  r.dtype = DataType::kBfloat16;
  Response e;
  e.type = OpType::kError;
  e.names = {"x"};
  e.error = "mismatched shapes";
  e.error_code = 3;
  Response g;
  g.type = OpType::kAllgather;
  g.names = {"gathered"};
  g.rows = {1, 2, 3, 4};
  g.last_joined_rank = 2;
  responses.responses = {r, e, g};
  responses.shutdown = true;
  responses.assigned = {{4, "grad/conv1.weight"}, {5, "grad/fc.bias"}};
  responses.retired = {1, 2};
  return {std::string(1, '\0') + EncodeRequestList(requests),
          std::string(1, '\0') + EncodeRequestList(RequestList{}),
          std::string(1, '\1') + EncodeResponseList(responses),
          std::string(1, '\1') + EncodeResponseList(ResponseList{}),
          std::string(1, '\2') + EncodeHostRequestList(host),
          std::string(1, '\2') + EncodeHostRequestList(HostRequestList{})};
}

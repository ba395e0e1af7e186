// Negotiation messages between ranks and the coordinator, and their byte encoding.
//
//   std::string bytes = EncodeRequestList(list);
//   HVX_ASSIGN_OR_RETURN(RequestList back, DecodeRequestList(bytes));
//
// A cycle's requests travel in two steps (hvx/core/SCALING.md): each rank's RequestList to the
// first rank of its host, which merges them (MergeHostRequests) into one HostRequestList for the
// set's rank 0. A request the coordinator has seen before travels as its tensor id alone.
//
// The encoding is private to one job: counts, ids, ranks, dimensions and string lengths as
// varints (LEB128, signed ones zigzagged), other values little-endian fixed-width, a request's
// scales only when they differ from 1. Init checks that every rank has the same kWireFormatVersion
// (in the build identity it compares), so a job never mixes builds that encode differently.
#ifndef HVX_CORE_MESSAGE_H_
#define HVX_CORE_MESSAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hvx/common/types.h"
#include "hvx/core/api.h"

namespace hvx {

// Raised whenever the encoding below changes.
inline constexpr int kWireFormatVersion = 7;

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReduceScatter,
  kBarrier,
  kJoin,
  kAddProcessSet,
  kError,  // responses only
};
// "ALLREDUCE", "ALLGATHER", ... as shown in errors and the timeline.
absl::string_view OpTypeName(OpType type);

// One rank's submission of one named tensor.
struct Request {
  int32_t rank = 0;  // in the process set
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  Device device;
  int32_t root = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  // Alltoall: rows sent to each rank (empty = equal split). AddProcessSet: the global ranks.
  std::vector<int64_t> splits;
  // Seconds the op had waited on its rank when this request was sent, so that the coordinator
  // measures a wait from its submission, also when it first waited in the response cache.
  double waited_s = 0;
  // Nonzero: this request is the one the coordinator announced under this tensor id
  // (ResponseList::assigned), on the sending rank's own device; then only rank and waited_s are
  // set besides it. Zero: every field is set.
  uint32_t id = 0;
};

// Whether a and b ask for the same thing: every field but rank, waited_s and id.
bool SameRequest(const Request& a, const Request& b);
// Whether the coordinator gives a request of this type an id (ops whose request every rank makes
// alike: ALLREDUCE, BROADCAST, REDUCESCATTER).
bool TakesTensorId(OpType type);

struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;
  bool joined = false;
};

// Rank masks, as HostRequestList's entries and the coordinator keep them: bit i of word i / 64.
inline bool MaskBit(const std::vector<uint64_t>& mask, size_t i) {
  return (mask[i / 64] >> (i % 64)) & 1;
}
inline void SetMaskBit(std::vector<uint64_t>* mask, size_t i) {
  (*mask)[i / 64] |= uint64_t{1} << (i % 64);
}

// The requests of one host's ranks in a set, merged by the host's first rank: each distinct
// request once, with the ranks that made it.
struct HostRequestList {
  // Set ranks of the host's members, ascending. Bit i of a rank mask below stands for ranks[i].
  std::vector<int32_t> ranks;
  struct Entry {
    Request request;             // rank unset; waited_s the longest of its ranks'
    std::vector<uint64_t> mask;  // ceil(ranks.size() / 64) words
  };
  std::vector<Entry> entries;
  std::vector<uint64_t> shutdown;  // members that asked for shutdown
  // Nonempty when the host's first rank could not read its members' lists (then nothing else is
  // set): the coordinator fails every rank of the set with it.
  std::string error;
};

// Merges the lists of a host's members (lists[i] from set rank ranks[i]): requests that are the
// same (SameRequest, or the same id) become one entry, in order of first appearance. Fails
// (InvalidArgument) unless there is one list per member.
absl::StatusOr<HostRequestList> MergeHostRequests(const std::vector<int32_t>& ranks,
                                                  const std::vector<RequestList>& lists);

// What every rank executes, identical on all ranks.
struct Response {
  OpType type = OpType::kAllreduce;
  std::vector<std::string> names;
  std::string error;  // kError
  // kError: why it failed, as an absl::StatusCode: kInvalidArgument when the ranks' arguments
  // disagree or are wrong, kDeadlineExceeded when some ranks never submitted it in time.
  uint8_t error_code = 0;
  DataType dtype = DataType::kFloat32;
  // Every rank runs the response on its own device of this type (its tensors'; each rank uses one
  // device per type), never on the device of the rank whose request the coordinator read first.
  DeviceType device_type = DeviceType::kCpu;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  // Per name: the agreed shape (allreduce: what joined ranks contribute zeros for).
  std::vector<std::vector<int64_t>> shapes;
  // Allgather: first dimension of each rank. Alltoall: size x size row counts, [sender][receiver].
  // AddProcessSet: the global ranks.
  std::vector<int64_t> rows;
  int32_t last_joined_rank = -1;

  int64_t TotalBytes() const;
};

// A tensor id the coordinator gives a name: later requests for it may carry the id alone.
struct TensorId {
  uint32_t id = 0;
  std::string name;
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  // Every rank exchanges its straggler sample after this cycle (straggler.h): rank 0's window
  // ended. (With the response cache on, the cache vote carries the same flag.)
  bool stats_due = false;
  // Names (of this list's responses) whose id every rank records with its own request for that
  // name, and ids no rank may send any more. Ranks apply `retired` first.
  std::vector<TensorId> assigned;
  std::vector<uint32_t> retired;
  // Nonempty when the coordinator could not read this cycle's requests (then only shutdown is
  // set besides it): every rank stops with it.
  std::string error;
};

std::string EncodeRequestList(const RequestList& list);
absl::StatusOr<RequestList> DecodeRequestList(absl::string_view bytes);
std::string EncodeHostRequestList(const HostRequestList& list);
// Fails (DataLoss) on bytes that are not an encoding, on member ranks that are negative or not
// ascending, on masks naming ranks beyond the members and on an entry naming none.
absl::StatusOr<HostRequestList> DecodeHostRequestList(absl::string_view bytes);
// The same list read entry by entry, without keeping the entries (rank 0 reads one per host, every
// cycle): `header` gets the list with its ranks, shutdown mask and error and no entries, then
// `entry` gets each entry in order, with the header and a request and mask that the next call
// overwrites, so that a long list costs no allocation per entry. Returns DecodeHostRequestList's
// error (the entries before the corrupt one have been visited) or the first error of a callback.
absl::Status VisitHostRequestList(
    absl::string_view bytes, absl::FunctionRef<absl::Status(const HostRequestList&)> header,
    absl::FunctionRef<absl::Status(const HostRequestList&, const Request&,
                                   const std::vector<uint64_t>&)>
        entry);
std::string EncodeResponseList(const ResponseList& list);
// Fails (DataLoss) on bytes that are not an encoding, and on a tensor id that is 0 or assigned
// twice.
absl::StatusOr<ResponseList> DecodeResponseList(absl::string_view bytes);

int64_t NumElements(const std::vector<int64_t>& shape);
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace hvx

#endif  // HVX_CORE_MESSAGE_H_

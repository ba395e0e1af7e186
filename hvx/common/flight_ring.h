// The flight recorder's ring: the last kFlightSlots collectives of one rank, each with its process
// set, per-set sequence number, name, op, dtype, bytes, the data plane it ran on, its state
// (submitted, negotiated, on the data plane, done, failed) and the monotonic time it reached each.
// The ring is one block of memory with a fixed layout. Under hvxrun the rank wrapper creates it
// (a memfd, handed to the program as HVX_FLIGHT_FD) and the program's engine writes it, so the
// wrapper reads it whatever the program is doing: frozen (SIGSTOP), stuck in its own code, or
// dead. The wrapper passes the slots on to hvxrun as control records (hex, one slot each), and
// hvxrun decodes them and names the rank a hang waits for. Links only the C++ library: the wrapper
// and hvxrun read what the engine writes with this one definition.
//
//   FlightRing ring;
//   ring.Attach(memory, FlightRingBytes());
//   uint32_t slot = ring.Submitted({op_id, seq, set, "allreduce", "float32", bytes, "grad.w",
//   now}); ring.Mark(slot, op_id, FlightState::kDataPlane, now, "SHM_ALLREDUCE"); ring.Finish(slot,
//   op_id, /*code=*/0, "", now); for (const FlightEvent& e : ReadFlightRing(memory, size)) ...
//
// Writers of one slot exclude each other with its version word (odd while written, taken by
// compare-and-swap); readers copy a slot and keep the copy only when the version was even and
// unchanged (a seqlock), retrying a few times.
#ifndef HVX_COMMON_FLIGHT_RING_H_
#define HVX_COMMON_FLIGHT_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hvx {

// The descriptor of the ring's memfd in the program, set by the rank wrapper.
inline constexpr char kFlightFdVariable[] = "HVX_FLIGHT_FD";
// The memfd's name: a writer maps HVX_FLIGHT_FD only when /proc/self/fd shows it ("/memfd:NAME"),
// never another file a program has open under that number.
inline constexpr char kFlightMemfdName[] = "hvx-flight";
// The write end of the pipe the program's threads write their stacks to when the wrapper sends it
// kStackSignal (stack_dump.h), set by the rank wrapper; SIGURG, which a program without the
// handler ignores.
inline constexpr char kStackFdVariable[] = "HVX_STACK_FD";
inline constexpr int kStackSignal = 23;  // SIGURG on Linux (x86, Arm)
inline constexpr uint32_t kFlightSlots = 512;

enum class FlightState : uint32_t {
  kEmpty = 0,
  kSubmitted = 1,   // handed to the engine, waiting for the others (negotiation)
  kNegotiated = 2,  // every rank submitted it; being executed
  kDataPlane = 3,   // inside the data plane's collective
  kDone = 4,
  kFailed = 5,
};
// "submitted", "negotiated", "data_plane", "done", "failed"; "?" otherwise.
const char* FlightStateName(FlightState state);

// One collective as the ring holds it. Strings are NUL-padded and cut at their field's size.
struct FlightSlot {
  std::atomic<uint32_t> version;
  uint32_t state;
  uint64_t op_id;  // unique on this rank, from 1
  uint64_t seq;    // this rank's submissions to the set so far, this one included
  int32_t set_id;
  int32_t code;  // absl status code of a failed op
  int64_t bytes;
  int64_t submitted_ns;  // CLOCK_MONOTONIC
  int64_t negotiated_ns;
  int64_t data_plane_ns;
  int64_t done_ns;
  char op[16];
  char dtype[16];
  char name[96];
  char plane[32];
  char error[160];
  char caller[64];  // where the program submitted it ("train.py:42"), "" when not said
};

struct FlightHeader {
  char magic[8];
  uint32_t slots;
  uint32_t slot_bytes;
  std::atomic<uint64_t> recorded;  // ops submitted so far
  // When an op last moved on (submitted, negotiated, into the data plane, done: not failed), or
  // the writer attached, on the monotonic clock; 0 before that.
  std::atomic<int64_t> last_progress_ns;
  int64_t reserved[4];
};

// Bytes of a ring of kFlightSlots: header and slots.
size_t FlightRingBytes();

// A decoded slot.
struct FlightEvent {
  FlightState state = FlightState::kEmpty;
  uint64_t op_id = 0;
  uint64_t seq = 0;
  int set_id = 0;
  int code = 0;
  int64_t bytes = 0;
  int64_t submitted_ns = 0;
  int64_t negotiated_ns = 0;
  int64_t data_plane_ns = 0;
  int64_t done_ns = 0;
  std::string op;
  std::string dtype;
  std::string name;
  std::string plane;
  std::string error;
  std::string caller;
  bool torn = false;  // its writer never finished writing it (frozen or killed mid-write)
};

// The writer, in the program. Default-constructed it records nothing.
class FlightRing {
 public:
  FlightRing() = default;
  // Starts writing into `memory` (FlightRingBytes() bytes, zeroed or a ring this layout wrote).
  // Returns false, recording nothing, when `size` is too small.
  bool Attach(void* memory, size_t size);
  bool enabled() const { return slots_ != nullptr; }
  // Ops recorded in this ring so far, by every writer it has had.
  uint64_t recorded() const;

  struct Op {
    uint64_t seq;
    int set_id;
    std::string_view op;
    std::string_view dtype;
    int64_t bytes;
    std::string_view name;
    int64_t now_ns;
    std::string_view caller = {};
  };
  // Where an op went: its slot and its id, unique among every writer the ring has had (a second
  // engine in the process, or a program the first started, numbers on).
  struct Ticket {
    uint32_t slot = 0;
    uint64_t id = 0;
  };
  // Records a submission in the next slot (overwriting the oldest); {0, 0} when disabled.
  Ticket Submitted(const Op& op);
  // Moves the op in `slot` on to `state` at `now_ns`, when the slot still holds `op_id` and the op
  // is not past that state; `plane` (kDataPlane) names the data plane.
  void Mark(uint32_t slot, uint64_t op_id, FlightState state, int64_t now_ns,
            std::string_view plane = {});
  // Ends the op in `slot`: done when `code` is 0, else failed with `error`.
  void Finish(uint32_t slot, uint64_t op_id, int code, std::string_view error, int64_t now_ns);

 private:
  // Takes `slot` for writing (its version odd); false when it no longer holds `op_id`.
  bool Lock(FlightSlot& slot, uint64_t op_id);
  void Unlock(FlightSlot& slot);

  FlightHeader* header_ = nullptr;
  FlightSlot* slots_ = nullptr;
  uint32_t count_ = 0;
};

// Whether a writer has attached to the ring in `memory` (the program started its engine).
bool IsFlightRing(const void* memory, size_t size);
// FlightHeader::last_progress_ns of the ring in `memory`; 0 when it is not a ring. An op that
// fails is no progress: a rank whose collective timed out still waits as it did.
int64_t FlightRingLastProgress(const void* memory, size_t size);
// The non-empty slots of the ring in `memory`, oldest op first; empty when it is not a ring.
std::vector<FlightEvent> ReadFlightRing(const void* memory, size_t size);
// The slots a dump sends, oldest first: the newest and the oldest unfinished ops, `max_unfinished`
// in all, and the last `max_finished` finished ones.
std::vector<FlightEvent> SelectForDump(const std::vector<FlightEvent>& events,
                                       size_t max_unfinished, size_t max_finished);

// A slot as one word of lowercase hex (a control record's field), and back. Decode returns false
// for anything that is not exactly one encoded slot.
std::string EncodeFlightEvent(const FlightEvent& event);
bool DecodeFlightEvent(std::string_view hex, FlightEvent* event);

// Monotonic now in nanoseconds (the clock the ring's times are on).
int64_t FlightNowNs();

}  // namespace hvx

#endif  // HVX_COMMON_FLIGHT_RING_H_

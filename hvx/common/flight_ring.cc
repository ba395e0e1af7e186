#include "hvx/common/flight_ring.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace hvx {
namespace {

constexpr char kMagic[8] = {'H', 'V', 'X', 'F', 'L', 'T', '1', '\0'};
constexpr int kReadTries = 8;
constexpr int kFields = 17;
// Yields while another writer holds a slot, up to this many times.
constexpr int kSpinsBeforeTakeOver = 100000;

static_assert(std::is_standard_layout<FlightSlot>::value, "the ring is shared between processes");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "a version word in shared memory");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "a counter in shared memory");

template <size_t N>
void CopyText(char (&field)[N], std::string_view text) {
  const size_t n = std::min(text.size(), N - 1);
  if (n > 0) std::memcpy(field, text.data(), n);  // an empty view's data() may be null
  std::memset(field + n, 0, N - n);
}

template <size_t N>
std::string TextOf(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

FlightEvent EventOf(const FlightSlot& s, bool torn) {
  FlightEvent e;
  e.state = static_cast<FlightState>(s.state);
  e.op_id = s.op_id;
  e.seq = s.seq;
  e.set_id = s.set_id;
  e.code = s.code;
  e.bytes = s.bytes;
  e.submitted_ns = s.submitted_ns;
  e.negotiated_ns = s.negotiated_ns;
  e.data_plane_ns = s.data_plane_ns;
  e.done_ns = s.done_ns;
  e.op = TextOf(s.op);
  e.dtype = TextOf(s.dtype);
  e.name = TextOf(s.name);
  e.plane = TextOf(s.plane);
  e.error = TextOf(s.error);
  e.caller = TextOf(s.caller);
  e.torn = torn;
  return e;
}

bool Finished(const FlightEvent& e) {
  return e.state == FlightState::kDone || e.state == FlightState::kFailed;
}

void AppendHex(std::string* out, std::string_view text) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (unsigned char c : text) {
    out->push_back(kDigits[c >> 4]);
    out->push_back(kDigits[c & 15]);
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool FromHex(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigit(hex[i]), lo = HexDigit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

bool ParseI64(std::string_view text, int64_t* value) {
  if (text.empty() || text.size() > 20) return false;
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *value = v;
  return true;
}

}  // namespace

const char* FlightStateName(FlightState state) {
  switch (state) {
    case FlightState::kEmpty:
      return "empty";
    case FlightState::kSubmitted:
      return "submitted";
    case FlightState::kNegotiated:
      return "negotiated";
    case FlightState::kDataPlane:
      return "data_plane";
    case FlightState::kDone:
      return "done";
    case FlightState::kFailed:
      return "failed";
  }
  return "?";
}

size_t FlightRingBytes() { return sizeof(FlightHeader) + kFlightSlots * sizeof(FlightSlot); }

int64_t FlightNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool FlightRing::Attach(void* memory, size_t size) {
  if (memory == nullptr || size < FlightRingBytes()) return false;
  header_ = static_cast<FlightHeader*>(memory);
  if (std::memcmp(header_->magic, kMagic, sizeof(kMagic)) != 0) {
    header_->slots = kFlightSlots;
    header_->slot_bytes = sizeof(FlightSlot);
    std::memcpy(header_->magic, kMagic, sizeof(kMagic));
  }
  slots_ = reinterpret_cast<FlightSlot*>(static_cast<char*>(memory) + sizeof(FlightHeader));
  count_ = kFlightSlots;
  // A rank quiet since its engine started (stuck before its first op) counts from here.
  header_->last_progress_ns.store(FlightNowNs(), std::memory_order_relaxed);
  return true;
}

bool FlightRing::Lock(FlightSlot& slot, uint64_t op_id) {
  uint32_t v = slot.version.load(std::memory_order_relaxed);
  for (int spins = 0;; ++spins) {
    if (v & 1) {
      // Held: by this process's other writer for a few stores, or by a writer that died while
      // writing (an earlier program on the same ring), which never lets go: then take it over.
      if (spins > kSpinsBeforeTakeOver) {
        slot.version.compare_exchange_strong(v, v + 1, std::memory_order_relaxed);
        v = slot.version.load(std::memory_order_relaxed);
        spins = 0;
        continue;
      }
      if (spins > 64) sched_yield();
      v = slot.version.load(std::memory_order_relaxed);
      continue;
    }
    if (slot.version.compare_exchange_weak(v, v + 1, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
      break;
    }
  }
  // The odd version is visible before any of the stores that follow (a reader on a weakly ordered
  // CPU must not see new data under the old even version).
  std::atomic_thread_fence(std::memory_order_release);
  if (op_id != 0 && slot.op_id != op_id) {
    Unlock(slot);
    return false;
  }
  return true;
}

void FlightRing::Unlock(FlightSlot& slot) { slot.version.fetch_add(1, std::memory_order_release); }

FlightRing::Ticket FlightRing::Submitted(const Op& op) {
  if (!enabled()) return {};
  const uint64_t n = header_->recorded.fetch_add(1, std::memory_order_relaxed);
  const Ticket ticket{static_cast<uint32_t>(n % count_), n + 1};
  FlightSlot& s = slots_[ticket.slot];
  Lock(s, 0);
  s.state = static_cast<uint32_t>(FlightState::kSubmitted);
  s.op_id = ticket.id;
  s.seq = op.seq;
  s.set_id = op.set_id;
  s.code = 0;
  s.bytes = op.bytes;
  s.submitted_ns = op.now_ns;
  s.negotiated_ns = s.data_plane_ns = s.done_ns = 0;
  CopyText(s.op, op.op);
  CopyText(s.dtype, op.dtype);
  CopyText(s.name, op.name);
  CopyText(s.caller, op.caller);
  s.plane[0] = '\0';
  s.error[0] = '\0';
  Unlock(s);
  header_->last_progress_ns.store(op.now_ns, std::memory_order_relaxed);
  return ticket;
}

void FlightRing::Mark(uint32_t index, uint64_t op_id, FlightState state, int64_t now_ns,
                      std::string_view plane) {
  if (!enabled() || index >= count_) return;
  FlightSlot& s = slots_[index];
  if (!Lock(s, op_id)) return;
  if (s.state < static_cast<uint32_t>(state)) {
    s.state = static_cast<uint32_t>(state);
    if (state == FlightState::kNegotiated) s.negotiated_ns = now_ns;
    if (state == FlightState::kDataPlane) {
      s.data_plane_ns = now_ns;
      if (s.negotiated_ns == 0) s.negotiated_ns = now_ns;
      CopyText(s.plane, plane);
    }
  }
  Unlock(s);
  header_->last_progress_ns.store(now_ns, std::memory_order_relaxed);
}

void FlightRing::Finish(uint32_t index, uint64_t op_id, int code, std::string_view error,
                        int64_t now_ns) {
  if (!enabled() || index >= count_) return;
  FlightSlot& s = slots_[index];
  if (!Lock(s, op_id)) return;
  s.state = static_cast<uint32_t>(code == 0 ? FlightState::kDone : FlightState::kFailed);
  s.code = code;
  s.done_ns = now_ns;
  if (code != 0) CopyText(s.error, error);
  Unlock(s);
  if (code == 0) header_->last_progress_ns.store(now_ns, std::memory_order_relaxed);
}

bool IsFlightRing(const void* memory, size_t size) {
  if (memory == nullptr || size < sizeof(FlightHeader)) return false;
  const auto* header = static_cast<const FlightHeader*>(memory);
  return std::memcmp(header->magic, kMagic, sizeof(kMagic)) == 0 &&
         header->slot_bytes == sizeof(FlightSlot) &&
         sizeof(FlightHeader) + uint64_t{header->slots} * sizeof(FlightSlot) <= size;
}

int64_t FlightRingLastProgress(const void* memory, size_t size) {
  if (!IsFlightRing(memory, size)) return 0;
  return static_cast<const FlightHeader*>(memory)->last_progress_ns.load(std::memory_order_relaxed);
}

uint64_t FlightRing::recorded() const {
  return enabled() ? header_->recorded.load(std::memory_order_relaxed) : 0;
}

std::vector<FlightEvent> ReadFlightRing(const void* memory, size_t size) {
  std::vector<FlightEvent> events;
  if (!IsFlightRing(memory, size)) return events;
  // Read once: the writer's memory may change under the reader.
  const uint64_t count = std::min<uint64_t>(static_cast<const FlightHeader*>(memory)->slots,
                                            (size - sizeof(FlightHeader)) / sizeof(FlightSlot));
  const auto* slots =
      reinterpret_cast<const FlightSlot*>(static_cast<const char*>(memory) + sizeof(FlightHeader));
  alignas(FlightSlot) unsigned char copy[sizeof(FlightSlot)];
  for (uint64_t i = 0; i < count; ++i) {
    const FlightSlot& s = slots[i];
    bool consistent = false;
    for (int t = 0; t < kReadTries && !consistent; ++t) {
      const uint32_t before = s.version.load(std::memory_order_acquire);
      std::memcpy(copy, static_cast<const void*>(&s), sizeof(FlightSlot));
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint32_t after = s.version.load(std::memory_order_relaxed);
      consistent = before == after && (before & 1) == 0;
    }
    const auto* c = reinterpret_cast<const FlightSlot*>(copy);
    if (c->state == static_cast<uint32_t>(FlightState::kEmpty) || c->op_id == 0) continue;
    if (c->state > static_cast<uint32_t>(FlightState::kFailed)) continue;
    events.push_back(EventOf(*c, !consistent));
  }
  std::sort(events.begin(), events.end(),
            [](const FlightEvent& a, const FlightEvent& b) { return a.op_id < b.op_id; });
  return events;
}

std::vector<FlightEvent> SelectForDump(const std::vector<FlightEvent>& events,
                                       size_t max_unfinished, size_t max_finished) {
  std::vector<bool> keep(events.size(), false);
  std::vector<size_t> unfinished;
  size_t finished = 0;
  for (size_t i = events.size(); i-- > 0;) {
    if (Finished(events[i])) {
      if (finished < max_finished) keep[i] = true, ++finished;
    } else {
      unfinished.push_back(i);  // newest first
    }
  }
  // The newest half and the oldest half: the op a rank is stuck in is its oldest pending one, and
  // a rank that went on is told by its newest.
  const size_t newest = max_unfinished - max_unfinished / 2;
  for (size_t k = 0; k < unfinished.size(); ++k) {
    if (k < newest || unfinished.size() - k <= max_unfinished / 2) keep[unfinished[k]] = true;
  }
  std::vector<FlightEvent> out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (keep[i]) out.push_back(events[i]);
  }
  return out;
}

std::string EncodeFlightEvent(const FlightEvent& e) {
  std::string out;
  for (int64_t v :
       {static_cast<int64_t>(e.state), static_cast<int64_t>(e.op_id), static_cast<int64_t>(e.seq),
        static_cast<int64_t>(e.set_id), static_cast<int64_t>(e.code), e.bytes, e.submitted_ns,
        e.negotiated_ns, e.data_plane_ns, e.done_ns, static_cast<int64_t>(e.torn)}) {
    out += std::to_string(v);
    out.push_back(',');
  }
  for (const std::string* s : {&e.op, &e.dtype, &e.name, &e.plane}) {
    AppendHex(&out, *s);
    out.push_back(',');
  }
  AppendHex(&out, e.error);
  out.push_back(',');
  AppendHex(&out, e.caller);
  return out;
}

bool DecodeFlightEvent(std::string_view hex, FlightEvent* event) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    const size_t comma = hex.find(',', start);
    fields.push_back(hex.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos || fields.size() > kFields) break;
    start = comma + 1;
  }
  if (fields.size() != kFields) return false;
  int64_t n[11];
  for (int i = 0; i < 11; ++i) {
    if (!ParseI64(fields[i], &n[i])) return false;
  }
  if (n[0] <= 0 || n[0] > static_cast<int64_t>(FlightState::kFailed) || n[1] <= 0 || n[2] < 0 ||
      n[3] < 0 || n[3] > (1 << 30) || n[4] < 0 || n[4] > 1000 || n[5] < 0 ||
      (n[10] != 0 && n[10] != 1)) {
    return false;
  }
  FlightEvent e;
  e.state = static_cast<FlightState>(n[0]);
  e.op_id = static_cast<uint64_t>(n[1]);
  e.seq = static_cast<uint64_t>(n[2]);
  e.set_id = static_cast<int>(n[3]);
  e.code = static_cast<int>(n[4]);
  e.bytes = n[5];
  e.submitted_ns = n[6];
  e.negotiated_ns = n[7];
  e.data_plane_ns = n[8];
  e.done_ns = n[9];
  e.torn = n[10] != 0;
  std::string* texts[] = {&e.op, &e.dtype, &e.name, &e.plane, &e.error, &e.caller};
  for (int i = 0; i < 6; ++i) {
    if (!FromHex(fields[11 + i], texts[i])) return false;
  }
  *event = std::move(e);
  return true;
}

}  // namespace hvx

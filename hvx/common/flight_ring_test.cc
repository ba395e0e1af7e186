#include "hvx/common/flight_ring.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace hvx {
namespace {

struct Ring {
  std::vector<char> memory = std::vector<char>(FlightRingBytes() + 64);
  FlightRing ring;
  Ring() { EXPECT_TRUE(ring.Attach(memory.data(), FlightRingBytes())); }
  std::vector<FlightEvent> Read() const { return ReadFlightRing(memory.data(), memory.size()); }
};

// An op with sequence number `seq`; a single writer's ops get ids 1, 2, ... as seqs here.
FlightRing::Op Op(uint64_t seq, const char* name, int64_t now = 100) {
  return {seq, 0, "allreduce", "float32", 4096, name, now};
}

TEST(FlightRing, RecordsEachOpThroughItsStates) {
  Ring r;
  const FlightRing::Ticket a = r.ring.Submitted(Op(1, "grad.a", 100));
  const FlightRing::Ticket b = r.ring.Submitted(Op(2, "grad.b", 110));
  r.ring.Mark(a.slot, a.id, FlightState::kNegotiated, 120);
  r.ring.Mark(a.slot, a.id, FlightState::kDataPlane, 130, "SHM_ALLREDUCE");
  r.ring.Finish(a.slot, a.id, 0, "", 140);
  r.ring.Finish(b.slot, b.id, 4, "timed out after 6 s waiting for rank 3", 150);
  const std::vector<FlightEvent> events = r.Read();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, "grad.a");
  EXPECT_EQ(events[0].state, FlightState::kDone);
  EXPECT_EQ(events[0].submitted_ns, 100);
  EXPECT_EQ(events[0].negotiated_ns, 120);
  EXPECT_EQ(events[0].data_plane_ns, 130);
  EXPECT_EQ(events[0].done_ns, 140);
  EXPECT_EQ(events[0].plane, "SHM_ALLREDUCE");
  EXPECT_EQ(events[0].op, "allreduce");
  EXPECT_EQ(events[0].dtype, "float32");
  EXPECT_EQ(events[0].bytes, 4096);
  EXPECT_EQ(events[1].state, FlightState::kFailed);
  EXPECT_EQ(events[1].code, 4);
  EXPECT_EQ(events[1].error, "timed out after 6 s waiting for rank 3");
  EXPECT_FALSE(events[1].torn);
}

TEST(FlightRing, AStateNeverGoesBackAndAnOverwrittenSlotIsLeftAlone) {
  Ring r;
  const FlightRing::Ticket a = r.ring.Submitted(Op(1, "x"));
  r.ring.Mark(a.slot, a.id, FlightState::kDataPlane, 130, "MPI_ALLREDUCE");
  r.ring.Mark(a.slot, a.id, FlightState::kNegotiated, 140);
  EXPECT_EQ(r.Read()[0].state, FlightState::kDataPlane);
  EXPECT_EQ(r.Read()[0].negotiated_ns, 130);
  // kFlightSlots later the slot holds another op: late marks of the first change nothing.
  for (uint64_t id = 2; id <= kFlightSlots + 1; ++id) r.ring.Submitted(Op(id, "y"));
  r.ring.Finish(a.slot, a.id, 0, "", 999);
  const std::vector<FlightEvent> events = r.Read();
  ASSERT_EQ(events.size(), kFlightSlots);
  EXPECT_EQ(events.front().op_id, 2u);
  EXPECT_EQ(events.back().op_id, kFlightSlots + 1);
  for (const FlightEvent& e : events) EXPECT_EQ(e.state, FlightState::kSubmitted);
}

// A ring's quiet spell counts from its last progress: its writer attaching, a submission, a step
// on, a success; never a failure (a rank that timed out waits as it did).
TEST(FlightRing, ProgressIsAttachingAndEveryStepOnButNotAFailure) {
  Ring r;
  const int64_t attached = FlightRingLastProgress(r.memory.data(), r.memory.size());
  EXPECT_GT(attached, 0);
  const FlightRing::Ticket a = r.ring.Submitted(Op(1, "a", attached + 10));
  EXPECT_EQ(FlightRingLastProgress(r.memory.data(), r.memory.size()), attached + 10);
  r.ring.Mark(a.slot, a.id, FlightState::kNegotiated, attached + 20);
  EXPECT_EQ(FlightRingLastProgress(r.memory.data(), r.memory.size()), attached + 20);
  r.ring.Finish(a.slot, a.id, 4, "timed out", attached + 30);
  EXPECT_EQ(FlightRingLastProgress(r.memory.data(), r.memory.size()), attached + 20);
  const FlightRing::Ticket b = r.ring.Submitted(Op(2, "b", attached + 40));
  r.ring.Finish(b.slot, b.id, 0, "", attached + 50);
  EXPECT_EQ(FlightRingLastProgress(r.memory.data(), r.memory.size()), attached + 50);
  std::vector<char> junk(FlightRingBytes(), 'x');
  EXPECT_EQ(FlightRingLastProgress(junk.data(), junk.size()), 0);
}

TEST(FlightRing, NamesLongerThanTheFieldAreCut) {
  Ring r;
  const std::string longname(300, 'n');
  r.ring.Submitted(Op(1, longname.c_str()));
  EXPECT_EQ(r.Read()[0].name, std::string(sizeof(FlightSlot::name) - 1, 'n'));
}

TEST(FlightRing, NotARingReadsAsNothing) {
  std::vector<char> junk(FlightRingBytes(), 'x');
  EXPECT_TRUE(ReadFlightRing(junk.data(), junk.size()).empty());
  EXPECT_TRUE(ReadFlightRing(nullptr, 0).empty());
  Ring r;
  r.ring.Submitted(Op(1, "a"));
  EXPECT_TRUE(ReadFlightRing(r.memory.data(), 100).empty());  // cut short
  FlightRing small;
  EXPECT_FALSE(small.Attach(junk.data(), 100));
  EXPECT_EQ(small.Submitted(Op(1, "a")).id, 0u);  // disabled: records nothing, fails nothing
}

TEST(FlightRing, AWriterKilledMidWriteLeavesATornSlot) {
  Ring r;
  r.ring.Submitted(Op(1, "a"));
  auto* slot = reinterpret_cast<FlightSlot*>(r.memory.data() + sizeof(FlightHeader));
  slot->version.fetch_add(1);  // as a writer stopped between its lock and unlock would leave it
  const std::vector<FlightEvent> events = r.Read();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].torn);
}

// The real arrangement: another process (the wrapper) reads a shared ring while the writer
// records ops as fast as it can; every slot it reads is one the writer wrote whole.
TEST(FlightRing, AReaderInAnotherProcessSeesOnlyWholeSlots) {
  void* shared =
      mmap(nullptr, FlightRingBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  FlightRing ring;
  ASSERT_TRUE(ring.Attach(shared, FlightRingBytes()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (uint64_t id = 1;; ++id) {
      const std::string name = "t" + std::to_string(id);
      const FlightRing::Ticket t =
          ring.Submitted({id, 0, "allreduce", "float32", static_cast<int64_t>(id), name,
                          static_cast<int64_t>(id)});
      ring.Finish(t.slot, t.id, 0, "", static_cast<int64_t>(id) + 1);
    }
  }
  // Reading starts once the writer has gone round the ring twice.
  const auto* header = static_cast<const FlightHeader*>(shared);
  while (header->recorded.load() < 2 * kFlightSlots) std::this_thread::yield();
  int checked = 0;
  for (int round = 0; round < 200; ++round) {
    for (const FlightEvent& e : ReadFlightRing(shared, FlightRingBytes())) {
      if (e.torn) continue;
      ASSERT_EQ(e.name, "t" + std::to_string(e.op_id));
      ASSERT_EQ(e.bytes, static_cast<int64_t>(e.op_id));
      ASSERT_EQ(e.submitted_ns, static_cast<int64_t>(e.op_id));
      ++checked;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  munmap(shared, FlightRingBytes());
  EXPECT_GT(checked, 1000);
}

TEST(FlightRing, EventsGoThroughTheirEncodingUnchanged) {
  FlightEvent e;
  e.state = FlightState::kDataPlane;
  e.op_id = 77;
  e.seq = 12;
  e.set_id = 2;
  e.code = 0;
  e.bytes = int64_t{1} << 40;
  e.submitted_ns = 123456789012345;
  e.negotiated_ns = 123456789012346;
  e.data_plane_ns = 123456789012347;
  e.done_ns = 0;
  e.op = "allgather";
  e.dtype = "bfloat16";
  e.name = "grad with spaces,\x01 and commas\n";
  e.plane = "NCCL_ALLGATHER";
  e.error = "";
  e.caller = "models/train.py:42";
  e.torn = true;
  const std::string word = EncodeFlightEvent(e);
  EXPECT_EQ(word.find_first_of(" \n\x01"), std::string::npos);
  FlightEvent back;
  ASSERT_TRUE(DecodeFlightEvent(word, &back));
  EXPECT_EQ(EncodeFlightEvent(back), word);
  EXPECT_EQ(back.name, e.name);
  EXPECT_EQ(back.caller, e.caller);
  EXPECT_TRUE(back.torn);
  for (const char* bad : {"", "1,2,3", "9,1,1,0,0,1,1,1,1,1,0,,,,,,",
                          "1,1,1,0,0,1,1,1,1,1,0,zz,,,,,", "1,1,1,0,0,1,1,1,1,1,0,,,,,,,",
                          "1,0,1,0,0,1,1,1,1,1,0,,,,,,", "1,1,1,0,0,1,1,1,1,1,0,,,,,"}) {
    EXPECT_FALSE(DecodeFlightEvent(bad, &back)) << bad;
  }
  EXPECT_TRUE(DecodeFlightEvent("1,1,1,0,0,1,1,1,1,1,0,,,,,,", &back));
}

TEST(FlightRing, ADumpKeepsTheOldestAndNewestUnfinishedOpsAndTheLastFinishedOnes) {
  std::vector<FlightEvent> events(20);
  for (size_t i = 0; i < events.size(); ++i) {
    events[i].op_id = i + 1;
    events[i].state = i < 10 ? FlightState::kSubmitted : FlightState::kDone;
  }
  std::vector<uint64_t> ids;
  for (const FlightEvent& e : SelectForDump(events, 4, 3)) ids.push_back(e.op_id);
  // The oldest pending (where a rank is stuck), the newest pending, the last finished.
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 9, 10, 18, 19, 20}));
  ids.clear();
  for (const FlightEvent& e : SelectForDump(events, 64, 32)) ids.push_back(e.op_id);
  EXPECT_EQ(ids.size(), 20u);
}

// A writer that died holding a slot (killed between its lock and unlock, in an earlier program on
// the same ring) does not hang the next one: it takes the slot over.
TEST(FlightRing, ASlotLeftLockedByADeadWriterIsTakenOver) {
  Ring r;
  r.ring.Submitted(Op(1, "a"));
  auto* slot = reinterpret_cast<FlightSlot*>(r.memory.data() + sizeof(FlightHeader));
  slot->version.fetch_add(1);
  for (uint64_t id = 2; id <= kFlightSlots + 1; ++id) r.ring.Submitted(Op(id, "b"));
  const std::vector<FlightEvent> events = r.Read();
  ASSERT_EQ(events.size(), kFlightSlots);
  EXPECT_EQ(events.back().op_id, kFlightSlots + 1);
  EXPECT_FALSE(events.back().torn);
  EXPECT_EQ(r.ring.recorded(), kFlightSlots + 1);
}

}  // namespace
}  // namespace hvx

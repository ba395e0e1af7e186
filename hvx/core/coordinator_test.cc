// Negotiation logic without any transport: wire encoding, the response cache, readiness,
// validation, fusion planning and stall reports. Over 700 lines: one case per behaviour of the
// coordinator, which every negotiation goes through (validation's messages case by case:
// validation_test.cc).
#include "hvx/core/coordinator.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hvx/core/fusion.h"
#include "hvx/core/message.h"
#include "hvx/core/response_cache.h"

namespace hvx {
namespace {

Request Allreduce(int rank, const std::string& name, std::vector<int64_t> shape,
                  DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = dtype;
  return r;
}

RequestList List(std::vector<Request> requests) {
  RequestList l;
  l.requests = std::move(requests);
  return l;
}

Request Join() {
  Request r;
  r.type = OpType::kJoin;
  r.name = "join";
  return r;
}

// Three ranks on hosts a, a, b with a 10 s collective timeout and no stall check.
CoordinatorOptions TimeoutOptions() {
  CoordinatorOptions o;
  o.stall_check_time_s = 0;
  o.collective_timeout_s = 10;
  o.global_ranks = {0, 1, 2};
  o.hosts = {"a", "a", "b"};
  return o;
}

TEST(MessageTest, RoundTripsAndRejectsTruncation) {
  RequestList in;
  in.joined = true;
  Request r = Allreduce(3, "grad.w", {2, 3}, DataType::kBfloat16);
  r.type = OpType::kAlltoall;
  r.splits = {1, 1};
  r.prescale = 0.25;
  r.device = Device::Cuda(1);
  r.waited_s = 2.5;
  in.requests.push_back(r);
  const std::string bytes = EncodeRequestList(in);
  auto out = DecodeRequestList(bytes);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->joined);
  ASSERT_EQ(out->requests.size(), 1u);
  EXPECT_EQ(out->requests[0].name, "grad.w");
  EXPECT_EQ(out->requests[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out->requests[0].splits, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(out->requests[0].device, Device::Cuda(1));
  EXPECT_EQ(out->requests[0].prescale, 0.25);
  EXPECT_EQ(out->requests[0].waited_s, 2.5);
  EXPECT_FALSE(DecodeRequestList(bytes.substr(0, bytes.size() - 1)).ok());
  // Found by message_fuzz_test: a peer's unknown data type (or op, reduce op, device) decoded.
  std::string unknown_dtype = bytes;
  // shutdown, joined, count; id 0 and rank 3 as one-byte varints; waited_s; type; name.
  const size_t dtype_at = 1 + 1 + 8 + 1 + 1 + 8 + 1 + 1 + r.name.size();
  ASSERT_EQ(unknown_dtype[dtype_at], static_cast<char>(r.dtype));
  unknown_dtype[dtype_at] = 57;
  EXPECT_TRUE(absl::StrContains(DecodeRequestList(unknown_dtype).status().message(),
                                "entry 0 has op type 3, data type 57"))
      << DecodeRequestList(unknown_dtype).status();

  // Varints: ids past 32 bits, ranks past int32, a varint of 11 bytes, and unknown scale bits are
  // refused; scales of 1 take no bytes and come back as 1.
  {
    RequestList one;
    Request plain = Allreduce(3, "grad.w", {2, 3}, DataType::kFloat32);
    one.requests.push_back(plain);
    const std::string b = EncodeRequestList(one);
    // The fixed 10-byte list header, then a request of 28 bytes (the fixed-width layout took 90).
    EXPECT_EQ(b.size(), 10u + 28u);
    auto back = DecodeRequestList(b);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->requests[0].prescale, 1.0);
    EXPECT_EQ(back->requests[0].postscale, 1.0);
    EXPECT_TRUE(SameRequest(back->requests[0], plain));
    const std::string header = b.substr(0, 10);
    const std::string rest = b.substr(11);                                         // after the id
    EXPECT_FALSE(DecodeRequestList(header + "\x80\x80\x80\x80\x10" + rest).ok());  // 2^32
    EXPECT_FALSE(DecodeRequestList(header + std::string(10, '\xff') + "\x01" + rest).ok());
    std::string rank_too_big = header + "\x00" + "\x80\x80\x80\x80\x10" + b.substr(12);
    EXPECT_FALSE(DecodeRequestList(rank_too_big).ok());
    std::string bad_scales = b;
    const size_t scales_at = b.size() - 2;  // the scale bits, then splits' count
    ASSERT_EQ(bad_scales[scales_at], 0);
    bad_scales[scales_at] = 4;
    EXPECT_FALSE(DecodeRequestList(bad_scales).ok());
  }

  ResponseList rl;
  Response resp;
  resp.names = {"a", "b"};
  resp.shapes = {{1}, {2, 2}};
  resp.rows = {4, 5};
  resp.error = "boom";
  resp.error_code = static_cast<uint8_t>(absl::StatusCode::kDeadlineExceeded);
  resp.dtype = DataType::kInt16;
  resp.last_joined_rank = 1;
  rl.responses.push_back(resp);
  rl.shutdown = true;
  auto back = DecodeResponseList(EncodeResponseList(rl));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->shutdown);
  EXPECT_FALSE(back->stats_due);
  rl.shutdown = false;
  rl.stats_due = true;
  auto due = DecodeResponseList(EncodeResponseList(rl));
  ASSERT_TRUE(due.ok());
  EXPECT_FALSE(due->shutdown);
  EXPECT_TRUE(due->stats_due);
  EXPECT_EQ(back->responses[0].names, resp.names);
  EXPECT_EQ(back->responses[0].shapes, resp.shapes);
  EXPECT_EQ(back->responses[0].error, "boom");
  EXPECT_EQ(back->responses[0].error_code, resp.error_code);
  EXPECT_EQ(back->responses[0].dtype, DataType::kInt16);
  EXPECT_EQ(back->responses[0].last_joined_rank, 1);
}

// Rank 0 reads each host's list entry by entry, reusing one request: an entry by id after one by
// name must not keep the named one's fields, a callback's error ends the visit unchanged, and a
// corrupt entry fails it after the entries before it.
TEST(MessageTest, VisitingAHostListGivesEachEntryAsDecoded) {
  Request by_id;
  by_id.id = 9;
  by_id.waited_s = 0.25;
  const std::vector<RequestList> lists = {
      List({Allreduce(2, "grad.a", {4, 5}, DataType::kInt32), by_id}),
      List({Allreduce(3, "grad.b", {6}), by_id})};
  const HostRequestList merged = MergeHostRequests({2, 3}, lists).value();
  const std::string bytes = EncodeHostRequestList(merged);
  std::vector<HostRequestList::Entry> seen;
  std::vector<int32_t> ranks;
  ASSERT_TRUE(VisitHostRequestList(
                  bytes,
                  [&](const HostRequestList& header) {
                    ranks = header.ranks;
                    EXPECT_TRUE(header.entries.empty());
                    return absl::OkStatus();
                  },
                  [&](const HostRequestList&, const Request& r, const std::vector<uint64_t>& m) {
                    seen.push_back({r, m});
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(ranks, (std::vector<int32_t>{2, 3}));
  const HostRequestList decoded = DecodeHostRequestList(bytes).value();
  ASSERT_EQ(seen.size(), 3u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_TRUE(SameRequest(seen[i].request, decoded.entries[i].request)) << i;
    EXPECT_EQ(seen[i].request.id, decoded.entries[i].request.id) << i;
    EXPECT_EQ(seen[i].mask, decoded.entries[i].mask) << i;
  }
  // The id entry follows "grad.a" by name (rank 2's list merged first), and carries none of its
  // fields.
  EXPECT_EQ(seen[1].request.id, 9u);
  EXPECT_TRUE(seen[1].request.name.empty());
  EXPECT_TRUE(seen[1].request.shape.empty());
  EXPECT_EQ(seen[1].request.dtype, DataType::kFloat32);

  int visited = 0;
  const absl::Status stop = absl::DataLossError("the coordinator refused it");
  EXPECT_EQ(VisitHostRequestList(
                bytes, [](const HostRequestList&) { return absl::OkStatus(); },
                [&](const HostRequestList&, const Request&, const std::vector<uint64_t>&) {
                  return ++visited == 2 ? stop : absl::OkStatus();
                }),
            stop);
  EXPECT_EQ(visited, 2);
  visited = 0;
  const absl::Status cut = VisitHostRequestList(
      bytes.substr(0, bytes.size() - 1), [](const HostRequestList&) { return absl::OkStatus(); },
      [&](const HostRequestList&, const Request&, const std::vector<uint64_t>&) {
        ++visited;
        return absl::OkStatus();
      });
  EXPECT_EQ(cut.code(), absl::StatusCode::kDataLoss) << cut;
  EXPECT_EQ(visited, 2);
}

TEST(MessageTest, HostListMergesEqualRequestsAndKeepsDifferentOnes) {
  // Host of set ranks 4, 6, 9: rank 6 sends x as int32, and y by id.
  Request y_by_id;
  y_by_id.id = 7;
  y_by_id.waited_s = 0.5;
  std::vector<RequestList> lists = {List({Allreduce(4, "x", {3})}),
                                    List({Allreduce(6, "x", {3}, DataType::kInt32), y_by_id}),
                                    List({Allreduce(9, "x", {3}), y_by_id})};
  lists[2].shutdown = true;
  lists[2].requests[1].waited_s = 1.5;
  const HostRequestList merged = MergeHostRequests({4, 6, 9}, lists).value();
  ASSERT_EQ(merged.entries.size(), 3u);
  EXPECT_EQ(merged.entries[0].request.dtype, DataType::kFloat32);
  EXPECT_EQ(merged.entries[0].mask, (std::vector<uint64_t>{0b101}));
  EXPECT_EQ(merged.entries[1].request.dtype, DataType::kInt32);
  EXPECT_EQ(merged.entries[1].mask, (std::vector<uint64_t>{0b010}));
  EXPECT_EQ(merged.entries[2].request.id, 7u);
  EXPECT_EQ(merged.entries[2].mask, (std::vector<uint64_t>{0b110}));
  EXPECT_EQ(merged.entries[2].request.waited_s, 1.5);
  EXPECT_EQ(merged.shutdown, (std::vector<uint64_t>{0b100}));

  const std::string bytes = EncodeHostRequestList(merged);
  auto back = DecodeHostRequestList(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(EncodeHostRequestList(*back), bytes);
  EXPECT_EQ(back->ranks, (std::vector<int32_t>{4, 6, 9}));
  EXPECT_FALSE(DecodeHostRequestList(bytes.substr(0, bytes.size() - 1)).ok());
  // A mask naming a fourth member of a three-rank host is corrupt.
  HostRequestList bad = merged;
  bad.entries[0].mask[0] |= 0b1000;
  EXPECT_EQ(DecodeHostRequestList(EncodeHostRequestList(bad)).status().code(),
            absl::StatusCode::kDataLoss);
  bad = merged;
  bad.ranks = {6, 4, 9};
  EXPECT_FALSE(DecodeHostRequestList(EncodeHostRequestList(bad)).ok());
}

TEST(MessageTest, RejectsListsThatNameNoRankTheSameRankTwiceOrIdZero) {
  EXPECT_EQ(MergeHostRequests({4, 6}, {List({Allreduce(4, "x", {3})})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  HostRequestList host =
      MergeHostRequests({4, 6}, {List({Allreduce(4, "x", {3})}), List({Allreduce(6, "x", {3})})})
          .value();
  HostRequestList bad = host;
  bad.entries[0].mask = {0};
  EXPECT_EQ(DecodeHostRequestList(EncodeHostRequestList(bad)).status().code(),
            absl::StatusCode::kDataLoss);
  bad = host;
  bad.ranks.clear();
  bad.shutdown.clear();
  bad.entries[0].mask.clear();
  EXPECT_EQ(DecodeHostRequestList(EncodeHostRequestList(bad)).status().code(),
            absl::StatusCode::kDataLoss);
  bad = HostRequestList{};
  bad.error = "cannot read";
  EXPECT_EQ(DecodeHostRequestList(EncodeHostRequestList(bad)).value().error, "cannot read");

  ResponseList out;
  out.assigned = {{0, "x"}};
  EXPECT_EQ(DecodeResponseList(EncodeResponseList(out)).status().code(),
            absl::StatusCode::kDataLoss);
  out.assigned = {{3, "x"}, {3, "y"}};
  EXPECT_EQ(DecodeResponseList(EncodeResponseList(out)).status().code(),
            absl::StatusCode::kDataLoss);
  out.assigned = {{3, "x"}, {4, "y"}};
  out.error = "stop";
  EXPECT_EQ(DecodeResponseList(EncodeResponseList(out)).value().error, "stop");

  // Rank 6 in two entries for x: which request is its?
  Coordinator c(8, CoordinatorOptions{});
  bad = host;
  bad.entries.push_back(bad.entries[0]);
  bad.entries[1].request.shape = {5};
  bad.entries[1].mask = {0b10};
  const absl::Status twice = c.Add(bad, absl::Now());
  EXPECT_EQ(twice.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(twice.message(), "a host's request list names set rank 6 twice for tensor 'x'");
}

TEST(CoordinatorTest, AllgatherRowsFromManySubmissionsAndOneLargeOne) {
  // 130 ranks, added from the highest down: ranks 0..69 share one request (more ranks than its
  // list keeps before it becomes a bitset), the others each send their own first dimension.
  constexpr int kRanks = 130;
  Coordinator c(kRanks, CoordinatorOptions{});
  const absl::Time now = absl::Now();
  for (int r = kRanks - 1; r >= 0; --r) {
    Request q = Allreduce(r, "g", {r < 70 ? 2 : r, 3});
    q.type = OpType::kAllgather;
    ASSERT_TRUE(c.Add(r, List({q}), now).ok());
  }
  const ResponseList out = c.Build(now);
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_EQ(out.responses[0].type, OpType::kAllgather) << out.responses[0].error;
  std::vector<int64_t> rows;
  for (int r = 0; r < kRanks; ++r) rows.push_back(r < 70 ? 2 : r);
  EXPECT_EQ(out.responses[0].rows, rows);
}

TEST(CoordinatorTest, AnUnknownTensorIdNamesWhoSentIt) {
  Coordinator c(8, CoordinatorOptions{});
  Request by_id;
  by_id.id = 99;
  EXPECT_EQ(c.Add(1, List({by_id}), absl::Now()).message(),
            "set rank 1 sent tensor id 99, which the coordinator has not announced");
  const HostRequestList host = MergeHostRequests({3, 5}, {List({by_id}), List({by_id})}).value();
  EXPECT_EQ(c.Add(host, absl::Now()).message(),
            "the host whose first rank is set rank 3 sent tensor id 99, which the coordinator has "
            "not announced");
}

// The lists of `ranks` ranks on hosts of the given sizes, merged per host.
std::vector<HostRequestList> PerHost(const std::vector<RequestList>& lists,
                                     const std::vector<int>& host_sizes) {
  std::vector<HostRequestList> hosts;
  int next = 0;
  for (int n : host_sizes) {
    std::vector<int32_t> members;
    std::vector<RequestList> mine;
    for (int i = 0; i < n; ++i, ++next) {
      members.push_back(next);
      mine.push_back(lists[next]);
    }
    hosts.push_back(
        DecodeHostRequestList(EncodeHostRequestList(MergeHostRequests(members, mine).value()))
            .value());
  }
  return hosts;
}

// Uneven hosts of 3, 1 and 2 ranks: what the coordinator answers to per-host lists is what it
// answers to the same requests rank by rank.
TEST(CoordinatorTest, PerHostListsGiveTheSameResponsesAsPerRankLists) {
  struct Case {
    int odd_rank;
    Request odd;
    std::string error;
  };
  std::vector<Case> cases = {
      {5, Allreduce(5, "x", {3}, DataType::kInt32),
       "tensor 'x': mismatched data types: rank 0 sent float32, rank 5 sent int32"},
      {4, Allreduce(4, "x", {4}),
       "tensor 'x': mismatched ALLREDUCE shapes: rank 0 sent [3], rank 4 sent [4]"},
      {1, Allreduce(1, "x", {3}), ""},
  };
  cases[2].odd.reduce_op = ReduceOp::kMax;
  cases[2].error = "tensor 'x': mismatched reduction operations: rank 0 used sum, rank 1 used max";
  for (const Case& k : cases) {
    std::vector<RequestList> lists;
    for (int r = 0; r < 6; ++r) {
      lists.push_back(List({r == k.odd_rank ? k.odd : Allreduce(r, "x", {3})}));
    }
    Coordinator flat(6, CoordinatorOptions{});
    for (int r = 0; r < 6; ++r) ASSERT_TRUE(flat.Add(r, lists[r], absl::Now()).ok());
    Coordinator hosts(6, CoordinatorOptions{});
    for (const HostRequestList& h : PerHost(lists, {3, 1, 2})) {
      ASSERT_TRUE(hosts.Add(h, absl::Now()).ok());
    }
    const ResponseList a = flat.Build(absl::Now());
    const ResponseList b = hosts.Build(absl::Now());
    ASSERT_EQ(a.responses.size(), 1u);
    ASSERT_EQ(b.responses.size(), 1u);
    EXPECT_EQ(a.responses[0].error, k.error);
    EXPECT_EQ(b.responses[0].error, k.error);
  }
}

TEST(CoordinatorTest, StallReportNamesTheMissingRankOfAnotherHost) {
  CoordinatorOptions o;
  o.stall_check_time_s = 0;
  Coordinator c(6, o);
  const absl::Time t0 = absl::Now();
  std::vector<RequestList> lists;
  for (int r = 0; r < 6; ++r) {
    lists.push_back(r == 4 ? RequestList{} : List({Allreduce(r, "w1", {1})}));
  }
  for (const HostRequestList& h : PerHost(lists, {3, 1, 2})) ASSERT_TRUE(c.Add(h, t0).ok());
  EXPECT_TRUE(c.Build(t0).responses.empty());
  EXPECT_EQ(c.StallReport(t0 + absl::Seconds(2), absl::Seconds(1)), "Missing ranks:\n  4: [w1]\n");
}

TEST(CoordinatorTest, ATensorIdStandsForItsRequestUntilRetired) {
  CoordinatorOptions o;
  o.stall_check_time_s = 0;
  o.max_tensor_ids = 2;
  Coordinator c(2, o);
  const absl::Time now = absl::Now();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(c.Add(r, List({Allreduce(r, "a", {3}), Allreduce(r, "b", {3})}), now).ok());
  }
  ResponseList first = c.Build(now);
  ASSERT_EQ(first.assigned.size(), 2u);
  EXPECT_EQ(first.assigned[0].name, "a");
  EXPECT_TRUE(first.retired.empty());
  const uint32_t a_id = first.assigned[0].id;

  // Rank 0 by id, rank 1 by name: the same request.
  Request by_id;
  by_id.id = a_id;
  ASSERT_TRUE(c.Add(0, List({by_id}), now).ok());
  ASSERT_TRUE(c.Add(1, List({Allreduce(1, "a", {3})}), now).ok());
  ResponseList second = c.Build(now);
  ASSERT_EQ(second.responses.size(), 1u);
  EXPECT_EQ(second.responses[0].type, OpType::kAllreduce);
  EXPECT_EQ(second.responses[0].names, (std::vector<std::string>{"a"}));
  EXPECT_EQ(second.responses[0].shapes, (std::vector<std::vector<int64_t>>{{3}}));

  // By id against a changed request: the error names what each rank meant.
  ASSERT_TRUE(c.Add(0, List({by_id}), now).ok());
  ASSERT_TRUE(c.Add(1, List({Allreduce(1, "a", {5})}), now).ok());
  EXPECT_EQ(c.Build(now).responses[0].error,
            "tensor 'a': mismatched ALLREDUCE shapes: rank 0 sent [3], rank 1 sent [5]");

  // A third name over max_tensor_ids = 2 retires the least recently used, b.
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.Add(r, List({Allreduce(r, "c", {1})}), now).ok());
  ResponseList third = c.Build(now);
  ASSERT_EQ(third.retired.size(), 1u);
  EXPECT_EQ(third.retired[0], first.assigned[1].id);
  Request stale;
  stale.id = first.assigned[1].id;
  const absl::Status unknown = c.Add(1, List({stale}), now);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(unknown.message(), "tensor id")) << unknown;
}

// Negotiates `name` by name on both ranks of `c`, then by the id it got; returns that id.
uint32_t NegotiateAndUseId(Coordinator& c, const std::string& name) {
  const absl::Time now = absl::Now();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(c.Add(r, List({Allreduce(r, name, {2})}), now).ok());
  const ResponseList named = c.Build(now);
  EXPECT_EQ(named.assigned.size(), 1u);
  if (named.assigned.size() != 1) return 0;
  Request by_id;
  by_id.id = named.assigned[0].id;
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(c.Add(r, List({by_id}), now).ok());
  const ResponseList by_ids = c.Build(now);
  EXPECT_EQ(by_ids.responses.size(), 1u);
  if (by_ids.responses.size() == 1) {
    EXPECT_EQ(by_ids.responses[0].names, std::vector<std::string>{name});
  }
  return by_id.id;
}

TEST(CoordinatorTest, TensorIdsWrapPastZeroAndNeverCollide) {
  CoordinatorOptions o;
  o.stall_check_time_s = 0;
  o.first_tensor_id = 0xfffffffe;
  Coordinator c(2, o);
  EXPECT_EQ(NegotiateAndUseId(c, "a"), 0xfffffffeu);
  EXPECT_EQ(NegotiateAndUseId(c, "b"), 0xffffffffu);
  // Past the top the counter skips 0 ("by name") and goes on at 1.
  EXPECT_EQ(NegotiateAndUseId(c, "c"), 1u);
  // The earlier names keep their ids.
  EXPECT_EQ(NegotiateAndUseId(c, "a"), 0xfffffffeu);
}

TEST(CoordinatorTest, ARetiredTensorIdGoesToTheNextNewName) {
  CoordinatorOptions o;
  o.stall_check_time_s = 0;
  o.max_tensor_ids = 2;
  Coordinator c(2, o);
  std::set<uint32_t> seen;
  uint32_t retired = 0;
  for (int i = 0; i < 6; ++i) {
    const absl::Time now = absl::Now();
    const std::string name = absl::StrCat("t", i);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.Add(r, List({Allreduce(r, name, {2})}), now).ok());
    const ResponseList out = c.Build(now);
    ASSERT_EQ(out.assigned.size(), 1u);
    const uint32_t id = out.assigned[0].id;
    EXPECT_NE(id, 0u);
    if (retired != 0) EXPECT_EQ(id, retired) << name;
    seen.insert(id);
    retired = out.retired.empty() ? 0 : out.retired.back();
    // The id now stands for this name only.
    Request by_id;
    by_id.id = id;
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.Add(r, List({by_id}), now).ok());
    const ResponseList again = c.Build(now);
    ASSERT_EQ(again.responses.size(), 1u);
    EXPECT_EQ(again.responses[0].names, std::vector<std::string>{name});
  }
  EXPECT_LE(seen.size(), 3u);
}

Response Single(const std::string& name, std::vector<int64_t> shape) {
  Response r;
  r.names = {name};
  r.shapes = {std::move(shape)};
  return r;
}

TEST(ResponseCacheTest, HitInvalidMissAndLruEviction) {
  ResponseCache cache(2);
  EXPECT_FALSE(cache.Put(Single("a", {4})));
  EXPECT_FALSE(cache.Put(Single("b", {4})));
  int bit = -1;
  EXPECT_EQ(cache.Find(Allreduce(0, "a", {4}), &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, 0);
  EXPECT_EQ(cache.Find(Allreduce(0, "a", {5}), &bit), ResponseCache::Lookup::kInvalid);
  EXPECT_EQ(cache.Find(Allreduce(0, "a", {4}, DataType::kInt32), &bit),
            ResponseCache::Lookup::kInvalid);
  EXPECT_EQ(cache.Find(Allreduce(0, "c", {4}), &bit), ResponseCache::Lookup::kMiss);
  // "a" becomes most recent, so "b" (bit 1) is evicted and "c" takes its bit.
  EXPECT_FALSE(cache.Put(Single("a", {4})));
  EXPECT_TRUE(cache.Put(Single("c", {4})));
  EXPECT_EQ(cache.Find(Allreduce(0, "b", {4}), &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(cache.Find(Allreduce(0, "c", {4}), &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, 1);
  ResponseCache off(0);
  EXPECT_FALSE(off.Put(Single("a", {4})));
  EXPECT_EQ(off.Find(Allreduce(0, "a", {4}), &bit), ResponseCache::Lookup::kMiss);
}

TEST(FuseResponsesTest, FusesOnlyCompatibleUpToThreshold) {
  std::vector<Response> in = {Single("a", {4}), Single("b", {4}), Single("c", {4}),
                              Single("d", {4})};
  in[2].dtype = DataType::kFloat64;  // incompatible: its own response
  auto out = FuseResponses(in, 32);  // 16 bytes each: a+b fit, d starts a new one
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"c"}));
  EXPECT_EQ(out[2].names, (std::vector<std::string>{"d"}));
  EXPECT_EQ(FuseResponses(in, 0).size(), 4u);
  EXPECT_EQ(FuseResponses(in, 1 << 20).size(), 2u);
}

TEST(CoordinatorTest, ReadyOnlyWhenEveryRankSubmitted) {
  Coordinator c(2, CoordinatorOptions{});
  const absl::Time now = absl::Now();
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "x", {3})}), now).ok());
  EXPECT_TRUE(c.Build(now).responses.empty());
  EXPECT_EQ(c.pending(), 1u);
  ASSERT_TRUE(c.Add(1, List({Allreduce(1, "x", {3})}), now).ok());
  auto out = c.Build(now);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kAllreduce);
  EXPECT_EQ(c.pending(), 0u);
}

TEST(CoordinatorTest, DisagreementsBecomeErrorsNamingRanks) {
  struct Case {
    Request b;
    const char* text;
  } cases[] = {
      {Allreduce(1, "x", {4}), "mismatched ALLREDUCE shapes: rank 0 sent [3], rank 1 sent [4]"},
      {Allreduce(1, "x", {3}, DataType::kInt32),
       "mismatched data types: rank 0 sent float32, rank 1 sent int32"},
  };
  for (const Case& k : cases) {
    Coordinator c(2, CoordinatorOptions{});
    ASSERT_TRUE(c.Add(0, List({Allreduce(0, "x", {3})}), absl::Now()).ok());
    ASSERT_TRUE(c.Add(1, List({k.b}), absl::Now()).ok());
    auto out = c.Build(absl::Now());
    ASSERT_EQ(out.responses.size(), 1u);
    EXPECT_EQ(out.responses[0].type, OpType::kError);
    EXPECT_TRUE(absl::StrContains(out.responses[0].error, k.text)) << out.responses[0].error;
    EXPECT_TRUE(absl::StrContains(out.responses[0].error, "tensor 'x'"));
  }
  Coordinator c(2, CoordinatorOptions{});
  Request scaled = Allreduce(1, "y", {3});
  scaled.postscale = 2;
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "y", {3})}), absl::Now()).ok());
  ASSERT_TRUE(c.Add(1, List({scaled}), absl::Now()).ok());
  EXPECT_TRUE(absl::StrContains(c.Build(absl::Now()).responses[0].error, "prescale/postscale"));
}

// Splits whose sum wraps around to the rank's first dimension: 2 * (2^63 - 1) + 4 = 2 (mod 2^64).
// Before, the coordinator accepted them, and the receivers' output sizes overflowed.
TEST(CoordinatorTest, AlltoallSplitsThatSumPastTheLimitAreRefused) {
  Coordinator c(3, CoordinatorOptions{});
  for (int r = 0; r < 3; ++r) {
    Request q = Allreduce(r, "a2a", {r == 0 ? 2 : 3});
    q.type = OpType::kAlltoall;
    q.splits =
        r == 0 ? std::vector<int64_t>{INT64_MAX, INT64_MAX, 4} : std::vector<int64_t>{1, 1, 1};
    ASSERT_TRUE(c.Add(r, List({q}), absl::Now()).ok());
  }
  auto out = c.Build(absl::Now());
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kError);
  EXPECT_TRUE(absl::StrContains(out.responses[0].error,
                                "rank 0's ALLTOALL splits (9223372036854775807, "
                                "9223372036854775807, 4) sum past 2^63"))
      << out.responses[0].error;
}

// What a peer sends is checked before any rank acts on it: a negative dimension (outputs are sized
// from it), and an AddProcessSet whose ranks differ between ranks or lie outside the job (every
// rank indexed its host list with them).
TEST(CoordinatorTest, PeersNumbersAreCheckedBeforeUse) {
  {
    Coordinator c(2, CoordinatorOptions{});
    for (int r = 0; r < 2; ++r) {
      Request q = Allreduce(r, "g", {r == 0 ? 3 : -5});
      q.type = OpType::kAllgather;
      ASSERT_TRUE(c.Add(r, List({q}), absl::Now()).ok());
    }
    auto out = c.Build(absl::Now());
    ASSERT_EQ(out.responses.size(), 1u);
    EXPECT_EQ(out.responses[0].type, OpType::kError);
    EXPECT_TRUE(
        absl::StrContains(out.responses[0].error, "rank 1 sent a negative dimension in [-5]"))
        << out.responses[0].error;
  }
  for (const auto& [theirs, text] :
       {std::pair<std::vector<int64_t>, const char*>{{0, 2},
                                                     "mismatched process set ranks: rank 0 listed "
                                                     "0,1, rank 1 listed 0,2"},
        {{0, 1}, ""}}) {
    Coordinator c(2, CoordinatorOptions{});
    for (int r = 0; r < 2; ++r) {
      Request q;
      q.type = OpType::kAddProcessSet;
      q.name = "process_set.add.0,1";
      q.splits = r == 0 ? std::vector<int64_t>{0, 1} : theirs;
      ASSERT_TRUE(c.Add(r, List({q}), absl::Now()).ok());
    }
    auto out = c.Build(absl::Now());
    ASSERT_EQ(out.responses.size(), 1u);
    if (*text == '\0') {
      EXPECT_EQ(out.responses[0].type, OpType::kAddProcessSet);
    } else {
      EXPECT_EQ(out.responses[0].type, OpType::kError);
      EXPECT_TRUE(absl::StrContains(out.responses[0].error, text)) << out.responses[0].error;
    }
  }
  Coordinator c(2, CoordinatorOptions{});
  for (int r = 0; r < 2; ++r) {
    Request q;
    q.type = OpType::kAddProcessSet;
    q.name = "process_set.add.0,99999";
    q.splits = {0, 99999};
    ASSERT_TRUE(c.Add(r, List({q}), absl::Now()).ok());
  }
  auto out = c.Build(absl::Now());
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_TRUE(absl::StrContains(out.responses[0].error,
                                "process set rank 99999 is outside the job of size 2"))
      << out.responses[0].error;
}

TEST(CoordinatorTest, AdasumNeedsPowerOfTwo) {
  Coordinator c(3, CoordinatorOptions{});
  for (int r = 0; r < 3; ++r) {
    Request q = Allreduce(r, "a", {2});
    q.reduce_op = ReduceOp::kAdasum;
    ASSERT_TRUE(c.Add(r, List({q}), absl::Now()).ok());
  }
  EXPECT_TRUE(absl::StrContains(c.Build(absl::Now()).responses[0].error, "power-of-two"));
}

TEST(CoordinatorTest, JoinedRanksCountAsReadyAndLastJoinerIsReported) {
  Coordinator c(3, CoordinatorOptions{{}, 60, 0, {0, 1, 2}, nullptr});
  const Request join = Join();
  ASSERT_TRUE(c.Add(2, List({join}), absl::Now()).ok());
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "g", {2})}), absl::Now()).ok());
  ASSERT_TRUE(c.Add(1, List({Allreduce(1, "g", {2})}), absl::Now()).ok());
  auto out = c.Build(absl::Now());
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kAllreduce);
  Request gather = Allreduce(0, "ag", {2});
  gather.type = OpType::kAllgather;
  ASSERT_TRUE(c.Add(0, List({gather}), absl::Now()).ok());
  gather.rank = 1;
  ASSERT_TRUE(c.Add(1, List({gather}), absl::Now()).ok());
  out = c.Build(absl::Now());
  EXPECT_TRUE(absl::StrContains(out.responses[0].error,
                                "not supported while ranks have joined (joined: 2)"));
  ASSERT_TRUE(c.Add(1, List({join}), absl::Now()).ok());
  ASSERT_TRUE(c.Add(0, List({join}), absl::Now()).ok());
  out = c.Build(absl::Now());
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kJoin);
  EXPECT_EQ(out.responses[0].last_joined_rank, 0);
}

// With a rank joined, an allgather is an error whatever the others do: it fails in the round its
// first request arrives, not after the collective timeout waiting for ranks that may have named it
// differently (their unnamed-op counts differ in a loop where a different rank joins each time).
TEST(CoordinatorTest, NonAllreduceFailsAtOnceWhileARankHasJoined) {
  Coordinator c(3, CoordinatorOptions{{}, 60, 0, {0, 1, 2}, nullptr});
  const Request join = Join();
  ASSERT_TRUE(c.Add(1, List({join}), absl::Now()).ok());
  Request gather = Allreduce(0, "allgather.noname.0", {2});
  gather.type = OpType::kAllgather;
  ASSERT_TRUE(c.Add(0, List({gather}), absl::Now()).ok());
  auto out = c.Build(absl::Now());
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kError);
  EXPECT_EQ(out.responses[0].names, std::vector<std::string>{"allgather.noname.0"});
  EXPECT_TRUE(absl::StrContains(out.responses[0].error,
                                "not supported while ranks have joined (joined: 1)"));
  // An allreduce still waits for the ranks that have not joined.
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "g", {2})}), absl::Now()).ok());
  EXPECT_TRUE(c.Build(absl::Now()).responses.empty());
  ASSERT_TRUE(c.Add(2, List({Allreduce(2, "g", {2})}), absl::Now()).ok());
  out = c.Build(absl::Now());
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kAllreduce);
}

TEST(CoordinatorTest, StallReportListsMissingRanksAndShutdownFailsThem) {
  CoordinatorOptions o;
  o.stall_check_time_s = 1;
  o.stall_shutdown_time_s = 2;
  o.global_ranks = {0, 1, 2};
  Coordinator c(3, o);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "w1", {1}), Allreduce(0, "w2", {1})}), t0).ok());
  ASSERT_TRUE(c.Add(1, List({Allreduce(1, "w1", {1})}), t0).ok());
  EXPECT_EQ(c.StallReport(t0, absl::Seconds(1)), "");
  EXPECT_EQ(c.StallReport(t0 + absl::Seconds(1.5), absl::Seconds(1)),
            "Missing ranks:\n  1: [w2]\n  2: [w1, w2]\n");
  EXPECT_TRUE(c.Build(t0 + absl::Seconds(1.5)).responses.empty());
  auto out = c.Build(t0 + absl::Seconds(3));
  ASSERT_EQ(out.responses.size(), 2u);
  EXPECT_EQ(out.responses[0].type, OpType::kError);
  EXPECT_TRUE(absl::StrContains(out.responses[0].error, "stalled")) << out.responses[0].error;
  EXPECT_TRUE(absl::StrContains(out.responses[0].error, "2: [w1, w2]"));
  EXPECT_EQ(c.pending(), 0u);
}

TEST(CoordinatorTest, CollectiveTimeoutFailsANameSomeRanksNeverSubmitted) {
  Coordinator c(3, TimeoutOptions());
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "w", {1})}), t0).ok());
  Request waited = Allreduce(1, "w", {1});
  waited.waited_s = 4;  // rank 1 had waited in the response cache before sending it
  ASSERT_TRUE(c.Add(1, List({waited}), t0 + absl::Seconds(1)).ok());
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(5)));
  EXPECT_TRUE(c.Build(t0 + absl::Seconds(5)).responses.empty());
  // The wait counts from rank 1's submission, 3 s before rank 0's.
  EXPECT_TRUE(c.CheckDue(t0 + absl::Seconds(7)));
  auto out = c.Build(t0 + absl::Seconds(7));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kError);
  EXPECT_EQ(out.responses[0].error_code, static_cast<uint8_t>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(
      out.responses[0].error,
      "ALLREDUCE 'w' timed out after 10 s (HVX_COLLECTIVE_TIMEOUT_S): rank 2 (host b) did "
      "not submit it (submitted by rank 0, rank 1). Every rank must run the same collectives: "
      "a rank that skipped this one, failed before it or runs different names leaves the "
      "others waiting.");
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(30)));
}

// A join waits as long as the other ranks keep running collectives with it, and fails when none
// joined nor completed one within the timeout.
TEST(CoordinatorTest, JoinFailsWhenNoCollectiveCompletesWithinTheTimeout) {
  Coordinator c(3, TimeoutOptions());
  const absl::Time t0 = absl::Now();
  const Request join = Join();
  ASSERT_TRUE(c.Add(1, List({join}), t0).ok());
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(9)));
  // Ranks 0 and 2 still train: an allreduce completes at 9 s, so the wait counts from there.
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "g", {2})}), t0 + absl::Seconds(9)).ok());
  ASSERT_TRUE(c.Add(2, List({Allreduce(2, "g", {2})}), t0 + absl::Seconds(9)).ok());
  ASSERT_EQ(c.Build(t0 + absl::Seconds(9)).responses.size(), 1u);
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(15)));
  EXPECT_TRUE(c.Build(t0 + absl::Seconds(15)).responses.empty());
  EXPECT_TRUE(c.CheckDue(t0 + absl::Seconds(19)));
  auto out = c.Build(t0 + absl::Seconds(19));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kError);
  EXPECT_EQ(out.responses[0].names, std::vector<std::string>{"join"});
  EXPECT_EQ(out.responses[0].error_code, static_cast<uint8_t>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(absl::StartsWith(
      out.responses[0].error,
      "JOIN timed out after 10 s (HVX_COLLECTIVE_TIMEOUT_S): rank 0 (host a), rank 2 (host b) "
      "neither joined nor ran a collective in that time (joined: rank 1)."))
      << out.responses[0].error;
  // The joined rank left the join: an allreduce waits for it again, and a new join starts over.
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(60)));
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "h", {2})}), t0 + absl::Seconds(20)).ok());
  ASSERT_TRUE(c.Add(2, List({Allreduce(2, "h", {2})}), t0 + absl::Seconds(20)).ok());
  EXPECT_TRUE(c.Build(t0 + absl::Seconds(20)).responses.empty());
}

TEST(CoordinatorTest, DisagreementsAreInvalidArgument) {
  Coordinator c(2, CoordinatorOptions{});
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "w", {1})}), t0).ok());
  ASSERT_TRUE(c.Add(1, List({Allreduce(1, "w", {2})}), t0).ok());
  auto out = c.Build(t0);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].error_code, static_cast<uint8_t>(absl::StatusCode::kInvalidArgument));
}

TEST(CoordinatorTest, StallWarningIsDueWithoutNewRequests) {
  CoordinatorOptions o;
  o.stall_check_time_s = 2;
  Coordinator c(2, o);
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(100)));
  ASSERT_TRUE(c.Add(0, List({Allreduce(0, "w", {1})}), t0).ok());
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(1)));
  EXPECT_TRUE(c.CheckDue(t0 + absl::Seconds(3)));
  c.Build(t0 + absl::Seconds(3));  // warns
  EXPECT_FALSE(c.CheckDue(t0 + absl::Seconds(4)));
  EXPECT_TRUE(c.CheckDue(t0 + absl::Seconds(5)));
}

}  // namespace
}  // namespace hvx

#include "hvx/launch/flight_verdict.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvx/common/json.h"

namespace hvx {
namespace launch {
namespace {

constexpr int kDeadline = static_cast<int>(absl::StatusCode::kDeadlineExceeded);
constexpr int kInvalidArgument = static_cast<int>(absl::StatusCode::kInvalidArgument);
// Ranks the line names one by one; the rest are counted.
constexpr size_t kNamedRanks = 4;
// Ops of a culprit shown under the verdict.
constexpr size_t kShownOps = 3;

// The rank reached the op and it never completed there: still pending, or failed (at the timeout,
// or because a peer failed inside it).
bool Waiting(const FlightEvent& e) {
  return e.state == FlightState::kSubmitted || e.state == FlightState::kNegotiated ||
         e.state == FlightState::kDataPlane || e.state == FlightState::kFailed;
}

bool StillInside(const FlightEvent& e) {
  return e.state != FlightState::kDone && e.state != FlightState::kFailed;
}

// Seconds from t to when hvxrun began stopping the job.
double Ago(const RankFlight& f, int64_t t) {
  return t > 0 ? (static_cast<double>(f.now_ns) - static_cast<double>(t)) / 1e9 + f.before_stop_s
               : 0;
}

// How long `e` waited: until it failed, or until the job was stopped.
double Waited(const RankFlight& f, const FlightEvent& e) {
  if (e.done_ns > 0) {
    return (static_cast<double>(e.done_ns) - static_cast<double>(e.submitted_ns)) / 1e9;
  }
  return Ago(f, e.submitted_ns);
}

std::string Seconds(double s) { return absl::StrFormat("%.1f s", s); }

std::string Who(const Plan& plan, int rank) {
  if (rank < 0 || rank >= plan.size) return absl::StrCat("rank ", rank);
  const RankPlacement& p = plan.ranks[rank];
  return absl::StrCat("rank ", rank, " (host ", p.host, ", local rank ", p.local_rank, ")");
}

std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() <= 8) return absl::StrJoin(ranks, ",");
  return absl::StrCat(absl::StrJoin(std::vector<int>(ranks.begin(), ranks.begin() + 8), ","),
                      ",... (", ranks.size(), " ranks)");
}

// "allreduce 'grad.b' (set 0, seq 7)".
std::string OpName(const FlightEvent& e) {
  std::string op = e.op;
  std::transform(op.begin(), op.end(), op.begin(), [](char c) { return std::tolower(c); });
  return absl::StrCat(op, " '", e.name, "' (set ", e.set_id, ", seq ", e.seq,
                      e.caller.empty() ? "" : absl::StrCat(", from ", e.caller), ")");
}

// Where `e` stands: "submitted, not negotiated", "in the data plane (SHM_ALLREDUCE)", ...
std::string Where(const RankFlight& f, const FlightEvent& e) {
  switch (e.state) {
    case FlightState::kSubmitted:
      return absl::StrCat("submitted ", Seconds(Ago(f, e.submitted_ns)),
                          " before the job was stopped, not negotiated");
    case FlightState::kNegotiated:
      return absl::StrCat("negotiated ", Seconds(Ago(f, e.negotiated_ns)),
                          " before, not yet in the data plane");
    case FlightState::kDataPlane:
      return absl::StrCat("inside the data plane (", e.plane.empty() ? "?" : e.plane, ") for ",
                          Seconds(Ago(f, e.data_plane_ns)));
    case FlightState::kDone:
      return absl::StrCat("done ", Seconds(Ago(f, e.done_ns)), " before the job was stopped");
    case FlightState::kFailed:
      return absl::StrCat("failed ", Seconds(Ago(f, e.done_ns)), " before: ", e.error);
    case FlightState::kEmpty:
      break;
  }
  return "?";
}

// The process as the wrapper saw it: ", its process stopped (SIGSTOP or a debugger)" etc.
std::string ProcessNote(const RankFlight& f) {
  std::string note;
  if (f.proc == "T" || f.proc == "t") return "its process is stopped (SIGSTOP or a debugger)";
  if (f.proc == "D") note = "its main thread is in uninterruptible sleep (I/O)";
  if (!note.empty() && !f.wchan.empty()) absl::StrAppend(&note, " in ", f.wchan, "()");
  if (note.empty() && f.idle_proc == "R") note = "its main thread was running";
  if (note.empty() && f.idle_proc == "S") {
    note = "its main thread was sleeping";
    if (!f.idle_wchan.empty()) absl::StrAppend(&note, " in ", f.idle_wchan, "()");
  }
  return note;
}

bool EndedByItself(const RankFlight& f) { return f.ended_itself; }

std::string HowItEnded(const RankFlight& f) {
  if (!f.failure.empty()) return absl::StrCat("failed: ", f.failure);
  if (f.signal != 0) {
    const char* name = strsignal(f.signal);
    return absl::StrCat("was killed by signal ", f.signal, " (", name ? name : "?", ")");
  }
  return absl::StrCat("exited with status ", f.exit_code);
}

// Whether an op of `f` failed at the collective timeout (it gave up waiting).
bool TimedOut(const RankFlight& f) {
  return std::any_of(f.events.begin(), f.events.end(), [](const FlightEvent& e) {
    return e.state == FlightState::kFailed && e.code == kDeadline;
  });
}

// The op `f` waits in (the oldest still waiting), or null.
const FlightEvent* WaitingOp(const RankFlight& f) {
  for (const FlightEvent& e : f.events) {
    if (Waiting(e)) return &e;
  }
  return nullptr;
}

const FlightEvent* LastFinished(const RankFlight& f) {
  const FlightEvent* last = nullptr;
  for (const FlightEvent& e : f.events) {
    if (!StillInside(e) && (last == nullptr || e.done_ns > last->done_ns)) last = &e;
  }
  return last;
}

struct Key {
  int set;
  std::string name;
  bool operator<(const Key& o) const { return std::tie(set, name) < std::tie(o.set, o.name); }
};

// Whether a rank other than `m` has `e` (its set and name) in its record.
bool SubmittedElsewhere(const std::map<int, RankFlight>& flights, int m, const FlightEvent& e) {
  for (const auto& [r, f] : flights) {
    if (r == m) continue;
    for (const FlightEvent& x : f.events) {
      if (x.set_id == e.set_id && x.name == e.name) return true;
    }
  }
  return false;
}

// What rank `m`, which never submitted `key` (`awaited` on its first waiter), did instead.
std::string Instead(const std::map<int, RankFlight>& flights, int m, const Key& key,
                    const FlightEvent& awaited) {
  const uint64_t seq = awaited.seq;
  auto it = flights.find(m);
  if (it == flights.end()) return "sent no flight record (it never started hvx, or hvxrun lost it)";
  const RankFlight& f = it->second;
  if (!f.dumped) {
    return f.exited ? absl::StrCat(HowItEnded(f), " and its wrapper sent no flight record")
                    : "sent no flight record";
  }
  std::string what;
  if (EndedByItself(f) && !TimedOut(f)) {
    what = absl::StrCat("it ", HowItEnded(f), " before it submitted it");
  } else if (f.proc == "T" || f.proc == "t") {
    what = absl::StrCat("it never came: ", ProcessNote(f));
  }
  const FlightEvent* w = WaitingOp(f);
  const FlightEvent* last = LastFinished(f);
  std::string doing;
  bool own_code = false;
  if (w != nullptr && w->set_id == key.set && w->seq == seq && w->op == awaited.op &&
      w->dtype == awaited.dtype && w->bytes == awaited.bytes) {
    doing = absl::StrCat("at the same position it submitted ", OpName(*w),
                         ", alike in op, type and size: the same op under another name? (",
                         Where(f, *w), ")");
  } else if (w != nullptr && w->set_id == key.set && !SubmittedElsewhere(flights, m, *w)) {
    doing = absl::StrCat("it went on without it and waits in ", OpName(*w),
                         ", which no other rank has reached: it skipped '", key.name, "'? (",
                         Where(f, *w), ")");
  } else if (w != nullptr && w->set_id != key.set) {
    doing = absl::StrCat("it waits in ", OpName(*w), " of another process set, ", Where(f, *w));
  } else if (w != nullptr) {
    doing = absl::StrCat("it waits in ", OpName(*w), ", ", Where(f, *w));
  } else if (last != nullptr) {
    own_code = true;
    doing = absl::StrCat(
        "no collective of it is pending: it has been in its own code since its "
        "last, ",
        OpName(*last), ", ", Where(f, *last));
  } else {
    own_code = true;
    doing = "it has run no collective yet";
  }
  if (what.empty()) {
    const std::string note = own_code ? ProcessNote(f) : "";
    return note.empty() ? doing : absl::StrCat(doing, "; ", note);
  }
  return absl::StrCat(what, "; ", doing);
}

void AddDetails(const Plan& plan, const std::map<int, RankFlight>& flights,
                const std::vector<int>& ranks, Verdict* v) {
  for (int r : ranks) {
    auto it = flights.find(r);
    if (it == flights.end()) continue;
    const RankFlight& f = it->second;
    const size_t n = f.events.size();
    for (size_t i = n > kShownOps ? n - kShownOps : 0; i < n; ++i) {
      v->details.push_back(
          absl::StrCat("rank ", r, " ", OpName(f.events[i]), ": ", Where(f, f.events[i])));
    }
    for (const std::string& line : StackToShow(f.stack)) {
      v->details.push_back(absl::StrCat("rank ", r, " ", line));
    }
  }
}

bool IsPythonThreadHeader(const std::string& line) {
  return absl::StartsWith(line, "Thread 0x") || absl::StartsWith(line, "Current thread 0x");
}

}  // namespace

std::vector<std::string> StackToShow(const std::vector<std::string>& stack, size_t frames) {
  std::vector<std::string> out;
  // The last Python block, up to the next header of either kind.
  size_t python = stack.size();
  for (size_t i = 0; i < stack.size(); ++i) {
    if (IsPythonThreadHeader(stack[i])) python = i;
  }
  if (python < stack.size()) {
    out.push_back("Python stack (most recent call first):");
    for (size_t i = python + 1, shown = 0; i < stack.size() && shown < frames; ++i) {
      if (IsPythonThreadHeader(stack[i]) || absl::StartsWith(stack[i], "thread ")) break;
      if (!absl::StartsWith(stack[i], "  ")) continue;
      out.push_back(stack[i]);
      ++shown;
    }
  }
  for (size_t i = 0; i < stack.size(); ++i) {
    if (!absl::StartsWith(stack[i], "thread ") || !absl::EndsWith(stack[i], " (main)")) continue;
    out.push_back(
        absl::StrCat("native stack of its ", stack[i].substr(0, stack[i].size() - 7), " (main):"));
    for (size_t j = i + 1, shown = 0; j < stack.size() && shown < frames; ++j, ++shown) {
      if (!absl::StartsWith(stack[j], "  #")) break;
      out.push_back(stack[j]);
    }
    break;
  }
  return out;
}

Verdict JudgeFlights(const Plan& plan, const std::map<int, RankFlight>& flights) {
  Verdict v;
  // A disagreement the coordinator found (shapes, types, ops, roots) names itself.
  const FlightEvent* refused = nullptr;
  int refused_on = -1;
  for (const auto& [r, f] : flights) {
    for (const FlightEvent& e : f.events) {
      // The lowest rank's latest (monotonic clocks of different hosts do not compare).
      if (e.state == FlightState::kFailed && e.code == kInvalidArgument &&
          (refused == nullptr || refused_on == r)) {
        refused = &e;
        refused_on = r;
      }
    }
  }
  if (refused != nullptr) {
    v.line = absl::StrCat(OpName(*refused), " failed on ", Who(plan, refused_on),
                          " (and the ranks it names): ", refused->error);
    return v;
  }

  // Who reached what: each rank's latest op of each name (a name comes back every step).
  std::map<Key, std::vector<int>> waiters;
  std::map<Key, double> longest;
  std::map<Key, int> timed_out;          // waiters whose op failed at the collective timeout
  std::map<Key, double> oldest;          // seconds from its first submission to the dumps
  std::map<int, std::set<int>> members;  // ranks seen in each set
  for (const auto& [r, f] : flights) {
    std::map<Key, const FlightEvent*> latest;
    for (const FlightEvent& e : f.events) {
      members[e.set_id].insert(r);
      latest[Key{e.set_id, e.name}] = &e;  // events come oldest first
    }
    for (const auto& [key, e] : latest) {
      if (!Waiting(*e)) continue;
      waiters[key].push_back(r);
      longest[key] = std::max(longest[key], Waited(f, *e));
      oldest[key] = std::max(oldest[key], Ago(f, e->submitted_ns));
      if (e->state == FlightState::kFailed && e->code == kDeadline) ++timed_out[key];
    }
  }
  if (waiters.empty()) {
    // A stopped rank first (the others may have failed waiting for it outside any collective, at
    // the end of the job), then the first to fail, then any that ended by itself.
    std::vector<int> died;
    for (const auto& [r, f] : flights) {
      if (f.dumped && (f.proc == "T" || f.proc == "t")) {
        const FlightEvent* last = LastFinished(f);
        v.line = absl::StrCat(
            Who(plan, r), " stands still: ", ProcessNote(f),
            last ? absl::StrCat("; its last op was ", OpName(*last), ", ", Where(f, *last)) : "");
        AddDetails(plan, flights, {r}, &v);
        return v;
      }
      if (EndedByItself(f)) {
        if (f.first_failure) {
          died.insert(died.begin(), r);
        } else {
          died.push_back(r);
        }
      }
    }
    if (!died.empty()) {
      const RankFlight& f = flights.at(died[0]);
      const FlightEvent* last = LastFinished(f);
      if (last == nullptr) return v;  // the summary says as much
      v.line = absl::StrCat(
          Who(plan, died[0]), " ", HowItEnded(f), " while no collective waited",
          last ? absl::StrCat("; its last was ", OpName(*last), ", ", Where(f, *last)) : "");
      AddDetails(plan, flights, {died[0]}, &v);
    }
    return v;
  }
  // The op the job hung on: the one most ranks reached (a rank that went on without an op waits
  // in a later one alone), then one that timed out (the first timeout stops the job, so a later op
  // that waits only because of it has not), then the most timeouts, then the oldest.
  const Key* hung = nullptr;
  auto rank_of = [&](const Key& k) {
    return std::make_tuple(waiters[k].size(), timed_out[k] > 0, timed_out[k], oldest[k]);
  };
  for (const auto& entry : waiters) {
    if (hung == nullptr || rank_of(entry.first) > rank_of(*hung)) hung = &entry.first;
  }
  const std::vector<int>& came = waiters[*hung];
  std::vector<int> missing;
  if (hung->set == 0) {
    for (int r = 0; r < plan.size; ++r) {
      if (!std::count(came.begin(), came.end(), r)) missing.push_back(r);
    }
  } else {
    for (int r : members[hung->set]) {
      if (!std::count(came.begin(), came.end(), r)) missing.push_back(r);
    }
  }
  // The op as its first waiter recorded it.
  const FlightEvent* op = nullptr;
  for (const FlightEvent& e : flights.at(came[0]).events) {
    if (e.set_id == hung->set && e.name == hung->name) op = &e;  // its latest
  }
  const std::string waited = Seconds(longest[*hung]);

  // A rank that ended by itself inside the op (a crash, a kill), not as one that gave up waiting:
  // the others' records, cut short by the stop, may not show that they reached it.
  // The job's first failure first: a peer's crash fails the ranks in the op with it.
  // The job's first failure may have sent no ring at all (an abort ends it at once).
  int crashed = -1;
  for (const auto& [r, f] : flights) {
    const bool reached = std::count(came.begin(), came.end(), r) != 0;
    if (EndedByItself(f) && !TimedOut(f) && (reached || f.first_failure) &&
        (crashed < 0 || (f.first_failure && !flights.at(crashed).first_failure))) {
      crashed = r;
    }
  }
  const bool unknown = std::any_of(missing.begin(), missing.end(), [&](int m) {
    auto it = flights.find(m);
    return it == flights.end() || !it->second.dumped || it->second.events.empty();
  });
  if (crashed >= 0 && unknown) missing.clear();

  // First the ranks whose ring shows that they did not reach it, then those whose ring is empty,
  // then those without one.
  auto evidence = [&](int m) {
    auto it = flights.find(m);
    if (it == flights.end() || !it->second.dumped) return 2;
    return it->second.events.empty() ? 1 : 0;
  };
  std::stable_sort(missing.begin(), missing.end(),
                   [&](int a, int b) { return evidence(a) < evidence(b); });
  if (!missing.empty()) {
    const int m = missing[0];
    v.line = absl::StrCat(Who(plan, m), " did not submit ", OpName(*op), " that ",
                          came.size() == 1 ? "rank " : "ranks ", RankList(came), " waited ", waited,
                          " for: ", Instead(flights, m, *hung, *op));
    if (missing.size() > 1) {
      std::vector<int> rest(missing.begin() + 1,
                            missing.begin() + std::min(missing.size(), kNamedRanks));
      absl::StrAppend(&v.line, "; nor did rank", rest.size() > 1 ? "s " : " ", RankList(rest),
                      missing.size() > kNamedRanks
                          ? absl::StrCat(" and ", missing.size() - kNamedRanks, " more")
                          : "");
    }
    AddDetails(plan, flights, {m}, &v);
    return v;
  }

  // Every member reached it (or one crashed in it and the others' records are incomplete): the
  // hang is inside it. The rank to blame: one stopped, one that crashed, one still inside it when
  // the others had given up; else none stands out.
  int culprit = -1;
  std::string why;
  for (int r : came) {
    const RankFlight& f = flights.at(r);
    if (f.proc == "T" || f.proc == "t") {
      culprit = r;
      why = ProcessNote(f);
      break;
    }
  }
  if (culprit < 0 && crashed >= 0) {
    culprit = crashed;
    why = absl::StrCat("it ", HowItEnded(flights.at(crashed)));
  }
  if (culprit < 0) {
    for (int r : came) {
      const RankFlight& f = flights.at(r);
      for (const FlightEvent& e : f.events) {
        if (e.set_id == hung->set && e.name == hung->name && StillInside(e)) {
          culprit = r;
          why = absl::StrCat("it was still inside it when the others gave up");
          const std::string note = ProcessNote(f);
          if (!note.empty()) absl::StrAppend(&why, "; ", note);
          break;
        }
      }
      if (culprit >= 0) break;
    }
  }
  if (culprit < 0) {
    v.line = absl::StrCat("every rank reached ", OpName(*op), " and waited in it up to ", waited,
                          ": none stands out (a network or data-plane fault?)");
    AddDetails(plan, flights, {came[0]}, &v);
    return v;
  }
  const RankFlight& f = flights.at(culprit);
  if (f.events.empty()) absl::StrAppend(&why, " (its ring did not reach hvxrun)");
  const FlightEvent* mine = nullptr;
  for (const FlightEvent& e : f.events) {
    if (e.set_id == hung->set && e.name == hung->name && Waiting(e)) mine = &e;
  }
  v.line = absl::StrCat(
      Who(plan, culprit), " held up ", OpName(*op),
      missing.empty() && !unknown ? ", which every rank reached and the others waited "
                                  : ", which the others waited ",
      waited, " in: ", why, mine ? absl::StrCat("; its op was ", Where(f, *mine)) : "");
  AddDetails(plan, flights, {culprit}, &v);
  return v;
}

namespace {

std::string EventJson(const RankFlight& f, const FlightEvent& e) {
  auto ago = [&](int64_t t) -> std::string {
    return t > 0 ? absl::StrFormat("%.6f", Ago(f, t)) : "null";
  };
  return absl::StrCat(
      "{\"set\":", e.set_id, ",\"seq\":", e.seq, ",\"name\":", JsonQuote(e.name),
      ",\"op\":", JsonQuote(e.op), ",\"dtype\":", JsonQuote(e.dtype), ",\"bytes\":", e.bytes,
      ",\"state\":", JsonQuote(FlightStateName(e.state)), ",\"plane\":", JsonQuote(e.plane),
      ",\"submitted_s_ago\":", ago(e.submitted_ns), ",\"negotiated_s_ago\":", ago(e.negotiated_ns),
      ",\"data_plane_s_ago\":", ago(e.data_plane_ns), ",\"done_s_ago\":", ago(e.done_ns),
      ",\"error\":", JsonQuote(e.error), ",\"caller\":", JsonQuote(e.caller),
      ",\"torn\":", e.torn ? "true" : "false", "}");
}

}  // namespace

std::string FlightJson(const Plan& plan, const std::map<int, RankFlight>& flights,
                       const Verdict& verdict) {
  std::vector<std::string> ranks;
  for (const auto& [r, f] : flights) {
    std::vector<std::string> events;
    for (const FlightEvent& e : f.events) events.push_back(EventJson(f, e));
    std::vector<std::string> stack;
    for (const std::string& line : f.stack) stack.push_back(JsonQuote(line));
    const RankPlacement* p = r >= 0 && r < plan.size ? &plan.ranks[r] : nullptr;
    ranks.push_back(absl::StrCat(
        "{\"rank\":", r, ",\"host\":", JsonQuote(p ? p->host : ""),
        ",\"local_rank\":", p ? p->local_rank : -1, ",\"dumped\":", f.dumped ? "true" : "false",
        ",\"why\":", JsonQuote(f.why), ",\"process_state\":", JsonQuote(f.proc),
        ",\"wchan\":", JsonQuote(f.wchan), ",\"exited\":", f.exited ? "true" : "false",
        ",\"exit_code\":", f.exit_code, ",\"signal\":", f.signal, ",\"events\":[",
        absl::StrJoin(events, ","), "],\"stack_taken\":", JsonQuote(f.stack_why), ",\"stack\":[",
        absl::StrJoin(stack, ","), "]}"));
  }
  std::vector<std::string> details;
  for (const std::string& d : verdict.details) details.push_back(JsonQuote(d));
  return absl::StrCat("{\"format\":\"hvx-flight\",\"version\":1,\"verdict\":",
                      JsonQuote(verdict.line), ",\"details\":[", absl::StrJoin(details, ","),
                      "],\"ranks\":[", absl::StrJoin(ranks, ",\n"), "]}\n");
}

std::string FlightTrace(const Plan& plan, const std::map<int, RankFlight>& flights) {
  // Each rank's times are on its own host's clock: they are aligned at the moment hvxrun began
  // stopping the job (each dump's time plus how long before that hvxrun had it), and start at
  // the earliest event.
  int64_t earliest = 0;
  bool any = false;
  for (const auto& [r, f] : flights) {
    for (const FlightEvent& e : f.events) {
      const int64_t t = e.submitted_ns - f.now_ns - static_cast<int64_t>(f.before_stop_s * 1e9);
      if (!any || t < earliest) earliest = t;
      any = true;
    }
  }
  std::vector<std::string> out;
  for (const auto& entry : flights) {
    const int r = entry.first;
    const RankFlight& f = entry.second;  // a lambda below uses it: no structured binding
    const std::string host = r >= 0 && r < plan.size ? plan.ranks[r].host : "";
    out.push_back(absl::StrCat(
        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", r,
        ",\"args\":{\"name\":", JsonQuote(absl::StrCat("rank ", r, " (", host, ")")), "}}"));
    for (const FlightEvent& e : f.events) {
      const auto us = [&](int64_t t) {
        return (static_cast<double>(t) - static_cast<double>(f.now_ns) - f.before_stop_s * 1e9 -
                static_cast<double>(earliest)) /
               1000.0;
      };
      const int64_t end = e.done_ns > 0 ? e.done_ns : f.now_ns;
      out.push_back(absl::StrFormat(
          "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":%s,\"ts\":%.3f,\"dur\":%.3f,"
          "\"args\":{\"seq\":%d,\"state\":%s,\"op\":%s,\"bytes\":%d,\"plane\":%s,\"error\":%s,"
          "\"caller\":%s}}",
          r, e.set_id, JsonQuote(e.name), us(e.submitted_ns), (end - e.submitted_ns) / 1000.0,
          e.seq, JsonQuote(FlightStateName(e.state)), JsonQuote(e.op), e.bytes, JsonQuote(e.plane),
          JsonQuote(e.error), JsonQuote(e.caller)));
    }
  }
  return absl::StrCat("{\"traceEvents\":[\n", absl::StrJoin(out, ",\n"), "\n]}\n");
}

}  // namespace launch
}  // namespace hvx

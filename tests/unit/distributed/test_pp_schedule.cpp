// distributed::make_pp_schedule / simulate_pp_schedule: every schedule runs each stage's forward
// and backward once per microbatch on the stage's rank, brackets them with the right transfers
// and unshard / reshard, completes in the simulator with the textbook bubble, and holds the
// activations its rule says; the simulator refuses broken schedules (deadlock, missing,
// duplicated or misplaced actions, receives out of their sender's order) in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/pp_schedule.h"

using namespace titan;
using namespace titan::distributed;
using K = PpActionKind;

namespace {

struct Case {
  std::string name;
  int pp, m, v;
  std::string label() const {
    return name + " pp " + std::to_string(pp) + " m " + std::to_string(m) + " v " + std::to_string(v);
  }
};

// The grid of the brief: each schedule at pp 1, 2, 4 with pp, 2 pp and 8 microbatches;
// Interleaved1F1B with 2 and 3 stages per rank.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (int pp : {1, 2, 4}) {
    std::vector<int> ms = {pp, 2 * pp, 8};
    std::sort(ms.begin(), ms.end());
    ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
    for (int m : ms) {
      out.push_back({"GPipe", pp, m, 1});
      out.push_back({"1F1B", pp, m, 1});
      for (int v : {2, 3}) out.push_back({"Interleaved1F1B", pp, m, v});
    }
  }
  return out;
}

// The error a call throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

size_t find_action(const std::vector<PpAction>& list, const PpAction& a) {
  return size_t(std::find(list.begin(), list.end(), a) - list.begin());
}

}  // namespace

TEST(PpSchedule, EveryStageRunsEachMicrobatchOnceOnItsRank) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.label());
    const PpSchedule s = make_pp_schedule(c.name, c.pp, c.m, c.v);
    ASSERT_EQ(s.name, c.name);
    ASSERT_EQ(int(s.ranks.size()), c.pp);
    const int S = c.pp * c.v;
    std::vector<int> f(S * c.m, 0), b(S * c.m, 0);
    for (int r = 0; r < c.pp; ++r)
      for (const PpAction& a : s.ranks[r]) {
        ASSERT_GE(a.stage, 0);
        ASSERT_LT(a.stage, S);
        EXPECT_EQ(a.stage % c.pp, r) << a.str() << " on rank " << r;  // loop placement
        if (a.kind == K::Forward) ++f[a.stage * c.m + a.microbatch];
        if (a.kind == K::Backward) ++b[a.stage * c.m + a.microbatch];
      }
    for (int i = 0; i < S * c.m; ++i) {
      EXPECT_EQ(f[i], 1) << "stage " << i / c.m << " microbatch " << i % c.m;
      EXPECT_EQ(b[i], 1) << "stage " << i / c.m << " microbatch " << i % c.m;
    }
    const PpSimulation sim = simulate_pp_schedule(s);  // throws on a deadlock or violation
    // Every rank computes m x v forwards and backwards.
    for (int r = 0; r < c.pp; ++r) EXPECT_DOUBLE_EQ(sim.busy[r], 3.0 * c.m * c.v);
  }
}

TEST(PpSchedule, TransfersBracketTheCompute) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.label());
    const PpSchedule s = make_pp_schedule(c.name, c.pp, c.m, c.v);
    const int S = s.stages();
    for (int r = 0; r < c.pp; ++r) {
      const std::vector<PpAction>& l = s.ranks[r];
      for (size_t i = 0; i < l.size(); ++i) {
        const PpAction& a = l[i];
        if (a.kind != K::Forward && a.kind != K::Backward) continue;
        const bool fwd = a.kind == K::Forward;
        const int from = fwd ? a.stage - 1 : a.stage + 1, to = fwd ? a.stage + 1 : a.stage - 1;
        if (from >= 0 && from < S && s.stage_rank(from) != r) {
          // The receive of what it needs comes before it on this rank.
          const PpAction recv{fwd ? K::RecvActivation : K::RecvGrad, a.stage, a.microbatch, s.stage_rank(from)};
          EXPECT_LT(find_action(l, recv), i) << recv.str() << " before " << a.str();
        }
        if (to >= 0 && to < S && s.stage_rank(to) != r) {
          // Its result is sent on right after it.
          const PpAction send{fwd ? K::SendActivation : K::SendGrad, a.stage, a.microbatch, s.stage_rank(to)};
          ASSERT_LT(i + 1, l.size());
          EXPECT_EQ(l[i + 1], send) << "after " << a.str() << ": " << l[i + 1].str();
        }
      }
    }
  }
}

TEST(PpSchedule, UnshardBeforeFirstUseReshardAfterLastBackward) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.label());
    const PpSchedule s = make_pp_schedule(c.name, c.pp, c.m, c.v);
    for (int st = 0; st < s.stages(); ++st) {
      const std::vector<PpAction>& l = s.ranks[s.stage_rank(st)];
      size_t first = l.size(), last = 0, u = l.size(), rs = l.size();
      int nu = 0, nr = 0;
      for (size_t i = 0; i < l.size(); ++i) {
        if (l[i].stage != st) continue;
        if (l[i].kind == K::Forward || l[i].kind == K::Backward) first = std::min(first, i);
        if (l[i].kind == K::Backward) last = i;
        if (l[i].kind == K::Unshard) u = i, ++nu;
        if (l[i].kind == K::Reshard) rs = i, ++nr;
      }
      EXPECT_EQ(nu, 1) << "stage " << st;
      EXPECT_EQ(nr, 1) << "stage " << st;
      EXPECT_LT(u, first) << "stage " << st;
      EXPECT_GT(rs, last) << "stage " << st;
    }
  }
}

// Most (stage, microbatch) forwards whose backward has not run yet, counted on the action list.
static int max_live(const std::vector<PpAction>& l) {
  int live = 0, most = 0;
  for (const PpAction& a : l) {
    if (a.kind == K::Forward) most = std::max(most, ++live);
    if (a.kind == K::Backward) --live;
  }
  return most;
}

TEST(PpSchedule, ActivationsInFlight) {
  for (const Case& c : cases()) {
    if (c.name == "Interleaved1F1B") continue;
    SCOPED_TRACE(c.label());
    const PpSchedule s = make_pp_schedule(c.name, c.pp, c.m, c.v);
    const PpSimulation sim = simulate_pp_schedule(s);
    for (int r = 0; r < c.pp; ++r) {
      const int live = max_live(s.ranks[r]);
      EXPECT_EQ(sim.max_in_flight[r], live) << "rank " << r;
      if (c.name == "GPipe") {
        EXPECT_EQ(live, c.m) << "rank " << r;
      } else {  // 1F1B: at most pp - r, reached once m >= pp
        EXPECT_LE(live, c.pp - r) << "rank " << r;
        EXPECT_EQ(live, std::min(c.pp - r, c.m)) << "rank " << r;
      }
    }
  }
}

TEST(PpSchedule, BubbleMatchesTheAnalyticFraction) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.label());
    const PpSchedule s = make_pp_schedule(c.name, c.pp, c.m, c.v);
    const PpSimulation sim = simulate_pp_schedule(s, 1.0, 2.0);
    const double p = c.pp, m = c.m, v = c.v;
    // Idle / (pp x makespan) of the textbook schedules (F = 1, B = 2 per stage).
    const double expect = (p - 1) / (v * m + p - 1);
    EXPECT_NEAR(pp_analytic_bubble_fraction(s), expect, 1e-15);
    EXPECT_NEAR(sim.bubble_fraction, expect, 1e-12);
    EXPECT_NEAR(sim.makespan, 3.0 * (v * m + p - 1), 1e-9);
    // The definition: 1 - busy / (pp x makespan).
    double busy = 0;
    for (double b : sim.busy) busy += b;
    EXPECT_NEAR(sim.bubble_fraction, 1.0 - busy / (p * sim.makespan), 1e-15);
  }
}

TEST(PpSchedule, InterleavedBubbleBelow1F1B) {
  for (const Case& c : cases()) {
    if (c.name != "Interleaved1F1B" || c.pp < 2) continue;
    SCOPED_TRACE(c.label());
    const double inter = simulate_pp_schedule(make_pp_schedule(c.name, c.pp, c.m, c.v)).bubble_fraction;
    const double plain = simulate_pp_schedule(make_pp_schedule("1F1B", c.pp, c.m)).bubble_fraction;
    EXPECT_LT(inter, plain);
  }
}

TEST(PpSchedule, NamesAndRefusals) {
  EXPECT_EQ(make_pp_schedule("gpipe", 2, 4).name, "GPipe");
  EXPECT_EQ(make_pp_schedule("1f1b", 2, 4).name, "1F1B");
  EXPECT_EQ(make_pp_schedule("INTERLEAVED1F1B", 2, 4, 2).name, "Interleaved1F1B");
  // GPipe takes fewer microbatches than ranks.
  EXPECT_NO_THROW(simulate_pp_schedule(make_pp_schedule("GPipe", 4, 2)));
  auto one_line = [](const std::string& e) { return !e.empty() && e.find('\n') == std::string::npos; };
  std::string e = error_of([] { make_pp_schedule("ZeroBubble", 2, 4); });
  EXPECT_TRUE(one_line(e)) << e;
  for (const char* part : {"ZeroBubble", "pipeline_parallel_schedule", "GPipe", "1F1B", "Interleaved1F1B"})
    EXPECT_NE(e.find(part), std::string::npos) << e;
  for (const char* name : {"1F1B", "Interleaved1F1B"}) {
    e = error_of([&] { make_pp_schedule(name, 4, 2, name[0] == 'I' ? 2 : 1); });
    EXPECT_TRUE(one_line(e)) << e;
    EXPECT_NE(e.find("[parallelism] pipeline_parallel_microbatches = 2 is less than pipeline_parallel_degree = 4"),
              std::string::npos)
        << e;
  }
  e = error_of([] { make_pp_schedule("Interleaved1F1B", 4, 6, 2); });
  EXPECT_TRUE(one_line(e)) << e;
  EXPECT_NE(e.find("[parallelism] pipeline_parallel_microbatches = 6 is not a multiple of pipeline_parallel_degree = 4"),
            std::string::npos)
      << e;
  e = error_of([] { make_pp_schedule("Interleaved1F1B", 2, 4, 1); });
  EXPECT_NE(e.find("at least 2 stages per rank"), std::string::npos) << e;
  e = error_of([] { make_pp_schedule("1F1B", 2, 4, 2); });
  EXPECT_NE(e.find("one stage on each rank"), std::string::npos) << e;
  EXPECT_NE(error_of([] { make_pp_schedule("GPipe", 0, 4); }).find("pipeline_parallel_degree = 0"), std::string::npos);
  EXPECT_NE(error_of([] { make_pp_schedule("GPipe", 2, 0); }).find("pipeline_parallel_microbatches = 0"),
            std::string::npos);
}

TEST(PpSchedule, ActionNotation) {
  EXPECT_EQ((PpAction{K::Forward, 1, 3, -1}).str(), "F3s1");
  EXPECT_EQ((PpAction{K::Backward, 2, 0, -1}).str(), "B0s2");
  EXPECT_EQ((PpAction{K::SendActivation, 0, 2, 1}).str(), "SA2s0>r1");
  EXPECT_EQ((PpAction{K::RecvActivation, 1, 2, 0}).str(), "RA2s1<r0");
  EXPECT_EQ((PpAction{K::SendGrad, 2, 0, 1}).str(), "SG0s2>r1");
  EXPECT_EQ((PpAction{K::RecvGrad, 1, 0, 2}).str(), "RG0s1<r2");
  EXPECT_EQ((PpAction{K::Unshard, 5, -1, -1}).str(), "Us5");
  EXPECT_EQ((PpAction{K::Reshard, 5, -1, -1}).str(), "Rs5");
}

// The broken schedules below start from a correct one and change one thing; each is refused
// with a line that says what is wrong.
static std::string simulate_error(const PpSchedule& s) {
  return error_of([&] { simulate_pp_schedule(s); });
}

TEST(PpSchedule, SimulatorRejectsADeadlock) {
  for (const char* name : {"GPipe", "1F1B"}) {
    SCOPED_TRACE(name);
    PpSchedule s = make_pp_schedule(name, 2, 4);
    // Rank 0 waits for microbatch 0's gradient before sending any activation: rank 1 can never
    // compute it.
    std::vector<PpAction>& l = s.ranks[0];
    const size_t i = find_action(l, {K::RecvGrad, 0, 0, 1});
    ASSERT_LT(i, l.size());
    std::rotate(l.begin(), l.begin() + i, l.begin() + i + 1);
    const std::string e = simulate_error(s);
    EXPECT_NE(e.find("deadlocks"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 0's RG0s0<r1"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1's RA0s1<r0"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(PpSchedule, SimulatorRejectsMissingAndDuplicatedActions) {
  const PpSchedule good = make_pp_schedule("1F1B", 4, 8);
  PpSchedule s = good;  // drop a backward
  std::vector<PpAction>& l = s.ranks[2];
  l.erase(l.begin() + long(find_action(l, {K::Backward, 2, 5, -1})));
  std::string e = simulate_error(s);
  EXPECT_NE(e.find("no backward of microbatch 5 on stage 2"), std::string::npos) << e;

  s = good;  // a forward twice
  s.ranks[1].push_back({K::Forward, 1, 3, -1});
  e = simulate_error(s);
  EXPECT_NE(e.find("rank 1's F3s1 appears twice"), std::string::npos) << e;

  s = good;  // a forward on a rank that does not hold its stage
  std::replace(s.ranks[3].begin(), s.ranks[3].end(), PpAction{K::Forward, 3, 0, -1}, PpAction{K::Forward, 2, 0, -1});
  e = simulate_error(s);
  EXPECT_NE(e.find("stage 2 lives on rank 2"), std::string::npos) << e;

  s = good;  // a send to the wrong rank
  std::replace(s.ranks[0].begin(), s.ranks[0].end(), PpAction{K::SendActivation, 0, 1, 1},
               PpAction{K::SendActivation, 0, 1, 2});
  e = simulate_error(s);
  EXPECT_NE(e.find("stage 1 lives on rank 1"), std::string::npos) << e;

  s = good;  // no reshard
  s.ranks[0].pop_back();
  e = simulate_error(s);
  EXPECT_NE(e.find("stage 0 is still unsharded"), std::string::npos) << e;
}

TEST(PpSchedule, SimulatorRejectsBrokenDependencies) {
  const PpSchedule good = make_pp_schedule("GPipe", 2, 2);
  PpSchedule s = good;  // forward before its receive
  std::vector<PpAction>& l = s.ranks[1];
  size_t ra = find_action(l, {K::RecvActivation, 1, 1, 0}), f = find_action(l, {K::Forward, 1, 1, -1});
  ASSERT_LT(ra, f);
  std::swap(l[ra], l[f]);
  std::string e = simulate_error(s);
  EXPECT_NE(e.find("rank 1's F1s1 runs before its activation is received"), std::string::npos) << e;

  s = good;  // receives in another order than rank 0 sent them
  std::vector<PpAction>& l1 = s.ranks[1];
  ra = find_action(l1, {K::RecvActivation, 1, 1, 0});
  const size_t ra0 = find_action(l1, {K::RecvActivation, 1, 0, 0});
  ASSERT_LT(ra0, ra);
  std::rotate(l1.begin() + long(ra0), l1.begin() + long(ra), l1.begin() + long(ra) + 1);  // RA1 first
  e = simulate_error(s);
  EXPECT_NE(e.find("rank 1's RA1s1<r0 is out of order: rank 0 sent SA0s0>r1 first"), std::string::npos) << e;

  s = good;  // a send before the forward that computes it
  std::vector<PpAction>& l0 = s.ranks[0];
  const size_t sa = find_action(l0, {K::SendActivation, 0, 0, 1});
  std::swap(l0[sa], l0[sa - 1]);
  e = simulate_error(s);
  EXPECT_NE(e.find("rank 0's SA0s0>r1 sends before its forward ran"), std::string::npos) << e;

  s = good;  // compute before the unshard
  std::vector<PpAction>& l00 = s.ranks[0];
  std::swap(l00[0], l00[1]);  // Us0 F0s0 -> F0s0 Us0
  e = simulate_error(s);
  EXPECT_NE(e.find("stage 0's parameters are sharded"), std::string::npos) << e;
}

TEST(PpSchedule, PrintoutListsActionsGridAndBubble) {
  const PpSchedule s = make_pp_schedule("1F1B", 4, 8);
  const PpSimulation sim = simulate_pp_schedule(s);
  const std::string out = format_pp_schedule(s, sim);
  std::vector<std::string> lines;
  for (size_t a = 0, b; a < out.size(); a = b + 1) {
    b = out.find('\n', a);
    if (b == std::string::npos) b = out.size();
    lines.push_back(out.substr(a, b - a));
  }
  int action_lines = 0, grid_rows = 0;
  for (const std::string& l : lines) {
    if (l.rfind("rank ", 0) == 0 && l.find(':') < l.find('|')) {
      ++action_lines;
      // The rank's actions, in order, in the compact notation.
      const int r = std::stoi(l.substr(5));
      std::string expect = "rank " + std::to_string(r) + ":";
      for (const PpAction& a : s.ranks[r]) expect += " " + a.str();
      EXPECT_EQ(l, expect);
    }
    if (l.rfind("rank ", 0) == 0 && l.find('|') != std::string::npos) {
      ++grid_rows;
      // Each rank computes 8 forwards (1 column) and 8 backwards (2 columns).
      int cells = 0;
      for (size_t i = l.find('|') + 1; i < l.size(); ++i)
        if ((l[i] == 'F' || l[i] == 'B') && (l[i - 1] == ' ' || l[i - 1] == '|')) ++cells;
      EXPECT_EQ(cells, 8 * 3) << l;
    }
  }
  EXPECT_EQ(action_lines, 4) << out;
  EXPECT_EQ(grid_rows, 4) << out;
  char bubble[96];
  std::snprintf(bubble, sizeof bubble, "bubble fraction: %.6g (analytic for 1F1B: %.6g)", sim.bubble_fraction,
                pp_analytic_bubble_fraction(s));
  EXPECT_NE(out.find(bubble), std::string::npos) << out;
  EXPECT_EQ(out.find("columns shown"), std::string::npos) << out;

  // A wide grid is cut, and says so.
  const PpSchedule wide = make_pp_schedule("Interleaved1F1B", 4, 16, 3);
  const std::string w = format_pp_schedule(wide, simulate_pp_schedule(wide));
  EXPECT_NE(w.find("columns shown"), std::string::npos) << w;
}

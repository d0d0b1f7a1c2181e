// Pipeline-parallel schedules (pp_schedule.h): each schedule is first a compute order per rank
// (its forwards and backwards), then lowered to actions by one shared pass that adds the sends,
// the receives (in their sender's order) and the unshard / reshard of each stage. The simulator
// checks a schedule statically (placement, peers, every action present once), then runs it on
// the cost model with one clock per rank.
#include "distributed/pp_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>

#include "core/error.h"
#include "util/strings.h"

namespace titan::distributed {

namespace {

using K = PpActionKind;

// One forward or backward of a compute order.
struct Compute {
  bool forward;
  int stage;
  int microbatch;
};


// Most (stage, microbatch) pairs a schedule may have: far beyond a real job (pp 64 x 8 virtual
// stages x 512 microbatches is 2^18), small enough for the simulator's tables.
constexpr long long kMaxStageMicrobatches = 1LL << 22;

// Transfers only go between ranks whose stages are neighbours, r and r +- 1 (mod pp): the queue
// of messages from `from` to `to` is link(from, to) of 2 pp (one per ordered pair, also at pp 2).
int link(int from, int to, int pp) { return 2 * from + (to == (from + 1) % pp ? 0 : 1); }

std::string describe(const PpSchedule& s) {
  return "pipeline schedule " + s.name + " (pp " + std::to_string(s.pp) + ", " + std::to_string(s.microbatches) +
         " microbatches, " + std::to_string(s.stages_per_rank) + " stage(s) per rank)";
}

// GPipe: all forwards, then all backwards, each in microbatch order.
std::vector<std::vector<Compute>> gpipe_order(int pp, int m) {
  std::vector<std::vector<Compute>> order(pp);
  for (int r = 0; r < pp; ++r) {
    for (int i = 0; i < m; ++i) order[r].push_back({true, r, i});
    for (int i = 0; i < m; ++i) order[r].push_back({false, r, i});
  }
  return order;
}

// 1F1B (PipeDream-Flush): pp - 1 - r warm-up forwards, then one forward and one backward at a
// time, then the backwards left.
std::vector<std::vector<Compute>> one_f_one_b_order(int pp, int m) {
  std::vector<std::vector<Compute>> order(pp);
  for (int r = 0; r < pp; ++r) {
    const int warmup = std::min(pp - 1 - r, m);
    for (int i = 0; i < warmup; ++i) order[r].push_back({true, r, i});
    for (int i = 0; i < m - warmup; ++i) {
      order[r].push_back({true, r, warmup + i});
      order[r].push_back({false, r, i});
    }
    for (int i = m - warmup; i < m; ++i) order[r].push_back({false, r, i});
  }
  return order;
}

// Megatron's interleaved 1F1B. Every rank walks the same sequence of m x v forwards: microbatches
// in groups of pp, each group through chunk 0, then chunk 1, ... (chunk c of rank r is stage
// c pp + r); the backwards walk it with the chunks reversed. Rank r runs (pp - 1 - r) x 2 +
// (v - 1) x pp warm-up forwards (at most all m v), then one forward and one backward at a time,
// then the backwards left. Megatron makes every forward a warm-up one when m = pp; with the
// buffered sends of this model that is not needed (no deadlock at m = pp either), and the count
// above reaches the same makespan holding fewer activations.
std::vector<std::vector<Compute>> interleaved_order(int pp, int m, int v) {
  const int total = m * v, group = pp * v;
  auto at = [&](int k, bool forward, int r) {
    const int in_group = k % group;
    int chunk = in_group / pp;
    if (!forward) chunk = v - 1 - chunk;
    return Compute{forward, chunk * pp + r, (k / group) * pp + in_group % pp};
  };
  std::vector<std::vector<Compute>> order(pp);
  for (int r = 0; r < pp; ++r) {
    const int warmup = std::min((pp - 1 - r) * 2 + (v - 1) * pp, total);
    for (int k = 0; k < warmup; ++k) order[r].push_back(at(k, true, r));
    for (int k = 0; k < total - warmup; ++k) {
      order[r].push_back(at(warmup + k, true, r));
      order[r].push_back(at(k, false, r));
    }
    for (int k = total - warmup; k < total; ++k) order[r].push_back(at(k, false, r));
  }
  return order;
}

// A message between two ranks: stage `stage`'s input activation (from stage - 1) or output
// gradient (from stage + 1) for one microbatch. `stage` is the receiving stage.
struct Message {
  bool grad;
  int stage;
  int microbatch;
  bool operator==(const Message&) const = default;
};

// Adds the sends, receives, unshards and reshards to per-rank compute orders (pp_schedule.h,
// communication model).
void lower(PpSchedule& s, const std::vector<std::vector<Compute>>& order) {
  const int pp = s.pp, S = s.stages();
  // What each rank sends each neighbour, in its order.
  std::vector<std::vector<Message>> sent(2 * size_t(pp));
  for (int r = 0; r < pp; ++r)
    for (const Compute& c : order[r]) {
      if (c.forward && c.stage + 1 < S && s.stage_rank(c.stage + 1) != r)
        sent[link(r, s.stage_rank(c.stage + 1), pp)].push_back({false, c.stage + 1, c.microbatch});
      if (!c.forward && c.stage > 0 && s.stage_rank(c.stage - 1) != r)
        sent[link(r, s.stage_rank(c.stage - 1), pp)].push_back({true, c.stage - 1, c.microbatch});
    }
  s.ranks.assign(pp, {});
  for (int r = 0; r < pp; ++r) {
    std::vector<PpAction>& out = s.ranks[r];
    std::vector<size_t> next(2 * size_t(pp), 0);  // next[link(p, r)]: how many of p's messages r received
    std::vector<char> received(2 * size_t(S) * s.microbatches, 0);  // [grad][stage][microbatch]
    auto got = [&](const Message& m) -> char& { return received[(size_t(m.grad) * S + m.stage) * s.microbatches + m.microbatch]; };
    std::vector<char> unsharded(S, 0);
    std::vector<int> last_backward(S, -1);
    for (size_t i = 0; i < order[r].size(); ++i)
      if (!order[r][i].forward) last_backward[order[r][i].stage] = int(i);
    for (size_t i = 0; i < order[r].size(); ++i) {
      const Compute& c = order[r][i];
      const int from = c.forward ? c.stage - 1 : c.stage + 1;  // the stage whose data it needs
      if (from >= 0 && from < S && s.stage_rank(from) != r) {
        const int p = s.stage_rank(from), l = link(p, r, pp);
        const Message need{!c.forward, c.stage, c.microbatch};
        // Receive p's messages in p's order until this one (it may have come already).
        while (!got(need)) {
          TITAN_ASSERT(next[l] < sent[l].size(), "rank ", p, " never sends what rank ", r, " needs");
          const Message& msg = sent[l][next[l]++];
          out.push_back({msg.grad ? K::RecvGrad : K::RecvActivation, msg.stage, msg.microbatch, p});
          got(msg) = 1;
        }
      }
      if (c.forward && !unsharded[c.stage]) {
        out.push_back({K::Unshard, c.stage, -1, -1});
        unsharded[c.stage] = 1;
      }
      out.push_back({c.forward ? K::Forward : K::Backward, c.stage, c.microbatch, -1});
      const int to = c.forward ? c.stage + 1 : c.stage - 1;
      if (to >= 0 && to < S && s.stage_rank(to) != r)
        out.push_back({c.forward ? K::SendActivation : K::SendGrad, c.stage, c.microbatch, s.stage_rank(to)});
      if (last_backward[c.stage] == int(i)) out.push_back({K::Reshard, c.stage, -1, -1});
    }
  }
}

}  // namespace

std::string PpAction::str() const {
  const std::string m = std::to_string(microbatch), st = "s" + std::to_string(stage);
  const std::string to = ">r" + std::to_string(peer_rank), from = "<r" + std::to_string(peer_rank);
  switch (kind) {
    case K::Forward: return "F" + m + st;
    case K::Backward: return "B" + m + st;
    case K::SendActivation: return "SA" + m + st + to;
    case K::RecvActivation: return "RA" + m + st + from;
    case K::SendGrad: return "SG" + m + st + to;
    case K::RecvGrad: return "RG" + m + st + from;
    case K::Unshard: return "U" + st;
    case K::Reshard: return "R" + st;
  }
  return "?";
}

const std::vector<std::string>& pp_schedule_names() {
  static const std::vector<std::string> names = {"GPipe", "1F1B", "Interleaved1F1B"};
  return names;
}

std::string pp_schedule_canonical(const std::string& name) {
  for (const std::string& n : pp_schedule_names())
    if (ascii_lower(n) == ascii_lower(name)) return n;
  return "";
}

int pp_default_stages_per_rank(const std::string& name) {
  return pp_schedule_canonical(name) == "Interleaved1F1B" ? 2 : 1;
}

PpSchedule make_pp_schedule(const std::string& name, int pp, int microbatches, int stages_per_rank,
                            const std::string& microbatches_from) {
  PpSchedule s;
  const std::string m_is = microbatches_from.empty()
                               ? "[parallelism] pipeline_parallel_microbatches = " + std::to_string(microbatches)
                               : microbatches_from;
  s.name = pp_schedule_canonical(name);
  if (s.name.empty()) {
    std::string known;
    for (const std::string& n : pp_schedule_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown [parallelism] pipeline_parallel_schedule '", name, "' (known: ", known, ")");
  }
  TITAN_CHECK(pp >= 1, "[parallelism] pipeline_parallel_degree = ", pp, ": must be at least 1");
  TITAN_CHECK(microbatches >= 1, m_is, ": must be at least 1");
  const bool interleaved = s.name == "Interleaved1F1B";
  if (interleaved)
    TITAN_CHECK(stages_per_rank >= 2, "Interleaved1F1B needs at least 2 stages per rank, got ", stages_per_rank,
                " (with one, use 1F1B)");
  else
    TITAN_CHECK(stages_per_rank == 1, s.name, " places one stage on each rank, got ", stages_per_rank,
                " stages per rank (several: Interleaved1F1B)");
  if (s.name != "GPipe")
    TITAN_CHECK(microbatches >= pp, s.name, ": ", m_is, " is less than pipeline_parallel_degree = ", pp, " (every rank needs a microbatch in flight)");
  if (interleaved)
    TITAN_CHECK(microbatches % pp == 0, "Interleaved1F1B: ", m_is, " is not a multiple of pipeline_parallel_degree = ", pp);
  TITAN_CHECK(1LL * pp * stages_per_rank * microbatches <= kMaxStageMicrobatches, s.name, ": ", pp, " ranks x ",
              stages_per_rank, " stage(s) x ", microbatches, " microbatches is more than ", kMaxStageMicrobatches,
              " stage-microbatch pairs");
  s.pp = pp;
  s.microbatches = microbatches;
  s.stages_per_rank = stages_per_rank;
  lower(s, s.name == "GPipe"  ? gpipe_order(pp, microbatches)
           : s.name == "1F1B" ? one_f_one_b_order(pp, microbatches)
                              : interleaved_order(pp, microbatches, stages_per_rank));
  return s;
}

double pp_analytic_bubble_fraction(const PpSchedule& s) {
  const double p = s.pp, m = s.microbatches, v = s.name == "Interleaved1F1B" ? s.stages_per_rank : 1;
  return (p - 1) / (v * m + p - 1);
}

PpSimulation simulate_pp_schedule(const PpSchedule& s, double forward_cost, double backward_cost) {
  TITAN_CHECK(forward_cost > 0 && backward_cost > 0 && std::isfinite(forward_cost) && std::isfinite(backward_cost),
              "pipeline simulation: forward and backward costs must be positive, got ", forward_cost, " and ",
              backward_cost);
  const std::string what = describe(s);
  TITAN_CHECK(s.pp >= 1 && s.stages_per_rank >= 1 && s.microbatches >= 1 && int(s.ranks.size()) == s.pp, what,
              ": malformed (", s.ranks.size(), " rank lists)");
  TITAN_CHECK(1LL * s.pp * s.stages_per_rank * s.microbatches <= kMaxStageMicrobatches, what, ": more than ",
              kMaxStageMicrobatches, " stage-microbatch pairs");
  const int pp = s.pp, S = s.stages(), M = s.microbatches;
  auto at = [&](int r, size_t i) { return "rank " + std::to_string(r) + "'s " + s.ranks[r][i].str(); };

  // Static checks: every action on the rank of its stage, with the right peer, each once; every
  // forward and backward present, and the transfers between stages on different ranks.
  std::vector<int> count(8 * size_t(S) * M, 0);  // [kind][stage][microbatch]
  auto slot = [&](K k, int stage, int mb) -> int& { return count[(size_t(k) * S + stage) * M + mb]; };
  for (int r = 0; r < pp; ++r)
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const PpAction& a = s.ranks[r][i];
      TITAN_CHECK(a.stage >= 0 && a.stage < S, what, ": ", at(r, i), " names a stage outside 0..", S - 1);
      TITAN_CHECK(s.stage_rank(a.stage) == r, what, ": ", at(r, i), ", but stage ", a.stage, " lives on rank ",
                  s.stage_rank(a.stage));
      if (a.kind == K::Unshard || a.kind == K::Reshard) {
        TITAN_CHECK(a.microbatch == -1 && a.peer_rank == -1, what, ": ", at(r, i), " takes no microbatch or peer");
        continue;
      }
      TITAN_CHECK(a.microbatch >= 0 && a.microbatch < M, what, ": ", at(r, i), " names a microbatch outside 0..",
                  M - 1);
      int peer_stage = -1;  // the stage at the other end of a transfer
      if (a.kind == K::SendActivation || a.kind == K::RecvGrad) peer_stage = a.stage + 1;
      if (a.kind == K::RecvActivation || a.kind == K::SendGrad) peer_stage = a.stage - 1;
      if (a.kind == K::Forward || a.kind == K::Backward) {
        TITAN_CHECK(a.peer_rank == -1, what, ": ", at(r, i), " takes no peer");
      } else {
        TITAN_CHECK(peer_stage >= 0 && peer_stage < S, what, ": ", at(r, i), ": stage ", a.stage,
                    " has no neighbour stage ", peer_stage);
        TITAN_CHECK(s.stage_rank(peer_stage) != r, what, ": ", at(r, i), ": stages ", a.stage, " and ", peer_stage,
                    " are both on rank ", r, " (they hand over in memory, without a transfer)");
        TITAN_CHECK(a.peer_rank == s.stage_rank(peer_stage), what, ": ", at(r, i), ": stage ", peer_stage,
                    " lives on rank ", s.stage_rank(peer_stage));
      }
      TITAN_CHECK(++slot(a.kind, a.stage, a.microbatch) == 1, what, ": ", at(r, i), " appears twice");
    }
  for (int st = 0; st < S; ++st)
    for (int mb = 0; mb < M; ++mb) {
      const std::string sm = " of microbatch " + std::to_string(mb) + " on stage " + std::to_string(st);
      TITAN_CHECK(slot(K::Forward, st, mb) == 1, what, ": no forward", sm);
      TITAN_CHECK(slot(K::Backward, st, mb) == 1, what, ": no backward", sm);
      if (st + 1 < S && s.stage_rank(st + 1) != s.stage_rank(st)) {
        TITAN_CHECK(slot(K::SendActivation, st, mb) == 1, what, ": stage ", st, " never sends its activation", sm);
        TITAN_CHECK(slot(K::RecvGrad, st, mb) == 1, what, ": stage ", st, " never receives its gradient", sm);
      }
      if (st > 0 && s.stage_rank(st - 1) != s.stage_rank(st)) {
        TITAN_CHECK(slot(K::RecvActivation, st, mb) == 1, what, ": stage ", st, " never receives its input", sm);
        TITAN_CHECK(slot(K::SendGrad, st, mb) == 1, what, ": stage ", st, " never sends its input gradient", sm);
      }
    }

  // The run. done_f / done_b: when a forward / backward finished (-1: not yet); have_act /
  // have_grad: when the activation / gradient a stage needs arrived on its rank.
  std::vector<double> done_f(size_t(S) * M, -1), done_b(size_t(S) * M, -1), have_act(size_t(S) * M, -1),
      have_grad(size_t(S) * M, -1);
  auto id = [&](int stage, int mb) { return size_t(stage) * M + mb; };
  struct InFlight {
    Message msg;
    double time;
  };
  std::vector<std::deque<InFlight>> channel(2 * size_t(pp));  // [link(from, to)]
  std::vector<char> unsharded(S, 0);
  std::vector<size_t> pc(pp, 0);
  std::vector<double> clock(pp, 0);
  std::vector<int> live(pp, 0);
  PpSimulation sim;
  sim.forward_cost = forward_cost;
  sim.backward_cost = backward_cost;
  sim.busy.assign(pp, 0);
  sim.max_in_flight.assign(pp, 0);
  sim.timeline.assign(pp, {});

  // Runs rank r's next action; false when it is a receive whose message has not been sent yet.
  auto step = [&](int r) {
    const size_t i = pc[r];
    const PpAction& a = s.ranks[r][i];
    double& t = clock[r];
    const size_t x = a.kind == K::Unshard || a.kind == K::Reshard ? 0 : id(a.stage, a.microbatch);
    switch (a.kind) {
      case K::Unshard:
        TITAN_CHECK(!unsharded[a.stage], what, ": ", at(r, i), " while stage ", a.stage, " is already unsharded");
        unsharded[a.stage] = 1;
        break;
      case K::Reshard:
        TITAN_CHECK(unsharded[a.stage], what, ": ", at(r, i), " while stage ", a.stage, " is not unsharded");
        unsharded[a.stage] = 0;
        break;
      case K::Forward:
      case K::Backward: {
        const bool fwd = a.kind == K::Forward;
        TITAN_CHECK(unsharded[a.stage], what, ": ", at(r, i), " runs while stage ", a.stage,
                    "'s parameters are sharded (no U", "s", a.stage, " before it)");
        double ready = 0;
        if (!fwd) {
          TITAN_CHECK(done_f[x] >= 0, what, ": ", at(r, i), " runs before its forward");
          ready = done_f[x];
        }
        const int from = fwd ? a.stage - 1 : a.stage + 1;
        if (from >= 0 && from < S) {
          if (s.stage_rank(from) == r) {
            const double d = fwd ? done_f[id(from, a.microbatch)] : done_b[id(from, a.microbatch)];
            TITAN_CHECK(d >= 0, what, ": ", at(r, i), " runs before ", fwd ? "F" : "B", a.microbatch, "s", from,
                        " on the same rank, whose ", fwd ? "activation" : "gradient", " it needs");
            ready = std::max(ready, d);
          } else {
            const double d = fwd ? have_act[x] : have_grad[x];
            TITAN_CHECK(d >= 0, what, ": ", at(r, i), " runs before its ", fwd ? "activation" : "gradient",
                        " is received (", fwd ? "RA" : "RG", a.microbatch, "s", a.stage, ")");
            ready = std::max(ready, d);
          }
        }
        const double start = std::max(t, ready), cost = fwd ? forward_cost : backward_cost;
        t = start + cost;
        (fwd ? done_f : done_b)[x] = t;
        sim.busy[r] += cost;
        sim.timeline[r].push_back({start, t, a});
        live[r] += fwd ? 1 : -1;
        sim.max_in_flight[r] = std::max(sim.max_in_flight[r], live[r]);
        break;
      }
      case K::SendActivation:
      case K::SendGrad: {
        const bool grad = a.kind == K::SendGrad;
        TITAN_CHECK((grad ? done_b : done_f)[x] >= 0, what, ": ", at(r, i), " sends before its ",
                    grad ? "backward" : "forward", " ran");
        channel[link(r, a.peer_rank, pp)].push_back(
            {{grad, grad ? a.stage - 1 : a.stage + 1, a.microbatch}, t});
        break;
      }
      case K::RecvActivation:
      case K::RecvGrad: {
        std::deque<InFlight>& q = channel[link(a.peer_rank, r, pp)];
        if (q.empty()) return false;
        const Message want{a.kind == K::RecvGrad, a.stage, a.microbatch};
        if (!(q.front().msg == want)) {
          const Message& m = q.front().msg;
          const PpAction sent{m.grad ? K::SendGrad : K::SendActivation, m.grad ? m.stage + 1 : m.stage - 1,
                              m.microbatch, r};
          fail(what, ": ", at(r, i), " is out of order: rank ", a.peer_rank, " sent ", sent.str(),
               " first (messages between two ranks are received in the order sent)");
        }
        t = std::max(t, q.front().time);
        (want.grad ? have_grad : have_act)[x] = t;
        q.pop_front();
        break;
      }
    }
    ++pc[r];
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r)
      while (pc[r] < s.ranks[r].size() && step(r)) progress = true;
  }
  std::string stuck;
  for (int r = 0; r < pp; ++r)
    if (pc[r] < s.ranks[r].size())
      stuck += (stuck.empty() ? "" : ", ") + at(r, pc[r]) + " (action " + std::to_string(pc[r]) + ") waits";
  TITAN_CHECK(stuck.empty(), what, " deadlocks: ", stuck, " (a receive waits for its message; sends never wait)");
  for (int st = 0; st < S; ++st)
    TITAN_CHECK(!unsharded[st], what, ": stage ", st, " is still unsharded at the end of the step (no R", "s", st,
                " after its last backward)");
  for (int r = 0; r < pp; ++r) sim.makespan = std::max(sim.makespan, clock[r]);
  double busy = 0;
  for (double b : sim.busy) busy += b;
  sim.bubble_fraction = sim.makespan > 0 ? 1.0 - busy / (pp * sim.makespan) : 0.0;
  return sim;
}

std::string format_pp_schedule(const PpSchedule& s, const PpSimulation& sim) {
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  std::string o = "pipeline schedule " + s.name + ": pp " + std::to_string(s.pp) + ", " +
                  std::to_string(s.microbatches) + " microbatches, " + std::to_string(s.stages()) + " stages (" +
                  std::to_string(s.stages_per_rank) + " per rank; stage s on rank s % " + std::to_string(s.pp) + ")\n";
  o += "actions (F<m>s<s>/B<m>s<s>: forward/backward of microbatch m on stage s; SA/RA: send/receive an "
       "activation, SG/RG: a gradient, >r<p>: to rank p, <r<p>: from rank p; Us<s>/Rs<s>: unshard/reshard):\n";
  const int pw = int(std::to_string(s.pp - 1).size());
  for (int r = 0; r < s.pp; ++r) {
    char head[32];
    std::snprintf(head, sizeof head, "rank %*d:", pw, r);
    o += head;
    for (const PpAction& a : s.ranks[r]) o += " " + a.str();
    o += "\n";
  }

  // The grid: column c shows what runs at time (c + 1/2) x forward_cost.
  const bool staged = s.stages_per_rank > 1;
  auto label = [&](const PpAction& a) {
    return (a.kind == K::Forward ? "F" : "B") + std::to_string(a.microbatch) +
           (staged ? "s" + std::to_string(a.stage) : "");
  };
  size_t cell = 1;
  for (const auto& line : sim.timeline)
    for (const PpInterval& iv : line) cell = std::max(cell, label(iv.action).size());
  cell += 1;  // a space between cells
  constexpr size_t kMaxGridChars = 160;
  const long cols = long(std::ceil(sim.makespan / sim.forward_cost - 1e-9));
  const long shown = std::min<long>(cols, std::max<long>(1, long(kMaxGridChars / cell)));
  o += "time grid (one column per forward time " + num(sim.forward_cost) + ", a backward takes " +
       num(sim.backward_cost) + "; " + (staged ? "F<m>s<s>/B<m>s<s>" : "F<m>/B<m>") + ": microbatch m" +
       (staged ? " on stage s" : "") + ", .: idle";
  if (shown < cols) o += "; first " + std::to_string(shown) + " of " + std::to_string(cols) + " columns shown";
  o += "):\n";
  for (int r = 0; r < s.pp; ++r) {
    char head[32];
    std::snprintf(head, sizeof head, "rank %*d |", pw, r);
    o += head;
    size_t k = 0;
    const std::vector<PpInterval>& line = sim.timeline[r];
    for (long c = 0; c < shown; ++c) {
      const double t = (double(c) + 0.5) * sim.forward_cost;
      while (k < line.size() && line[k].end <= t) ++k;
      std::string cellText = k < line.size() && line[k].start <= t ? label(line[k].action) : ".";
      cellText.resize(cell, ' ');
      o += cellText;
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    o += "\n";
  }
  o += "makespan " + num(sim.makespan) + "; busy per rank";
  for (int r = 0; r < s.pp; ++r) o += (r ? ", " : " ") + num(sim.busy[r]);
  o += "; activations held per rank at most";
  for (int r = 0; r < s.pp; ++r) o += (r ? ", " : " ") + std::to_string(sim.max_in_flight[r]);
  o += "\nbubble fraction: " + num(sim.bubble_fraction) + " (analytic for " + s.name + ": " +
       num(pp_analytic_bubble_fraction(s)) + ")\n";
  return o;
}

}  // namespace titan::distributed

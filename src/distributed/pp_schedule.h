// Pipeline-parallel schedules as data: which rank runs which forward, backward, send, receive,
// unshard and reshard, in which order, for one training step of `microbatches` microbatches over
// `pp` pipeline ranks. Nothing here executes a model (the runtime that will walk these lists does
// not exist yet); simulate_pp_schedule() runs the lists on a cost model instead, checks them and
// measures their bubble.
//
// Stages and placement. The model is cut into pp x stages_per_rank consecutive stages. Stage s
// lives on rank s % pp ("loop" placement of torchtitan and Megatron: rank r holds stages r, r+pp,
// r+2pp, ...); with one stage per rank that is rank s.
//
// Schedules (make_pp_schedule; the order of the forwards F and backwards B on each rank):
//   GPipe            every forward in microbatch order, then every backward in microbatch order
//                    (as torch's ScheduleGPipe); holds all m microbatches' activations.
//   1F1B             PipeDream-Flush / Megatron's non-interleaved schedule: rank r runs
//                    min(pp - 1 - r, m) warm-up forwards, then alternates one forward and one
//                    backward, then the remaining backwards; holds at most pp - r activations.
//   Interleaved1F1B  Megatron's interleaved schedule over v = stages_per_rank >= 2 virtual stages
//                    per rank; microbatches a multiple of pp. Forwards go in groups of pp
//                    microbatches through chunk 0, 1, ..., v-1 (backwards: chunks reversed);
//                    rank r runs 2 (pp - 1 - r) + (v - 1) pp warm-up forwards, then 1F1B.
//
// Communication model (what the simulator enforces, and what a runtime must provide). Messages
// go between ranks only: two consecutive stages on one rank (pp = 1 with several stages) hand
// over in memory, with no action. A send is posted and completes at once: the runtime buffers it
// (an isend whose buffer stays alive until the step ends, or an eager send), never waiting for the
// receiver. A receive blocks until its message has arrived. Messages from one rank to another are
// matched in the order they were sent, without tags (as NCCL point-to-point and torch's
// batch_isend_irecv): the k-th receive a rank posts from a peer gets the k-th message that peer
// sent it, so receives are listed in their sender's order. make_pp_schedule derives every send
// and receive from the compute order: each send right after the compute that produced its data,
// and before a compute that needs a message, the receives of everything the peer sent up to that
// message (a receive can thus come earlier than the compute that uses it, never later; it never
// waits longer for that, since the peer sent those messages first).
//
// Action notation (PpAction::str(), used by the printout and `titan info --pp-schedule`):
//   F<m>s<s>        forward of microbatch m on stage s           e.g. F3s1
//   B<m>s<s>        backward of microbatch m on stage s          e.g. B0s2
//   SA<m>s<s>>r<p>  send stage s's output activation of m to rank p (stage s+1)    SA2s0>r1
//   RA<m>s<s><r<p>  receive stage s's input activation of m from rank p (stage s-1)  RA2s1<r0
//   SG<m>s<s>>r<p>  send the gradient of stage s's input for m to rank p (stage s-1) SG0s2>r1
//   RG<m>s<s><r<p>  receive the gradient of stage s's output for m from rank p (s+1) RG0s1<r2
//   Us<s> / Rs<s>   unshard (FSDP all-gather) / reshard (free) stage s's parameters
// The stage of an action is always one on the acting rank. Each rank unshards a stage right
// before its first forward in the step (receives need no parameters) and reshards it right after
// its last backward and that backward's send.
#pragma once
#include <string>
#include <vector>

namespace titan::distributed {

enum class PpActionKind { Forward, Backward, SendActivation, RecvActivation, SendGrad, RecvGrad, Unshard, Reshard };

struct PpAction {
  PpActionKind kind;
  int stage;
  int microbatch;  // -1 for Unshard / Reshard
  int peer_rank;   // the other rank of a send / receive, -1 otherwise
  std::string str() const;  // the compact notation above
  bool operator==(const PpAction&) const = default;
};

struct PpSchedule {
  std::string name;  // canonical: GPipe, 1F1B, Interleaved1F1B
  int pp = 1;
  int microbatches = 1;
  int stages_per_rank = 1;
  std::vector<std::vector<PpAction>> ranks;  // ranks[r]: rank r's actions in execution order

  int stages() const { return pp * stages_per_rank; }
  int stage_rank(int stage) const { return stage % pp; }
};

// The schedule `name` (GPipe, 1F1B, Interleaved1F1B; any letter case) for pp ranks and
// `microbatches` microbatches. Refuses (titan::Error, one line) an unknown name, pp or
// microbatches below 1, fewer microbatches than ranks for 1F1B and Interleaved1F1B, microbatches
// that are not a multiple of pp for Interleaved1F1B, and a stages_per_rank the schedule does not
// take (1 for GPipe and 1F1B, at least 2 for Interleaved1F1B). The refusals name the microbatch
// count as `microbatches_from` (default "[parallelism] pipeline_parallel_microbatches = <m>"; the
// trainer says where its count comes from).
PpSchedule make_pp_schedule(const std::string& name, int pp, int microbatches, int stages_per_rank = 1,
                            const std::string& microbatches_from = "");

// The schedule names make_pp_schedule knows, canonical spelling.
const std::vector<std::string>& pp_schedule_names();
// `name` in its canonical spelling (any letter case matches), "" when it names no schedule.
std::string pp_schedule_canonical(const std::string& name);
// The stages per rank a schedule takes when not told: 2 for Interleaved1F1B, 1 for the others.
int pp_default_stages_per_rank(const std::string& name);

// One compute action as it ran in the simulation: [start, end) in cost units.
struct PpInterval {
  double start = 0, end = 0;
  PpAction action;
};

struct PpSimulation {
  double forward_cost = 1, backward_cost = 2;  // the costs it ran with
  double makespan = 0;         // time at which the last rank finishes
  double bubble_fraction = 0;  // idle compute time / (pp x makespan) = 1 - sum(busy) / (pp x makespan)
  std::vector<double> busy;    // per rank: time spent in forwards and backwards
  std::vector<int> max_in_flight;                // per rank: most (stage, microbatch) forwards whose backward had not run
  std::vector<std::vector<PpInterval>> timeline;  // per rank: its forwards and backwards in order
};

// Runs the schedule: each rank executes its list in order; a forward or backward takes
// forward_cost or backward_cost, everything else takes no time, and communication is free (the
// model above: sends complete at once, a receive waits for its message). A forward of stage s > 0
// needs stage s-1's activation of that microbatch (received, or computed on this rank); a backward
// needs its own forward, and below the last stage the gradient from stage s+1; both need their
// stage unsharded. Throws titan::Error (one line) when the schedule is malformed (an action on a
// rank that does not hold its stage, a wrong peer, a missing or duplicated forward / backward /
// transfer), violates a dependency (computes on data it has not received, sends data it has not
// computed, receives out of its sender's order), leaves a message unreceived or a stage unsharded,
// or deadlocks (every unfinished rank waits on a receive; the message names where each waits).
PpSimulation simulate_pp_schedule(const PpSchedule& schedule, double forward_cost = 1.0, double backward_cost = 2.0);

// The textbook bubble fraction under the definition above (idle / (pp x makespan)), for equal
// stages: (pp - 1) / (m + pp - 1) for GPipe and 1F1B, (pp - 1) / (v m + pp - 1) for
// Interleaved1F1B (Megatron's (pp - 1) / (v m) of the ideal time, as a fraction of the makespan).
// The simulation of these schedules gives exactly these values, the makespan being
// (m + pp - 1) x (F + B), resp. (v m + pp - 1) x (F + B) with F and B the costs of one stage, for
// every case the tests and the author tried (pp <= 8, m <= 32, v <= 4, B / F in 1, 1.5, 2, 3).
double pp_analytic_bubble_fraction(const PpSchedule& schedule);

// A human-readable printout: a header, one line per rank with its actions in order, a time grid
// (one row per rank, one column per sim.forward_cost of time; F<m> / B<m> cells, with the stage as
// F<m>s<s> when ranks hold several stages, `.` idle; only the first columns of a wide one), and
// `bubble fraction: X (analytic for NAME: Y)`.
std::string format_pp_schedule(const PpSchedule& schedule, const PpSimulation& sim);

}  // namespace titan::distributed

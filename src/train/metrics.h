// Training metrics: per logged step a console line (torchtitan's layout), one JSON object in
// <dump_folder>/metrics.jsonl and, when enabled, TensorBoard scalars; a run summary at the end.
//
// Logged steps: step 1, the last warm-up step, every log_freq-th step and the last step. The
// first perf_warmup_steps steps are warm-up (first-touch page faults, allocator growth, caches):
// they are flagged "warmup": true and kept out of the summary's steady-state medians. Rates in a
// log line cover the steps since the previous log line (never mixing warm-up and steady steps).
//
//   tps     = tokens / seconds (this process)
//   tflops  = model FLOPs / seconds / 1e12: flops_per_token x tokens, or the step's own count
//             (StepRecord::flops: with the loss on some tokens only, as in chat SFT, the lm_head
//             runs on the counted ones alone and only their head FLOPs count)
//   mfu     = 100 * model FLOPs / seconds / peak_flops           (percent)
//   memory  = allocator live bytes now; memory_peak = allocator peak; memory_pct = peak / machine
//   data_pct = 100 * seconds waiting for data / step seconds
//   with N data-parallel ranks (StepRecord::world): tps is per rank, tps_total = N x tps (the
//   ranks step in lock-step), comm_pct = 100 * seconds in collectives / step seconds, and
//   comm_wait_pct = 100 * seconds the computing thread waited for them / step seconds (the
//   exposed part: below comm_pct when FSDP's communication thread overlaps compute), and with a
//   sharded model gather_bytes = the bytes the logged step's parameter all-gathers assembled on
//   this rank (each unit's padded values in their dtype; (N-1)/N of them arrived over the wire),
//   and with expert parallelism dispatch_bytes = what this rank's MoE blocks sent to the other
//   ep ranks in the step (tokens' rows to their experts and back, forward and backward), with
//   tensor / context parallelism tp_bytes / cp_bytes = what this rank sent over its tp / cp group
//   in the step (the layers' collectives: comm::Comm::sent_bytes, a ring's volume), and
//   with pipeline parallelism pp_bubble = 1 - (seconds in this rank's stage forwards and
//   backwards) / (seconds of its schedule runs): the measured bubble (waits for the other stages,
//   sends, receives), against the schedule's predicted one (titan info --pp-schedule)
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"

namespace titan {

class TensorBoardWriter;
struct JobConfig;

struct StepRecord {
  int64_t step = 0;           // 1-based training step
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;         // tokens processed in this step (all micro-batches of this process)
  double flops = 0;           // model FLOPs of those tokens (0: tokens x MetricsOptions::flops_per_token)
  double step_seconds = 0;    // wall time of the whole step, data loading included
  double data_seconds = 0;    // part of step_seconds spent waiting for the data loader
  int64_t world = 1;          // ranks; each processed `tokens` in the same wall time
  // Ranks whose `tokens` are distinct ones of the step (world / (tp x pp): the ranks of a tensor-
  // or pipeline-parallel group work on the same tokens); tps_total = tps x this. 0: world.
  int64_t token_ranks = 0;
  double comm_seconds = 0;    // part of step_seconds inside collectives (gradients, parameters)
  double comm_wait_seconds = 0;  // of which the computing thread waited (not overlapped)
  double max_rank_peak_bytes = 0;  // largest allocator peak over all ranks (world > 1)
  int64_t gather_bytes = 0;   // parameter all-gathers of this step on this rank (sharded; 0 otherwise)
  int64_t dispatch_bytes = 0; // sent to other ranks by the expert-parallel MoE blocks this step (0 without EP)
  int64_t tp_bytes = 0, cp_bytes = 0;  // sent over the tp / cp group this step (0 without them)
  double pp_bubble = -1;      // pipeline: this rank's idle fraction of its schedule's runs (-1 without PP)
  // Tokens trained on so far from each dataset of a [training] dataset_mix, all ranks together
  // (metrics.jsonl's "dataset_tokens"); empty for one dataset.
  std::vector<std::pair<std::string, uint64_t>> dataset_tokens;
};

enum class ColorMode { Auto, Never, Always };  // Auto: colors only when the console is a TTY

struct MetricsOptions {
  std::string dump_folder;        // metrics.jsonl and summary.json go here ("" = no files)
  // > 0: a run resumed from the checkpoint of this step continues the existing metrics.jsonl,
  // first dropping (atomically) the lines of later steps, which the stopped run logged after that
  // checkpoint, and a torn last line. TensorBoard events are appended in a new file that starts
  // with a SessionLog START at step resume_step + 1, on which TensorBoard's reader discards the
  // older events of that step and later ones.
  int64_t resume_step = 0;
  int64_t log_freq = 10;
  int64_t total_steps = 0;        // the last step is always logged (0 = unknown)
  int64_t perf_warmup_steps = 2;
  double flops_per_token = 0;
  double peak_flops = 0;          // FLOP/s for MFU; 0 leaves mfu at 0
  Device device;                  // whose allocator the memory columns read ([compute] device)
  bool tensorboard = false;
  std::string tb_folder;
  ColorMode color = ColorMode::Auto;
  std::FILE* console = stdout;    // nullptr: no console output
};

// The options a JobConfig implies ([metrics], [job] dump_folder, [training] steps; peak_flops from
// [metrics] peak_tflops, 0 when unset: the trainer then sets the peak measured on this machine,
// mfu_peak() of train/peak_flops.h).
MetricsOptions metrics_options_from(const JobConfig& cfg, double flops_per_token);

struct LogLine {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double memory_gib = 0, memory_peak_gib = 0, memory_pct = 0;
  double tps = 0, tflops = 0, mfu = 0, data_pct = 0;
  int64_t world = 1;
  double tps_total = 0, comm_pct = 0, comm_wait_pct = 0, memory_peak_max_rank_gib = 0;
  int64_t gather_bytes = 0, dispatch_bytes = 0, tp_bytes = 0, cp_bytes = 0;
  double pp_bubble = -1;
  double elapsed_s = 0;  // since the logger was created
  bool warmup = false;
};

struct RunSummary {
  int64_t steps = 0;         // steps recorded
  int64_t steady_steps = 0;  // of which after warm-up
  double median_tps = 0, median_tflops = 0, median_mfu = 0;  // over steady steps (all if none)
  double peak_memory_gib = 0, peak_memory_pct = 0;
  double total_seconds = 0;  // wall time from logger creation to finish()
  double final_loss = 0;
};

class MetricsLogger {
 public:
  explicit MetricsLogger(MetricsOptions opt);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // Record one finished step; returns the log line when this step is logged.
  std::optional<LogLine> record(const StepRecord& r);
  RunSummary summary() const;
  // A validation result: a console line, a metrics.jsonl line {"step", "validation_loss",
  // "validation_perplexity", "validation_tokens"} and TensorBoard's validation_metrics/loss and
  // validation_metrics/perplexity.
  void record_validation(int64_t step, double loss, int64_t tokens, double seconds);
  // Print the summary, write <dump_folder>/summary.json, flush everything; returns the summary.
  // A run that recorded no step (resumed at its last step) leaves the console and summary.json
  // alone: the summary there is the one of the run that trained.
  RunSummary finish();
  // Lines of metrics.jsonl dropped on resume (see MetricsOptions::resume_step).
  int64_t dropped_jsonl_lines() const { return dropped_lines_; }

  // The console text of a line (no newline); ANSI colors when `color`.
  static std::string format_line(const LogLine& l, bool color);
  static std::string format_summary(const RunSummary& s);

 private:
  LogLine make_line(const StepRecord& r);
  MetricsOptions opt_;
  bool color_ = false;
  double start_ = 0;
  // Accumulated since the previous log line.
  int64_t win_tokens_ = 0;
  double win_seconds_ = 0, win_data_ = 0, win_comm_ = 0, win_wait_ = 0;
  int64_t world_ = 1, token_ranks_ = 1;
  std::vector<double> steady_tps_, all_tps_;
  std::vector<double> steady_fps_, all_fps_;  // model FLOP/s of each step
  double win_flops_ = 0;
  int64_t steps_ = 0;
  double last_loss_ = 0;
  double max_peak_bytes_ = 0;
  // Appends one line to metrics.jsonl; a failed write (a full disk) is an error naming the file.
  void write_jsonl(const std::string& line);
  std::string jsonl_path_;
  int jsonl_fd_ = -1;  // metrics.jsonl, opened for appending; -1 = none
  int64_t dropped_lines_ = 0;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace titan

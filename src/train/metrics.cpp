#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/clock.h"
#include "core/error.h"
#include "model/flops.h"
#include "train/job_config.h"
#include "train/tensorboard.h"
#include "util/strings.h"

namespace titan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;


// 12345.6 -> "12,346" (torchtitan prints tps with thousands separators).
std::string with_commas(double v) {
  long long n = std::llround(v);
  std::string s = std::to_string(n < 0 ? -n : n), o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) o += ',';
    o += s[i];
  }
  return n < 0 ? "-" + o : o;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// JSON has no NaN/Inf: a non-finite loss is written as null (the run stops on it anyway).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// Keeps the lines of metrics.jsonl up to step `last` (a resume from that step's checkpoint): drops
// complete lines of later steps and a last line without its newline (torn by a kill or a full
// disk); anything else stays as it is. Rewrites the file atomically when something is dropped;
// returns how many lines were.
int64_t drop_lines_after(const std::string& path, int64_t last) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return 0;
  const std::string text = read_file(path);
  std::string kept;
  int64_t dropped = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      ++dropped;
      break;
    }
    const std::string_view line(text.data() + pos, nl + 1 - pos);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool later = j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                       j["step"].get<int64_t>() > last;
    if (later) ++dropped;
    else kept += line;
    pos = nl + 1;
  }
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

}  // namespace

MetricsOptions metrics_options_from(const JobConfig& cfg, double flops_per_token) {
  MetricsOptions o;
  o.dump_folder = cfg.job.dump_folder;
  o.log_freq = cfg.metrics.log_freq;
  o.total_steps = cfg.training.steps;
  o.perf_warmup_steps = cfg.metrics.perf_warmup_steps;
  o.flops_per_token = flops_per_token;
  o.device = Device{cfg.compute.device, 0};
  o.peak_flops = cfg.metrics.peak_tflops * 1e12;  // 0: the trainer measures it (train/peak_flops.h)
  o.tensorboard = cfg.metrics.enable_tensorboard;
  o.tb_folder = cfg.tensorboard_folder();
  o.color = cfg.metrics.disable_color_printing ? ColorMode::Never : ColorMode::Auto;
  return o;
}

MetricsLogger::MetricsLogger(MetricsOptions opt) : opt_(std::move(opt)), start_(now_seconds()) {
  TITAN_CHECK(opt_.log_freq >= 1, "[metrics] log_freq must be >= 1");
  color_ = opt_.color == ColorMode::Always ||
           (opt_.color == ColorMode::Auto && opt_.console && isatty(fileno(opt_.console)));
  if (!opt_.dump_folder.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt_.dump_folder, ec);
    TITAN_CHECK(!ec, opt_.dump_folder, ": cannot create dump folder: ", ec.message());
    jsonl_path_ = opt_.dump_folder + "/metrics.jsonl";
    if (opt_.resume_step > 0) dropped_lines_ = drop_lines_after(jsonl_path_, opt_.resume_step);
    jsonl_fd_ = ::open(jsonl_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | (opt_.resume_step > 0 ? 0 : O_TRUNC), 0644);
    TITAN_CHECK(jsonl_fd_ >= 0, jsonl_path_, ": cannot open for writing: ", std::strerror(errno));
  }
  if (opt_.tensorboard) {
    tb_ = std::make_unique<TensorBoardWriter>(opt_.tb_folder);
    tb_->add_session_start(opt_.resume_step + 1);
  }
}

MetricsLogger::~MetricsLogger() {
  if (jsonl_fd_ >= 0) ::close(jsonl_fd_);
}

void MetricsLogger::write_jsonl(const std::string& line) {
  // Unbuffered: each line reaches the OS at once (a killed run keeps its metrics), and a write
  // that fails stops the run now rather than training on with the metrics lost.
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t w = ::write(jsonl_fd_, line.data() + off, line.size() - off);
    if (w < 0 && errno == EINTR) continue;
    TITAN_CHECK(w > 0, jsonl_path_, ": cannot write metrics: ", std::strerror(w < 0 ? errno : EIO));
    off += size_t(w);
  }
}

LogLine MetricsLogger::make_line(const StepRecord& r) {
  MemoryStats m = allocator_for(opt_.device).stats();
  size_t machine = device_memory_bytes(opt_.device);
  LogLine l;
  l.step = r.step;
  l.loss = r.loss;
  l.grad_norm = r.grad_norm;
  l.lr = r.lr;
  l.memory_gib = double(m.live_bytes) / kGiB;
  l.memory_peak_gib = double(m.peak_bytes) / kGiB;
  l.memory_pct = machine ? 100.0 * double(m.peak_bytes) / double(machine) : 0;
  l.tps = win_seconds_ > 0 ? double(win_tokens_) / win_seconds_ : 0;
  const double fps = win_seconds_ > 0 ? win_flops_ / win_seconds_ : 0;
  l.tflops = fps / 1e12;
  l.mfu = opt_.peak_flops > 0 ? 100.0 * fps / opt_.peak_flops : 0;
  l.data_pct = win_seconds_ > 0 ? 100.0 * win_data_ / win_seconds_ : 0;
  l.world = r.world;
  l.tps_total = l.tps * double(r.token_ranks > 0 ? r.token_ranks : r.world);
  l.comm_pct = win_seconds_ > 0 ? 100.0 * win_comm_ / win_seconds_ : 0;
  l.comm_wait_pct = win_seconds_ > 0 ? 100.0 * win_wait_ / win_seconds_ : 0;
  l.memory_peak_max_rank_gib = r.max_rank_peak_bytes / kGiB;
  l.gather_bytes = r.gather_bytes;
  l.dispatch_bytes = r.dispatch_bytes;
  l.tp_bytes = r.tp_bytes, l.cp_bytes = r.cp_bytes;
  l.pp_bubble = r.pp_bubble;
  l.elapsed_s = now_seconds() - start_;
  l.warmup = r.step <= opt_.perf_warmup_steps;
  return l;
}

std::optional<LogLine> MetricsLogger::record(const StepRecord& r) {
  ++steps_;
  last_loss_ = r.loss;
  const double flops = r.flops > 0 ? r.flops : opt_.flops_per_token * double(r.tokens);
  win_tokens_ += r.tokens;
  win_flops_ += flops;
  win_seconds_ += r.step_seconds;
  win_data_ += r.data_seconds;
  win_comm_ += r.comm_seconds;
  win_wait_ += r.comm_wait_seconds;
  world_ = r.world;
  token_ranks_ = r.token_ranks > 0 ? r.token_ranks : r.world;
  double tps = r.step_seconds > 0 ? double(r.tokens) / r.step_seconds : 0;
  all_tps_.push_back(tps);
  all_fps_.push_back(r.step_seconds > 0 ? flops / r.step_seconds : 0);
  if (r.step > opt_.perf_warmup_steps) {
    steady_tps_.push_back(tps);
    steady_fps_.push_back(all_fps_.back());
  }
  max_peak_bytes_ = std::max(max_peak_bytes_, double(allocator_for(opt_.device).stats().peak_bytes));

  bool log = r.step == 1 || r.step % opt_.log_freq == 0 || r.step == opt_.perf_warmup_steps ||
             (opt_.total_steps > 0 && r.step == opt_.total_steps);
  if (!log) return std::nullopt;

  LogLine l = make_line(r);
  win_tokens_ = 0;
  win_flops_ = 0;
  win_seconds_ = win_data_ = win_comm_ = win_wait_ = 0;

  if (opt_.console) {
    std::fprintf(opt_.console, "%s\n", format_line(l, color_).c_str());
    std::fflush(opt_.console);
  }
  if (jsonl_fd_ >= 0) {
    nlohmann::json j = {{"step", l.step},
                        {"loss", num(l.loss)},
                        {"grad_norm", num(l.grad_norm)},
                        {"lr", l.lr},
                        {"memory_gib", l.memory_gib},
                        {"memory_peak_gib", l.memory_peak_gib},
                        {"memory_pct", l.memory_pct},
                        {"tps", l.tps},
                        {"tflops", l.tflops},
                        {"mfu", l.mfu},
                        {"data_pct", l.data_pct},
                        {"elapsed_s", l.elapsed_s},
                        {"warmup", l.warmup}};
    if (l.world > 1) {
      j["world"] = l.world;
      j["tps_total"] = l.tps_total;
      j["comm_pct"] = l.comm_pct;
      j["comm_wait_pct"] = l.comm_wait_pct;
      j["memory_peak_max_rank_gib"] = l.memory_peak_max_rank_gib;
      if (l.gather_bytes > 0) j["gather_bytes"] = l.gather_bytes;
      if (l.dispatch_bytes > 0) j["dispatch_bytes"] = l.dispatch_bytes;
      if (l.tp_bytes > 0) j["tp_bytes"] = l.tp_bytes;
      if (l.cp_bytes > 0) j["cp_bytes"] = l.cp_bytes;
      if (l.pp_bubble >= 0) j["pp_bubble"] = l.pp_bubble;
    }
    if (!r.dataset_tokens.empty()) {
      nlohmann::json d = nlohmann::json::object();
      for (const auto& [name, n] : r.dataset_tokens) d[name] = n;
      j["dataset_tokens"] = d;
    }
    write_jsonl(j.dump() + "\n");
  }
  if (tb_) {
    tb_->add_scalars(l.step, {{"loss_metrics/global_avg_loss", l.loss},
                              {"grad_norm", l.grad_norm},
                              {"lr", l.lr},
                              {"throughput(tps)", l.tps},
                              {"tflops", l.tflops},
                              {"mfu(%)", l.mfu},
                              {"memory/current(GiB)", l.memory_gib},
                              {"memory/peak(GiB)", l.memory_peak_gib},
                              {"memory/peak(%)", l.memory_pct},
                              {"time_metrics/data_loading(%)", l.data_pct}});
  }
  return l;
}

void MetricsLogger::record_validation(int64_t step, double loss, int64_t tokens, double seconds) {
  const double ppl = std::exp(loss);
  if (opt_.console) {
    std::fprintf(opt_.console, "%svalidate step %5lld  loss %8.4f  perplexity %10.3f  (%lld tokens, %.2f s)%s\n",
                 color_ ? "\033[36m" : "", (long long)step, loss, ppl, (long long)tokens, seconds,
                 color_ ? "\033[0m" : "");
    std::fflush(opt_.console);
  }
  if (jsonl_fd_ >= 0) {
    const nlohmann::json j = {{"step", step},
                              {"validation_loss", num(loss)},
                              {"validation_perplexity", num(ppl)},
                              {"validation_tokens", tokens}};
    write_jsonl(j.dump() + "\n");
  }
  if (tb_) tb_->add_scalars(step, {{"validation_metrics/loss", loss}, {"validation_metrics/perplexity", ppl}});
}

RunSummary MetricsLogger::summary() const {
  RunSummary s;
  s.steps = steps_;
  s.steady_steps = int64_t(steady_tps_.size());
  s.median_tps = median(steady_tps_.empty() ? all_tps_ : steady_tps_);
  const double fps = median(steady_fps_.empty() ? all_fps_ : steady_fps_);
  s.median_tflops = fps / 1e12;
  s.median_mfu = opt_.peak_flops > 0 ? 100.0 * fps / opt_.peak_flops : 0;
  double peak = std::max(max_peak_bytes_, double(allocator_for(opt_.device).stats().peak_bytes));
  s.peak_memory_gib = peak / kGiB;
  size_t machine = device_memory_bytes(opt_.device);
  s.peak_memory_pct = machine ? 100.0 * peak / double(machine) : 0;
  s.total_seconds = now_seconds() - start_;
  s.final_loss = last_loss_;
  return s;
}

RunSummary MetricsLogger::finish() {
  RunSummary s = summary();
  if (steps_ == 0) return s;
  if (opt_.console) {
    std::fprintf(opt_.console, "%s\n", format_summary(s).c_str());
    std::fflush(opt_.console);
  }
  if (!opt_.dump_folder.empty()) {
    nlohmann::json j = {{"steps", s.steps},
                        {"steady_steps", s.steady_steps},
                        {"median_tps", s.median_tps},
                        {"median_tflops", s.median_tflops},
                        {"median_mfu", s.median_mfu},
                        {"peak_memory_gib", s.peak_memory_gib},
                        {"peak_memory_pct", s.peak_memory_pct},
                        {"total_seconds", s.total_seconds},
                        {"final_loss", num(s.final_loss)}};
    if (world_ > 1) {
      j["world"] = world_;
      j["median_tps_total"] = s.median_tps * double(token_ranks_);
    }
    write_file_atomic(opt_.dump_folder + "/summary.json", j.dump(2) + "\n");
  }
  return s;
}

std::string MetricsLogger::format_line(const LogLine& l, bool color) {
  // torchtitan's palette: step red, loss green, memory yellow, tps blue, tflops cyan, mfu magenta.
  auto c = [&](const char* code) { return color ? std::string("\033[") + code + "m" : std::string(); };
  std::string s;
  s += c("31") + "step: " + fmt("%2.0f", double(l.step));
  s += "  " + c("32") + "loss: " + fmt("%7.4f", l.loss);
  s += "  " + c("0") + "grad_norm: " + fmt("%7.4f", l.grad_norm);
  s += "  lr: " + fmt("%.4e", l.lr);
  s += "  " + c("33") + "memory: " + fmt("%5.2f", l.memory_peak_gib) + "GiB(" + fmt("%.2f", l.memory_pct) + "%)";
  s += "  " + c("34") + "tps: " + with_commas(l.tps);
  s += "  " + c("36") + "tflops: " + fmt("%.3f", l.tflops);
  s += "  " + c("35") + "mfu: " + fmt("%.2f", l.mfu) + "%";
  s += "  " + c("0") + "data: " + fmt("%.1f", l.data_pct) + "%";
  if (l.world > 1)
    s += "  " + c("34") + "tps(" + std::to_string(l.world) + " ranks): " + with_commas(l.tps_total) + c("0") +
         "  comm: " + fmt("%.1f", l.comm_pct) + "% (waited " + fmt("%.1f", l.comm_wait_pct) + "%)";
  if (l.pp_bubble >= 0) s += "  pp bubble: " + fmt("%.1f", 100.0 * l.pp_bubble) + "%";
  if (l.warmup) s += "  (warm-up)";
  s += c("0");
  return s;
}

std::string MetricsLogger::format_summary(const RunSummary& s) {
  std::string o = "summary: " + std::to_string(s.steps) + " steps in " + fmt("%.1f", s.total_seconds) + " s";
  o += "  steady-state (" + std::to_string(s.steady_steps) + " steps) median tps: " + with_commas(s.median_tps);
  o += "  tflops: " + fmt("%.3f", s.median_tflops) + "  mfu: " + fmt("%.2f", s.median_mfu) + "%";
  o += "  peak memory: " + fmt("%.2f", s.peak_memory_gib) + "GiB(" + fmt("%.2f", s.peak_memory_pct) + "%)";
  o += "  final loss: " + fmt("%.4f", s.final_loss);
  return o;
}

}  // namespace titan

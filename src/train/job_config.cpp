#include "train/job_config.h"

#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/error.h"
#include "util/strings.h"

namespace titan {
namespace {

enum class Kind { Int, Double, OptDouble, Bool, String, StringList };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Int: return "an integer";
    case Kind::Double: return "a number";
    case Kind::OptDouble: return "a number";
    case Kind::Bool: return "a boolean (true/false)";
    case Kind::String: return "a string";
    case Kind::StringList: return "an array of strings";
  }
  return "?";
}

// One configurable key: where it lives in JobConfig and how its text is typed.
struct Field {
  const char* section;
  const char* key;
  Kind kind;
  void* ptr;
  std::vector<std::string> choices;  // allowed values of a String key (empty: any)
};

// The table of every key, bound to one JobConfig instance. Its order is the render order.
std::vector<Field> fields_of(JobConfig& c) {
  return {
      {"job", "dump_folder", Kind::String, &c.job.dump_folder, {}},
      {"job", "description", Kind::String, &c.job.description, {}},
      {"model", "name", Kind::String, &c.model.name, {"qwen3", "qwen3_moe"}},
      {"model", "flavor", Kind::String, &c.model.flavor, {}},
      {"model", "hf_assets_path", Kind::String, &c.model.hf_assets_path, {}},
      {"model", "n_layers", Kind::Int, &c.model.n_layers, {}},
      {"model", "num_experts", Kind::Int, &c.model.num_experts, {}},
      {"model", "top_k", Kind::Int, &c.model.top_k, {}},
      {"model", "load_balance_coeff", Kind::Double, &c.model.load_balance_coeff, {}},
      {"optimizer", "name", Kind::String, &c.optimizer.name, {"AdamW"}},
      {"optimizer", "lr", Kind::Double, &c.optimizer.lr, {}},
      {"optimizer", "beta1", Kind::Double, &c.optimizer.beta1, {}},
      {"optimizer", "beta2", Kind::Double, &c.optimizer.beta2, {}},
      {"optimizer", "eps", Kind::Double, &c.optimizer.eps, {}},
      {"optimizer", "weight_decay", Kind::Double, &c.optimizer.weight_decay, {}},
      {"lr_scheduler", "warmup_steps", Kind::Int, &c.lr_scheduler.warmup_steps, {}},
      {"lr_scheduler", "decay_ratio", Kind::OptDouble, &c.lr_scheduler.decay_ratio, {}},
      {"lr_scheduler", "decay_type", Kind::String, &c.lr_scheduler.decay_type, {"linear", "sqrt", "cosine"}},
      {"lr_scheduler", "min_lr_factor", Kind::Double, &c.lr_scheduler.min_lr_factor, {}},
      {"training", "local_batch_size", Kind::Int, &c.training.local_batch_size, {}},
      {"training", "global_batch_size", Kind::Int, &c.training.global_batch_size, {}},
      {"training", "seq_len", Kind::Int, &c.training.seq_len, {}},
      {"training", "max_norm", Kind::Double, &c.training.max_norm, {}},
      {"training", "steps", Kind::Int, &c.training.steps, {}},
      {"training", "dataset", Kind::String, &c.training.dataset, {}},
      {"training", "dataset_path", Kind::String, &c.training.dataset_path, {}},
      {"training", "seed", Kind::Int, &c.training.seed, {}},
      {"training", "deterministic", Kind::Bool, &c.training.deterministic, {}},
      {"training", "mixed_precision_param", Kind::String, &c.training.mixed_precision_param,
       {"float32", "bfloat16"}},
      {"parallelism", "data_parallel_shard_degree", Kind::Int, &c.parallelism.data_parallel_shard_degree, {}},
      {"parallelism", "data_parallel_replicate_degree", Kind::Int, &c.parallelism.data_parallel_replicate_degree, {}},
      {"parallelism", "tensor_parallel_degree", Kind::Int, &c.parallelism.tensor_parallel_degree, {}},
      {"parallelism", "fsdp_reshard_after_forward", Kind::String, &c.parallelism.fsdp_reshard_after_forward,
       {"default", "always", "never"}},
      {"parallelism", "fsdp_prefetch", Kind::Bool, &c.parallelism.fsdp_prefetch, {}},
      {"parallelism", "pipeline_parallel_degree", Kind::Int, &c.parallelism.pipeline_parallel_degree, {}},
      {"parallelism", "context_parallel_degree", Kind::Int, &c.parallelism.context_parallel_degree, {}},
      {"parallelism", "expert_parallel_degree", Kind::Int, &c.parallelism.expert_parallel_degree, {}},
      {"checkpoint", "enable", Kind::Bool, &c.checkpoint.enable, {}},
      {"checkpoint", "folder", Kind::String, &c.checkpoint.folder, {}},
      {"checkpoint", "interval", Kind::Int, &c.checkpoint.interval, {}},
      {"checkpoint", "initial_load_path", Kind::String, &c.checkpoint.initial_load_path, {}},
      {"checkpoint", "initial_load_in_hf", Kind::Bool, &c.checkpoint.initial_load_in_hf, {}},
      {"checkpoint", "last_save_in_hf", Kind::Bool, &c.checkpoint.last_save_in_hf, {}},
      {"checkpoint", "export_dtype", Kind::String, &c.checkpoint.export_dtype, {"float32", "bfloat16", "float16"}},
      {"checkpoint", "keep_latest_k", Kind::Int, &c.checkpoint.keep_latest_k, {}},
      {"checkpoint", "load_step", Kind::Int, &c.checkpoint.load_step, {}},
      {"activation_checkpoint", "mode", Kind::String, &c.activation_checkpoint.mode, {"none", "selective", "full"}},
      {"metrics", "log_freq", Kind::Int, &c.metrics.log_freq, {}},
      {"metrics", "enable_tensorboard", Kind::Bool, &c.metrics.enable_tensorboard, {}},
      {"metrics", "save_tb_folder", Kind::String, &c.metrics.save_tb_folder, {}},
      {"metrics", "disable_color_printing", Kind::Bool, &c.metrics.disable_color_printing, {}},
      {"metrics", "peak_tflops", Kind::Double, &c.metrics.peak_tflops, {}},
      {"metrics", "perf_warmup_steps", Kind::Int, &c.metrics.perf_warmup_steps, {}},
      {"kernels", "replace", Kind::StringList, &c.kernels.replace, {}},
      {"compute", "threads", Kind::Int, &c.compute.threads, {}},
      {"comm", "init_timeout_seconds", Kind::Int, &c.comm.init_timeout_seconds, {}},
      {"comm", "train_timeout_seconds", Kind::Int, &c.comm.train_timeout_seconds, {}},
  };
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"job",      "model",      "optimizer",
                                                 "lr_scheduler", "training", "parallelism",
                                                 "checkpoint", "activation_checkpoint", "metrics",
                                                 "kernels",  "compute",    "comm"};
  return names;
}

std::vector<std::string> keys_in(std::vector<Field>& fs, const std::string& section) {
  std::vector<std::string> out;
  for (auto& f : fs)
    if (section == f.section) out.push_back(f.key);
  return out;
}

Field* find_field(std::vector<Field>& fs, const std::string& section, const std::string& key) {
  for (auto& f : fs)
    if (section == f.section && key == f.key) return &f;
  return nullptr;
}

// " (did you mean X?)" or "".
std::string hint(const std::string& s, const std::vector<std::string>& cands, const std::string& pre = "") {
  std::string m = closest_match(s, cands);
  return m.empty() ? "" : " (did you mean " + pre + m + "?)";
}

std::string all_dotted_keys_hint(std::vector<Field>& fs, const std::string& dotted, const std::string& pre) {
  std::vector<std::string> all;
  for (auto& f : fs) all.push_back(std::string(f.section) + "." + f.key);
  return hint(dotted, all, pre);
}

void check_choice(const Field& f, const std::string& v, const std::string& where) {
  if (f.choices.empty()) return;
  for (auto& c : f.choices)
    if (c == v) return;
  std::string list;
  for (auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
  fail(where, ": [", f.section, "] ", f.key, " = \"", v, "\" is not one of: ", list, hint(v, f.choices));
}

// ---- TOML file values ----

const char* toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
  }
}

void set_from_toml(const Field& f, const toml::node& n, const std::string& where) {
  auto bad = [&]() {
    fail(where, ": [", f.section, "] ", f.key, " must be ", kind_name(f.kind), ", got ", toml_type_name(n));
  };
  switch (f.kind) {
    case Kind::Int:
      if (!n.is_integer()) bad();
      *static_cast<int64_t*>(f.ptr) = n.as_integer()->get();
      break;
    case Kind::Double:
    case Kind::OptDouble: {
      double v;
      if (n.is_floating_point()) v = n.as_floating_point()->get();
      else if (n.is_integer()) v = double(n.as_integer()->get());
      else bad();
      if (f.kind == Kind::Double) *static_cast<double*>(f.ptr) = v;
      else *static_cast<std::optional<double>*>(f.ptr) = v;
      break;
    }
    case Kind::Bool:
      if (!n.is_boolean()) bad();
      *static_cast<bool*>(f.ptr) = n.as_boolean()->get();
      break;
    case Kind::String:
      if (!n.is_string()) bad();
      check_choice(f, n.as_string()->get(), where);
      *static_cast<std::string*>(f.ptr) = n.as_string()->get();
      break;
    case Kind::StringList: {
      if (!n.is_array()) bad();
      std::vector<std::string> out;
      for (auto& e : *n.as_array()) {
        if (!e.is_string())
          fail(where, ": [", f.section, "] ", f.key, " must be an array of strings, got an element of type ",
               toml_type_name(e));
        out.push_back(e.as_string()->get());
      }
      *static_cast<std::vector<std::string>*>(f.ptr) = out;
      break;
    }
  }
}

std::string at(const std::string& origin, const toml::node& n) {
  auto line = n.source().begin.line;
  return line > 0 ? origin + ":" + std::to_string(line) : origin;
}

// ---- command-line values ----

void set_from_text(const Field& f, const std::string& v, const std::string& opt) {
  auto bad = [&]() { fail("option --", opt, " must be ", kind_name(f.kind), ", got \"", v, "\""); };
  switch (f.kind) {
    case Kind::Int: {
      int64_t x = 0;
      auto r = std::from_chars(v.data(), v.data() + v.size(), x);
      if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size()) bad();
      *static_cast<int64_t*>(f.ptr) = x;
      break;
    }
    case Kind::Double:
    case Kind::OptDouble: {
      if (f.kind == Kind::OptDouble && (v == "none" || v.empty())) {
        static_cast<std::optional<double>*>(f.ptr)->reset();
        break;
      }
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size()) bad();
      if (f.kind == Kind::Double) *static_cast<double*>(f.ptr) = x;
      else *static_cast<std::optional<double>*>(f.ptr) = x;
      break;
    }
    case Kind::Bool:
      if (v == "true" || v == "1") *static_cast<bool*>(f.ptr) = true;
      else if (v == "false" || v == "0") *static_cast<bool*>(f.ptr) = false;
      else bad();
      break;
    case Kind::String:
      check_choice(f, v, "option --" + opt);
      *static_cast<std::string*>(f.ptr) = v;
      break;
    case Kind::StringList: {
      // Comma-separated (a=b,c=d), or a TOML array as in a job file (["a=b", "c=d"]); an empty
      // value clears the list.
      std::vector<std::string> out;
      std::string body = trim(v);
      const bool array = !body.empty() && body.front() == '[';
      if (array) {
        if (body.back() != ']') bad();
        body = body.substr(1, body.size() - 2);
      }
      if (!trim(body).empty())
        for (auto& part : split(body, ',')) {
          std::string e = trim(part);
          if (array) {
            if (e.size() < 2 || (e.front() != '"' && e.front() != '\'') || e.back() != e.front()) bad();
            e = e.substr(1, e.size() - 2);
          }
          out.push_back(e);
        }
      *static_cast<std::vector<std::string>*>(f.ptr) = out;
      break;
    }
  }
}

// ---- rendering ----

std::string quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += char(ch);
    } else if (ch == '\n') {
      o += "\\n";
    } else if (ch == '\t') {
      o += "\\t";
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else {
      o += char(ch);
    }
  }
  return o + "\"";
}

// Shortest text that reads back to the same double, always a TOML float.
std::string float_text(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::general);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string value_text(const Field& f) {
  switch (f.kind) {
    case Kind::Int: return std::to_string(*static_cast<int64_t*>(f.ptr));
    case Kind::Double: return float_text(*static_cast<double*>(f.ptr));
    case Kind::OptDouble: return float_text(**static_cast<std::optional<double>*>(f.ptr));
    case Kind::Bool: return *static_cast<bool*>(f.ptr) ? "true" : "false";
    case Kind::String: return quote(*static_cast<std::string*>(f.ptr));
    case Kind::StringList: {
      std::string o = "[";
      auto& v = *static_cast<std::vector<std::string>*>(f.ptr);
      for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + quote(v[i]);
      return o + "]";
    }
  }
  return "";
}

std::string render_sections(const JobConfig& cfg, const std::set<std::string>* only) {
  JobConfig copy = cfg;  // fields_of binds mutable pointers; rendering never writes through them
  auto fs = fields_of(copy);
  std::ostringstream os;
  for (auto& sec : section_names()) {
    if (only && !only->count(sec)) continue;
    os << "[" << sec << "]\n";
    for (auto& f : fs) {
      if (sec != f.section) continue;
      if (f.kind == Kind::OptDouble && !static_cast<std::optional<double>*>(f.ptr)->has_value()) {
        os << "# " << f.key << " unset\n";
        continue;
      }
      os << f.key << " = " << value_text(f) << "\n";
    }
    os << "\n";
  }
  return os.str();
}

void require(bool ok, const std::string& origin, const char* section, const char* key, const std::string& what) {
  if (!ok) fail(origin, ": [", section, "] ", key, " ", what);
}

}  // namespace

void apply_toml(JobConfig& cfg, const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    fail(origin, ":", e.source().begin.line, ": TOML syntax error: ", e.description());
  }
  auto fs = fields_of(cfg);
  for (auto&& [skey, snode] : root) {
    std::string sec(skey.str());
    bool known = false;
    for (auto& s : section_names()) known |= (s == sec);
    if (!known) {
      // A top-level key that names a known key ("steps = 3") is probably missing its section.
      std::string m = closest_match(sec, section_names());
      std::string h = m.empty() ? "" : " (did you mean [" + m + "]?)";
      for (auto& f : fs)
        if (sec == f.key && h.empty()) h = std::string(" (did you mean [") + f.section + "] " + f.key + "?)";
      fail(at(origin, snode), ": unknown section [", sec, "]", h);
    }
    if (!snode.is_table()) fail(at(origin, snode), ": [", sec, "] must be a table, got ", toml_type_name(snode));
    for (auto&& [kkey, knode] : *snode.as_table()) {
      std::string key(kkey.str());
      Field* f = find_field(fs, sec, key);
      if (!f) {
        std::string h;  // a key of another section wins over a fuzzy match in this one
        for (auto& g : fs)
          if (key == g.key && h.empty()) h = std::string(" (did you mean [") + g.section + "] " + g.key + "?)";
        if (h.empty()) h = hint(key, keys_in(fs, sec));
        fail(at(origin, knode), ": unknown key [", sec, "] ", key, h);
      }
      set_from_toml(*f, knode, at(origin, knode));
    }
  }
}

JobConfig load_job_config_file(const std::string& path) {
  JobConfig cfg;
  apply_toml(cfg, read_file(path), path);
  return cfg;
}

void apply_override(JobConfig& cfg, const std::string& dotted, const std::string& value) {
  auto fs = fields_of(cfg);
  size_t dot = dotted.find('.');
  std::string sec = dot == std::string::npos ? "" : dotted.substr(0, dot);
  std::string key = dot == std::string::npos ? dotted : dotted.substr(dot + 1);
  Field* f = find_field(fs, sec, key);
  if (!f) fail("unknown option --", dotted, all_dotted_keys_hint(fs, dotted, "--"));
  set_from_text(*f, value, dotted);
}

JobConfig parse_job_command_line(const std::vector<std::string>& args) {
  // Split into (key, value) pairs first, so the config file can be loaded before any override.
  std::vector<std::pair<std::string, std::string>> opts;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) fail("unexpected argument '", a, "' (options are --section.key value)");
    std::string key = a.substr(2), val;
    size_t eq = key.find('=');
    if (eq != std::string::npos) {
      val = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      TITAN_CHECK(i + 1 < args.size(), "option --", key, " needs a value");
      val = args[++i];
    }
    opts.emplace_back(key, val);
  }
  JobConfig cfg;
  std::string origin = "command line";
  int files = 0;
  for (auto& [k, v] : opts)
    if (k == "config" || k == "job.config_file") {
      TITAN_CHECK(++files == 1, "option --", k, " given more than once");
      cfg = load_job_config_file(v);
      origin = v + " + command line";
    }
  for (auto& [k, v] : opts)
    if (k != "config" && k != "job.config_file") apply_override(cfg, k, v);
  cfg.validate(origin);
  return cfg;
}

void JobConfig::validate(const std::string& o) const {
  JobConfig copy = *this;
  for (auto& f : fields_of(copy))
    if (f.kind == Kind::String) check_choice(f, *static_cast<std::string*>(f.ptr), o);

  require(model.n_layers == -1 || model.n_layers >= 1, o, "model", "n_layers", "must be -1 (flavor's) or >= 1");
  require(model.num_experts == -1 || model.num_experts >= 1, o, "model", "num_experts", "must be -1 or >= 1");
  require(model.top_k == -1 || model.top_k >= 1, o, "model", "top_k", "must be -1 or >= 1");
  require(model.load_balance_coeff >= 0 && std::isfinite(model.load_balance_coeff), o, "model", "load_balance_coeff",
          "must be >= 0 (0 = off)");
  require(!model.flavor.empty() || !model.hf_assets_path.empty(), o, "model", "flavor",
          "is empty and no [model] hf_assets_path is given");

  require(optimizer.lr > 0 && std::isfinite(optimizer.lr), o, "optimizer", "lr", "must be a positive number");
  require(optimizer.beta1 >= 0 && optimizer.beta1 < 1, o, "optimizer", "beta1", "must be in [0, 1)");
  require(optimizer.beta2 >= 0 && optimizer.beta2 < 1, o, "optimizer", "beta2", "must be in [0, 1)");
  require(optimizer.eps > 0, o, "optimizer", "eps", "must be > 0");
  require(optimizer.weight_decay >= 0, o, "optimizer", "weight_decay", "must be >= 0");

  require(lr_scheduler.warmup_steps >= 0, o, "lr_scheduler", "warmup_steps", "must be >= 0");
  require(lr_scheduler.warmup_steps <= job_limits::kMaxSteps, o, "lr_scheduler", "warmup_steps",
          "must be <= " + std::to_string(job_limits::kMaxSteps) + " (2^40, as [training] steps)");
  require(!lr_scheduler.decay_ratio || (*lr_scheduler.decay_ratio >= 0 && *lr_scheduler.decay_ratio <= 1), o,
          "lr_scheduler", "decay_ratio", "must be in [0, 1]");
  require(lr_scheduler.min_lr_factor >= 0 && lr_scheduler.min_lr_factor <= 1, o, "lr_scheduler", "min_lr_factor",
          "must be in [0, 1]");

  using namespace job_limits;
  require(training.local_batch_size >= 1, o, "training", "local_batch_size", "must be >= 1");
  require(training.local_batch_size <= kMaxLocalBatch, o, "training", "local_batch_size",
          "must be <= " + std::to_string(kMaxLocalBatch) + " (sequences per rank and micro-batch)");
  require(training.global_batch_size == -1 || training.global_batch_size >= 1, o, "training", "global_batch_size",
          "must be -1 or >= 1");
  require(training.global_batch_size <= kMaxGlobalBatch, o, "training", "global_batch_size",
          "must be <= " + std::to_string(kMaxGlobalBatch) + " (sequences per optimizer step)");
  require(training.seq_len >= 1, o, "training", "seq_len", "must be >= 1");
  require(training.seq_len <= kMaxSeqLen, o, "training", "seq_len",
          "must be <= " + std::to_string(kMaxSeqLen) + " (longer than any model's context)");
  // Both factors are bounded above, so these products cannot overflow.
  TITAN_CHECK(training.local_batch_size * training.seq_len <= kMaxMicroTokens, o,
              ": [training] local_batch_size x seq_len = ", training.local_batch_size * training.seq_len,
              " tokens per micro-batch exceeds ", kMaxMicroTokens, " (no rank holds the activations of that many)");
  TITAN_CHECK(training.global_batch_size * training.seq_len <= kMaxStepTokens, o,
              ": [training] global_batch_size x seq_len = ", training.global_batch_size * training.seq_len,
              " tokens per step exceeds ", kMaxStepTokens);
  require(training.max_norm > 0, o, "training", "max_norm", "must be > 0");
  require(training.steps >= 1, o, "training", "steps", "must be >= 1");
  require(training.steps <= kMaxSteps, o, "training", "steps",
          "must be <= " + std::to_string(kMaxSteps) + " (2^40: step counters stay exact in the lr schedule)");
  require(!training.dataset.empty(), o, "training", "dataset", "must not be empty");

  // Parallelism: data parallelism over MPI ranks (src/dist); the other degrees are not built yet.
  require(parallelism.data_parallel_shard_degree == -1 || parallelism.data_parallel_shard_degree >= 1, o,
          "parallelism", "data_parallel_shard_degree", "must be -1 (all remaining ranks) or >= 1");
  require(parallelism.data_parallel_shard_degree <= kMaxRanks, o, "parallelism", "data_parallel_shard_degree",
          "must be <= " + std::to_string(kMaxRanks) + " ranks");
  require(parallelism.data_parallel_replicate_degree >= 1, o, "parallelism", "data_parallel_replicate_degree",
          "must be >= 1");
  require(parallelism.data_parallel_replicate_degree <= kMaxRanks, o, "parallelism",
          "data_parallel_replicate_degree", "must be <= " + std::to_string(kMaxRanks) + " ranks");
  TITAN_CHECK(parallelism.data_parallel_shard_degree * parallelism.data_parallel_replicate_degree <= kMaxRanks, o,
              ": [parallelism] data_parallel_shard_degree x data_parallel_replicate_degree = ",
              parallelism.data_parallel_shard_degree * parallelism.data_parallel_replicate_degree, " exceeds ",
              kMaxRanks, " ranks");
  auto not_impl = [&](const char* key, int64_t v, bool allow_minus1) {
    bool ok = v == 1 || (allow_minus1 && v == -1);
    if (!ok)
      fail(o, ": [parallelism] ", key, " = ", v, " is not implemented yet (only 1", allow_minus1 ? " or -1" : "",
           " is supported in this build)");
  };
  not_impl("tensor_parallel_degree", parallelism.tensor_parallel_degree, false);
  not_impl("pipeline_parallel_degree", parallelism.pipeline_parallel_degree, false);
  not_impl("context_parallel_degree", parallelism.context_parallel_degree, false);
  not_impl("expert_parallel_degree", parallelism.expert_parallel_degree, false);
  // The global batch must split into local batches; the data-parallel degree may depend on the
  // world size (-1), so the trainer checks divisibility by local x dp once the world is known.
  TITAN_CHECK(training.global_batch_size == -1 || training.global_batch_size % training.local_batch_size == 0, o,
              ": [training] global_batch_size = ", training.global_batch_size,
              " is not a multiple of local_batch_size = ", training.local_batch_size);
  if (parallelism.data_parallel_shard_degree != -1) grad_accumulation_steps(1);

  require(checkpoint.interval >= 1, o, "checkpoint", "interval", "must be >= 1");
  require(checkpoint.keep_latest_k >= 0, o, "checkpoint", "keep_latest_k", "must be >= 0 (0 keeps all)");
  require(checkpoint.load_step >= -1, o, "checkpoint", "load_step", "must be -1 (latest) or a step >= 0");
  require(!checkpoint.initial_load_in_hf || !checkpoint.initial_load_path.empty(), o, "checkpoint",
          "initial_load_in_hf", "is true but [checkpoint] initial_load_path is empty");

  require(metrics.log_freq >= 1, o, "metrics", "log_freq", "must be >= 1");
  require(metrics.peak_tflops >= 0, o, "metrics", "peak_tflops", "must be >= 0 (0 = measured on this machine)");
  require(metrics.perf_warmup_steps >= 0, o, "metrics", "perf_warmup_steps", "must be >= 0");

  for (auto& r : kernels.replace) {
    size_t eq = r.find('=');
    require(eq != std::string::npos && eq > 0 && eq + 1 < r.size(), o, "kernels", "replace",
            "entry \"" + r + "\" is not of the form \"pattern=kernel\"");
  }
  require(compute.threads >= 0, o, "compute", "threads", "must be >= 0 (0 = leave as is)");
  require(compute.threads <= kMaxThreads, o, "compute", "threads",
          "must be <= " + std::to_string(kMaxThreads) +
              " (0 = leave as is; more threads than the machine has only slow a run down, and far more crash the "
              "OpenMP runtime)");
  require(comm.init_timeout_seconds > 0, o, "comm", "init_timeout_seconds", "must be > 0 (seconds)");
  require(comm.train_timeout_seconds > 0, o, "comm", "train_timeout_seconds", "must be > 0 (seconds)");
}

int64_t JobConfig::data_parallel_degree(int64_t world_size) const {
  int64_t shard = parallelism.data_parallel_shard_degree;
  int64_t other = parallelism.data_parallel_replicate_degree * parallelism.tensor_parallel_degree *
                  parallelism.pipeline_parallel_degree * parallelism.context_parallel_degree;
  if (shard == -1) {
    TITAN_CHECK(other > 0 && world_size % other == 0, "world size ", world_size,
                " is not divisible by the product of the other parallel degrees (", other, ")");
    shard = world_size / other;
  }
  return shard * parallelism.data_parallel_replicate_degree;
}

int64_t JobConfig::grad_accumulation_steps(int64_t world_size) const {
  int64_t per_step = training.local_batch_size * data_parallel_degree(world_size);
  if (training.global_batch_size == -1) return 1;
  TITAN_CHECK(training.global_batch_size % per_step == 0, "[training] global_batch_size = ",
              training.global_batch_size, " is not a multiple of local_batch_size x data-parallel degree = ",
              per_step);
  return training.global_batch_size / per_step;
}

static std::string under_dump(const std::string& dump, const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  if (dump.empty()) return p;
  return dump.back() == '/' ? dump + p : dump + "/" + p;
}

std::string JobConfig::checkpoint_folder() const { return under_dump(job.dump_folder, checkpoint.folder); }
std::string JobConfig::tensorboard_folder() const { return under_dump(job.dump_folder, metrics.save_tb_folder); }

std::string render_toml(const JobConfig& cfg) { return render_sections(cfg, nullptr); }

std::string config_hash(const JobConfig& cfg) {
  static const std::set<std::string> numeric = {"model",       "optimizer",   "lr_scheduler",          "training",
                                                "parallelism", "kernels",     "activation_checkpoint"};
  std::string text = render_sections(cfg, &numeric);
  uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;  // FNV prime
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::map<std::string, std::string> trajectory_config(const JobConfig& cfg, int64_t world_size) {
  static const std::set<std::string> keys = {
      "model.name",          "model.flavor",          "model.n_layers",          "model.num_experts",
      "model.top_k",         "model.load_balance_coeff", "optimizer.name",       "optimizer.lr",
      "optimizer.beta1",     "optimizer.beta2",       "optimizer.eps",           "optimizer.weight_decay",
      "lr_scheduler.warmup_steps", "lr_scheduler.decay_ratio", "lr_scheduler.decay_type",
      "lr_scheduler.min_lr_factor", "training.seq_len",  "training.max_norm",      "training.dataset",
      "training.mixed_precision_param", "kernels.replace"};
  JobConfig copy = cfg;  // fields_of binds mutable pointers; nothing is written through them
  std::map<std::string, std::string> out;
  for (auto& f : fields_of(copy)) {
    std::string k = std::string(f.section) + "." + f.key;
    if (!keys.count(k)) continue;
    const bool unset = f.kind == Kind::OptDouble && !static_cast<std::optional<double>*>(f.ptr)->has_value();
    out[k] = unset ? "unset" : value_text(f);
  }
  out["training.global_batch_size"] = std::to_string(cfg.training.local_batch_size *
                                                     cfg.data_parallel_degree(world_size) *
                                                     cfg.grad_accumulation_steps(world_size));
  return out;
}

std::vector<std::string> job_config_keys() {
  JobConfig c;
  std::vector<std::string> out;
  for (auto& f : fields_of(c)) out.push_back(std::string(f.section) + "." + f.key);
  return out;
}

}  // namespace titan

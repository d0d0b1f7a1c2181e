#include "train/job_config.h"

#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/error.h"
#include "distributed/pp_schedule.h"
#include "train/job_config_fields.h"
#include "util/strings.h"

namespace titan {
namespace {

using job_fields::Check;
using job_fields::Field;
using job_fields::fields_of;
using job_fields::Kind;
using job_fields::section_names;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Int: return "an integer";
    case Kind::Double: return "a number";
    case Kind::OptDouble: return "a number";
    case Kind::Bool: return "a boolean (true/false)";
    case Kind::String: return "a string";
    case Kind::StringList: return "an array of strings";
    case Kind::Enum: return "a string";
    case Kind::Mix: return "an array of {path, weight} tables";
  }
  return "?";
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

// Sets an enum key from its spelling; anything else is an error listing the allowed values.
void set_choice(const Field& f, const std::string& v, const std::string& where) {
  for (auto& [value, name] : f.choices)
    if (v == name) {
      f.set_enum(f.ptr, value);
      return;
    }
  std::vector<std::string> names;
  std::string list;
  for (auto& c : f.choices) {
    names.push_back(c.second);
    list += (list.empty() ? "" : ", ") + names.back();
  }
  fail(where, ": [", f.section, "] ", f.key, " = \"", v, "\" is not one of: ", list, hint(v, names));
}

const char* choice_name(const Field& f) {
  const int v = f.get_enum(f.ptr);
  for (auto& [value, name] : f.choices)
    if (value == v) return name;
  return "?";  // a value the key does not allow (set in code, not parsed): validate() names it
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
      *static_cast<std::string*>(f.ptr) = n.as_string()->get();
      break;
    case Kind::Enum:
      if (!n.is_string()) bad();
      set_choice(f, n.as_string()->get(), where);
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
    case Kind::Mix: {
      if (!n.is_array()) bad();
      std::vector<DatasetMixEntry> out;
      for (auto& e : *n.as_array()) {
        const auto* t = e.as_table();
        if (!t) fail(where, ": [", f.section, "] ", f.key, " must be an array of {path, weight} tables, got an element of type ", toml_type_name(e));
        DatasetMixEntry m;
        bool has_path = false;
        for (auto& [k, v] : *t) {
          const std::string key(k.str());
          if (key == "path" && v.is_string()) {
            m.path = v.as_string()->get(), has_path = true;
          } else if (key == "weight" && (v.is_floating_point() || v.is_integer())) {
            m.weight = v.is_integer() ? double(v.as_integer()->get()) : v.as_floating_point()->get();
          } else {
            fail(where, ": [", f.section, "] ", f.key, ": an entry's keys are path (a string) and weight (a number), got ",
                 key, " of type ", toml_type_name(v));
          }
        }
        if (!has_path) fail(where, ": [", f.section, "] ", f.key, ": an entry without a path");
        out.push_back(std::move(m));
      }
      *static_cast<std::vector<DatasetMixEntry>*>(f.ptr) = out;
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
      *static_cast<std::string*>(f.ptr) = v;
      break;
    case Kind::Enum:
      set_choice(f, v, "option --" + opt);
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
    case Kind::Mix: {
      // path=weight entries, comma-separated (a.jsonl=0.7,b.parquet=0.3), or a TOML array as in
      // a job file ([{path = "a.jsonl", weight = 0.7}]); an empty value clears.
      if (!trim(v).empty() && trim(v).front() == '[') {
        toml::table t;
        try {
          t = toml::parse("v = " + trim(v));
        } catch (const toml::parse_error&) {
          bad();
        }
        set_from_toml(f, *t.get("v"), "option --" + opt);
        break;
      }
      std::vector<DatasetMixEntry> out;
      if (!trim(v).empty())
        for (auto& part : split(v, ',')) {
          const std::string e = trim(part);
          const size_t eq = e.rfind('=');
          if (eq == std::string::npos || eq == 0) bad();
          char* end = nullptr;
          const std::string w = e.substr(eq + 1);
          const double x = std::strtod(w.c_str(), &end);
          if (w.empty() || end != w.c_str() + w.size()) bad();
          out.push_back({trim(e.substr(0, eq)), x});
        }
      *static_cast<std::vector<DatasetMixEntry>*>(f.ptr) = out;
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
    case Kind::Enum: return quote(choice_name(f));
    case Kind::StringList: {
      std::string o = "[";
      auto& v = *static_cast<std::vector<std::string>*>(f.ptr);
      for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + quote(v[i]);
      return o + "]";
    }
    case Kind::Mix: {
      std::string o = "[";
      auto& v = *static_cast<std::vector<DatasetMixEntry>*>(f.ptr);
      for (size_t i = 0; i < v.size(); ++i)
        o += std::string(i ? ", " : "") + "{path = " + quote(v[i].path) + ", weight = " + float_text(v[i].weight) + "}";
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

// The checks next to one field's definition (job_config_fields.cpp).
void check_field(const Field& f, const std::string& o) {
  for (const Check& c : f.checks) {
    bool ok = true;
    switch (f.kind) {
      case Kind::Int: ok = c.on_int(*static_cast<const int64_t*>(f.ptr)); break;
      case Kind::Double: ok = c.on_double(*static_cast<const double*>(f.ptr)); break;
      case Kind::OptDouble: {
        const auto& v = *static_cast<const std::optional<double>*>(f.ptr);
        ok = !v || c.on_double(*v);
        break;
      }
      case Kind::String: ok = c.on_text(*static_cast<const std::string*>(f.ptr)); break;
      default: break;
    }
    if (ok) continue;
    if (c.names_value) fail(o, ": [", f.section, "] ", f.key, " = ", value_text(f), " ", c.what);
    fail(o, ": [", f.section, "] ", f.key, " ", c.what);
  }
  if (f.kind == Kind::Enum && std::string(choice_name(f)) == "?") {  // set in code, never parsed
    std::string list;
    for (auto& c : f.choices) list += (list.empty() ? "" : ", ") + std::string(c.second);
    fail(o, ": [", f.section, "] ", f.key, " = \"", f.enum_name(f.get_enum(f.ptr)), "\" is not one of: ", list);
  }
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
  JobConfig copy = *this;  // fields_of binds mutable pointers; nothing is written through them
  for (const Field& f : fields_of(copy)) check_field(f, o);

  // Checks across keys.
  using namespace job_limits;
  for (const DatasetMixEntry& m : training.dataset_mix) {
    require(!trim(m.path).empty(), o, "training", "dataset_mix", "has an entry with an empty path");
    require(m.weight > 0 && std::isfinite(m.weight), o, "training", "dataset_mix",
            "entry " + m.path + ": weight " + float_text(m.weight) + " must be a positive number");
  }
  require(training.dataset_mix.empty() || training.dataset_path.empty(), o, "training", "dataset_mix",
          "and [training] dataset_path are both set; a mixture names all its datasets");
  require(training.dataset_mix.empty() || training.dataset_format == DatasetFormat::Text, o, "training",
          "dataset_mix", "mixes text datasets only (dataset_format = \"text\")");
  require(training.dataset_mix.empty() || training.dataset_streaming != DatasetStreaming::Off, o, "training",
          "dataset_streaming", "= \"off\" cannot serve a dataset_mix (mixtures are streamed)");
  require(!model.flavor.empty() || !model.hf_assets_path.empty(), o, "model", "flavor",
          "is empty and no [model] hf_assets_path is given");
  // Both factors are bounded above, so these products cannot overflow.
  TITAN_CHECK(training.local_batch_size * training.seq_len <= kMaxMicroTokens, o,
              ": [training] local_batch_size x seq_len = ", training.local_batch_size * training.seq_len,
              " tokens per micro-batch exceeds ", kMaxMicroTokens, " (no rank holds the activations of that many)");
  TITAN_CHECK(training.global_batch_size * training.seq_len <= kMaxStepTokens, o,
              ": [training] global_batch_size x seq_len = ", training.global_batch_size * training.seq_len,
              " tokens per step exceeds ", kMaxStepTokens);
  TITAN_CHECK(parallelism.data_parallel_shard_degree * parallelism.data_parallel_replicate_degree <= kMaxRanks, o,
              ": [parallelism] data_parallel_shard_degree x data_parallel_replicate_degree = ",
              parallelism.data_parallel_shard_degree * parallelism.data_parallel_replicate_degree, " exceeds ",
              kMaxRanks, " ranks");
  // The global batch must split into local batches; the data-parallel degree may depend on the
  // world size (-1), so the trainer checks divisibility by local x dp once the world is known.
  TITAN_CHECK(training.global_batch_size == -1 || training.global_batch_size % training.local_batch_size == 0, o,
              ": [training] global_batch_size = ", training.global_batch_size,
              " is not a multiple of local_batch_size = ", training.local_batch_size);
  if (parallelism.data_parallel_shard_degree != -1) grad_accumulation_steps(1);
  if (parallelism.pipeline_parallel_degree > 1) {
    const bool known = !distributed::pp_schedule_canonical(parallelism.pipeline_parallel_schedule).empty();
    std::string list;
    for (const auto& n : distributed::pp_schedule_names()) list += (list.empty() ? "" : ", ") + n;
    require(known, o, "parallelism", "pipeline_parallel_schedule",
            "\"" + parallelism.pipeline_parallel_schedule + "\" is not a schedule (known: " + list + ")");
    require(!validation.enable, o, "validation", "enable",
            "is true with [parallelism] pipeline_parallel_degree > 1: validation does not run through pipeline "
            "stages in this build");
    require(training.local_batch_size % parallelism.pipeline_parallel_microbatch_size == 0, o, "parallelism",
            "pipeline_parallel_microbatch_size",
            "= " + std::to_string(parallelism.pipeline_parallel_microbatch_size) +
                " does not divide [training] local_batch_size = " + std::to_string(training.local_batch_size));
    try {
      pp_schedule_of(*this);
    } catch (const Error& e) {
      fail(o, ": ", e.what());
    }
  }
  if (parallelism.context_parallel_degree > 1) {
    const int64_t cp = parallelism.context_parallel_degree;
    const bool ht = parallelism.context_parallel_load_balancer == CpLoadBalancer::HeadTail;
    const int64_t chunks = ht ? 2 * cp : cp;
    require(training.seq_len % chunks == 0, o, "training", "seq_len",
            "= " + std::to_string(training.seq_len) + " does not divide into " + std::to_string(chunks) +
                " chunks ([parallelism] context_parallel_degree = " + std::to_string(cp) +
                ", context_parallel_load_balancer = \"" + (ht ? "headtail\": 2 chunks per rank)" : "none\")"));
    require(!validation.enable || validation.seq_len % chunks == 0, o, "validation", "seq_len",
            "= " + std::to_string(validation.seq_len) + " does not divide into the " + std::to_string(chunks) +
                " context-parallel chunks of [training] seq_len");
    require(!lora.enable, o, "lora", "enable",
            "is true with [parallelism] context_parallel_degree > 1: LoRA does not run context-parallel in this build");
    require(parallelism.pipeline_parallel_degree == 1, o, "parallelism", "pipeline_parallel_degree",
            "> 1 with context_parallel_degree > 1: pipeline stages do not run context-parallel in this build");
  }
  require(!checkpoint.initial_load_in_hf || !checkpoint.initial_load_path.empty(), o, "checkpoint",
          "initial_load_in_hf", "is true but [checkpoint] initial_load_path is empty");
  for (auto& r : kernels.replace) {
    size_t eq = r.find('=');
    require(eq != std::string::npos && eq > 0 && eq + 1 < r.size(), o, "kernels", "replace",
            "entry \"" + r + "\" is not of the form \"pattern=kernel\"");
  }
}

int64_t pp_stages_per_rank(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  if (p.pipeline_parallel_stages_per_rank != 0) return p.pipeline_parallel_stages_per_rank;
  return distributed::pp_default_stages_per_rank(p.pipeline_parallel_schedule);
}

distributed::PpSchedule pp_schedule_of(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  const int64_t micro = cfg.training.local_batch_size / p.pipeline_parallel_microbatch_size;
  const std::string from = "[training] local_batch_size / [parallelism] pipeline_parallel_microbatch_size = " +
                           std::to_string(cfg.training.local_batch_size) + " / " +
                           std::to_string(p.pipeline_parallel_microbatch_size) + " = " + std::to_string(micro) +
                           " microbatch(es)";
  return distributed::make_pp_schedule(p.pipeline_parallel_schedule, int(p.pipeline_parallel_degree), int(micro),
                                       int(pp_stages_per_rank(cfg)), from);
}

comm::ParallelDegrees parallel_degrees(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  comm::ParallelDegrees d;
  d.dp_replicate = p.data_parallel_replicate_degree, d.dp_shard = p.data_parallel_shard_degree;
  d.cp = p.context_parallel_degree, d.tp = p.tensor_parallel_degree, d.pp = p.pipeline_parallel_degree;
  d.ep = p.expert_parallel_degree;
  return d;
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
      "training.mixed_precision_param", "kernels.replace", "model.attn_mask_type", "training.dataset_format",
      "training.train_on_prompt", "training.skip_bad_rows", "training.dataset_column", "training.dataset_mix", "lora.enable", "lora.rank", "lora.alpha", "lora.dropout", "lora.target_modules",
      "lora.target_parameters",
      "lora.use_rslora", "lora.init", "lora.base_dtype", "lora.round_adapters"};
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

std::vector<JobConfigKeyInfo> job_config_key_info() {
  JobConfig defaults;
  std::vector<JobConfigKeyInfo> out;
  for (const Field& f : fields_of(defaults)) {
    JobConfigKeyInfo k;
    k.section = f.section;
    k.key = f.key;
    switch (f.kind) {
      case Kind::Int: k.type = "integer"; break;
      case Kind::Double: k.type = "number"; break;
      case Kind::OptDouble: k.type = "number, optional"; break;
      case Kind::Bool: k.type = "boolean"; break;
      case Kind::String: k.type = "string"; break;
      case Kind::StringList: k.type = "array of strings"; break;
      case Kind::Enum: k.type = "string"; break;
      case Kind::Mix: k.type = "array of {path, weight} tables"; break;
    }
    const bool unset = f.kind == Kind::OptDouble && !static_cast<std::optional<double>*>(f.ptr)->has_value();
    k.default_value = unset ? "unset" : value_text(f);
    for (auto& c : f.choices) k.allowed.push_back(c.second);
    if (f.known_values) k.known = f.known_values();
    k.doc = f.doc ? f.doc : "";
    out.push_back(std::move(k));
  }
  return out;
}

std::string job_config_help() {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::ostringstream os;
  os << "titan train job config: TOML sections and keys (torchtitan's). Every key is also an override,\n"
        "--section.key VALUE or --section.key=VALUE, applied after --config FILE in the order given.\n"
        "Per key: its default, its type and allowed values, then what it sets.\n";
  const auto keys = job_config_key_info();
  for (const auto& sec : section_names()) {
    os << "\n[" << sec << "]\n";
    for (const auto& k : keys) {
      if (k.section != sec) continue;
      os << "  " << k.key << " = " << k.default_value << "  (";
      if (!k.allowed.empty()) os << "one of: " << join(k.allowed);
      else os << k.type;
      if (!k.known.empty()) os << "; known: " << join(k.known);
      os << ")\n      " << k.doc << "\n";
    }
  }
  return os.str();
}

}  // namespace titan

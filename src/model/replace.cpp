#include "model/replace.h"

#include <map>

#include "model/decoder.h"
#include "ops/catalog.h"

namespace titan {

ReplaceRule parse_replace_rule(const std::string& entry) {
  const size_t eq = entry.find('=');
  TITAN_CHECK(eq != std::string::npos && entry.find('=', eq + 1) == std::string::npos,
              "kernels.replace: entry '", entry, "' must be pattern=op.variant");
  ReplaceRule r;
  r.text = entry;
  r.pattern = entry.substr(0, eq);
  TITAN_CHECK(!r.pattern.empty(), "kernels.replace: entry '", entry, "' has an empty module pattern");
  for (char c : r.pattern)
    TITAN_CHECK(c != ' ' && c != '\t', "kernels.replace: pattern '", r.pattern, "' contains whitespace");
  auto [op, variant] = split_kernel_name(entry.substr(eq + 1));
  r.op = op;
  r.variant = variant;
  return r;
}

namespace {

// Backtracking glob over [p, pend) x [n, nend); patterns are short, names are short.
bool match_from(const std::string& p, size_t pi, const std::string& n, size_t ni) {
  while (pi < p.size()) {
    if (p[pi] == '*') {
      const bool any = pi + 1 < p.size() && p[pi + 1] == '*';
      const size_t rest = pi + (any ? 2 : 1);
      for (size_t k = ni;; ++k) {  // try every length the star may take
        if (match_from(p, rest, n, k)) return true;
        if (k >= n.size() || (!any && n[k] == '.')) return false;
      }
    }
    if (p[pi] == '[') {  // a character class: [qkvo] matches one of those characters
      const size_t close = p.find(']', pi + 1);
      if (close != std::string::npos) {
        if (ni >= n.size() || n[ni] == '.' || p.find(n[ni], pi + 1) >= close) return false;
        pi = close + 1, ++ni;
        continue;
      }
    }
    if (ni >= n.size() || p[pi] != n[ni]) return false;
    ++pi, ++ni;
  }
  return ni == n.size();
}

}  // namespace

bool module_pattern_match(const std::string& pattern, const std::string& name) {
  return match_from(pattern, 0, name, 0);
}

std::vector<Replacement> apply_kernel_replacements(std::vector<KernelModule>& modules,
                                                   const std::vector<std::string>& entries,
                                                   std::vector<std::string>* log) {
  std::vector<ReplaceRule> rules;
  for (const auto& e : entries) rules.push_back(parse_replace_rule(e));
  // Validate everything first, so that a bad rule leaves the model untouched.
  std::map<size_t, std::string> target;  // module index -> final variant
  for (const auto& r : rules) {
    TITAN_CHECK(op_exists(r.op), "kernels.replace '", r.text, "': unknown op '", r.op, "'");
    if (!op_has_variant(r.op, r.variant)) {
      std::string known;
      for (const auto& v : op_variants(r.op)) known += (known.empty() ? "" : ", ") + r.op + "." + v;
      fail("kernels.replace '", r.text, "': unknown kernel ", r.op, ".", r.variant, " (known: ", known, ")");
    }
    size_t matched = 0;
    for (size_t i = 0; i < modules.size(); ++i) {
      const KernelModule& m = modules[i];
      if (!module_pattern_match(r.pattern, m.name)) continue;
      ++matched;
      TITAN_CHECK(m.op == r.op, "kernels.replace '", r.text, "': kernel ", r.op, ".", r.variant,
                  " cannot replace module ", m.name, ", which runs op '", m.op, "'");
      const std::string why = op_constraint(r.op, r.variant, m.shape);
      TITAN_CHECK(why.empty(), "kernels.replace '", r.text, "': kernel ", r.op, ".", r.variant, " refuses module ",
                  m.name, ": ", why);
      target[i] = op_variant_of(r.op, r.variant);  // an alias logs as the variant it selects
    }
    TITAN_CHECK(matched > 0, "kernels.replace '", r.text, "': pattern '", r.pattern, "' matches no module (",
                modules.empty() ? std::string("the model has none") : "modules look like " + modules.front().name,
                ")");
  }
  std::vector<Replacement> done;
  for (const auto& [i, variant] : target) {
    KernelModule& m = modules[i];
    Replacement rep{m.name, m.op, m.current(), variant};
    m.set(variant);
    if (log) log->push_back("[kernels] " + m.name + ": " + m.op + "." + rep.from + " -> " + m.op + "." + rep.to);
    done.push_back(std::move(rep));
  }
  if (log)
    log->push_back("[kernels] " + std::to_string(done.size()) + " module(s) replaced by " +
                   std::to_string(rules.size()) + " rule(s)");
  return done;
}

std::vector<KernelModule> decoder_kernel_modules(DecoderModel& model, int64_t batch, int64_t seq) {
  const ModelConfig& c = model.config();
  KernelShape s;
  s.batch = batch, s.seq = seq, s.hidden = c.hidden_size, s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads, s.head_dim = c.head_dim, s.ffn = c.intermediate_size;
  s.compute = model.compute_dtype();
  std::vector<KernelModule> m;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    KernelSet& k = model.layer_kernels(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.push_back(kernel_module(p + "self_attn.rope", k.rope, s));
    m.push_back(kernel_module(p + "self_attn.attention", k.attention, s));
    if (c.layer_is_sparse(l)) {  // the whole MoE block (router, experts and their SwiGLU) is one kernel
      KernelShape ms = s;
      ms.ffn = c.moe_intermediate_size, ms.experts = c.num_experts, ms.top_k = c.num_experts_per_tok;
      m.push_back(kernel_module(p + "mlp", k.moe, ms));
    } else {
      m.push_back(kernel_module(p + "mlp", k.swiglu, s));
    }
    m.push_back(kernel_module(p + "linear", k.linear, s));
    m.push_back(kernel_module(p + "norm", k.rmsnorm, s));
    m.push_back(kernel_module(p + "residual", k.residual, s));
    if (c.has_qkv_bias()) m.push_back(kernel_module(p + "self_attn.bias", k.bias, s));
  }
  KernelSet& h = model.head_kernels();
  m.push_back(kernel_module("model.embed_tokens", h.embedding, s));
  m.push_back(kernel_module("model.norm", h.rmsnorm, s));
  m.push_back(kernel_module("lm_head", h.cross_entropy, s));
  return m;
}

}  // namespace titan

#include "ops/catalog.h"

#include <functional>
#include <map>

#include "ops/adamw/adamw.h"
#include "ops/attention/attention.h"
#include "ops/bias/bias.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/embedding/embedding.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/registry.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"

namespace titan {
namespace {

struct OpEntry {
  std::function<std::vector<std::string>()> variants;
  std::function<std::string(const std::string&)> resolve;
  std::function<std::string(const std::string&, const KernelShape&)> constraint;
};

template <class K>
OpEntry entry() {
  return {[] { return KernelRegistry<K>::get().variants(); },
          [](const std::string& name) { return KernelRegistry<K>::get().resolve(name); },
          [](const std::string& v, const KernelShape& s) { return check_constraint(kernel<K>(v), s); }};
}

// The one list of ops, in the order op_names() gives them (titan verify kernels, docs).
const std::vector<std::pair<std::string, OpEntry>>& ops() {
  static const std::vector<std::pair<std::string, OpEntry>> v = {
      {"embedding", entry<EmbeddingKernel>()}, {"gemm", entry<GemmKernel>()},
      {"linear", entry<LinearKernel>()},       {"rmsnorm", entry<RMSNormKernel>()},
      {"rope", entry<RopeKernel>()},           {"attention", entry<AttentionKernel>()},
      {"swiglu", entry<SwiGLUKernel>()},       {"residual", entry<ResidualKernel>()},
      {"cross_entropy", entry<CrossEntropyKernel>()}, {"adamw", entry<AdamWKernel>()},
      {"moe", entry<MoEKernel>()},                   {"bias", entry<BiasKernel>()},
      {"gated_delta", entry<GatedDeltaKernel>()},     {"causal_conv1d", entry<CausalConv1dKernel>()},
      {"gated_rmsnorm", entry<GatedRMSNormKernel>()},
  };
  return v;
}

const std::map<std::string, OpEntry>& table() {
  static const std::map<std::string, OpEntry> t(ops().begin(), ops().end());
  return t;
}

}  // namespace

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> n = [] {
    std::vector<std::string> names;
    for (const auto& [name, e] : ops()) names.push_back(name);
    return names;
  }();
  return n;
}

bool op_exists(const std::string& op) { return table().count(op) != 0; }

std::vector<std::string> op_variants(const std::string& op) {
  auto it = table().find(op);
  TITAN_CHECK(it != table().end(), "unknown op '", op, "'");
  return it->second.variants();
}

std::string op_variant_of(const std::string& op, const std::string& name) {
  if (!op_exists(op)) return "";
  const std::string v = table().at(op).resolve(name);
  for (const auto& known : op_variants(op))
    if (known == v) return v;
  return "";
}

bool op_has_variant(const std::string& op, const std::string& variant) { return !op_variant_of(op, variant).empty(); }

std::string op_constraint(const std::string& op, const std::string& variant, const KernelShape& s) {
  TITAN_CHECK(op_has_variant(op, variant), "unknown kernel ", op, ".", variant);
  return table().at(op).constraint(variant, s);
}

std::pair<std::string, std::string> split_kernel_name(const std::string& s) {
  const size_t dot = s.find('.');
  TITAN_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < s.size(), "kernel name '", s,
              "' must be op.variant (e.g. rope.transposed)");
  return {s.substr(0, dot), s.substr(dot + 1)};
}

}  // namespace titan

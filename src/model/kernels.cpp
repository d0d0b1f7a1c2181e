#include "model/kernels.h"

#include <set>
#include <type_traits>

namespace titan {
namespace {

// The name of `op`'s variant in set `variant` on `dev`: the set's own name, except the MoE op's in
// the CPU's own set (it has no variant of that name; its grouped GEMM is the optimized one).
template <class K>
std::string variant_in_set(const std::string& variant, DeviceType dev) {
  if constexpr (std::is_same_v<K, MoEKernel>)
    if (dev == DeviceType::CPU && variant == default_variant(DeviceType::CPU)) return "grouped_gemm";
  return variant;
}

// Calls f(op pointer slot) for every op of a KernelSet.
template <class F>
void for_each_op(KernelSet& k, F&& f) {
  f(k.embedding), f(k.linear), f(k.rmsnorm), f(k.rope), f(k.attention), f(k.swiglu), f(k.residual), f(k.bias);
  f(k.cross_entropy), f(k.moe), f(k.gated_delta), f(k.conv1d), f(k.gated_rmsnorm);
}

// The ops of set `variant` on `dev`; those it has none of are named in `missing`.
KernelSet find_set(const std::string& variant, DeviceType dev, std::vector<std::string>& missing) {
  KernelSet k;
  for_each_op(k, [&](auto*& slot) {
    using K = std::remove_const_t<std::remove_pointer_t<std::remove_reference_t<decltype(slot)>>>;
    slot = KernelRegistry<K>::get().find(variant_in_set<K>(variant, dev), dev);
    if (!slot) missing.push_back(K::op_name);
  });
  return k;
}

}  // namespace

std::vector<std::string> kernel_sets(DeviceType dev) {
  std::set<std::string> names;  // every variant name any op has on dev
  KernelSet k;
  for_each_op(k, [&](auto*& slot) {
    using K = std::remove_const_t<std::remove_pointer_t<std::remove_reference_t<decltype(slot)>>>;
    for (const std::string& v : KernelRegistry<K>::get().variants(dev)) names.insert(v);
  });
  names.insert(default_variant(dev));
  std::vector<std::string> sets;
  for (const std::string& v : names) {
    std::vector<std::string> missing;
    find_set(v, dev, missing);
    if (missing.empty()) sets.push_back(v);
  }
  return sets;
}

KernelSet kernel_set(const std::string& variant, DeviceType dev) {
  std::vector<std::string> missing;
  KernelSet k = find_set(variant, dev, missing);
  if (!missing.empty()) {
    std::string ops, sets;
    for (const std::string& m : missing) ops += (ops.empty() ? "" : ", ") + m;
    for (const std::string& s : kernel_sets(dev)) sets += (sets.empty() ? "" : ", ") + s;
    fail("kernel set '", variant, "' has no ", device_type_name(dev), " kernels for ", ops,
                " (kernel sets on ", device_type_name(dev), ": ", sets.empty() ? std::string("none") : sets, ")");
  }
  return k;
}

}  // namespace titan

// Op registry: (op, variant, device) -> kernel. Each op family declares its kernel struct (a
// forward, a backward, and a constraint check) in src/ops/<op>/<op>.h; reference.cpp and cpu.cpp
// beside it register their variants with TITAN_REGISTER_KERNEL. Every op has a "reference"
// variant (plain loops, double accumulation) that the optimized variants are tested against.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/exec_context.h"

namespace titan {

template <class K>
class KernelRegistry {
 public:
  static KernelRegistry& get() {
    static KernelRegistry r;
    return r;
  }
  void add(const std::string& variant, DeviceType dev, const K* k) { table_[{variant, dev}] = k; }
  // Another name that selects `variant` (an earlier name kept so that job files written with it
  // still work); find / at accept it, variants() / known() list only the variant's own name.
  void add_alias(const std::string& alias, const std::string& variant) { aliases_[alias] = variant; }
  // The variant a name selects: the aliased variant, or the name itself.
  const std::string& resolve(const std::string& name) const {
    auto a = aliases_.find(name);
    return a == aliases_.end() ? name : a->second;
  }
  const K* find(const std::string& variant, DeviceType dev = DeviceType::CPU) const {
    auto it = table_.find({resolve(variant), dev});
    return it == table_.end() ? nullptr : it->second;
  }
  const K& at(const std::string& variant, DeviceType dev = DeviceType::CPU) const {
    const K* k = find(variant, dev);
    TITAN_CHECK(k != nullptr, "unknown kernel ", K::op_name, ".", variant, " (known: ", known(), ")");
    return *k;
  }
  std::vector<std::string> variants(DeviceType dev = DeviceType::CPU) const {
    std::vector<std::string> v;
    for (auto& [key, k] : table_)
      if (key.second == dev) v.push_back(key.first);
    return v;
  }
  std::string known() const {
    std::string s;
    for (auto& [key, k] : table_) s += (s.empty() ? "" : ", ") + key.first;
    return s;
  }

 private:
  std::map<std::pair<std::string, DeviceType>, const K*> table_;
  std::map<std::string, std::string> aliases_;  // alias -> variant
};

template <class K>
struct KernelRegistrar {
  KernelRegistrar(const char* variant, DeviceType dev, const K* k) { KernelRegistry<K>::get().add(variant, dev, k); }
  KernelRegistrar(const char* alias, const char* variant) { KernelRegistry<K>::get().add_alias(alias, variant); }
};

// The variant a device runs unless a job names another: that device's own kernels ("cpu" on the
// CPU; "cuda" for a CUDA device, docs/cuda.md). The model, the trainer and the CLI take the name
// from here rather than spelling it. Every op also has "reference" (plain loops, double
// accumulation) on the CPU.
inline const char* default_variant(DeviceType dev = DeviceType::CPU) {
  return dev == DeviceType::CPU ? "cpu" : "cuda";
}

// Kernel lookup by op type; `variant` usually "reference" or default_variant().
template <class K>
const K& kernel(const std::string& variant, DeviceType dev = DeviceType::CPU) {
  return KernelRegistry<K>::get().at(variant, dev);
}

}  // namespace titan

#define TITAN_KCAT2(a, b) a##b
#define TITAN_KCAT(a, b) TITAN_KCAT2(a, b)
// Registers a kernel object (static storage) under (variant, device). The ops library is linked
// whole (CMakeLists.txt), so the registrar always links.
#define TITAN_REGISTER_KERNEL(KernelType, variant, device, object) \
  static ::titan::KernelRegistrar<KernelType> TITAN_KCAT(titan_kreg_, __LINE__)(variant, device, &(object))
// Registers `alias` as another name for `variant` (KernelRegistry::add_alias).
#define TITAN_REGISTER_KERNEL_ALIAS(KernelType, alias, variant) \
  static ::titan::KernelRegistrar<KernelType> TITAN_KCAT(titan_kalias_, __LINE__)(alias, variant)

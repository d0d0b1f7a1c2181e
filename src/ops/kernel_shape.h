// What a model knows about a module's shapes at start-up, so that a kernel variant can refuse a
// configuration it does not support before the first step (instead of producing a wrong result).
// Kernel structs that have shape constraints carry a `KernelConstraint constraint` member; null
// means "no constraint beyond the argument checks the kernel makes on every call".
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace titan {

struct KernelShape {
  int64_t batch = 0, seq = 0;            // B, S (0 = not known yet)
  int64_t hidden = 0;                    // H
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ffn = 0;                       // intermediate size (dense MLP) or moe_intermediate_size
  int64_t experts = 0, top_k = 0;        // MoE only
  DType compute = DType::F32;
};

// Returns "" when the variant supports `s`, else one line saying what it needs.
using KernelConstraint = std::string (*)(const KernelShape& s);

// The constraint of any kernel struct: its `constraint` member when it has one, else none.
template <class K>
std::string check_constraint(const K& k, const KernelShape& s) {
  if constexpr (requires { k.constraint; }) {
    if (k.constraint != nullptr) return k.constraint(s);
  }
  return "";
}

}  // namespace titan

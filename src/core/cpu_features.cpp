#include "core/cpu_features.h"

namespace titan {

bool cpu_has_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool cpu_has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return ok;
}

bool cpu_has_avx512_bf16() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return ok;
}

}  // namespace titan

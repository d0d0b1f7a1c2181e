// Monotonic wall-clock seconds (std::chrono::steady_clock), for step timing and timeouts.
#pragma once
#include <chrono>

namespace titan {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace titan

// Where a tensor lives. Only the CPU is implemented; CUDA is a reserved seam: kernels register per
// device in the op registry, and the allocator is chosen per device.
#pragma once
#include <string>

namespace titan {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const { return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index); }
};

inline Device cpu() { return Device{}; }

}  // namespace titan

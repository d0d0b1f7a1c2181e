// Where a tensor lives: the CPU, or cuda:0 (docs/cuda.md; under the grid emulator without a GPU).
// Kernels register per device in the op registry, and the allocator is chosen per device.
#pragma once
#include <string>

namespace titan {

enum class DeviceType : uint8_t { CPU, CUDA };

inline const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const {
    const std::string s = device_type_name(type);
    return type == DeviceType::CPU ? s : s + ":" + std::to_string(index);
  }
};

inline Device cpu() { return Device{}; }

}  // namespace titan

#include "core/exec_context.h"

#include "core/allocator.h"

namespace titan {

Workspace::~Workspace() {
  if (data_) allocator_for(device_).deallocate(data_, bytes_);
}

void* Workspace::get(size_t bytes) {
  if (bytes <= bytes_ && data_) return data_;
  Allocator& a = allocator_for(device_);
  if (data_) a.deallocate(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
  data_ = a.allocate(bytes);
  bytes_ = bytes;
  return data_;
}

const ExecContext& ExecContext::host() {
  static const ExecContext ctx{};
  return ctx;
}

}  // namespace titan

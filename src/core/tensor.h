// Tensor: a contiguous, row-major view into a reference-counted Storage. Storage is either owned
// (allocated through the device allocator, counted in its live/peak bytes) or borrowed (for
// example a memory-mapped safetensors file, kept alive by a shared handle). Views share storage.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace titan {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
// Element and byte counts; a negative dimension, or a count beyond 2^63, is an error naming the shape.
int64_t shape_numel(const Shape& s);
uint64_t shape_nbytes(const Shape& s, DType dt);

class Storage {
 public:
  Storage(size_t bytes, Device d);                                       // owned
  Storage(void* data, size_t bytes, Device d, std::shared_ptr<void> keepalive);  // borrowed
  struct Deferred {};
  Storage(size_t bytes, Device d, Deferred);  // owned, no memory until allocate()
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool owned() const { return owned_; }

  // Owned storage can give its memory back and take new memory later, under the same object, so
  // every view of it stays valid (FSDP frees a layer's full parameters between uses). Contents
  // are lost on release; allocate() gives uninitialised memory. Both are no-ops when already so.
  void release();
  void allocate();
  bool resident() const { return data_ != nullptr || bytes_ == 0; }
  // Owned storage without memory yet becomes borrowed storage over `data` (bytes() of it, kept
  // alive by keepalive): a frozen model's parameter can be a view of a mapped checkpoint file.
  void adopt(void* data, std::shared_ptr<void> keepalive);

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  bool owned_;
  std::shared_ptr<void> keepalive_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dt, Device d = cpu());
  static Tensor zeros(const Shape& shape, DType dt, Device d = cpu());
  // Owned storage without memory yet (Storage::allocate() gives it some).
  static Tensor deferred(const Shape& shape, DType dt, Device d = cpu());
  // Wrap external memory without copying; keepalive holds whatever owns it.
  static Tensor borrow(void* data, const Shape& shape, DType dt, std::shared_ptr<void> keepalive,
                       Device d = cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(size_t(i < 0 ? i + ndim() : i)); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : cpu(); }
  bool is_borrowed() const { return storage_ && !storage_->owned(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw() const {
    TITAN_ASSERT(storage_->resident(), "tensor ", str(), " has no memory (released storage: a sharded parameter used "
                 "outside its gather)");
    return static_cast<char*>(storage_->data()) + offset_;
  }
  // Typed host access: a GPU tensor's memory is not the host's, so reading it here is refused (a
  // kernel takes its device pointer through raw()).
  template <class T>
  T* data() const {
    TITAN_ASSERT(defined() && dtype_of<T>::value == dtype_, "tensor dtype is ", dtype_name(dtype_));
    TITAN_ASSERT(storage_->device().type == DeviceType::CPU, "host access to ", str(), " on ", device().str(),
                 " (copy it to the CPU first: to(cpu()))");
    return static_cast<T*>(raw());
  }

  // Same storage, new shape with equal numel (-1 infers one dimension).
  Tensor view(Shape shape) const;
  // Rows [begin, end) along dimension 0, sharing storage.
  Tensor slice0(int64_t begin, int64_t end) const;
  // New owned tensor converted to dt (floating types), or an owned copy when dt == dtype().
  Tensor to(DType dt) const;
  // New owned tensor on device d, same dtype (host <-> GPU copies through titan::gpu).
  Tensor to(Device d) const;
  Tensor clone() const { return to(dtype_); }
  void zero_();
  void fill_(float v);  // f32 only
  void copy_(const Tensor& src);  // same numel; converts between float dtypes (on the CPU); copies across devices

  std::string str() const;  // "f32[2, 3]"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

// A tensor with its name (checkpoint files, gradient lists).
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

}  // namespace titan

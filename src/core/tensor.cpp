#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/allocator.h"
#include "core/gpu_memory.h"

namespace titan {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  bool zero = false;
  for (int64_t d : s) {
    TITAN_CHECK(d >= 0, "negative dimension in shape ", shape_str(s));
    zero |= d == 0;
  }
  if (zero) return 0;
  int64_t n = 1;
  for (int64_t d : s)
    TITAN_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(s), " has too many elements (more than 2^63)");
  return n;
}

uint64_t shape_nbytes(const Shape& s, DType dt) {
  int64_t bytes = 0;
  TITAN_CHECK(!__builtin_mul_overflow(shape_numel(s), int64_t(dtype_size(dt)), &bytes), "tensor ", dtype_name(dt),
              shape_str(s), " has too many elements: its size is more than 2^63 bytes");
  return uint64_t(bytes);
}

Storage::Storage(size_t bytes, Device d)
    : data_(allocator_for(d).allocate(bytes)), bytes_(bytes), device_(d), owned_(true) {}

Storage::Storage(void* data, size_t bytes, Device d, std::shared_ptr<void> keepalive)
    : data_(data), bytes_(bytes), device_(d), owned_(false), keepalive_(std::move(keepalive)) {}

Storage::Storage(size_t bytes, Device d, Deferred) : data_(nullptr), bytes_(bytes), device_(d), owned_(true) {}

Storage::~Storage() {
  if (owned_ && data_) allocator_for(device_).deallocate(data_, bytes_);
}

void Storage::release() {
  TITAN_ASSERT(owned_, "release() of borrowed storage");
  if (!data_) return;
  allocator_for(device_).deallocate(data_, bytes_);
  data_ = nullptr;
}

void Storage::adopt(void* data, std::shared_ptr<void> keepalive) {
  TITAN_ASSERT(owned_ && !data_, "adopt() of storage that is borrowed or already has memory");
  data_ = data;
  owned_ = false;
  keepalive_ = std::move(keepalive);
}

void Storage::allocate() {
  TITAN_ASSERT(owned_, "allocate() of borrowed storage");
  if (!data_ && bytes_) data_ = allocator_for(device_).allocate(bytes_);
}

Tensor Tensor::deferred(const Shape& shape, DType dt, Device d) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dt;
  t.storage_ = std::make_shared<Storage>(size_t(shape_nbytes(shape, dt)), d, Storage::Deferred{});
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dt, Device d) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dt;
  t.storage_ = std::make_shared<Storage>(size_t(shape_nbytes(shape, dt)), d);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dt, Device d) {
  Tensor t = empty(shape, dt, d);
  t.zero_();
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dt, std::shared_ptr<void> keepalive,
                      Device d) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dt;
  t.storage_ = std::make_shared<Storage>(data, size_t(shape_nbytes(shape, dt)), d, std::move(keepalive));
  return t;
}

Tensor Tensor::view(Shape shape) const {
  const Shape asked = shape;
  int infer = -1;
  Shape known;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TITAN_ASSERT(infer < 0, "view: more than one -1");
      infer = int(i);
    } else {
      known.push_back(shape[i]);
    }
  }
  if (infer >= 0) {
    const int64_t k = shape_numel(known);
    shape[size_t(infer)] = k ? numel_ / k : 0;
  }
  TITAN_ASSERT(shape_numel(shape) == numel_, "view ", shape_str(asked), " of ", str());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  TITAN_ASSERT(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice0 of ", str());
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  Tensor t = *this;
  t.offset_ = offset_ + size_t(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  t.numel_ = (end - begin) * row;
  return t;
}

Tensor Tensor::to(DType dt) const {
  Tensor t = empty(shape_, dt, device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device d) const {
  Tensor t = empty(shape_, dtype_, d);
  t.copy_(*this);
  return t;
}

void Tensor::zero_() {
  if (!numel_) return;
  if (device().type == DeviceType::CUDA)
    gpu::zero(raw(), nbytes());
  else
    std::memset(raw(), 0, nbytes());
}

void Tensor::fill_(float v) {
  float* p = data<float>();
  for (int64_t i = 0; i < numel_; ++i) p[i] = v;
}

void Tensor::copy_(const Tensor& src) {
  TITAN_ASSERT(src.numel() == numel_, "copy_ ", src.str(), " into ", str());
  const bool from_gpu = src.device().type == DeviceType::CUDA, to_gpu = device().type == DeviceType::CUDA;
  if (from_gpu || to_gpu) {  // a copy across devices (or within one GPU) keeps the dtype
    TITAN_CHECK(src.dtype() == dtype_, "copy_ from ", src.device().str(), " ", src.str(), " into ", device().str(), " ",
                str(), ": a copy to or from a GPU keeps the dtype (convert on one side first)");
    if (!numel_) return;
    if (from_gpu && to_gpu)
      gpu::copy_device(raw(), src.raw(), nbytes());
    else if (to_gpu)
      gpu::copy_to_device(raw(), src.raw(), nbytes());
    else
      gpu::copy_to_host(raw(), src.raw(), nbytes());
    return;
  }
  if (src.dtype() == dtype_) {
    if (numel_) std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  convert_floats(src.raw(), src.dtype(), raw(), dtype_, size_t(numel_));
}

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + shape_str(shape_); }

}  // namespace titan

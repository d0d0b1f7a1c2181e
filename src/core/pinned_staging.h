// Pinned staging: how checkpoint I/O (train/tensor_file, train/checkpoint_pieces, io/safetensors)
// moves a GPU tensor's bytes to and from the host in bounded pieces. One buffer of page-locked host
// memory (gpu::alloc_pinned) per save, load or export, of at most chunk_bytes() (64 MiB unless a
// test sets less), whatever the model's size: a tensor larger than the buffer goes through it
// piece by piece, in order, so a writer checksums and writes each piece as it arrives and a
// reader fills the device from each piece it reads. Never a host copy of a whole tensor or model.
// The copies are synchronous (cudaMemcpy to or from pinned memory returns when the bytes have
// arrived), so the buffer is reused at once.
#pragma once
#include <cstdint>
#include <functional>

namespace titan {

class PinnedStaging {
 public:
  static constexpr uint64_t kDefaultChunkBytes = uint64_t(64) << 20;

  PinnedStaging() = default;  // no memory until the first copy (or reserve)
  explicit PinnedStaging(uint64_t largest) { reserve(largest); }
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // A buffer for copies of up to `largest` bytes: min(largest, chunk_bytes()) bytes at least. It
  // grows (to at most chunk_bytes(), at least doubling) and never shrinks; the old one is freed
  // before the new one is taken.
  void reserve(uint64_t largest);
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // The `bytes` bytes of device memory at `src` through the buffer, in order: sink(chunk, n, at)
  // gets bytes [at, at + n) of them. Every chunk but the last is a multiple of `unit` bytes (an
  // element size: 1, 2, 4 or 8), so a chunk holds whole elements.
  void from_device(const void* src, uint64_t bytes,
                   const std::function<void(const char* chunk, uint64_t n, uint64_t at)>& sink, uint64_t unit = 8);
  // The reverse: fill(chunk, n, at) writes bytes [at, at + n) of what goes to `dst` into the
  // buffer, which is then copied there.
  void to_device(void* dst, uint64_t bytes, const std::function<void(char* chunk, uint64_t n, uint64_t at)>& fill,
                 uint64_t unit = 8);

  // The bound on one buffer. set_chunk_bytes(0) restores the default; otherwise a multiple of 8
  // (for tests: a small bound sends every tensor through many pieces).
  static uint64_t chunk_bytes();
  static void set_chunk_bytes(uint64_t bytes);

  // Process-wide: pinned bytes held by staging buffers now, the most held at once since the start
  // or reset_peak(), and how many buffers were taken.
  struct Stats {
    uint64_t live_bytes = 0, peak_bytes = 0, buffers = 0;
  };
  static Stats stats();
  static void reset_peak();  // peak := live

 private:
  uint64_t chunk_for(uint64_t bytes, uint64_t unit);
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace titan

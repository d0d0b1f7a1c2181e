// The caching allocator of cuda:0. cudaMalloc and cudaFree synchronise the device and cost far
// more than a kernel, so a training step must not call them: freed blocks are kept, keyed by their
// rounded size, and handed out again. A step allocates the same shapes every step, so after the
// first step every request is served from the cache (system_allocs() stops growing; the test
// DeviceMemory.StepsReuseBlocks holds it to that).
//
// Sizes round up to 512 bytes below 1 MiB and to 2 MiB above, and a request takes the smallest
// cached block of at least its rounded size and at most twice it (a larger block stays for a
// larger request). When the device refuses a block, the cache is returned to the device and the
// request tried once more before failing with the live, cached and requested bytes.
//
// Stream order: blocks are handed out again at once, which is safe while every kernel and copy
// runs on one compute stream (a freed block's last use is queued before the next user's); a
// block used by another stream (communication) must outlive that use (the NCCL step group
// joins the compute stream before its buffers are freed).
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/allocator.h"
#include "core/error.h"
#include "core/gpu_memory.h"

namespace titan {
namespace {

class CudaAllocator final : public Allocator {
 public:
  static constexpr size_t kSmall = size_t(1) << 20, kSmallGranule = 512, kLargeGranule = size_t(2) << 20;

  ~CudaAllocator() override = default;  // at exit the device may be gone: blocks are left to the driver

  void* allocate(size_t bytes) override {
    const size_t want = round(bytes);
    std::lock_guard<std::mutex> g(mu_);
    void* p = nullptr;
    size_t got = want;
    auto it = cache_.lower_bound(want);
    if (it != cache_.end() && it->first <= 2 * want) {
      p = it->second, got = it->first;
      cached_ -= got;
      cache_.erase(it);
    }
    if (!p) p = system_alloc(want, bytes);
    in_use_[p] = Block{got, bytes};
    note_alloc(bytes);
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    std::lock_guard<std::mutex> g(mu_);
    auto it = in_use_.find(p);
    TITAN_ASSERT(it != in_use_.end() && it->second.requested == bytes, "cuda allocator: free of ", bytes,
                 " bytes at a pointer it did not hand out");
    note_free(bytes);
    cache_.emplace(it->second.size, p);
    cached_ += it->second.size;
    in_use_.erase(it);
  }

  size_t cached_bytes() const override {
    std::lock_guard<std::mutex> g(mu_);
    return cached_;
  }
  size_t reserved_bytes() const override {
    std::lock_guard<std::mutex> g(mu_);
    return reserved_;
  }
  size_t system_allocs() const override {
    std::lock_guard<std::mutex> g(mu_);
    return system_allocs_;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> g(mu_);
    release_cache();
  }

 private:
  struct Block {
    size_t size, requested;
  };
  static size_t round(size_t bytes) {
    if (bytes == 0) return kSmallGranule;
    const size_t g = bytes < kSmall ? kSmallGranule : kLargeGranule;
    return (bytes + g - 1) / g * g;
  }
  void release_cache() {  // with mu_ held
    for (auto& [n, p] : cache_) gpu::free(p), reserved_ -= n;
    cache_.clear();
    cached_ = 0;
  }
  void* system_alloc(size_t size, size_t requested) {  // with mu_ held
    void* p = nullptr;
    for (int attempt = 0; attempt < 2 && !p; ++attempt) {
      try {
        p = gpu::alloc(size);
      } catch (const Error& e) {
        if (attempt == 1 || cache_.empty())
          fail("out of memory on cuda:0: could not allocate ", requested, " bytes (", live_bytes_locked(),
               " bytes in tensors, ", cached_, " cached): ", e.what());
        release_cache();  // give the cached blocks back and try once more
      }
    }
    reserved_ += size;
    ++system_allocs_;
    return p;
  }
  size_t live_bytes_locked() const {
    size_t n = 0;
    for (auto& [p, b] : in_use_) n += b.requested;
    return n;
  }

  mutable std::mutex mu_;
  std::multimap<size_t, void*> cache_;
  std::unordered_map<void*, Block> in_use_;
  size_t cached_ = 0, reserved_ = 0, system_allocs_ = 0;
};

}  // namespace

Allocator& cuda_allocator() {
  static CudaAllocator* a = new CudaAllocator();  // never destroyed: tensors may outlive static destruction order
  return *a;
}

}  // namespace titan

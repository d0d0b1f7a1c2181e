#include "core/allocator.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "core/error.h"
#include "core/gpu_memory.h"

namespace titan {

MemoryStats Allocator::stats() const {
  return MemoryStats{live_.load(), peak_.load(), count_.load(), cached_bytes(), reserved_bytes(), system_allocs()};
}

void Allocator::reset_peak() { peak_.store(live_.load()); }

void Allocator::note_alloc(size_t bytes) {
  size_t now = live_.fetch_add(bytes) + bytes;
  count_.fetch_add(1);
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void Allocator::note_free(size_t bytes) { live_.fetch_sub(bytes); }

namespace {

// A training step allocates the same activation buffers every step. Large blocks (>= 1 MiB)
// are kept after free, keyed by their size rounded to 64 KiB, and handed out again: without this
// every step pays the kernel's page faults and zeroing for each fresh mapping (several percent
// of a step). The cache is bounded: beyond kMaxCached bytes the largest cached blocks go back.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMin = size_t(1) << 20, kGranule = size_t(1) << 16;
  static constexpr size_t kMaxCached = size_t(4) << 30;

  ~CpuAllocator() override { empty_cache(); }

  void* allocate(size_t bytes) override {
    size_t rounded = round(bytes);
    void* p = nullptr;
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> g(mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end()) {
        p = it->second;
        cache_.erase(it);
        cached_ -= rounded;
      }
    }
    if (!p) p = std::aligned_alloc(64, rounded);
    TITAN_CHECK(p != nullptr, "out of memory: could not allocate ", bytes, " bytes on the CPU");
    note_alloc(bytes);
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    note_free(bytes);
    size_t rounded = round(bytes);
    if (rounded < kCacheMin) {
      std::free(p);
      return;
    }
    std::lock_guard<std::mutex> g(mu_);
    cache_.emplace(rounded, p);
    cached_ += rounded;
    while (cached_ > kMaxCached && !cache_.empty()) {
      auto last = std::prev(cache_.end());
      cached_ -= last->first;
      std::free(last->second);
      cache_.erase(last);
    }
  }
  size_t cached_bytes() const override {
    std::lock_guard<std::mutex> g(mu_);
    return cached_;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [n, p] : cache_) std::free(p);
    cache_.clear();
    cached_ = 0;
  }

 private:
  static size_t round(size_t bytes) {
    if (bytes == 0) return 64;
    if (bytes < kCacheMin) return (bytes + 63) / 64 * 64;
    return (bytes + kGranule - 1) / kGranule * kGranule;
  }
  mutable std::mutex mu_;
  std::multimap<size_t, void*> cache_;
  size_t cached_ = 0;
};

}  // namespace

Allocator& allocator_for(Device d) {
  static CpuAllocator cpu_alloc;
  if (d.type == DeviceType::CPU) return cpu_alloc;
  TITAN_CHECK(d.type == DeviceType::CUDA && d.index == 0, "device ", d.str(),
              " is not available in this build (one GPU per process: cuda:0)");
  return cuda_allocator();
}

size_t machine_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

size_t device_memory_bytes(Device d) {
  return d.type == DeviceType::CPU ? machine_memory_bytes() : gpu::total_memory();
}

}  // namespace titan

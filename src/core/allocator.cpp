#include "core/allocator.h"

#include <unistd.h>

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace titan {

MemoryStats Allocator::stats() const {
  return MemoryStats{live_.load(), peak_.load(), count_.load()};
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

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    TITAN_CHECK(p != nullptr, "out of memory: could not allocate ", bytes, " bytes on the CPU");
    note_alloc(bytes);
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    std::free(p);
    note_free(bytes);
  }
};

}  // namespace

Allocator& allocator_for(Device d) {
  static CpuAllocator cpu_alloc;
  TITAN_CHECK(d.type == DeviceType::CPU, "device ", d.str(), " is not available in this build");
  return cpu_alloc;
}

size_t machine_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

}  // namespace titan

#include "core/pinned_staging.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/error.h"
#include "core/gpu_memory.h"

namespace titan {
namespace {

std::atomic<uint64_t> g_chunk{PinnedStaging::kDefaultChunkBytes};
std::mutex g_mu;
PinnedStaging::Stats g_stats;

}  // namespace

uint64_t PinnedStaging::chunk_bytes() { return g_chunk.load(); }

void PinnedStaging::set_chunk_bytes(uint64_t bytes) {
  TITAN_CHECK(bytes % 8 == 0, "pinned staging: chunk of ", bytes, " bytes is not a multiple of 8");
  g_chunk.store(bytes ? bytes : kDefaultChunkBytes);
}

PinnedStaging::Stats PinnedStaging::stats() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_stats;
}

void PinnedStaging::reset_peak() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_stats.peak_bytes = g_stats.live_bytes;
}

PinnedStaging::~PinnedStaging() {
  if (!data_) return;
  gpu::free_pinned(data_);
  std::lock_guard<std::mutex> lk(g_mu);
  g_stats.live_bytes -= size_;
}

void PinnedStaging::reserve(uint64_t largest) {
  const uint64_t bound = chunk_bytes(), want = std::min(largest, bound);
  if (want <= size_) return;
  const uint64_t next = std::min(bound, std::max(want, 2 * size_));
  if (data_) {
    gpu::free_pinned(data_);
    data_ = nullptr;
    std::lock_guard<std::mutex> lk(g_mu);
    g_stats.live_bytes -= size_;
  }
  size_ = 0;
  data_ = static_cast<char*>(gpu::alloc_pinned(next));
  size_ = next;
  std::lock_guard<std::mutex> lk(g_mu);
  g_stats.live_bytes += size_;
  g_stats.peak_bytes = std::max(g_stats.peak_bytes, g_stats.live_bytes);
  ++g_stats.buffers;
}

uint64_t PinnedStaging::chunk_for(uint64_t bytes, uint64_t unit) {
  TITAN_ASSERT(unit == 1 || unit == 2 || unit == 4 || unit == 8, "pinned staging: element size ", unit);
  reserve(bytes);
  // size_ is a multiple of 8 unless it holds all `bytes` (a buffer for fewer bytes than the bound).
  const uint64_t chunk = size_ >= bytes ? bytes : size_ / unit * unit;
  TITAN_ASSERT(chunk > 0, "pinned staging: a buffer of ", size_, " bytes for elements of ", unit);
  return chunk;
}

void PinnedStaging::from_device(const void* src, uint64_t bytes,
                                const std::function<void(const char*, uint64_t, uint64_t)>& sink, uint64_t unit) {
  if (bytes == 0) return;
  const uint64_t chunk = chunk_for(bytes, unit);
  for (uint64_t at = 0; at < bytes; at += chunk) {
    const uint64_t n = std::min(chunk, bytes - at);
    gpu::copy_to_host(data_, static_cast<const char*>(src) + at, n);
    sink(data_, n, at);
  }
}

void PinnedStaging::to_device(void* dst, uint64_t bytes, const std::function<void(char*, uint64_t, uint64_t)>& fill,
                              uint64_t unit) {
  if (bytes == 0) return;
  const uint64_t chunk = chunk_for(bytes, unit);
  for (uint64_t at = 0; at < bytes; at += chunk) {
    const uint64_t n = std::min(chunk, bytes - at);
    fill(data_, n, at);
    gpu::copy_to_device(static_cast<char*>(dst) + at, data_, n);
  }
}

}  // namespace titan

// The grid emulator's scheduler (see runtime.h for the model and the checks).
#include "core/cuda_emu/runtime.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define TITAN_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TITAN_EMU_ASAN 1
#endif
#endif
#ifdef TITAN_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

// The fiber switch: saves the callee-saved registers of the System V x86-64 ABI on the current
// stack, stores the stack pointer to *save, loads `next` and restores its registers. A new fiber's
// stack is laid out as if it had switched away at the start of fiber_entry (init_context). No
// signal mask is saved (ucontext's swapcontext makes a system call for it on every switch).
extern "C" void titan_emu_switch(void** save, void* next);
asm(R"(
  .text
  .globl titan_emu_switch
  .type titan_emu_switch, @function
titan_emu_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size titan_emu_switch, .-titan_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace titan::cuda_emu {
namespace {

#ifdef TITAN_EMU_ASAN
constexpr size_t kStackBytes = 512 * 1024;  // ASan's redzones make frames several times larger
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif

enum class State : uint8_t { Ready, AtBarrier, AtWarp, Done };

struct Fiber {
  void* sp = nullptr;  // the saved stack pointer while switched away
  char* stack = nullptr;
  Builtins b{};
  int linear = 0;  // linear thread index in the block
  State st = State::Ready;
  const char* file = nullptr;  // where it waits
  int line = 0;
  // A pending warp collective.
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  int pred_count = 0;  // syncthreads_count: the block's count, handed back
};

struct Block;
thread_local Block* t_block = nullptr;  // the block running on this OS thread
thread_local Fiber* t_fiber = nullptr;  // the fiber running now

std::mutex g_mu;
std::map<const void*, size_t> g_max_dynamic;  // cudaFuncAttributeMaxDynamicSharedMemorySize
std::map<void*, size_t> g_device;             // live emulated device allocations
size_t g_device_bytes = 0;
std::map<void*, size_t> g_pinned;  // live emulated pinned host allocations
size_t g_pinned_bytes = 0;

uint64_t initial_seed() {
  if (const char* s = std::getenv("TITAN_CUDA_EMU_SEED")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    TITAN_CHECK(end != s && *end == '\0', "TITAN_CUDA_EMU_SEED: '", s, "' is not a decimal number");
    return v;
  }
  return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
}
uint64_t& seed_ref() {
  static uint64_t s = initial_seed();
  return s;
}
std::atomic<uint64_t> g_launches{0};

std::string dim_str(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string idx_str(uint3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

// Fiber stacks, kept per OS thread across launches.
struct StackPool {
  std::vector<std::unique_ptr<char[]>> stacks;
  char* get(size_t i) {
    while (stacks.size() <= i) stacks.emplace_back(new char[kStackBytes]);
    return stacks[i].get();
  }
};
thread_local StackPool t_stacks;

struct SharedArray {
  std::unique_ptr<unsigned char[]> mem;
  size_t bytes;
};

struct Block {
  const LaunchSite* site = nullptr;
  const std::function<void()>* body = nullptr;
  uint64_t seed = 0;
  dim3 grid, block;
  uint3 block_idx;
  size_t dynamic_bytes = 0, max_dynamic = 0;
  std::vector<Fiber> fibers;
  void* main_sp = nullptr;
  std::map<const void*, SharedArray> statics;
  size_t static_bytes = 0;
  std::unique_ptr<unsigned char[]> dynamic;
  std::string error;  // the first error; the block stops at it
  std::mt19937_64 rng;
#ifdef TITAN_EMU_ASAN
  void* main_fake_stack = nullptr;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
#endif

  std::string where() const {
    std::ostringstream os;
    os << "kernel " << site->kernel << " (launched at " << site->file << ":" << site->line << ", grid "
       << dim_str(grid) << ", block " << dim_str(block) << ", seed " << seed << ")";
    return os.str();
  }
  std::string thread_str(const Fiber& f) const {
    return "thread " + idx_str(f.b.threadIdx) + " of block " + idx_str(block_idx);
  }
};

[[noreturn]] void emu_fail(const std::string& what) {
  Block* b = t_block;
  fail("cuda emulator: ", what, b ? " in " + b->where() : std::string());
}

// Leaves the running fiber for the scheduler (the fiber's state says why).
void yield_to_scheduler() {
  Block* b = t_block;
  Fiber* f = t_fiber;
#ifdef TITAN_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, b->main_stack_bottom, b->main_stack_size);
#endif
  titan_emu_switch(&f->sp, b->main_sp);
#ifdef TITAN_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// A fiber's whole life: run the kernel body, record an error, return to the scheduler.
[[noreturn]] void fiber_entry() {
#ifdef TITAN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &t_block->main_stack_bottom, &t_block->main_stack_size);
#endif
  Block* b = t_block;
  try {
    (*b->body)();
  } catch (const std::exception& e) {
    if (b->error.empty()) b->error = e.what();
  }
  Fiber* f = t_fiber;
  f->st = State::Done;
#ifdef TITAN_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, b->main_stack_bottom, b->main_stack_size);
#endif
  void* dead = nullptr;
  titan_emu_switch(&dead, b->main_sp);  // never resumed
  __builtin_unreachable();
}

void run_fiber(Block& b, Fiber& f) {
  t_fiber = &f;
#ifdef TITAN_EMU_ASAN
  __sanitizer_start_switch_fiber(&b.main_fake_stack, f.stack, kStackBytes);
#endif
  titan_emu_switch(&b.main_sp, f.sp);
#ifdef TITAN_EMU_ASAN
  __sanitizer_finish_switch_fiber(b.main_fake_stack, nullptr, nullptr);
#endif
  t_fiber = nullptr;
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
  }
  return "?";
}

std::string hex(unsigned m) {
  std::ostringstream os;
  os << "0x" << std::hex << m;
  return os.str();
}

// Completes the warp collectives whose lanes have all arrived; "" or an error.
// Returns whether any completed.
bool resolve_warps(Block& b, std::string& err) {
  const int n = int(b.fibers.size());
  bool any = false;
  for (int w0 = 0; w0 < n; w0 += 32) {
    const int lanes = std::min(32, n - w0);
    for (int l = 0; l < lanes; ++l) {
      Fiber& f = b.fibers[size_t(w0 + l)];
      if (f.st != State::AtWarp) continue;
      auto at = [&] {
        return std::string(op_name(f.op)) + " at " + f.file + ":" + std::to_string(f.line) + " (mask " + hex(f.mask) +
               ", " + b.thread_str(f) + ")";
      };
      for (int k = 0; k < 32; ++k) {
        if (!(f.mask >> k & 1u)) continue;
        if (k >= lanes) {
          err = at() + ": the mask names lane " + std::to_string(k) + ", which is not in the block";
          return false;
        }
        const Fiber& o = b.fibers[size_t(w0 + k)];
        if (o.st == State::Done) {
          err = at() + ": the mask names lane " + std::to_string(k) + ", which has exited";
          return false;
        }
        if (o.st == State::AtBarrier) {
          err = at() + ": the mask names lane " + std::to_string(k) + ", which waits at __syncthreads at " + o.file +
                ":" + std::to_string(o.line);
          return false;
        }
        if (o.op != f.op || o.mask != f.mask || o.width != f.width) {
          err = at() + ": the mask names lane " + std::to_string(k) + ", which runs " + op_name(o.op) + " at " + o.file +
                ":" + std::to_string(o.line) + " with mask " + hex(o.mask);
          return false;
        }
      }
      // Every lane of the mask is here: compute each one's result.
      uint64_t vals[32] = {};
      unsigned preds = 0;
      for (int k = 0; k < lanes; ++k)
        if (f.mask >> k & 1u) {
          vals[k] = b.fibers[size_t(w0 + k)].value;
          if (vals[k] != 0) preds |= 1u << k;
        }
      const unsigned mask = f.mask;
      for (int k = 0; k < lanes; ++k) {
        if (!(mask >> k & 1u)) continue;
        Fiber& g = b.fibers[size_t(w0 + k)];
        const int width = g.width, seg = k / width * width;
        int src = k;
        switch (g.op) {
          case WarpOp::ShflIdx: src = seg + ((g.arg % width) + width) % width; break;
          case WarpOp::ShflUp: src = k - g.arg >= seg ? k - g.arg : k; break;
          case WarpOp::ShflDown: src = k + g.arg < seg + width ? k + g.arg : k; break;
          case WarpOp::ShflXor: src = (k ^ g.arg) < seg + width ? (k ^ g.arg) : k; break;
          default: break;
        }
        if (src != k && (src < 0 || src >= 32 || !(mask >> src & 1u))) {
          err = std::string(op_name(g.op)) + " at " + g.file + ":" + std::to_string(g.line) + " (mask " + hex(mask) +
                ", " + b.thread_str(g) + "): reads lane " + std::to_string(src) + ", which is not in the mask";
          return false;
        }
        switch (g.op) {
          case WarpOp::Ballot: g.result = preds; break;
          case WarpOp::Any: g.result = preds != 0; break;
          case WarpOp::All: g.result = preds == mask; break;
          case WarpOp::Sync: g.result = 0; break;
          default: g.result = vals[src]; break;
        }
      }
      for (int k = 0; k < lanes; ++k)
        if (mask >> k & 1u) b.fibers[size_t(w0 + k)].st = State::Ready;
      any = true;
    }
  }
  return any;
}

// Releases a barrier that the whole block has reached; "" or the deadlock.
bool resolve_barrier(Block& b, std::string& err) {
  const Fiber* first = nullptr;
  int at = 0, done = 0;
  for (const Fiber& f : b.fibers) {
    if (f.st == State::AtBarrier) {
      ++at;
      if (!first) first = &f;
    } else if (f.st == State::Done) {
      ++done;
    }
  }
  if (!first) return false;
  const std::string site = std::string("__syncthreads at ") + first->file + ":" + std::to_string(first->line);
  for (const Fiber& f : b.fibers) {
    if (f.st == State::Done) {
      err = "deadlock: " + site + " reached by " + std::to_string(at) + " of " + std::to_string(b.fibers.size()) +
            " threads; " + b.thread_str(f) + " has exited without reaching it";
      return false;
    }
    if (f.st == State::AtBarrier && (f.line != first->line || std::strcmp(f.file, first->file) != 0)) {
      err = "deadlock: " + site + " and __syncthreads at " + f.file + ":" + std::to_string(f.line) +
            " are different barriers (" + b.thread_str(*first) + " and " + b.thread_str(f) + ")";
      return false;
    }
  }
  int count = 0;
  for (const Fiber& f : b.fibers) count += int(f.value != 0);
  for (Fiber& f : b.fibers) {
    f.st = State::Ready;
    f.pred_count = count;
  }
  return true;
}

// A new fiber's stack: the six callee-saved registers (zero) and fiber_entry as the return
// address, below a null return address that ends backtraces; 16-byte aligned as at a call.
void init_context(Fiber& f) {
  auto top = reinterpret_cast<uintptr_t>(f.stack + kStackBytes) & ~uintptr_t(15);
  auto* words = reinterpret_cast<void**>(top) - 8;  // top - 64: registers at [0..5], entry at [6], 0 at [7]
  for (int k = 0; k < 6; ++k) words[k] = nullptr;
  words[6] = reinterpret_cast<void*>(&fiber_entry);
  words[7] = nullptr;
  f.sp = words;  // after the pops and the ret, rsp = top - 8: the alignment a called function sees
}

void run_block(Block& b) {
  const unsigned nt = b.block.x * b.block.y * b.block.z;
  b.fibers.assign(nt, Fiber{});
  b.statics.clear();
  b.static_bytes = 0;
  b.error.clear();
  if (b.dynamic_bytes) std::memset(b.dynamic.get(), 0xFF, b.dynamic_bytes);
  for (unsigned i = 0; i < nt; ++i) {
    Fiber& f = b.fibers[i];
    f.linear = int(i);
    f.b.threadIdx = {i % b.block.x, (i / b.block.x) % b.block.y, i / (b.block.x * b.block.y)};
    f.b.blockIdx = b.block_idx;
    f.b.blockDim = b.block;
    f.b.gridDim = b.grid;
    f.stack = t_stacks.get(i);
    init_context(f);
  }
  std::vector<unsigned> order(nt);
  for (unsigned i = 0; i < nt; ++i) order[i] = i;
  for (;;) {
    std::shuffle(order.begin(), order.end(), b.rng);
    bool ran = false;
    for (unsigned i : order) {
      Fiber& f = b.fibers[i];
      if (f.st != State::Ready) continue;
      run_fiber(b, f);
      ran = true;
      if (!b.error.empty()) throw Error(b.error);  // already names the kernel
    }
    if (ran) continue;
    std::string err;
    if (resolve_warps(b, err)) continue;
    if (!err.empty()) emu_fail(err);
    if (resolve_barrier(b, err)) continue;
    if (!err.empty()) emu_fail(err);
    break;  // all done
  }
  b.statics.clear();
}

Fiber& current_fiber(const char* what) {
  if (!t_fiber) fail("cuda emulator: ", what, " called outside a kernel");
  return *t_fiber;
}

}  // namespace

const Builtins& builtins() { return current_fiber("threadIdx/blockIdx").b; }

uint64_t seed() { return seed_ref(); }
void set_seed(uint64_t s) { seed_ref() = s; }

void set_max_dynamic_shared(const void* func, size_t bytes) {
  TITAN_CHECK(bytes <= Limits::kOptInShared, "cuda emulator: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, ",
              bytes, ") exceeds the device's opt-in maximum of ", Limits::kOptInShared, " bytes");
  std::lock_guard<std::mutex> lk(g_mu);
  g_max_dynamic[func] = bytes;
}

void launch(const LaunchSite& site, const void* func, dim3 grid, dim3 block, size_t dynamic_shared,
            const std::function<void()>& body) {
  TITAN_CHECK(t_block == nullptr, "cuda emulator: kernel ", site.kernel, " launched at ", site.file, ":", site.line,
              " from inside a kernel (dynamic parallelism is not emulated)");
  const std::string at = std::string("kernel ") + site.kernel + " launched at " + site.file + ":" +
                         std::to_string(site.line) + ": ";
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  TITAN_CHECK(block.x >= 1 && block.y >= 1 && block.z >= 1 && grid.x >= 1 && grid.y >= 1 && grid.z >= 1, at,
              "empty grid ", dim_str(grid), " or block ", dim_str(block), " (invalid configuration)");
  TITAN_CHECK(threads <= Limits::kMaxThreadsPerBlock && block.x <= Limits::kMaxBlockX &&
                  block.y <= Limits::kMaxBlockY && block.z <= Limits::kMaxBlockZ,
              at, "block ", dim_str(block), " exceeds the limit of 1024 threads per block (x, y <= 1024, z <= 64)");
  TITAN_CHECK(grid.x <= Limits::kMaxGridX && grid.y <= Limits::kMaxGridY && grid.z <= Limits::kMaxGridZ, at, "grid ",
              dim_str(grid), " exceeds the grid limits (y, z <= 65535)");
  size_t max_dynamic = Limits::kDefaultDynamicShared;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_max_dynamic.find(func);
    if (it != g_max_dynamic.end()) max_dynamic = std::max(max_dynamic, it->second);
  }
  TITAN_CHECK(dynamic_shared <= max_dynamic, at, dynamic_shared, " bytes of dynamic shared memory exceed ", max_dynamic,
              dynamic_shared > Limits::kDefaultDynamicShared && max_dynamic == Limits::kDefaultDynamicShared
                  ? " (above 48 KiB needs cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n))"
                  : "");
  Block b;
  b.site = &site;
  b.body = &body;
  b.seed = seed_ref() + g_launches.fetch_add(1);
  b.rng.seed(b.seed);
  b.grid = grid;
  b.block = block;
  b.dynamic_bytes = dynamic_shared;
  b.max_dynamic = max_dynamic;
  b.dynamic.reset(dynamic_shared ? new unsigned char[dynamic_shared] : nullptr);
  // The blocks in a shuffled order: i -> (a i + c) mod n with a odd and coprime to n.
  const uint64_t nb = uint64_t(grid.x) * grid.y * grid.z;
  uint64_t a = (b.rng() | 1) % nb;
  if (a == 0) a = 1;
  while (std::gcd(a, nb) != 1) a = (a + 1) % nb == 0 ? 1 : (a + 1) % nb;
  const uint64_t c = b.rng() % nb;
  struct Guard {
    ~Guard() { t_block = nullptr, t_fiber = nullptr; }
  } guard;
  t_block = &b;
  for (uint64_t i = 0; i < nb; ++i) {
    const uint64_t id = static_cast<uint64_t>((static_cast<unsigned __int128>(a) * i + c) % nb);
    b.block_idx = {unsigned(id % grid.x), unsigned(id / grid.x % grid.y), unsigned(id / (uint64_t(grid.x) * grid.y))};
    run_block(b);
  }
}

void* shared_array(const void* key, size_t bytes, const char* name, const char* file, int line) {
  Fiber& f = current_fiber("a __shared__ declaration");
  (void)f;
  Block& b = *t_block;
  auto it = b.statics.find(key);
  if (it != b.statics.end()) return it->second.mem.get();
  if (b.static_bytes + bytes > Limits::kStaticShared)
    emu_fail("__shared__ " + std::string(name) + " at " + file + ":" + std::to_string(line) + " (" +
             std::to_string(bytes) + " bytes) brings static shared memory to " + std::to_string(b.static_bytes + bytes) +
             " bytes, above the 48 KiB limit");
  if (b.static_bytes + bytes + b.dynamic_bytes > std::max(b.max_dynamic, Limits::kDefaultDynamicShared) ||
      b.static_bytes + bytes + b.dynamic_bytes > Limits::kOptInShared)
    emu_fail("__shared__ " + std::string(name) + " at " + file + ":" + std::to_string(line) + ": static (" +
             std::to_string(b.static_bytes + bytes) + ") plus dynamic (" + std::to_string(b.dynamic_bytes) +
             ") shared memory exceed the block's limit of " + std::to_string(b.max_dynamic) + " bytes");
  SharedArray s{std::unique_ptr<unsigned char[]>(new unsigned char[bytes ? bytes : 1]), bytes};
  std::memset(s.mem.get(), 0xFF, bytes);
  b.static_bytes += bytes;
  return b.statics.emplace(key, std::move(s)).first->second.mem.get();
}

void* dynamic_shared() {
  current_fiber("extern __shared__");
  return t_block->dynamic.get();
}
size_t dynamic_shared_bytes() {
  current_fiber("extern __shared__");
  return t_block->dynamic_bytes;
}

void syncthreads(const char* file, int line) { (void)syncthreads_count(file, line, 0); }

int syncthreads_count(const char* file, int line, int pred) {
  Fiber& f = current_fiber("__syncthreads");
  f.st = State::AtBarrier;
  f.file = file, f.line = line, f.value = pred != 0;
  yield_to_scheduler();
  return f.pred_count;
}

void syncwarp(const char* file, int line, unsigned mask) { (void)warp_op(file, line, WarpOp::Sync, mask, 0, 0, 32); }

uint64_t warp_op(const char* file, int line, WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber& f = current_fiber(op_name(op));
  const int lane = f.linear % 32;
  if (!(mask >> lane & 1u))
    emu_fail(std::string(op_name(op)) + " at " + file + ":" + std::to_string(line) + ": mask " + hex(mask) +
             " does not name the calling lane " + std::to_string(lane) + " (" + t_block->thread_str(f) + ")");
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    emu_fail(std::string(op_name(op)) + " at " + file + ":" + std::to_string(line) + ": width " +
             std::to_string(width) + " is not a power of two in [1, 32]");
  f.st = State::AtWarp;
  f.file = file, f.line = line, f.op = op, f.mask = mask, f.value = value, f.arg = arg, f.width = width;
  yield_to_scheduler();
  return f.result;
}

void* device_malloc(size_t bytes) {
  void* p = std::malloc(bytes ? bytes : 1);
  TITAN_CHECK(p != nullptr, "cuda emulator: out of memory allocating ", bytes, " bytes");
  std::lock_guard<std::mutex> lk(g_mu);
  g_device[p] = bytes;
  g_device_bytes += bytes;
  return p;
}

void device_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_device.find(p);
    TITAN_CHECK(it != g_device.end(), "cuda emulator: cudaFree of a pointer that is not a live device allocation");
    g_device_bytes -= it->second;
    g_device.erase(it);
  }
  std::free(p);
}

size_t device_live_bytes() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_device_bytes;
}

void* pinned_malloc(size_t bytes) {
  constexpr size_t kAlign = 64;
  void* p = std::aligned_alloc(kAlign, (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign);
  TITAN_CHECK(p != nullptr, "cuda emulator: out of memory allocating ", bytes, " bytes of pinned host memory");
  std::lock_guard<std::mutex> lk(g_mu);
  g_pinned[p] = bytes;
  g_pinned_bytes += bytes;
  return p;
}

void pinned_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_pinned.find(p);
    TITAN_CHECK(it != g_pinned.end(), "cuda emulator: cudaFreeHost of a pointer that is not a live pinned allocation");
    g_pinned_bytes -= it->second;
    g_pinned.erase(it);
  }
  std::free(p);
}

size_t pinned_live_bytes() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_pinned_bytes;
}

}  // namespace titan::cuda_emu

#include "common/fake_nccl.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace titan::test {

using namespace comm::nccl;

struct FakeNccl::Op {
  enum Kind { AllGather, Broadcast, AllReduce, ReduceScatter, Send, Recv } kind;
  const void* send;
  void* recv;
  size_t count;
  DataType type;
  RedOp op;
  int peer;  // send/recv: the peer; broadcast: the root
  struct FakeComm* comm;
};

namespace {

using Op = FakeNccl::Op;

size_t type_size(DataType t) { return t == DataType::U8 ? 1 : t == DataType::F32 ? 4 : 2; }
const char* type_name(DataType t) { return t == DataType::U8 ? "u8" : t == DataType::F32 ? "f32" : "bf16"; }
const char* op_name(RedOp o) { return o == RedOp::Sum ? "sum" : "avg"; }
std::string hname(const char* prefix, void* h) { return prefix + std::to_string(reinterpret_cast<uintptr_t>(h)); }

constexpr auto kWait = std::chrono::seconds(10);

struct World {
  explicit World(int ranks) : n(ranks), posted(size_t(ranks), nullptr) {}
  const int n;
  std::mutex m;
  std::condition_variable cv;
  int joined = 0, arrived = 0;
  uint64_t generation = 0;
  std::vector<const std::vector<Op>*> posted;
};

std::mutex g_mutex;
std::map<uint64_t, std::shared_ptr<World>> g_worlds;  // by unique id
uint64_t g_ids = 0;

uint64_t id_number(const UniqueId& id) {
  uint64_t v = 0;
  std::memcpy(&v, id.bytes, sizeof v);
  return v;
}

// All n ranks of the world meet here (a generation barrier).
void meet(World& w, std::unique_lock<std::mutex>& l, const char* what) {
  const uint64_t g = w.generation;
  if (++w.arrived == w.n) {
    w.arrived = 0;
    ++w.generation;
    w.cv.notify_all();
    return;
  }
  if (!w.cv.wait_for(l, kWait, [&] { return w.generation != g; }))
    fail("fake nccl: ", what, " waited 10 s for the other ranks (a rank issued no matching group)");
}

// Why the ranks' posted groups do not match, or "" (the same answer on every rank).
std::string mismatch(const World& w) {
  auto collectives = [](const std::vector<Op>& ops) {
    std::vector<const Op*> c;
    for (const Op& o : ops)
      if (o.kind != Op::Send && o.kind != Op::Recv) c.push_back(&o);
    return c;
  };
  const auto c0 = collectives(*w.posted[0]);
  for (int q = 0; q < w.n; ++q) {
    const auto cq = collectives(*w.posted[size_t(q)]);
    if (cq.size() != c0.size())
      return "rank " + std::to_string(q) + " issued " + std::to_string(cq.size()) + " collectives, rank 0 " +
             std::to_string(c0.size());
    for (size_t i = 0; i < cq.size(); ++i) {
      const Op &a = *c0[i], &b = *cq[i];
      if (a.kind != b.kind || a.count != b.count || a.type != b.type || a.op != b.op || a.peer != b.peer)
        return "collective " + std::to_string(i) + " of rank " + std::to_string(q) + " differs from rank 0's";
    }
    for (const Op& o : *w.posted[size_t(q)])
      if ((o.kind == Op::Send || o.kind == Op::Recv || o.kind == Op::Broadcast) && (o.peer < 0 || o.peer >= w.n))
        return "rank " + std::to_string(q) + " names peer " + std::to_string(o.peer);
  }
  for (int p = 0; p < w.n; ++p)
    for (int q = 0; q < w.n; ++q) {
      std::vector<size_t> sent, received;
      for (const Op& o : *w.posted[size_t(p)])
        if (o.kind == Op::Send && o.peer == q) sent.push_back(o.count * type_size(o.type));
      for (const Op& o : *w.posted[size_t(q)])
        if (o.kind == Op::Recv && o.peer == p) received.push_back(o.count * type_size(o.type));
      if (sent != received)
        return "rank " + std::to_string(p) + "'s sends to rank " + std::to_string(q) + " do not match its receives";
    }
  return "";
}

// Bytes an op reads and writes (a null range for none).
std::pair<const char*, size_t> reads(const Op& o, int n) {
  const size_t b = o.count * type_size(o.type);
  if (o.kind == Op::Recv) return {nullptr, 0};
  return {static_cast<const char*>(o.send), o.kind == Op::ReduceScatter ? b * size_t(n) : b};
}
std::pair<const char*, size_t> writes(const Op& o, int n) {
  const size_t b = o.count * type_size(o.type);
  if (o.kind == Op::Send) return {nullptr, 0};
  return {static_cast<const char*>(o.recv), o.kind == Op::AllGather ? b * size_t(n) : b};
}
// Why one op of this rank's group reads memory another op of it writes, or "": NCCL may run the
// collectives of a group concurrently, so a group must not depend on itself.
std::string hazard(const std::vector<Op>& ops, int n) {
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t j = 0; j < ops.size(); ++j) {
      if (i == j) continue;
      const auto [r, rb] = reads(ops[i], n);
      const auto [w, wb] = writes(ops[j], n);
      if (r && w && rb && wb && r < w + wb && w < r + rb)
        return "op " + std::to_string(i) + " of the group reads what op " + std::to_string(j) + " writes";
    }
  return "";
}

float load(const void* base, DataType t, size_t i) {
  if (t == DataType::F32) return static_cast<const float*>(base)[i];
  return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
}
void store(char* base, DataType t, size_t i, float v) {
  if (t == DataType::F32)
    std::memcpy(base + i * 4, &v, 4);
  else {
    const uint16_t b = f32_to_bf16(v);
    std::memcpy(base + i * 2, &b, 2);
  }
}

}  // namespace

struct FakeComm {
  std::shared_ptr<World> world;
  int rank;
};

FakeNccl::FakeNccl() = default;
FakeNccl::~FakeNccl() = default;

uint64_t fake_nccl_ids_made() {
  std::lock_guard<std::mutex> l(g_mutex);
  return g_ids;
}

UniqueId FakeNccl::get_unique_id() {
  UniqueId id{};
  {
    std::lock_guard<std::mutex> l(g_mutex);
    const uint64_t v = ++g_ids;
    std::memcpy(id.bytes, &v, sizeof v);
  }
  for (size_t i = 8; i < sizeof id.bytes; ++i) id.bytes[i] = char(i);
  log_.push_back("get_unique_id");
  return id;
}

CommHandle FakeNccl::init_rank(int nranks, const UniqueId& id, int rank) {
  TITAN_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "fake nccl: init_rank(", nranks, ", ", rank, ")");
  const uint64_t key = id_number(id);
  std::shared_ptr<World> w;
  {
    std::lock_guard<std::mutex> l(g_mutex);
    auto& slot = g_worlds[key];
    if (!slot) slot = std::make_shared<World>(nranks);
    w = slot;
  }
  TITAN_CHECK(w->n == nranks, "fake nccl: id ", key, " names a world of ", w->n, " ranks, not ", nranks);
  {
    std::unique_lock<std::mutex> l(w->m);
    if (++w->joined == w->n) w->cv.notify_all();
    if (!w->cv.wait_for(l, kWait, [&] { return w->joined >= w->n; }))
      fail("fake nccl: init_rank waited 10 s for the world of id ", key, " (", w->joined, " of ", w->n, " joined)");
  }
  log_.push_back("init_rank n=" + std::to_string(nranks) + " rank=" + std::to_string(rank) +
                 " id=" + std::to_string(key));
  ++live_comms_;
  return new FakeComm{w, rank};
}

void FakeNccl::destroy(CommHandle c) {
  log_.push_back("destroy");
  --live_comms_;
  delete static_cast<FakeComm*>(c);
}
void FakeNccl::abort(CommHandle) { log_.push_back("abort"); }

void FakeNccl::group_start() {
  log_.push_back("group_start");
  ++depth_;
}
void FakeNccl::group_end() {
  log_.push_back("group_end");
  TITAN_CHECK(depth_ > 0, "fake nccl: group_end without group_start");
  if (--depth_ == 0) run_group();
}

void FakeNccl::enqueue(Op op) {
  pending_.push_back(op);
  if (depth_ == 0) run_group();
}

void FakeNccl::all_gather(const void* send, void* recv, size_t count, DataType t, CommHandle c, Stream) {
  log_.push_back(std::string("all_gather ") + type_name(t) + " x" + std::to_string(count));
  enqueue({Op::AllGather, send, recv, count, t, RedOp::Sum, 0, static_cast<FakeComm*>(c)});
}
void FakeNccl::broadcast(const void* send, void* recv, size_t count, DataType t, int root, CommHandle c, Stream) {
  log_.push_back(std::string("broadcast ") + type_name(t) + " x" + std::to_string(count) +
                 " root=" + std::to_string(root));
  enqueue({Op::Broadcast, send, recv, count, t, RedOp::Sum, root, static_cast<FakeComm*>(c)});
}
void FakeNccl::all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, CommHandle c, Stream) {
  log_.push_back(std::string("all_reduce ") + type_name(t) + " x" + std::to_string(count) + " " + op_name(op));
  enqueue({Op::AllReduce, send, recv, count, t, op, 0, static_cast<FakeComm*>(c)});
}
void FakeNccl::reduce_scatter(const void* send, void* recv, size_t count, DataType t, RedOp op, CommHandle c, Stream) {
  log_.push_back(std::string("reduce_scatter ") + type_name(t) + " x" + std::to_string(count) + " " + op_name(op));
  enqueue({Op::ReduceScatter, send, recv, count, t, op, 0, static_cast<FakeComm*>(c)});
}
void FakeNccl::send(const void* buf, size_t count, DataType t, int peer, CommHandle c, Stream) {
  log_.push_back(std::string("send ") + type_name(t) + " x" + std::to_string(count) + " peer=" + std::to_string(peer));
  enqueue({Op::Send, buf, nullptr, count, t, RedOp::Sum, peer, static_cast<FakeComm*>(c)});
}
void FakeNccl::recv(void* buf, size_t count, DataType t, int peer, CommHandle c, Stream) {
  log_.push_back(std::string("recv ") + type_name(t) + " x" + std::to_string(count) + " peer=" + std::to_string(peer));
  enqueue({Op::Recv, nullptr, buf, count, t, RedOp::Sum, peer, static_cast<FakeComm*>(c)});
}

void FakeNccl::run_group() {
  std::vector<Op> ops = std::move(pending_);
  pending_.clear();
  if (ops.empty()) return;
  FakeComm* fc = ops[0].comm;
  for (const Op& o : ops) TITAN_CHECK(o.comm == fc, "fake nccl: one group over two communicators");
  World& w = *fc->world;
  const int me = fc->rank, n = w.n;
  {
    std::unique_lock<std::mutex> l(w.m);
    w.posted[size_t(me)] = &ops;
    meet(w, l, "group_end");
  }
  // Every rank's ops are posted and stay alive until the second meeting: compute my results.
  std::string bad = mismatch(w);
  if (bad.empty()) bad = hazard(ops, n);
  std::vector<std::pair<void*, std::vector<char>>> results;
  if (bad.empty()) {
    size_t ci = 0;  // my collective index
    std::map<int, size_t> nth_recv;
    for (const Op& o : ops) {
      const size_t es = type_size(o.type), bytes = o.count * es;
      if (o.kind == Op::Send) continue;
      if (o.kind == Op::Recv) {
        const size_t k = nth_recv[o.peer]++;
        size_t seen = 0;
        for (const Op& s : *w.posted[size_t(o.peer)])
          if (s.kind == Op::Send && s.peer == me && seen++ == k) {
            const char* src = static_cast<const char*>(s.send);
            results.emplace_back(o.recv, std::vector<char>(src, src + bytes));
          }
        continue;
      }
      // The i-th collective of every rank.
      std::vector<const Op*> same(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) {
        size_t c = 0;
        for (const Op& x : *w.posted[size_t(q)])
          if (x.kind != Op::Send && x.kind != Op::Recv && c++ == ci) same[size_t(q)] = &x;
      }
      ++ci;
      std::vector<char> out;
      if (o.kind == Op::AllGather) {
        out.resize(bytes * size_t(n));
        for (int q = 0; q < n; ++q) std::memcpy(out.data() + size_t(q) * bytes, same[size_t(q)]->send, bytes);
      } else if (o.kind == Op::Broadcast) {
        const char* src = static_cast<const char*>(same[size_t(o.peer)]->send);
        out.assign(src, src + bytes);
      } else {
        TITAN_CHECK(o.type != DataType::U8, "fake nccl: a reduction over u8");
        out.resize(bytes);
        const size_t base = o.kind == Op::ReduceScatter ? size_t(me) * o.count : 0;
        for (size_t e = 0; e < o.count; ++e) {
          float s = load(same[0]->send, o.type, base + e);
          for (int q = 1; q < n; ++q) s += load(same[size_t(q)]->send, o.type, base + e);
          if (o.op == RedOp::Avg) s /= float(n);
          store(out.data(), o.type, e, s);
        }
      }
      results.emplace_back(o.recv, std::move(out));
    }
  }
  {
    std::unique_lock<std::mutex> l(w.m);
    meet(w, l, "group_end");
  }
  if (!bad.empty()) fail("fake nccl: mismatched group: ", bad);
  for (auto& [dst, bytes] : results)
    if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
}

Stream FakeNccl::stream_create() {
  Stream s = reinterpret_cast<Stream>(next_handle_++);
  log_.push_back(hname("stream_create s", s));
  return s;
}
void FakeNccl::stream_destroy(Stream s) { log_.push_back(hname("stream_destroy s", s)); }
Event FakeNccl::event_create() {
  Event e = reinterpret_cast<Event>(next_handle_++);
  log_.push_back(hname("event_create e", e));
  return e;
}
void FakeNccl::event_destroy(Event e) { log_.push_back(hname("event_destroy e", e)); }
void FakeNccl::event_record(Event e, Stream s) { log_.push_back(hname("event_record e", e) + hname(" s", s)); }
void FakeNccl::stream_wait_event(Stream s, Event e) {
  log_.push_back(hname("stream_wait_event s", s) + hname(" e", e));
}
void FakeNccl::stream_synchronize(Stream s) { log_.push_back(hname("stream_synchronize s", s)); }

void* FakeNccl::device_alloc(size_t bytes) {
  auto mem = std::make_unique<char[]>(bytes ? bytes : 1);
  void* p = mem.get();
  device_[p] = std::move(mem);
  device_bytes_[p] = bytes;
  return p;
}
void FakeNccl::device_free(void* p) {
  TITAN_CHECK(device_.erase(p) == 1, "fake nccl: device_free of an unknown pointer");
  device_bytes_.erase(p);
}
size_t FakeNccl::live_device_bytes() const {
  size_t s = 0;
  for (const auto& [p, b] : device_bytes_) s += b;
  return s;
}
void FakeNccl::copy_to_device(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void FakeNccl::copy_to_host(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace titan::test

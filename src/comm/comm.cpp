#include "comm/comm.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace titan::comm {

namespace {

// Element access in f32 for the two buffer types.
inline float load(float x) { return x; }
inline float load(uint16_t x) { return bf16_to_f32(x); }
inline void store(float* p, float v) { *p = v; }
inline void store(uint16_t* p, float v) { *p = f32_to_bf16(v); }

}  // namespace

// ---- the communication thread ------------------------------------------------------------------

struct CommWork::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

struct CommQueue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool running = false, stop = false;
  std::thread worker;
  std::thread::id worker_id;

  ~CommQueue() {
    {
      std::lock_guard<std::mutex> l(m);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
  void push(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(m);
      jobs.push_back(std::move(job));
      if (!worker.joinable()) {
        worker = std::thread([this] { loop(); });
        worker_id = worker.get_id();
      }
    }
    cv.notify_all();
  }
  void loop() {
    std::unique_lock<std::mutex> l(m);
    for (;;) {
      cv.wait(l, [&] { return stop || !jobs.empty(); });
      if (jobs.empty()) return;  // stop, nothing left
      std::function<void()> job = std::move(jobs.front());
      jobs.pop_front();
      running = true;
      l.unlock();
      job();
      l.lock();
      running = false;
      cv.notify_all();
    }
  }
  bool on_worker() {
    std::lock_guard<std::mutex> l(m);
    return worker.joinable() && std::this_thread::get_id() == worker_id;
  }
  void drain() {
    std::unique_lock<std::mutex> l(m);
    if (!worker.joinable() || std::this_thread::get_id() == worker_id) return;
    cv.wait(l, [&] { return jobs.empty() && !running; });
  }
};

CommWork& CommWork::operator=(CommWork&& o) noexcept {
  if (this != &o) {
    if (state_) {
      try {
        wait();
      } catch (...) {
      }
    }
    state_ = std::move(o.state_);
  }
  return *this;
}

CommWork::~CommWork() {
  if (!state_) return;
  try {
    wait();
  } catch (...) {
    // An unwaited failure: the error was the caller's to collect; the work has stopped either way.
  }
}

void CommWork::wait() {
  if (!state_) return;
  std::shared_ptr<State> s = std::move(state_);
  std::unique_lock<std::mutex> l(s->m);
  s->cv.wait(l, [&] { return s->done; });
  if (s->error) std::rethrow_exception(s->error);
}

bool CommWork::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> l(state_->m);
  return state_->done;
}

Comm::Comm() : queue_(std::make_shared<CommQueue>()) {}
Comm::Comm(const Comm& parent) : queue_(parent.queue_), timeout_(parent.timeout_), timeout_setting_(parent.timeout_setting_) {}
Comm::~Comm() = default;

CommWork Comm::start(std::function<void(Comm&)> op) {
  auto st = std::make_shared<CommWork::State>();
  queue_->push([this, st, op = std::move(op)] {
    std::exception_ptr e;
    try {
      op(*this);
    } catch (...) {
      e = std::current_exception();
    }
    std::lock_guard<std::mutex> l(st->m);
    st->error = e;
    st->done = true;
    st->cv.notify_all();
  });
  return CommWork(st);
}

void Comm::quiesce() { queue_->drain(); }

void Comm::all_gather_bytes(const void* in, void* out, size_t bytes) {
  quiesce();
  count_sent(size_t(size() - 1) * bytes);
  do_all_gather(in, out, bytes);
}
void Comm::all_to_all_bytes(const void* in, void* out, size_t bytes) {
  quiesce();
  count_sent(size_t(size() - 1) * bytes);
  do_all_to_all(in, out, bytes);
}
void Comm::all_to_all_v_bytes(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) {
  quiesce();
  for (int q = 0; q < size(); ++q)
    if (q != rank()) count_sent(send_bytes[q]);
  do_all_to_all_v(in, send_bytes, out, recv_bytes);
}
void Comm::exchange_counts(const int64_t* send, int64_t* recv) { all_to_all_bytes(send, recv, sizeof(int64_t)); }
void Comm::send(const void* buf, size_t bytes, int dst) {
  TITAN_CHECK(dst >= 0 && dst < size(), "send to rank ", dst, " of a ", size(), "-rank communicator");
  quiesce();
  if (dst != rank()) count_sent(bytes);
  do_send(buf, bytes, dst);
}
void Comm::recv(void* buf, size_t bytes, int src) {
  TITAN_CHECK(src >= 0 && src < size(), "recv from rank ", src, " of a ", size(), "-rank communicator");
  quiesce();
  do_recv(buf, bytes, src);
}
void Comm::broadcast(void* buf, size_t bytes, int root) {
  TITAN_CHECK(root >= 0 && root < size(), "broadcast from rank ", root, " of a ", size(), "-rank communicator");
  quiesce();
  if (root == rank()) count_sent(size_t(size() - 1) * bytes);
  do_broadcast(buf, bytes, root);
}
void Comm::barrier() {
  quiesce();
  do_barrier();
}
std::unique_ptr<Comm> Comm::split(int color, int key) {
  quiesce();
  return do_split(color, key);
}

// ---- reductions built on the byte moves -------------------------------------------------------

template <class T>
void Comm::reduce_scatter_t(const T* in, T* out, int64_t chunk, ReduceOp op) {
  const int n = size();
  TITAN_ASSERT(chunk >= 0);
  const float scale = op == ReduceOp::Avg ? 1.0f / float(n) : 1.0f;
  if (n == 1) {
    for (int64_t i = 0; i < chunk; ++i) store(out + i, load(in[i]) * scale);
    return;
  }
  const int64_t piece_max = std::min<int64_t>(chunk, kPieceElems);
  std::vector<T> send(size_t(n) * size_t(piece_max)), recv(send.size());
  std::vector<float> acc(static_cast<size_t>(piece_max));
  for (int64_t off = 0; off < chunk; off += piece_max) {
    const int64_t p = std::min(piece_max, chunk - off);
    // Block q of the send buffer: elements [off, off+p) of rank q's chunk.
    for (int q = 0; q < n; ++q) std::memcpy(&send[size_t(q) * p], in + int64_t(q) * chunk + off, size_t(p) * sizeof(T));
    all_to_all_bytes(send.data(), recv.data(), size_t(p) * sizeof(T));
    // recv block q = rank q's contribution to my chunk; add in rank order.
    for (int64_t i = 0; i < p; ++i) acc[i] = load(recv[i]);
    for (int q = 1; q < n; ++q) {
      const T* r = &recv[size_t(q) * p];
      for (int64_t i = 0; i < p; ++i) acc[i] += load(r[i]);
    }
    for (int64_t i = 0; i < p; ++i) store(out + off + i, op == ReduceOp::Avg ? acc[i] * scale : acc[i]);
  }
}

template <class T>
void Comm::all_gather_t(const T* in, T* out, int64_t chunk) {
  const int n = size();
  if (n == 1) {
    if (out != in) std::memmove(out, in, size_t(chunk) * sizeof(T));
    return;
  }
  const int64_t piece_max = std::min<int64_t>(chunk, kPieceElems);
  std::vector<T> recv(size_t(n) * size_t(piece_max));
  for (int64_t off = 0; off < chunk; off += piece_max) {
    const int64_t p = std::min(piece_max, chunk - off);
    all_gather_bytes(in + off, recv.data(), size_t(p) * sizeof(T));
    for (int q = 0; q < n; ++q) std::memcpy(out + int64_t(q) * chunk + off, &recv[size_t(q) * p], size_t(p) * sizeof(T));
  }
}

template <class T>
void Comm::all_reduce_t(T* buf, int64_t n_elems, ReduceOp op) {
  const int n = size();
  const int64_t chunk = (n_elems + n - 1) / n;
  std::vector<T> padded(size_t(chunk) * size_t(n), T(0)), mine(static_cast<size_t>(chunk));
  std::memcpy(padded.data(), buf, size_t(n_elems) * sizeof(T));
  reduce_scatter_t(padded.data(), mine.data(), chunk, op);
  all_gather_t(mine.data(), padded.data(), chunk);
  std::memcpy(buf, padded.data(), size_t(n_elems) * sizeof(T));
}

void Comm::reduce_scatter(const float* in, float* out, int64_t chunk, ReduceOp op) { reduce_scatter_t(in, out, chunk, op); }
void Comm::reduce_scatter(const uint16_t* in, uint16_t* out, int64_t chunk, ReduceOp op) {
  reduce_scatter_t(in, out, chunk, op);
}
void Comm::all_gather(const float* in, float* out, int64_t chunk) { all_gather_t(in, out, chunk); }
void Comm::all_gather(const uint16_t* in, uint16_t* out, int64_t chunk) { all_gather_t(in, out, chunk); }
void Comm::all_reduce(float* buf, int64_t n, ReduceOp op) { all_reduce_t(buf, n, op); }
void Comm::all_reduce(uint16_t* buf, int64_t n, ReduceOp op) { all_reduce_t(buf, n, op); }

// Every rank's scalar, in rank order.
template <class T>
static std::vector<T> gather_scalar(Comm& c, T v) {
  std::vector<T> all(static_cast<size_t>(c.size()));
  c.all_gather_bytes(&v, all.data(), sizeof v);
  return all;
}

double Comm::all_reduce_sum(double v) {
  double s = 0;
  for (double x : gather_scalar(*this, v)) s += x;
  return s;
}

int64_t Comm::all_reduce_sum(int64_t v) {
  int64_t s = 0;
  for (int64_t x : gather_scalar(*this, v)) s += x;
  return s;
}

double Comm::all_reduce_max(double v) {
  const std::vector<double> all = gather_scalar(*this, v);
  return *std::max_element(all.begin(), all.end());
}

void Comm::check_same(const std::string& what, const std::string& value) {
  // Fixed-width exchange: lengths first, then the padded strings.
  const int n = size();
  int64_t len = int64_t(value.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  all_gather_bytes(&len, lens.data(), sizeof len);
  const int64_t width = *std::max_element(lens.begin(), lens.end());
  std::string mine = value;
  mine.resize(size_t(width), '\0');
  std::string all(size_t(width) * size_t(n), '\0');
  if (width > 0) all_gather_bytes(mine.data(), all.data(), size_t(width));
  bool same = true;
  std::vector<std::string> vals;
  for (int q = 0; q < n; ++q) {
    vals.push_back(all.substr(size_t(q) * size_t(width), size_t(lens[size_t(q)])));
    same = same && vals.back() == vals[0];
  }
  if (same) return;
  std::string list;
  for (int q = 0; q < n; ++q) list += (q ? ", rank " : "rank ") + std::to_string(q) + ": " + vals[size_t(q)];
  fail("ranks disagree on ", what, " (", list, "); every rank must run the same configuration");
}

void Comm::set_timeout(double seconds, const std::string& setting) {
  TITAN_CHECK(std::isfinite(seconds) && seconds >= 0, setting.empty() ? std::string("collective timeout") : setting,
              " must be >= 0 seconds (0 = no timeout), got ", seconds);
  apply_timeout(seconds, setting);
  timeout_ = seconds;
  timeout_setting_ = setting;
}

void LocalComm::do_all_gather(const void* in, void* out, size_t bytes) {
  if (in != out) std::memmove(out, in, bytes);
}
void LocalComm::do_all_to_all(const void* in, void* out, size_t bytes) {
  if (in != out) std::memmove(out, in, bytes);
}
void LocalComm::do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) {
  TITAN_ASSERT(send_bytes[0] == recv_bytes[0], "all_to_all_v of 1 rank: sends ", send_bytes[0], " bytes, expects ",
               recv_bytes[0]);
  if (in != out && send_bytes[0]) std::memmove(out, in, send_bytes[0]);
}
void LocalComm::do_send(const void* buf, size_t bytes, int dst) {
  TITAN_ASSERT(dst == 0, "send to rank ", dst, " of 1 rank");
  const char* p = static_cast<const char*>(buf);
  self_messages_.emplace_back(p, p + bytes);
}
void LocalComm::do_recv(void* buf, size_t bytes, int src) {
  TITAN_ASSERT(src == 0, "recv from rank ", src, " of 1 rank");
  TITAN_CHECK(!self_messages_.empty(), "recv from rank 0 of 1 rank: no message was sent (it would wait for ever)");
  std::vector<char> m = std::move(self_messages_.front());
  self_messages_.erase(self_messages_.begin());
  TITAN_CHECK(m.size() == bytes, "recv of ", bytes, " bytes from rank 0, which sent ", m.size());
  if (bytes) std::memcpy(buf, m.data(), bytes);
}
void LocalComm::do_broadcast(void*, size_t, int root) { TITAN_ASSERT(root == 0, "broadcast root ", root, " of 1 rank"); }
void LocalComm::abort(int code) { std::exit(code); }

}  // namespace titan::comm

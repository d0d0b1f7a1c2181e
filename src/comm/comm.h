// Communication between the ranks of a job: the collective interface every layer above may call
// (the model's tensor-, context- and expert-parallel layers included), a single-process backend
// (LocalComm) and an in-process threaded one (comm/thread_comm.h: N ranks as N threads, for
// tests of 2-D and 3-D meshes without mpirun). The MPI backend lives in distributed/mpi_comm.cpp.
//
// A backend supplies only byte-level primitives (the protected do_* functions: all-gather,
// all-to-all, all-to-all with per-rank sizes, send/recv, broadcast, barrier, split, abort). Every
// reduction is built on them here, and each reduces in RANK ORDER in f32 (bf16 buffers are
// widened to f32, summed in rank order, rounded once to bf16):
//   reduce_scatter: all-to-all, then rank r sums the world's copies of its chunk r for q = 0..N-1;
//   all_reduce    : reduce_scatter of the padded buffer, then all_gather;
//   scalars       : all_gather, then every rank sums the N values in rank order (double / int64).
// So results are bitwise identical on every rank and from run to run, whatever algorithm the MPI
// library picks for its own collectives (MPI_Reduce and friends give no such guarantee). They are
// not bitwise equal to a single process summing the same terms in another order: that difference
// is f32 reduction-order rounding (about 1e-7 relative per addition).
//
// Asynchronous work: start(op) queues `op` (any sequence of calls on this communicator or one
// split from the same world) on the world's communication thread and returns a CommWork to
// wait() on. Queued work runs in the order started. A synchronous call from any other thread
// first waits for the queue to drain, so the backend never sees two threads at once (MPI is
// initialised MPI_THREAD_SERIALIZED) and the order of collectives is the same on every rank as
// long as every rank starts and calls in the same order.
//
// Large buffers move in pieces of at most kPieceElems elements per rank, so the staging memory is
// bounded (world x piece) and no MPI count exceeds INT_MAX.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace titan::comm {

enum class ReduceOp { Sum, Avg };

class Comm;
struct CommQueue;  // the world's communication thread (comm.cpp)

// A handle on work queued by Comm::start(). wait() blocks until it has run and rethrows what it
// threw; a CommWork destroyed unwaited waits in its destructor (work never outlives its buffers).
class CommWork {
 public:
  CommWork() = default;
  CommWork(CommWork&&) noexcept = default;
  CommWork& operator=(CommWork&& o) noexcept;
  ~CommWork();
  void wait();
  bool done() const;  // true once it has run (or when empty)
  struct State;

 private:
  friend class Comm;
  explicit CommWork(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

class Comm {
 public:
  virtual ~Comm();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "local" | "threads" | "mpi"

  // out (size() x bytes) = concatenation of every rank's `in` (bytes each), in rank order.
  void all_gather_bytes(const void* in, void* out, size_t bytes);
  // in and out hold size() blocks of `bytes`: block q of `in` goes to rank q, block q of `out`
  // comes from rank q.
  void all_to_all_bytes(const void* in, void* out, size_t bytes);
  // Per-rank sizes: `in` holds size() blocks back to back, block q (send_bytes[q] bytes) for rank
  // q; `out` receives block p (recv_bytes[p] bytes, which must equal what rank p sends me) from
  // rank p, back to back in rank order. exchange_counts() tells every rank what it will receive.
  void all_to_all_v_bytes(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes);
  // send[q] = what I send to rank q; recv[p] = what rank p sends me (an all-to-all of counts).
  void exchange_counts(const int64_t* send, int64_t* recv);
  // Point-to-point, in order per pair of ranks: send returns once the message is buffered (it
  // never waits for the receiver: a pipeline schedule's sends may run ahead of the peer's
  // receives); recv(src) blocks until the oldest message `src` sent to this rank has arrived; its
  // size must be `bytes` (checked where the backend can).
  void send(const void* buf, size_t bytes, int dst);
  void recv(void* buf, size_t bytes, int src);
  void broadcast(void* buf, size_t bytes, int root);
  void barrier();
  // Ends every rank of the job (MPI_Abort); for a single process, std::exit(code).
  [[noreturn]] virtual void abort(int code) = 0;
  // Collective: a communicator over the ranks that pass the same color, ranked by key (as
  // MPI_Comm_split). It shares this one's watchdog, timeout and communication thread, and must be
  // destroyed before it.
  std::unique_ptr<Comm> split(int color, int key);

  // Queues `op(*this)` on the communication thread (see the header comment). Collective in the
  // sense that every rank must start the same sequence.
  CommWork start(std::function<void(Comm&)> op);

  // A collective that waits longer than `seconds` for the other ranks ends this process with a
  // one-line error (`titan: error (rank r of N): MPI_... has not completed after ...`) and
  // status 1, and mpirun then ends the others (MpiComm's watchdog, distributed/watchdog.h). 0 = wait
  // forever, the default. `setting` names the value's origin in that line ("[comm]
  // train_timeout_seconds"). May be changed at any time, e.g. from the setup timeout to the
  // training one after the first step. A single process never waits for a peer: no-op there.
  void set_timeout(double seconds, const std::string& setting = "");
  double timeout() const { return timeout_; }
  const std::string& timeout_setting() const { return timeout_setting_; }

  // in: size() x chunk elements; out: chunk elements = reduction over ranks of block rank().
  void reduce_scatter(const float* in, float* out, int64_t chunk, ReduceOp op);
  void reduce_scatter(const uint16_t* in_bf16, uint16_t* out_bf16, int64_t chunk, ReduceOp op);
  // in: chunk elements; out: size() x chunk elements (rank q's block at q x chunk).
  void all_gather(const float* in, float* out, int64_t chunk);
  void all_gather(const uint16_t* in_bf16, uint16_t* out_bf16, int64_t chunk);
  // In place over n elements, same result on every rank.
  void all_reduce(float* buf, int64_t n, ReduceOp op);
  void all_reduce(uint16_t* buf_bf16, int64_t n, ReduceOp op);
  double all_reduce_sum(double v);
  int64_t all_reduce_sum(int64_t v);
  double all_reduce_max(double v);

  // Every rank passes its value of `what` (e.g. the config hash); when they differ, every rank
  // throws the same titan::Error listing each rank's value, so no rank is left waiting.
  void check_same(const std::string& what, const std::string& value);

  static constexpr int64_t kPieceElems = int64_t(1) << 22;  // 4Mi elements (16 MiB f32) per rank

  // Bytes this rank has handed to the other ranks through this communicator so far (its own block
  // of a collective excluded): an all-gather of b bytes per rank counts (n - 1) b, an all-to-all
  // the blocks for the others, a send its bytes, a broadcast (n - 1) b on the root. The reductions
  // above are built on them, so a reduce-scatter of n chunks of c bytes counts (n - 1) c and an
  // all-reduce of N bytes 2 (n - 1) N / n: the volume of a ring, the analytic count to compare with.
  int64_t sent_bytes() const { return sent_.load(std::memory_order_relaxed); }

 protected:
  Comm();
  // A communicator split from `parent`: shares its communication thread.
  explicit Comm(const Comm& parent);
  Comm& operator=(const Comm&) = delete;

  virtual void do_all_gather(const void* in, void* out, size_t bytes) = 0;
  virtual void do_all_to_all(const void* in, void* out, size_t bytes) = 0;
  virtual void do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) = 0;
  virtual void do_send(const void* buf, size_t bytes, int dst) = 0;
  virtual void do_recv(void* buf, size_t bytes, int src) = 0;
  virtual void do_broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<Comm> do_split(int color, int key) = 0;
  virtual void apply_timeout(double /*seconds*/, const std::string& /*setting*/) {}

 private:
  // Waits for queued work unless called on the communication thread itself.
  void quiesce();
  std::shared_ptr<CommQueue> queue_;
  std::atomic<int64_t> sent_{0};
  void count_sent(size_t bytes) { sent_.fetch_add(int64_t(bytes), std::memory_order_relaxed); }
  double timeout_ = 0;
  std::string timeout_setting_;
  template <class T>
  void reduce_scatter_t(const T* in, T* out, int64_t chunk, ReduceOp op);
  template <class T>
  void all_gather_t(const T* in, T* out, int64_t chunk);
  template <class T>
  void all_reduce_t(T* buf, int64_t n, ReduceOp op);
};

// Another timeout for as long as this object lives, then the previous one again: e.g. none (0)
// around the barrier where the other ranks wait for rank 0 to write a checkpoint alone.
class ScopedTimeout {
 public:
  ScopedTimeout(Comm& c, double seconds, const std::string& setting = "")
      : comm_(c), seconds_(c.timeout()), setting_(c.timeout_setting()) {
    c.set_timeout(seconds, setting);
  }
  ~ScopedTimeout() { comm_.set_timeout(seconds_, setting_); }
  ScopedTimeout(const ScopedTimeout&) = delete;
  ScopedTimeout& operator=(const ScopedTimeout&) = delete;

 private:
  Comm& comm_;
  double seconds_;
  std::string setting_;
};

// One process: rank 0 of 1; every collective is a copy.
class LocalComm final : public Comm {
 public:
  LocalComm() = default;
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }
  [[noreturn]] void abort(int code) override;

 protected:
  void do_all_gather(const void* in, void* out, size_t bytes) override;
  void do_all_to_all(const void* in, void* out, size_t bytes) override;
  void do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) override;
  void do_send(const void* buf, size_t bytes, int dst) override;
  void do_recv(void* buf, size_t bytes, int src) override;
  void do_broadcast(void*, size_t, int root) override;
  void do_barrier() override {}
  std::unique_ptr<Comm> do_split(int, int) override { return std::make_unique<LocalComm>(); }

 private:
  std::vector<std::vector<char>> self_messages_;  // send to rank 0 from rank 0, oldest first
};

// Typed helpers over all_to_all_v_bytes: counts in elements.
template <class T>
void all_to_all_v(Comm& c, const T* in, const int64_t* send_counts, T* out, const int64_t* recv_counts) {
  std::vector<size_t> sb(size_t(c.size())), rb(size_t(c.size()));
  for (int q = 0; q < c.size(); ++q) sb[size_t(q)] = size_t(send_counts[q]) * sizeof(T);
  for (int q = 0; q < c.size(); ++q) rb[size_t(q)] = size_t(recv_counts[q]) * sizeof(T);
  c.all_to_all_v_bytes(in, sb.data(), out, rb.data());
}

}  // namespace titan::comm

// Communication between the ranks of a data-parallel job: a small collective interface with a
// single-process implementation (LocalComm) and an MPI one (MpiComm, mpi_comm.cpp).
//
// A backend supplies only byte-level primitives (all_gather_bytes, all_to_all_bytes, broadcast,
// barrier, abort). Every reduction is built on them here, and each reduces in RANK ORDER in f32
// (bf16 buffers are widened to f32, summed in rank order, rounded once to bf16):
//   reduce_scatter: all-to-all, then rank r sums the world's copies of its chunk r for q = 0..N-1;
//   all_reduce    : reduce_scatter of the padded buffer, then all_gather;
//   scalars       : all_gather, then every rank sums the N values in rank order (double / int64).
// So results are bitwise identical on every rank and from run to run, whatever algorithm the MPI
// library picks for its own collectives (MPI_Reduce and friends give no such guarantee). They are
// not bitwise equal to a single process summing the same terms in another order: that difference
// is f32 reduction-order rounding (about 1e-7 relative per addition).
//
// Large buffers move in pieces of at most kPieceElems elements per rank, so the staging memory is
// bounded (world x piece) and no MPI count exceeds INT_MAX.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace titan::distributed {

enum class ReduceOp { Sum, Avg };

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "local" | "mpi"

  // out (size() x bytes) = concatenation of every rank's `in` (bytes each), in rank order.
  virtual void all_gather_bytes(const void* in, void* out, size_t bytes) = 0;
  // in and out hold size() blocks of `bytes`: block q of `in` goes to rank q, block q of `out`
  // comes from rank q.
  virtual void all_to_all_bytes(const void* in, void* out, size_t bytes) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job (MPI_Abort); for a single process, std::exit(code).
  [[noreturn]] virtual void abort(int code) = 0;
  // Collective: a communicator over the ranks that pass the same color, ranked by key (as
  // MPI_Comm_split). It shares this one's watchdog and timeout, and must be destroyed before it.
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

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

 protected:
  virtual void apply_timeout(double /*seconds*/, const std::string& /*setting*/) {}

 private:
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
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }
  void all_gather_bytes(const void* in, void* out, size_t bytes) override;
  void all_to_all_bytes(const void* in, void* out, size_t bytes) override;
  void broadcast(void*, size_t, int root) override;
  void barrier() override {}
  [[noreturn]] void abort(int code) override;
  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<LocalComm>(); }
};

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set PMIx or
// OMPI_COMM_WORLD_* variables). TITAN_COMM=local|mpi overrides the detection.
bool launched_by_mpi();
// MpiComm when launched_by_mpi(), else LocalComm. The MPI library is initialised at most once per
// process; the returned object finalises it when destroyed.
std::unique_ptr<Comm> make_comm();
// The MPI backend (error when MPI cannot be initialised).
std::unique_ptr<Comm> make_mpi_comm();

}  // namespace titan::distributed

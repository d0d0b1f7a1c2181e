// MpiComm: the Comm backend over MPI_COMM_WORLD and the communicators split from it (OpenMPI on
// Debian; any MPI-3 library works).
//
// Faults: the communicator uses MPI_ERRORS_ARE_FATAL, so a failed MPI call ends the whole job
// rather than returning into code that would wait for a peer forever. A rank that dies (signal,
// exit without MPI_Finalize) makes mpirun terminate every other rank; a rank that raises a
// titan::Error calls abort() (MPI_Abort) after printing its error, which also ends every rank.
// A rank that hangs without dying (deadlock, SIGSTOP, an endless loop outside MPI) is caught by
// the others: every MPI call here is marked in flight for a CollectiveWatchdog (distributed/watchdog.h;
// one atomic store before and one after the call), whose thread ends this process with a one-line
// error once a call has waited longer than set_timeout()'s seconds; mpirun then ends the rest.
// With no timeout set (the default) the thread is not started.
#include <mpi.h>

#include <climits>
#include <deque>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "comm/comm.h"
#include "distributed/backends.h"
#include "distributed/watchdog.h"

namespace titan::distributed {

using comm::Comm;

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI ", what, " failed: ", std::string(msg, size_t(len)));
}

// Indices of the watchdog's operation names (MpiComm's constructor lists them in this order).
enum Op : unsigned { kAllgather, kAlltoall, kBcast, kBarrier, kSplit, kAlltoallv, kSend, kRecv };

// Marks one MPI call in flight for the watchdog for as long as it lives.
struct InFlight {
  CollectiveWatchdog& w;
  InFlight(CollectiveWatchdog& wd, Op op) : w(wd) { w.begin(op); }
  ~InFlight() { w.end(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

int count_of(size_t bytes) {
  TITAN_ASSERT(bytes <= size_t(INT_MAX), "MPI message of ", bytes, " bytes per rank");
  return int(bytes);
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // The main thread and the FSDP communication thread (distributed/fsdp.h) call MPI, never at the
      // same time (OpenMP workers never do).
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      TITAN_CHECK(provided >= MPI_THREAD_SERIALIZED, "the MPI library does not support MPI_THREAD_SERIALIZED ",
                  "(it provides level ", provided, "), which the communication thread needs");
      owns_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    watchdog_ = std::make_shared<CollectiveWatchdog>(
        "rank " + std::to_string(rank_) + " of " + std::to_string(size_),
        std::vector<std::string>{"MPI_Allgather", "MPI_Alltoall", "MPI_Bcast", "MPI_Barrier", "MPI_Comm_split",
                                 "MPI_Alltoallv", "MPI_Isend", "MPI_Recv"});
  }
  // A sub-communicator (split()): its calls are watched by the world communicator's watchdog.
  MpiComm(const MpiComm& parent, MPI_Comm c) : Comm(parent), comm_(c), watchdog_(parent.watchdog_) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) reap(true);
    if (comm_ != MPI_COMM_WORLD) {
      if (!finalized) MPI_Comm_free(&comm_);
      return;
    }
    watchdog_.reset();  // its thread stops before MPI does (sub-communicators are gone by now)
    if (owns_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 protected:
  std::unique_ptr<Comm> do_split(int color, int key) override {
    MPI_Comm c;
    {
      InFlight f(*watchdog_, kSplit);
      check_mpi(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split");
    }
    return std::make_unique<MpiComm>(*this, c);
  }

  void do_all_gather(const void* in, void* out, size_t bytes) override {
    InFlight f(*watchdog_, kAllgather);
    check_mpi(MPI_Allgather(in, count_of(bytes), MPI_BYTE, out, count_of(bytes), MPI_BYTE, comm_),
              "MPI_Allgather");
  }
  void do_all_to_all(const void* in, void* out, size_t bytes) override {
    InFlight f(*watchdog_, kAlltoall);
    check_mpi(MPI_Alltoall(in, count_of(bytes), MPI_BYTE, out, count_of(bytes), MPI_BYTE, comm_),
              "MPI_Alltoall");
  }
  void do_broadcast(void* buf, size_t bytes, int root) override {
    // Large broadcasts go in INT_MAX-bounded pieces.
    char* p = static_cast<char*>(buf);
    const size_t piece = size_t(1) << 30;
    size_t off = 0;
    do {
      const size_t b = bytes - off < piece ? bytes - off : piece;
      InFlight f(*watchdog_, kBcast);
      check_mpi(MPI_Bcast(p + off, count_of(b), MPI_BYTE, root, comm_), "MPI_Bcast");
      off += b;
    } while (off < bytes);
  }
  void do_barrier() override {
    InFlight f(*watchdog_, kBarrier);
    check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  }
  void do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) override {
    const size_t n = static_cast<size_t>(size_);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    size_t so = 0, ro = 0;
    for (int q = 0; q < size_; ++q) {
      sc[size_t(q)] = count_of(send_bytes[q]), sd[size_t(q)] = count_of(so), so += send_bytes[q];
      rc[size_t(q)] = count_of(recv_bytes[q]), rd[size_t(q)] = count_of(ro), ro += recv_bytes[q];
    }
    InFlight f(*watchdog_, kAlltoallv);
    check_mpi(MPI_Alltoallv(in, sc.data(), sd.data(), MPI_BYTE, out, rc.data(), rd.data(), MPI_BYTE, comm_),
              "MPI_Alltoallv");
  }
  // Buffered (Comm::send): a copy goes out by MPI_Isend and is freed once the request completes
  // (checked at every send and receive, waited for when the communicator ends), so a send never
  // waits for its receiver, as a pipeline schedule requires (distributed/pp_schedule.h). Messages
  // between two ranks still arrive in the order sent (MPI's non-overtaking rule).
  void do_send(const void* buf, size_t bytes, int dst) override {
    reap(false);
    pending_.emplace_back();
    Pending& p = pending_.back();
    p.data.assign(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
    InFlight f(*watchdog_, kSend);
    check_mpi(MPI_Isend(p.data.data(), count_of(bytes), MPI_BYTE, dst, 0, comm_, &p.req), "MPI_Isend");
  }
  void do_recv(void* buf, size_t bytes, int src) override {
    reap(false);
    MPI_Status st;
    {
      InFlight f(*watchdog_, kRecv);
      check_mpi(MPI_Recv(buf, count_of(bytes), MPI_BYTE, src, 0, comm_, &st), "MPI_Recv");
    }
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    TITAN_CHECK(size_t(got) == bytes, "MPI_Recv of ", bytes, " bytes from rank ", src, " received ", got);
  }
  void apply_timeout(double seconds, const std::string& setting) override { watchdog_->set_timeout(seconds, setting); }

 private:
  // Frees the buffers of completed sends (all: waits for every send still in flight).
  void reap(bool all) {
    while (!pending_.empty()) {
      int done = 0;
      if (all) {
        InFlight f(*watchdog_, kSend);
        check_mpi(MPI_Wait(&pending_.front().req, MPI_STATUS_IGNORE), "MPI_Wait");
        done = 1;
      } else {
        check_mpi(MPI_Test(&pending_.front().req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      }
      if (!done) return;
      pending_.pop_front();
    }
  }
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<char> data;
  };
  std::deque<Pending> pending_;  // buffered sends in flight, oldest first
  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
  std::shared_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace titan::distributed

// The Comm backend over NCCL (issue 26): one rank per GPU, as llm.c sets it up. A bootstrap
// communicator (MPI in a job; the threaded backend in the tests) carries rank 0's ncclUniqueId to
// every rank, then each rank joins with ncclCommInitRank. Every NCCL and CUDA call goes through
// comm/nccl_api.h, so the same code runs over the real library (comm/nccl_runtime.cu, a GPU
// build) and over the tests' in-process fake (tests/common/fake_nccl.h), where its host logic
// is unit-tested without a GPU.
//
// The Comm primitives (host buffers, as every backend takes them) are staged through device
// buffers and issued as one NCCL group each on this communicator's stream, then the stream is
// synchronised:
//   all_gather     -> ncclAllGather (uint8)
//   all_to_all(_v) -> ncclSend/ncclRecv to and from every rank, self included, zero sizes skipped
//   broadcast      -> ncclBroadcast
// So Comm's reductions (built on all_to_all and all_gather, summed in rank order on the host) keep
// their bits: the same on every rank and equal to the MPI and threaded backends'. Point-to-point
// send/recv, barrier, split's colour exchange and the timeout go to the bootstrap communicator:
// Comm's send must return before the peer receives (a pipeline schedule sends ahead), which an
// ungrouped ncclSend does not promise. split() splits the bootstrap and bootstraps a new NCCL
// communicator over the part (a fresh unique id from its rank 0).
//
// A training step's device collectives: NcclStepGroup (below) issues them as ONE NCCL group on the
// communication stream after an event of the compute stream, and the compute stream waits on the
// group's end event before it reads the results. Those reductions are NCCL's own (ring/tree order):
// deterministic for one NCCL version, topology and configuration, not rank-order like Comm's.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "comm/nccl_api.h"

namespace titan::comm {

class NcclComm final : public Comm {
 public:
  // Collective over `bootstrap` (which must outlive this communicator): rank 0 makes the unique
  // id, the bootstrap broadcasts it, every rank calls init_rank with the bootstrap's rank and size.
  NcclComm(Comm& bootstrap, nccl::Api& api);
  ~NcclComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  [[noreturn]] void abort(int code) override;

  nccl::Api& api() const { return api_; }
  nccl::CommHandle handle() const { return handle_; }
  nccl::Stream stream() const { return stream_; }  // the communication stream

 protected:
  void do_all_gather(const void* in, void* out, size_t bytes) override;
  void do_all_to_all(const void* in, void* out, size_t bytes) override;
  void do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) override;
  void do_send(const void* buf, size_t bytes, int dst) override;
  void do_recv(void* buf, size_t bytes, int src) override;
  void do_broadcast(void* buf, size_t bytes, int root) override;
  void do_barrier() override;
  std::unique_ptr<Comm> do_split(int color, int key) override;
  void apply_timeout(double seconds, const std::string& setting) override;

 private:
  friend class NcclStepGroup;
  NcclComm(const NcclComm& parent, std::unique_ptr<Comm> bootstrap);  // split()
  void init();
  // Device staging buffers of at least `in` and `out` bytes (grown, never shrunk).
  void reserve(size_t in, size_t out);
  // The exchange of one all_to_all(_v): sends and receives in one group, staged in and out.
  void exchange(const void* in, const size_t* send_off, const size_t* send_bytes, void* out, const size_t* recv_off,
                const size_t* recv_bytes);

  std::unique_ptr<Comm> owned_bootstrap_;  // a split's part of the parent's bootstrap
  Comm& boot_;
  nccl::Api& api_;
  int rank_ = 0, size_ = 1;
  nccl::CommHandle handle_ = nullptr;
  nccl::Stream stream_ = nullptr;
  nccl::Event ready_ = nullptr, done_ = nullptr;  // NcclStepGroup's events
  void* dev_in_ = nullptr;
  void* dev_out_ = nullptr;
  size_t in_cap_ = 0, out_cap_ = 0;
};

// One step's device collectives (device pointers) issued as one NCCL group. Collect with the
// add functions, then issue(compute): an event recorded on `compute`, the communication stream
// waits on it, ncclGroupStart, the collectives in the order added, ncclGroupEnd, an event recorded
// on the communication stream. join(compute) makes `compute` wait on that event (the work queued
// on it afterwards sees the results); nothing blocks the host. Every rank must add the same
// collectives in the same order. Not to be issued while work start()ed on the same communicator
// may be running (NCCL calls on one communicator come from one thread at a time).
class NcclStepGroup {
 public:
  explicit NcclStepGroup(NcclComm& c) : c_(c) {}
  void all_reduce(float* buf, int64_t n, ReduceOp op);
  void all_reduce_bf16(uint16_t* buf, int64_t n, ReduceOp op);
  // in: size() x chunk elements; out: chunk elements (block rank() reduced over the ranks).
  void reduce_scatter(const float* in, float* out, int64_t chunk, ReduceOp op);
  void reduce_scatter_bf16(const uint16_t* in, uint16_t* out, int64_t chunk, ReduceOp op);
  // in: chunk elements; out: size() x chunk elements.
  void all_gather(const float* in, float* out, int64_t chunk);
  void all_gather_bf16(const uint16_t* in, uint16_t* out, int64_t chunk);
  size_t size() const { return ops_.size(); }
  void issue(nccl::Stream compute);
  void join(nccl::Stream compute);

 private:
  enum class Kind { AllReduce, ReduceScatter, AllGather };
  struct Op {
    Kind kind;
    const void* in;
    void* out;
    size_t count;
    nccl::DataType type;
    nccl::RedOp op;
  };
  void add(Kind k, const void* in, void* out, int64_t count, nccl::DataType t, ReduceOp op);
  NcclComm& c_;
  std::vector<Op> ops_;
  bool issued_ = false;
};

}  // namespace titan::comm

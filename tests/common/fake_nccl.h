// An in-process NCCL for the NCCL Comm backend's host logic (comm/nccl_comm.h), without a GPU: one
// FakeNccl per rank (each rank a thread of run_threaded_ranks), "device" memory is host memory, a
// stream runs its work at once. What it models of NCCL:
//   - get_unique_id makes a fresh id; init_rank(n, id, r) joins the world of that id and waits (up
//     to 10 s, then throws) until all n ranks have joined, so a rank given a wrong id fails;
//   - calls between group_start and group_end form one group (a call outside a group is a group of
//     its own); at group_end the ranks of the communicator meet, every rank checks that all ranks'
//     collectives agree (kind, count, type, root, op) and that each send has a receive of the same
//     size in the same order, then each rank's receive buffers get their results (reductions in
//     rank order, bf16 widened to f32 and rounded once);
//   - every NCCL, stream and event call is logged in order ("group_start", "all_gather u8 x12",
//     "event_record e2 s1", ...) for tests of the order; device memory is counted.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl_api.h"

namespace titan::test {

class FakeNccl final : public comm::nccl::Api {
 public:
  FakeNccl();
  ~FakeNccl() override;
  const std::vector<std::string>& log() const { return log_; }
  void clear_log() { log_.clear(); }
  size_t live_device_bytes() const;
  int live_comms() const { return live_comms_; }

  comm::nccl::UniqueId get_unique_id() override;
  comm::nccl::CommHandle init_rank(int nranks, const comm::nccl::UniqueId& id, int rank) override;
  void destroy(comm::nccl::CommHandle c) override;
  void abort(comm::nccl::CommHandle c) override;
  void group_start() override;
  void group_end() override;
  void all_gather(const void* send, void* recv, size_t count, comm::nccl::DataType t, comm::nccl::CommHandle c,
                  comm::nccl::Stream s) override;
  void broadcast(const void* send, void* recv, size_t count, comm::nccl::DataType t, int root, comm::nccl::CommHandle c,
                 comm::nccl::Stream s) override;
  void all_reduce(const void* send, void* recv, size_t count, comm::nccl::DataType t, comm::nccl::RedOp op,
                  comm::nccl::CommHandle c, comm::nccl::Stream s) override;
  void reduce_scatter(const void* send, void* recv, size_t count, comm::nccl::DataType t, comm::nccl::RedOp op,
                      comm::nccl::CommHandle c, comm::nccl::Stream s) override;
  void send(const void* buf, size_t count, comm::nccl::DataType t, int peer, comm::nccl::CommHandle c,
            comm::nccl::Stream s) override;
  void recv(void* buf, size_t count, comm::nccl::DataType t, int peer, comm::nccl::CommHandle c,
            comm::nccl::Stream s) override;
  comm::nccl::Stream stream_create() override;
  void stream_destroy(comm::nccl::Stream s) override;
  comm::nccl::Event event_create() override;
  void event_destroy(comm::nccl::Event e) override;
  void event_record(comm::nccl::Event e, comm::nccl::Stream s) override;
  void stream_wait_event(comm::nccl::Stream s, comm::nccl::Event e) override;
  void stream_synchronize(comm::nccl::Stream s) override;
  void* device_alloc(size_t bytes) override;
  void device_free(void* p) override;
  void copy_to_device(void* dst, const void* src, size_t bytes, comm::nccl::Stream s) override;
  void copy_to_host(void* dst, const void* src, size_t bytes, comm::nccl::Stream s) override;

  struct Op;  // one call of a group (fake_nccl.cpp)

 private:
  void enqueue(Op op);
  void run_group();
  std::vector<std::string> log_;
  std::vector<Op> pending_;
  int depth_ = 0;
  int live_comms_ = 0;
  uintptr_t next_handle_ = 1;
  std::map<void*, std::unique_ptr<char[]>> device_;
  std::map<void*, size_t> device_bytes_;
};

// The number of unique ids made in this process so far.
uint64_t fake_nccl_ids_made();

}  // namespace titan::test

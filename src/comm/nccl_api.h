// The part of NCCL and the CUDA runtime the NCCL Comm backend (comm/nccl_comm.h) uses, as an
// interface: comm/nccl_runtime.cu implements it over <nccl.h> and <cuda_runtime.h> (compiled by
// nvcc where the NCCL headers are found, linked only into a TITAN_CUDA_RUNTIME=ON build), and the
// tests implement it in process (tests/common/fake_nccl.h: N ranks as N threads, host memory as
// device memory), so the backend's host logic — the unique-id bootstrap, which NCCL calls a Comm
// primitive becomes, the grouping, the stream and event order — runs and is tested on a machine
// without a GPU. The calls mean what the NCCL / CUDA calls of the same name mean; counts are in
// elements of the given type; handles are opaque.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace titan::comm::nccl {

// ncclUniqueId: NCCL_UNIQUE_ID_BYTES (128) opaque bytes that rank 0 makes and every rank passes to
// init_rank (nccl_runtime.cu checks the size against the header).
struct UniqueId {
  char bytes[128];
};

enum class DataType { U8, F32, BF16 };
enum class RedOp { Sum, Avg };

using CommHandle = void*;  // ncclComm_t
using Stream = void*;      // cudaStream_t
using Event = void*;       // cudaEvent_t

class Api {
 public:
  virtual ~Api() = default;
  // NCCL
  virtual UniqueId get_unique_id() = 0;                                        // ncclGetUniqueId
  virtual CommHandle init_rank(int nranks, const UniqueId& id, int rank) = 0;  // ncclCommInitRank
  virtual void destroy(CommHandle c) = 0;                                      // ncclCommDestroy
  virtual void abort(CommHandle c) = 0;                                        // ncclCommAbort
  virtual void group_start() = 0;                                              // ncclGroupStart
  virtual void group_end() = 0;                                                // ncclGroupEnd
  virtual void all_gather(const void* send, void* recv, size_t count, DataType t, CommHandle c, Stream s) = 0;
  virtual void broadcast(const void* send, void* recv, size_t count, DataType t, int root, CommHandle c, Stream s) = 0;
  virtual void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, CommHandle c, Stream s) = 0;
  // recv holds `count` elements: the reduction of every rank's block rank() of send (n x count).
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DataType t, RedOp op, CommHandle c,
                              Stream s) = 0;
  virtual void send(const void* buf, size_t count, DataType t, int peer, CommHandle c, Stream s) = 0;
  virtual void recv(void* buf, size_t count, DataType t, int peer, CommHandle c, Stream s) = 0;
  // CUDA runtime
  virtual Stream stream_create() = 0;  // cudaStreamCreateWithFlags(cudaStreamNonBlocking)
  virtual void stream_destroy(Stream s) = 0;
  virtual Event event_create() = 0;  // cudaEventCreateWithFlags(cudaEventDisableTiming)
  virtual void event_destroy(Event e) = 0;
  virtual void event_record(Event e, Stream s) = 0;                                     // cudaEventRecord
  virtual void stream_wait_event(Stream s, Event e) = 0;                                // cudaStreamWaitEvent
  virtual void stream_synchronize(Stream s) = 0;                                        // cudaStreamSynchronize
  virtual void* device_alloc(size_t bytes) = 0;                                         // cudaMalloc
  virtual void device_free(void* p) = 0;                                                // cudaFree
  virtual void copy_to_device(void* dst, const void* src, size_t bytes, Stream s) = 0;  // cudaMemcpyAsync
  virtual void copy_to_host(void* dst, const void* src, size_t bytes, Stream s) = 0;    // cudaMemcpyAsync
};

// The implementation over NCCL and the CUDA runtime on the current device; defined only in a GPU
// build (comm/nccl_runtime.cu with TITAN_CUDA_RUNTIME=ON).
std::unique_ptr<Api> cuda_nccl_api();

}  // namespace titan::comm::nccl

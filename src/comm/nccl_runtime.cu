// comm/nccl_api.h over the NCCL library and the CUDA runtime: the Api a GPU build gives NcclComm
// (comm/nccl_comm.h). Compiled by nvcc (the TITAN_CUDA gate, cmake/cuda.cmake) where the NCCL
// headers are found, so every build with the toolkit checks it against the real <nccl.h>; linked
// (with libnccl) only with TITAN_CUDA_RUNTIME=ON. No kernels here.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "comm/nccl_api.h"
#include "core/error.h"

namespace titan::comm::nccl {
namespace {

static_assert(sizeof(UniqueId) == sizeof(ncclUniqueId), "nccl_api.h's UniqueId must be NCCL_UNIQUE_ID_BYTES");

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL ", what, " failed: ", ncclGetErrorString(r));
}
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA ", what, " failed: ", cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::U8:
      return ncclUint8;
    case DataType::F32:
      return ncclFloat32;
    case DataType::BF16:
      return ncclBfloat16;
  }
  return ncclUint8;
}
ncclRedOp_t nccl_op(RedOp o) { return o == RedOp::Avg ? ncclAvg : ncclSum; }
ncclComm_t comm_of(CommHandle c) { return static_cast<ncclComm_t>(c); }
cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

class CudaNccl final : public Api {
 public:
  UniqueId get_unique_id() override {
    ncclUniqueId id;
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    UniqueId out;
    static_assert(sizeof out.bytes == sizeof id.internal);
    for (size_t i = 0; i < sizeof out.bytes; ++i) out.bytes[i] = id.internal[i];
    return out;
  }
  CommHandle init_rank(int nranks, const UniqueId& uid, int rank) override {
    ncclUniqueId id;
    for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = uid.bytes[i];
    ncclComm_t c = nullptr;
    check_nccl(ncclCommInitRank(&c, nranks, id, rank), "ncclCommInitRank");
    return c;
  }
  void destroy(CommHandle c) override { check_nccl(ncclCommDestroy(comm_of(c)), "ncclCommDestroy"); }
  void abort(CommHandle c) override { ncclCommAbort(comm_of(c)); }  // on the way out: no check
  void group_start() override { check_nccl(ncclGroupStart(), "ncclGroupStart"); }
  void group_end() override { check_nccl(ncclGroupEnd(), "ncclGroupEnd"); }
  void all_gather(const void* send, void* recv, size_t count, DataType t, CommHandle c, Stream s) override {
    check_nccl(ncclAllGather(send, recv, count, nccl_type(t), comm_of(c), stream_of(s)), "ncclAllGather");
  }
  void broadcast(const void* send, void* recv, size_t count, DataType t, int root, CommHandle c, Stream s) override {
    check_nccl(ncclBroadcast(send, recv, count, nccl_type(t), root, comm_of(c), stream_of(s)), "ncclBroadcast");
  }
  void all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, CommHandle c, Stream s) override {
    check_nccl(ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm_of(c), stream_of(s)), "ncclAllReduce");
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DataType t, RedOp op, CommHandle c,
                      Stream s) override {
    check_nccl(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), comm_of(c), stream_of(s)),
               "ncclReduceScatter");
  }
  void send(const void* buf, size_t count, DataType t, int peer, CommHandle c, Stream s) override {
    check_nccl(ncclSend(buf, count, nccl_type(t), peer, comm_of(c), stream_of(s)), "ncclSend");
  }
  void recv(void* buf, size_t count, DataType t, int peer, CommHandle c, Stream s) override {
    check_nccl(ncclRecv(buf, count, nccl_type(t), peer, comm_of(c), stream_of(s)), "ncclRecv");
  }
  Stream stream_create() override {
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void stream_destroy(Stream s) override { check_cuda(cudaStreamDestroy(stream_of(s)), "cudaStreamDestroy"); }
  Event event_create() override {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void event_destroy(Event e) override {
    check_cuda(cudaEventDestroy(static_cast<cudaEvent_t>(e)), "cudaEventDestroy");
  }
  void event_record(Event e, Stream s) override {
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(e), stream_of(s)), "cudaEventRecord");
  }
  void stream_wait_event(Stream s, Event e) override {
    check_cuda(cudaStreamWaitEvent(stream_of(s), static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
  }
  void stream_synchronize(Stream s) override {
    check_cuda(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize");
  }
  void* device_alloc(size_t bytes) override {
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
  }
  void device_free(void* p) override { check_cuda(cudaFree(p), "cudaFree"); }
  void copy_to_device(void* dst, const void* src, size_t bytes, Stream s) override {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(s)), "cudaMemcpyAsync");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes, Stream s) override {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(s)), "cudaMemcpyAsync");
  }
};

}  // namespace

std::unique_ptr<Api> cuda_nccl_api() { return std::make_unique<CudaNccl>(); }

}  // namespace titan::comm::nccl

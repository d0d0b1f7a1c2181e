#include "comm/nccl_comm.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace titan::comm {

NcclComm::NcclComm(Comm& bootstrap, nccl::Api& api) : boot_(bootstrap), api_(api) { init(); }

NcclComm::NcclComm(const NcclComm& parent, std::unique_ptr<Comm> bootstrap)
    : Comm(parent), owned_bootstrap_(std::move(bootstrap)), boot_(*owned_bootstrap_), api_(parent.api_) {
  init();
}

void NcclComm::init() {
  rank_ = boot_.rank(), size_ = boot_.size();
  // llm.c's bootstrap: rank 0 asks NCCL for the id, the others receive it over the bootstrap.
  nccl::UniqueId id{};
  if (rank_ == 0) id = api_.get_unique_id();
  boot_.broadcast(&id, sizeof id, 0);
  handle_ = api_.init_rank(size_, id, rank_);
  stream_ = api_.stream_create();
  ready_ = api_.event_create();
  done_ = api_.event_create();
}

NcclComm::~NcclComm() {
  // Outstanding work (a step group not yet joined) finishes before its buffers and comm go.
  api_.stream_synchronize(stream_);
  if (dev_in_) api_.device_free(dev_in_);
  if (dev_out_) api_.device_free(dev_out_);
  api_.event_destroy(done_);
  api_.event_destroy(ready_);
  api_.stream_destroy(stream_);
  api_.destroy(handle_);
}

void NcclComm::abort(int code) {
  api_.abort(handle_);
  boot_.abort(code);  // ends the job (MPI_Abort), or throws (the threaded backend)
  std::exit(code);    // not reached: Comm::abort does not return
}

void NcclComm::reserve(size_t in, size_t out) {
  auto grow = [&](void*& p, size_t& cap, size_t want) {
    if (want <= cap) return;
    if (p) api_.device_free(p);
    p = api_.device_alloc(want);
    cap = want;
  };
  grow(dev_in_, in_cap_, in);
  grow(dev_out_, out_cap_, out);
}

void NcclComm::do_all_gather(const void* in, void* out, size_t bytes) {
  if (bytes == 0) return;  // every rank passes the same size
  const size_t total = bytes * size_t(size_);
  reserve(bytes, total);
  api_.copy_to_device(dev_in_, in, bytes, stream_);
  api_.group_start();
  api_.all_gather(dev_in_, dev_out_, bytes, nccl::DataType::U8, handle_, stream_);
  api_.group_end();
  api_.copy_to_host(out, dev_out_, total, stream_);
  api_.stream_synchronize(stream_);
}

void NcclComm::exchange(const void* in, const size_t* send_off, const size_t* send_bytes, void* out,
                        const size_t* recv_off, const size_t* recv_bytes) {
  const size_t n = size_t(size_);
  const size_t in_total = send_off[n - 1] + send_bytes[n - 1], out_total = recv_off[n - 1] + recv_bytes[n - 1];
  reserve(in_total, out_total);
  if (in_total) api_.copy_to_device(dev_in_, in, in_total, stream_);
  char* din = static_cast<char*>(dev_in_);
  char* dout = static_cast<char*>(dev_out_);
  api_.group_start();
  for (int q = 0; q < size_; ++q) {
    // A block of zero bytes is skipped on both sides (rank q's send_bytes[me] is my recv_bytes[q]).
    if (send_bytes[q]) api_.send(din + send_off[q], send_bytes[q], nccl::DataType::U8, q, handle_, stream_);
    if (recv_bytes[q]) api_.recv(dout + recv_off[q], recv_bytes[q], nccl::DataType::U8, q, handle_, stream_);
  }
  api_.group_end();
  if (out_total) api_.copy_to_host(out, dev_out_, out_total, stream_);
  api_.stream_synchronize(stream_);
}

void NcclComm::do_all_to_all(const void* in, void* out, size_t bytes) {
  if (bytes == 0) return;
  const size_t n = size_t(size_);
  std::vector<size_t> off(n), sz(n, bytes);
  for (int q = 0; q < size_; ++q) off[size_t(q)] = size_t(q) * bytes;
  exchange(in, off.data(), sz.data(), out, off.data(), sz.data());
}

void NcclComm::do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) {
  const size_t n = size_t(size_);
  std::vector<size_t> soff(n), roff(n);
  for (int q = 1; q < size_; ++q) {
    soff[size_t(q)] = soff[size_t(q - 1)] + send_bytes[q - 1];
    roff[size_t(q)] = roff[size_t(q - 1)] + recv_bytes[q - 1];
  }
  exchange(in, soff.data(), send_bytes, out, roff.data(), recv_bytes);
}

void NcclComm::do_send(const void* buf, size_t bytes, int dst) { boot_.send(buf, bytes, dst); }
void NcclComm::do_recv(void* buf, size_t bytes, int src) { boot_.recv(buf, bytes, src); }

void NcclComm::do_broadcast(void* buf, size_t bytes, int root) {
  if (bytes == 0) return;
  reserve(bytes, 0);
  if (rank_ == root) api_.copy_to_device(dev_in_, buf, bytes, stream_);
  api_.group_start();
  api_.broadcast(dev_in_, dev_in_, bytes, nccl::DataType::U8, root, handle_, stream_);
  api_.group_end();
  if (rank_ != root) api_.copy_to_host(buf, dev_in_, bytes, stream_);
  api_.stream_synchronize(stream_);
}

void NcclComm::do_barrier() { boot_.barrier(); }

std::unique_ptr<Comm> NcclComm::do_split(int color, int key) {
  std::unique_ptr<Comm> part = boot_.split(color, key);
  return std::unique_ptr<Comm>(new NcclComm(*this, std::move(part)));
}

void NcclComm::apply_timeout(double seconds, const std::string& setting) { boot_.set_timeout(seconds, setting); }

// ---- NcclStepGroup ----

namespace {
nccl::RedOp red_op(ReduceOp op) { return op == ReduceOp::Avg ? nccl::RedOp::Avg : nccl::RedOp::Sum; }
}  // namespace

void NcclStepGroup::add(Kind k, const void* in, void* out, int64_t count, nccl::DataType t, ReduceOp op) {
  TITAN_CHECK(!issued_, "NcclStepGroup: a collective added after issue()");
  TITAN_CHECK(count >= 0, "NcclStepGroup: negative element count ", count);
  if (count == 0) return;
  ops_.push_back({k, in, out, size_t(count), t, red_op(op)});
}

void NcclStepGroup::all_reduce(float* buf, int64_t n, ReduceOp op) {
  add(Kind::AllReduce, buf, buf, n, nccl::DataType::F32, op);
}
void NcclStepGroup::all_reduce_bf16(uint16_t* buf, int64_t n, ReduceOp op) {
  add(Kind::AllReduce, buf, buf, n, nccl::DataType::BF16, op);
}
void NcclStepGroup::reduce_scatter(const float* in, float* out, int64_t chunk, ReduceOp op) {
  add(Kind::ReduceScatter, in, out, chunk, nccl::DataType::F32, op);
}
void NcclStepGroup::reduce_scatter_bf16(const uint16_t* in, uint16_t* out, int64_t chunk, ReduceOp op) {
  add(Kind::ReduceScatter, in, out, chunk, nccl::DataType::BF16, op);
}
void NcclStepGroup::all_gather(const float* in, float* out, int64_t chunk) {
  add(Kind::AllGather, in, out, chunk, nccl::DataType::F32, ReduceOp::Sum);
}
void NcclStepGroup::all_gather_bf16(const uint16_t* in, uint16_t* out, int64_t chunk) {
  add(Kind::AllGather, in, out, chunk, nccl::DataType::BF16, ReduceOp::Sum);
}

void NcclStepGroup::issue(nccl::Stream compute) {
  TITAN_CHECK(!issued_, "NcclStepGroup: issued twice");
  issued_ = true;
  nccl::Api& api = c_.api_;
  api.event_record(c_.ready_, compute);
  api.stream_wait_event(c_.stream_, c_.ready_);
  api.group_start();
  for (const Op& o : ops_) switch (o.kind) {
      case Kind::AllReduce:
        api.all_reduce(o.in, o.out, o.count, o.type, o.op, c_.handle_, c_.stream_);
        break;
      case Kind::ReduceScatter:
        api.reduce_scatter(o.in, o.out, o.count, o.type, o.op, c_.handle_, c_.stream_);
        break;
      case Kind::AllGather:
        api.all_gather(o.in, o.out, o.count, o.type, c_.handle_, c_.stream_);
        break;
    }
  api.group_end();
  api.event_record(c_.done_, c_.stream_);
}

void NcclStepGroup::join(nccl::Stream compute) {
  TITAN_CHECK(issued_, "NcclStepGroup: join() before issue()");
  c_.api_.stream_wait_event(compute, c_.done_);
}

}  // namespace titan::comm

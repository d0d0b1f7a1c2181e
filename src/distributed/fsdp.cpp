#include "distributed/fsdp.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "distributed/flat_params.h"
#include "distributed/grad_clip.h"
#include "model/decoder.h"

namespace titan::distributed {

namespace {

// Elements per rank per collective call: staging of at most ~4Mi floats whatever the rank count.
int64_t bucket_for(int64_t max_chunk, int64_t world) {
  return std::max<int64_t>(1, std::min(max_chunk, (int64_t(1) << 22) / world));
}

// A unit's chunk in 4-byte words: ceil(bytes / 4N) (ceil(P / N) elements of f32 values), at least 1.
int64_t chunk_words(int64_t bytes, int64_t world) { return std::max<int64_t>(1, (bytes + 4 * world - 1) / (4 * world)); }

}  // namespace

FsdpPlan fsdp_plan(const ModelConfig& c, int64_t world, bool frozen, DType base, int64_t tp, int64_t ep,
                   const PipelineStages& pp) {
  TITAN_CHECK(base == DType::F32 || frozen, "sharded data parallelism: bf16 weights need a frozen base");
  TITAN_CHECK(ep >= 1 && world % ep == 0, "sharded data parallelism: ", world, " ranks do not split into expert-parallel groups of ", ep);
  std::vector<int64_t> sizes(size_t(c.num_hidden_layers) + 2, 0);
  // The parts Fsdp shards (Fsdp::Part): runs of a unit's parameters with the same group, the
  // experts over world / ep ranks under expert parallelism.
  std::vector<std::pair<int64_t, int64_t>> parts;  // (bytes, ranks)
  int64_t last_unit = -1;
  bool last_expert = false;
  for (const ParamSpec& s : local_param_specs(c, ep, 0)) {
    if (!pp.holds_unit(s.unit, c.num_hidden_layers, c.tie_word_embeddings)) continue;  // another stage's
    const int64_t b = shape_numel(s.local_shape(tp)) * int64_t(dtype_size(s.dtype(base)));
    sizes[size_t(s.unit)] += b;
    const bool expert = ep > 1 && s.placement.by_expert;
    if (s.unit != last_unit || expert != last_expert) parts.push_back({0, expert ? world / ep : world});
    parts.back().first += b;
    last_unit = s.unit, last_expert = expert;
  }
  FsdpPlan p;
  p.unit_bytes = sizes;
  p.tied = c.tie_word_embeddings;
  int64_t max_chunk = 0;
  for (auto [bytes, ranks] : parts) {
    const int64_t chunk = chunk_words(bytes, ranks);
    p.shard_bytes += 4 * chunk;
    max_chunk = std::max(max_chunk, chunk);
  }
  for (int64_t n : sizes) {
    p.largest_unit_bytes = std::max(p.largest_unit_bytes, n);
    p.total_bytes += n;
  }
  // all-gather staging (N x bucket) and the reduce-scatter output (bucket; 1 word when frozen)
  p.staging_bytes = 4 * (world * bucket_for(max_chunk, world) + (frozen ? 1 : bucket_for(max_chunk, world)));
  p.schedule = unit_schedule(c, Pass::Train);
  p.frozen = frozen;
  return p;
}

int64_t FsdpPlan::transient_bytes(bool reshard_after_forward, bool prefetch) const {
  int64_t peak = 0;
  for (int64_t b : resident_at_runs(reshard_after_forward, prefetch)) peak = std::max(peak, b);
  return peak;
}

std::vector<int64_t> FsdpPlan::resident_at_runs(bool reshard_after_forward, bool prefetch) const {
  // Replays the schedule with the rules of Fsdp::need / done / prefetch below. A trained unit's
  // values are f32, so its full gradients are as many bytes as its values. The most resident at
  // once is at a compute step: needs and prefetches come before one, releases after it.
  const size_t n = unit_bytes.size();
  std::vector<char> values(n, 0), grads(n, 0);
  std::vector<int64_t> reducing;  // units whose gradients the communication thread still reduces
  std::vector<int64_t> at;
  int64_t live = 0;
  // A frozen base's gradients are tracked (the tied embedding's lifetime) but hold no memory.
  auto size_of = [&](const std::vector<char>& held, int64_t u) {
    return &held == &grads && frozen ? int64_t(0) : unit_bytes[size_t(u)];
  };
  auto take = [&](std::vector<char>& held, int64_t u) {
    if (!held[size_t(u)]) held[size_t(u)] = 1, live += size_of(held, u);
  };
  auto drop = [&](std::vector<char>& held, int64_t u) {
    if (held[size_t(u)]) held[size_t(u)] = 0, live -= size_of(held, u);
  };
  for (const UnitStep& s : schedule) {
    const int64_t u = s.unit;
    switch (s.kind) {
      case UnitStep::Kind::Prefetch:
        if (prefetch) take(values, u);
        break;
      case UnitStep::Kind::Need:
        if (uses(s.use, UnitUse::Values)) take(values, u);
        if (uses(s.use, UnitUse::Grads)) take(grads, u);
        break;
      case UnitStep::Kind::Done: {
        if (uses(s.use, UnitUse::Grads)) {
          grads[size_t(u)] = 0;
          if (frozen)
            ;  // nothing held, nothing reduced
          else if (prefetch)
            reducing.push_back(u);  // freed by the communication thread once reduced
          else
            live -= unit_bytes[size_t(u)];
        }
        const bool keep = !reshard_after_forward || (u == 0 && tied && !grads[0]);
        if (uses(s.use, UnitUse::Values) && (uses(s.use, UnitUse::Grads) || !keep)) drop(values, u);
        break;
      }
      case UnitStep::Kind::Run:
        at.push_back(live);
        // A reduction issued before this step overlaps it and is taken as done after it.
        for (int64_t r : reducing) live -= unit_bytes[size_t(r)];
        reducing.clear();
        break;
    }
  }
  return at;
}

// A run of a unit's parameters sharded over one group: the fsdp group, or under expert
// parallelism the expert_fsdp group for the experts this rank holds.
struct Fsdp::Part {
  size_t p0 = 0, p1 = 0;                 // parameter range
  Comm* comm = nullptr;
  int64_t numel = 0, bytes = 0;          // elements (f32 gradients) and value bytes
  int64_t chunk = 0, local = 0;          // in words; local: where this rank's chunk starts in the shard
  std::vector<std::shared_ptr<Storage>> values, grads;  // the distinct storages behind the params
};

struct Fsdp::Unit {
  std::vector<Part> parts;
  // Every part's storages (what gathering the unit brings and releasing it frees).
  std::vector<std::shared_ptr<Storage>> values, grads;
  enum class State { Sharded, Pending, Resident } state = State::Sharded;
  int64_t gather_ticket = 0;  // Pending: the worker job that gathers the values
  bool grads_resident = false;
  int64_t reduce_ticket = 0;  // the last job reducing (and then freeing) this unit's grads
};

// Runs collectives in submission order on one thread (or inline when there is no thread).
class Fsdp::Worker {
 public:
  explicit Worker(bool threaded) {
    if (threaded) th_ = std::thread([this] { loop(); });
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (th_.joinable()) th_.join();
  }
  // Jobs submitted and not finished: only while unwinding from an error on this rank, when the
  // thread may be stuck in a collective the other ranks never join.
  bool busy() const {
    std::lock_guard<std::mutex> g(mu_);
    return th_.joinable() && finished_ < issued_;
  }
  // Gives up on a busy thread (the process is about to end every rank with the error).
  void abandon() { th_.detach(); }
  int64_t submit(std::function<void()> job) {
    if (!th_.joinable()) {  // inline: done when submit returns (errors propagate directly)
      run(job);
      std::lock_guard<std::mutex> g(mu_);
      finished_ = ++issued_;
      return issued_;
    }
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(std::move(job));
    cv_.notify_all();
    return ++issued_;
  }
  void wait(int64_t ticket) {
    const double t0 = now_seconds();
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return finished_ >= ticket || err_; });
    waited_ += now_seconds() - t0;
    if (err_) std::rethrow_exception(err_);
  }
  void drain() {
    int64_t t;
    {
      std::lock_guard<std::mutex> g(mu_);
      t = issued_;
    }
    wait(t);
  }
  double seconds() const {
    std::lock_guard<std::mutex> g(mu_);
    return seconds_;
  }
  // Time the submitting thread was blocked: all of it inline, the waits with a thread.
  double blocked_seconds() const {
    std::lock_guard<std::mutex> g(mu_);
    return th_.joinable() ? waited_ : seconds_;
  }

 private:
  void run(const std::function<void()>& job) {
    const double t0 = now_seconds();
    job();
    std::lock_guard<std::mutex> g(mu_);
    seconds_ += now_seconds() - t0;
  }
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        job = std::move(q_.front());
        q_.pop_front();
      }
      try {
        run(job);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu_);
        if (!err_) err_ = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        ++finished_;
      }
      cv_.notify_all();
    }
  }
  std::thread th_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  int64_t issued_ = 0, finished_ = 0;
  double seconds_ = 0, waited_ = 0;
  std::exception_ptr err_;
};

Fsdp::Fsdp(DecoderModel& model, Comm& comm, Options opt, const std::function<void(int64_t unit)>& fill,
           Comm* replicate, Comm* expert)
    : model_(model), ps_(model.params()), comm_(comm), replicate_(replicate), opt_(opt), frozen_(model.base_frozen()) {
  const int64_t n = comm.size();
  const bool ep = model.expert_parallel().on();
  TITAN_ASSERT(!ep || expert, "Fsdp: an expert-parallel model needs the expert_fsdp group");
  for (int64_t ui = 0; ui < model.num_units(); ++ui) {
    auto u = std::make_unique<Unit>();
    std::set<Storage*> seen;
    const auto [q0, q1] = model.unit_params(ui);
    for (size_t i = q0; i < q1; ++i) {
      const bool by_expert = ep && model.param_specs()[i].placement.by_expert;
      Comm* group = by_expert ? expert : &comm;
      if (u->parts.empty() || u->parts.back().comm != group) {
        u->parts.emplace_back();
        u->parts.back().p0 = i, u->parts.back().comm = group;
      }
      Part& part = u->parts.back();
      part.p1 = i + 1;
      Param& p = ps_.all()[i];
      const DType dt = p.value.dtype();
      TITAN_CHECK(frozen_ ? !p.grad.defined() && (dt == DType::F32 || dt == DType::BF16)
                          : dt == DType::F32 && p.grad.dtype() == DType::F32,
                  "sharded data parallelism: parameter ", p.name, " is ", dtype_name(dt),
                  frozen_ ? " (a frozen base is f32 or bf16)" : " (trained parameters are f32)");
      TITAN_CHECK(!p.value.storage()->resident() && (frozen_ || !p.grad.storage()->resident()),
                  "sharded data parallelism: parameter ", p.name, " already has memory (build the model deferred)");
      // A storage belongs to one part (a stacked expert buffer holds experts only).
      if (seen.insert(p.value.storage().get()).second) part.values.push_back(p.value.storage());
      if (!frozen_ && seen.insert(p.grad.storage().get()).second) part.grads.push_back(p.grad.storage());
      part.numel += p.value.numel();
      part.bytes += int64_t(p.value.nbytes());
    }
    for (Part& part : u->parts) {
      part.chunk = chunk_words(part.bytes, part.comm->size());
      part.local = shard_;
      // This rank's spans: the pieces of [r c, (r+1) c) of the part's flattening (f32 models; a
      // bf16 base is never checkpointed).
      const int64_t lo = part.comm->rank() * part.chunk;
      if (model.weight_dtype() == DType::F32)
        for_each_flat_span(ps_, part.p0, part.p1, lo, std::min(part.numel, lo + part.chunk),
                           [&](size_t i, int64_t po, int64_t fo, int64_t c) {
                             spans_.push_back(Span{i, po, c, part.local + (fo - lo)});
                           });
      shard_ += part.chunk;
      u->values.insert(u->values.end(), part.values.begin(), part.values.end());
      u->grads.insert(u->grads.end(), part.grads.begin(), part.grads.end());
    }
    units_.push_back(std::move(u));
  }
  int64_t max_chunk = 0;
  for (auto& u : units_)
    for (const Part& part : u->parts) max_chunk = std::max(max_chunk, part.chunk);
  bucket_ = bucket_for(max_chunk, n);
  plan_ = fsdp_plan(model.config(), n, frozen_, model.weight_dtype(), model.tensor_parallel().size(),
                    model.expert_parallel().size(), model.pipeline());
  TITAN_ASSERT(plan_.shard_bytes == 4 * shard_ && plan_.unit_bytes.size() == units_.size(),
               "FSDP plan disagrees with the model");
  stage_ = Tensor::zeros({bucket_ * n}, DType::F32);
  out_ = Tensor::zeros({frozen_ ? 1 : bucket_}, DType::F32);
  p_ = Tensor::zeros({shard_}, DType::F32);
  const int64_t trained = frozen_ ? 0 : shard_;  // a frozen base has no gradient or moment shards
  g_ = Tensor::zeros({trained}, DType::F32);
  m_ = Tensor::zeros({trained}, DType::F32);
  v_ = Tensor::zeros({trained}, DType::F32);
  // Fill each unit in full (identically on every rank), keep this rank's chunk, free the rest.
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = *units_[ui];
    for (auto& s : u.values) s->allocate();
    fill(int64_t(ui));
    for (const Part& part : u.parts) {
      const int64_t lo = 4 * part.comm->rank() * part.chunk;
      value_bytes_read(ps_, part.p0, part.p1, lo, std::min(part.bytes, lo + 4 * part.chunk),
                       p_.data<float>() + part.local);
    }
    for (auto& s : u.values) s->release();
  }
  tied_ = model.config().tie_word_embeddings;
  worker_ = std::make_unique<Worker>(opt.prefetch);
  model.set_unit_hooks(this);
}

Fsdp::~Fsdp() {
  model_.set_unit_hooks(nullptr);
  if (worker_->busy()) {
    // Unwinding from an error mid-pass: joining could wait forever on a collective the other
    // ranks will not join (the caller aborts the job next), so the thread and its queue are
    // left behind rather than joined.
    worker_->abandon();
    (void)worker_.release();
  }
  worker_.reset();
}

double Fsdp::comm_seconds() const { return worker_->seconds() + comm_seconds_; }
double Fsdp::comm_wait_seconds() const { return worker_->blocked_seconds() + comm_seconds_; }

void Fsdp::gather(Unit& u) {
  // Bytes, in whatever dtype the values have (f32, or a frozen base's bf16 weights).
  char* s = static_cast<char*>(stage_.raw());
  for (const Part& part : u.parts) {
    const int n = part.comm->size();
    const char* mine = static_cast<const char*>(p_.raw()) + 4 * part.local;
    const int64_t chunk = 4 * part.chunk, bucket = 4 * bucket_;
    for (int64_t o = 0; o < chunk; o += bucket) {
      const int64_t b = std::min(bucket, chunk - o);
      part.comm->all_gather_bytes(mine + o, s, size_t(b));
      for (int q = 0; q < n; ++q) {
        const int64_t lo = int64_t(q) * chunk + o;
        value_bytes_write(ps_, part.p0, part.p1, lo, std::min(lo + b, part.bytes), s + int64_t(q) * b);
      }
      gathered_bytes_ += int64_t(n) * b;
    }
  }
}

void Fsdp::reduce_grads(Unit& u) {
  float* s = stage_.data<float>();
  float* out = out_.data<float>();
  for (const Part& part : u.parts) {
    const int n = part.comm->size();
    float* acc = g_.data<float>() + part.local;
    for (int64_t o = 0; o < part.chunk; o += bucket_) {
      const int64_t b = std::min(bucket_, part.chunk - o);
      std::memset(s, 0, size_t(n) * size_t(b) * sizeof(float));  // padding past the part stays 0
      for (int q = 0; q < n; ++q) {
        const int64_t lo = int64_t(q) * part.chunk + o;
        flat_read(ps_, part.p0, part.p1, true, lo, std::min(lo + b, part.numel), s + int64_t(q) * b);
      }
      part.comm->reduce_scatter(s, out, b, ReduceOp::Sum);
      for (int64_t i = 0; i < b; ++i) acc[o + i] += out[i];
    }
  }
}

void Fsdp::wait_values(Unit& u) {
  if (u.state == Unit::State::Pending) {
    worker_->wait(u.gather_ticket);
    u.state = Unit::State::Resident;
  }
}

void Fsdp::issue_gather(Unit& u) {
  if (u.state != Unit::State::Sharded) return;
  for (auto& s : u.values) s->allocate();
  u.gather_ticket = worker_->submit([this, &u] { gather(u); });
  u.state = Unit::State::Pending;
}

void Fsdp::prefetch(int64_t unit) {
  // Without a communication thread a gather would run right here, holding the unit's memory from
  // now on for no overlap: the announcement is ignored.
  if (!opt_.prefetch || unit < 0 || unit >= int64_t(units_.size())) return;
  issue_gather(*units_[size_t(unit)]);
}

void Fsdp::need(int64_t unit, UnitUse use) {
  Unit& u = *units_.at(size_t(unit));
  if (uses(use, UnitUse::Values)) {
    issue_gather(u);
    wait_values(u);
  }
  if (uses(use, UnitUse::Grads) && !u.grads_resident && frozen_) {
    u.grads_resident = true;  // the unit's backward: no gradient memory (the keep rule in done())
  } else if (uses(use, UnitUse::Grads) && !u.grads_resident) {
    worker_->wait(u.reduce_ticket);  // the previous micro-batch's reduction still reads them
    for (auto& s : u.grads) s->allocate();
    for (const Part& part : u.parts)
      for (size_t i = part.p0; i < part.p1; ++i) ps_.all()[i].grad.zero_();
    u.grads_resident = true;
  }
}

void Fsdp::done(int64_t unit, UnitUse use) {
  Unit& u = *units_.at(size_t(unit));
  const bool values = uses(use, UnitUse::Values), grads = uses(use, UnitUse::Grads);
  if (grads) {
    TITAN_ASSERT(u.grads_resident, "done(grads) without need(grads) for unit ", unit);
    u.grads_resident = false;
    if (!frozen_)
      u.reduce_ticket = worker_->submit([this, &u] {
        reduce_grads(u);
        for (auto& s : u.grads) s->release();
      });
  }
  // A tied embedding stays from its lookup to the head, which reads it again (with its gradient
  // then resident): the head's phase holds it anyway, so keeping it adds nothing to the peak and
  // saves gathering the largest unit twice. The head's done() frees it.
  const bool keep = !opt_.reshard_after_forward || (unit == 0 && tied_ && !u.grads_resident);
  if (values && (grads || !keep)) {
    wait_values(u);
    if (u.state == Unit::State::Resident) {
      // A reduction still queued for this unit reads only its gradients: the values can go.
      for (auto& s : u.values) s->release();
      u.state = Unit::State::Sharded;
    }
  }
}

void Fsdp::end_pass() {
  worker_->drain();
  for (auto& up : units_) {
    Unit& u = *up;
    TITAN_ASSERT(!u.grads_resident, "a unit's gradients were never reduced in this pass");
    if (u.state != Unit::State::Sharded) {
      for (auto& s : u.values) s->release();
      u.state = Unit::State::Sharded;
    }
  }
}

void Fsdp::set_tensor_parallel(Comm* tp, std::vector<bool> split) {
  TITAN_ASSERT(split.size() == ps_.all().size(), "Fsdp::set_tensor_parallel: one flag per parameter");
  tp_ = tp && tp->size() > 1 ? tp : nullptr;
  tp_split_ = std::move(split);
}

// This rank's part of the squared norm over the tp group: its split parameters' spans, and the
// replicated ones' on tp rank 0 only.
double Fsdp::tp_sum_of_squares() const {
  std::vector<GradRange> r;
  float* g = g_.data<float>();
  for (const Span& s : spans_)
    if (tp_split_[s.param] || tp_->rank() == 0) r.push_back({g + s.local, s.count});
  return sum_of_squares(model_.exec(), r);
}

void Fsdp::set_pipeline(Comm* pp, Comm* tied) {
  pp_ = pp && pp->size() > 1 ? pp : nullptr;
  // Only the ranks whose model holds the embedding unit (the first stage, and the last's copy).
  tied_pair_ = tied && tied->size() > 1 && model_.holds_unit(0) ? tied : nullptr;
  // The last stage's copy of a tied embedding: summed with the first stage's, counted there.
  tied_copy_ = tied_pair_ && !model_.pipeline().holds(0);
}

void Fsdp::zero_grad() {
  worker_->drain();
  g_.zero_();
}

double Fsdp::step(double max_norm, const AdamWKernel& adamw, const AdamWParams& hp) {
  TITAN_ASSERT(!frozen_, "Fsdp::step on a frozen base");
  worker_->drain();
  if (replicate_ && replicate_->size() > 1) {  // HSDP: the replicas' gradient shards summed
    const double t0 = now_seconds();
    replicate_->all_reduce(g_.data<float>(), shard_, ReduceOp::Sum);
    comm_seconds_ += now_seconds() - t0;
  }
  if (tied_pair_) {  // a tied embedding's two copies (first and last stage): both gradients summed
    const double t0 = now_seconds();
    TITAN_ASSERT(units_[0]->parts.size() == 1, "a tied embedding unit is one part");
    const Part& e = units_[0]->parts[0];
    tied_pair_->all_reduce(g_.data<float>() + e.local, e.chunk, ReduceOp::Sum);
    comm_seconds_ += now_seconds() - t0;
  }
  // The clipping of the whole-tensor path (distributed/grad_clip.h) on my shard; the global sum of
  // squares is the ranks' sums added in rank order.
  const double norm = clip_grad_norm(model_.exec(), {{g_.data<float>(), shard_}}, max_norm, [this](double ss) {
    const double t0 = now_seconds();
    if (tp_) ss = tp_sum_of_squares();
    if (tied_copy_) {  // the last stage's tied copy is counted on the first stage
      const Part& e = units_[0]->parts[0];
      ss -= sum_of_squares(model_.exec(), {{g_.data<float>() + e.local, e.chunk}});
    }
    double total = comm_.all_reduce_sum(ss);
    if (tp_) total = tp_->all_reduce_sum(total);
    if (pp_) total = pp_->all_reduce_sum(total);  // every stage's parameters
    comm_seconds_ += now_seconds() - t0;
    return total;
  });
  if (!std::isfinite(norm)) return norm;
  // Padding elements have 0 parameter, 0 gradient and 0 moments, and stay so.
  adamw.step(model_.exec(), p_, g_, m_, v_, hp);
  return norm;
}

void Fsdp::for_each_unit_gathered(const std::function<void(int64_t unit)>& f) {
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    need(int64_t(ui), UnitUse::Values);
    f(int64_t(ui));
    Unit& u = *units_[ui];
    for (auto& s : u.values) s->release();
    u.state = Unit::State::Sharded;
  }
  worker_->drain();
}

std::optional<std::string> Fsdp::first_non_finite_grad() const {
  if (frozen_) return std::nullopt;
  const float* g = g_.data<float>();
  for (const Span& s : spans_)
    for (int64_t i = 0; i < s.count; ++i)
      if (!std::isfinite(g[s.local + i])) return ps_.all()[s.param].name;
  return std::nullopt;
}

}  // namespace titan::distributed

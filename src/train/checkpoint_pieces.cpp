#include "train/checkpoint_pieces.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/gpu_memory.h"
#include "core/pinned_staging.h"
#include "train/tensor_region.h"

namespace titan {
namespace {

std::string range_str(int64_t b, int64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; }

std::string typed_shape(DType dt, const Shape& s) { return dtype_name(dt) + shape_str(s); }

bool on_gpu(const TensorPiece& p) { return p.data.device().type == DeviceType::CUDA; }

// How host bytes reach a piece's memory: memcpy, or a copy to the device for a piece on the GPU.
ByteCopy copy_into(const TensorPiece& p) {
  if (on_gpu(p)) return gpu::copy_to_device;
  return [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
}

// Copy the overlap of source elements [src_first, src_first + src_count) (host bytes at `src`)
// with the destination piece's range into the piece.
void copy_overlap(const char* src, int64_t src_first, int64_t src_count, TensorPiece& dst, size_t esize) {
  const int64_t b = std::max(src_first, dst.offset);
  const int64_t e = std::min(src_first + src_count, dst.offset + dst.data.numel());
  if (b >= e) return;
  char* out = static_cast<char*>(dst.data.raw()) + size_t(b - dst.offset) * esize;
  copy_into(dst)(out, src + size_t(b - src_first) * esize, size_t(e - b) * esize);
}

}  // namespace

CheckpointPieces::CheckpointPieces(const std::vector<std::string>& paths, std::string label)
    : label_(std::move(label)) {
  for (size_t f = 0; f < paths.size(); ++f) {
    files_.push_back(std::make_unique<TensorFileReader>(paths[f]));
    for (const TensorFileEntry& e : files_.back()->entries()) by_name_[e.name].push_back({f, &e});
  }
  for (auto& [name, refs] : by_name_) {
    // Entries in order of their first element; the tiling is checked on their runs (one per
    // range piece, one per contiguous stretch of a box), so ranges and boxes mix.
    std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) {
      const auto ba = region_bounds(a.entry->region(), a.entry->full_shape);
      const auto bb = region_bounds(b.entry->region(), b.entry->full_shape);
      return ba < bb;
    });
    const TensorFileEntry& first = *refs[0].entry;
    const std::string& first_path = files_[refs[0].file]->path();
    struct Stretch {
      int64_t b, e;
      size_t ref;
    };
    std::vector<Stretch> runs;
    for (size_t i = 0; i < refs.size(); ++i) {
      const TensorFileEntry& e = *refs[i].entry;
      const std::string& path = files_[refs[i].file]->path();
      TITAN_CHECK(e.dtype == first.dtype && e.full_shape == first.full_shape, path, ": tensor '", name, "' is ",
                  typed_shape(e.dtype, e.full_shape), " but ", first_path, " stores it as ",
                  typed_shape(first.dtype, first.full_shape));
      for (const TensorRun& r : region_runs(e.region(), e.full_shape)) runs.push_back({r.flat, r.flat + r.len, i});
    }
    std::sort(runs.begin(), runs.end(), [](const Stretch& a, const Stretch& b) { return a.b < b.b; });
    int64_t covered = 0;
    const Stretch* prev = nullptr;
    for (const Stretch& r : runs) {
      const std::string& path = files_[refs[r.ref].file]->path();
      TITAN_CHECK(r.b <= covered, label_, ": tensor '", name, "' ", typed_shape(first.dtype, first.full_shape),
                  ": elements ", range_str(covered, r.b),
                  " are in no file (a rank's piece is missing; checkpoint incomplete)");
      TITAN_CHECK(r.b >= covered, path, ": tensor '", name, "' elements ", range_str(r.b, r.e), " overlap elements ",
                  range_str(prev->b, prev->e), " stored in ", files_[refs[prev->ref].file]->path());
      covered = r.e;
      prev = &r;
    }
    const int64_t full = shape_numel(first.full_shape);
    TITAN_CHECK(covered == full, label_, ": tensor '", name, "' ", typed_shape(first.dtype, first.full_shape),
                ": elements ", range_str(covered, full),
                " are in no file (a rank's piece is missing; checkpoint incomplete)");
  }
}

std::vector<std::string> CheckpointPieces::names() const {
  std::vector<std::string> out;
  for (auto& [name, refs] : by_name_) out.push_back(name);
  return out;
}

void CheckpointPieces::check_names(const std::vector<std::string>& names) const {
  std::set<std::string> want;
  for (auto& n : names) TITAN_CHECK(want.insert(n).second, label_, ": tensor name '", n, "' is requested twice");
  for (auto& [name, refs] : by_name_)
    TITAN_CHECK(want.count(name), files_[refs[0].file]->path(), ": unexpected tensor '", name,
                "' (not in the model being loaded)");
  for (auto& n : names) TITAN_CHECK(by_name_.count(n), label_, ": missing tensor '", n, "'");
}

void CheckpointPieces::fill(std::vector<TensorPiece>& pieces) const {
  // Which pieces each stored entry feeds, keyed by (file, byte offset): reads go in file order.
  struct Job {
    Ref ref;
    std::vector<size_t> pieces;
  };
  std::map<std::pair<size_t, uint64_t>, Job> jobs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    TensorPiece& p = pieces[i];
    auto it = by_name_.find(p.name);
    TITAN_CHECK(it != by_name_.end(), label_, ": missing tensor '", p.name, "'");
    const TensorFileEntry& first = *it->second[0].entry;
    const std::string& first_path = files_[it->second[0].file]->path();
    const int64_t n = p.data.defined() ? p.data.numel() : 0, full = shape_numel(first.full_shape);
    const bool box = !p.box_shape.empty();
    const bool whole = (box || p.offset == 0) && n == full;
    TITAN_CHECK(p.data.defined() && p.data.dtype() == first.dtype && p.full_shape == first.full_shape, first_path,
                ": tensor '", p.name, "' is ", typed_shape(first.dtype, first.full_shape), " but the destination is ",
                p.data.defined() ? typed_shape(p.data.dtype(), p.full_shape) : std::string("undefined"),
                whole ? "" : " " + p.region().str());
    if (box) {
      const std::string why = region_outside(p.region(), p.full_shape);
      TITAN_CHECK(why.empty(), label_, ": requested ", why.substr(0, why.find(" lies")), " of tensor '", p.name, "'",
                  why.substr(std::min(why.size(), why.find(" lies"))));
      TITAN_CHECK(n == shape_numel(p.box_shape), label_, ": destination of tensor '", p.name, "' holds ", n,
                  " elements for its ", p.region().str());
    } else {
      TITAN_CHECK(p.offset >= 0 && p.offset <= full && n <= full - p.offset, label_, ": requested elements ",
                  range_str(p.offset, p.offset + n), " of tensor '", p.name, "' lie outside its full shape ",
                  shape_str(p.full_shape), " (", full, " elements)");
    }
    if (n == 0) continue;
    const auto [pb, pe] = region_bounds(p.region(), p.full_shape);
    for (const Ref& r : it->second) {
      const TensorFileEntry& e = *r.entry;
      const auto [eb, ee] = region_bounds(e.region(), e.full_shape);
      if (eb >= pe) break;  // sorted by first element
      if (ee <= pb) continue;
      Job& job = jobs[{r.file, e.offset}];
      job.ref = r;
      job.pieces.push_back(i);
    }
  }
  // Entries read for a piece on the GPU stream through one pinned buffer (at most the staging
  // bound, sized for the largest of them) and go on to the device chunk by chunk.
  const auto to_gpu = [&](const Job& job) {
    return std::any_of(job.pieces.begin(), job.pieces.end(), [&](size_t i) { return on_gpu(pieces[i]); });
  };
  uint64_t largest_gpu = 0;
  for (auto& [key, job] : jobs)
    if (to_gpu(job)) largest_gpu = std::max(largest_gpu, job.ref.entry->nbytes);
  PinnedStaging staging(largest_gpu);
  for (auto& [key, job] : jobs) {
    const TensorFileEntry& e = *job.ref.entry;
    const TensorFileReader& file = *files_[job.ref.file];
    const size_t esize = dtype_size(e.dtype);
    const bool via_gpu = to_gpu(job);
    const auto stream = [&](const std::function<void(int64_t, const char*, int64_t)>& sink) {
      if (via_gpu)
        file.stream_entry(e, staging.data(), staging.size(), sink);
      else
        file.stream_entry(e, sink);
    };
    const bool any_box = e.box() || std::any_of(job.pieces.begin(), job.pieces.end(),
                                                [&](size_t i) { return !pieces[i].box_shape.empty(); });
    if (any_box) {  // boxes: the entry streamed, each chunk's runs copied into each piece's runs
      const std::vector<TensorRun> src = region_runs(e.region(), e.full_shape);
      std::vector<std::vector<TensorRun>> dst;
      for (size_t i : job.pieces) dst.push_back(region_runs(pieces[i].region(), pieces[i].full_shape));
      stream([&](int64_t first, const char* bytes, int64_t count) {
        for (size_t k = 0; k < job.pieces.size(); ++k) {
          const TensorPiece& p = pieces[job.pieces[k]];
          copy_runs(src, bytes, first, count, dst[k], static_cast<char*>(p.data.raw()), esize, copy_into(p));
        }
      });
      continue;
    }
    const int64_t eb = e.elem_offset, ee = eb + e.numel();
    // A piece that holds the whole entry takes it straight from the file; the others copy from it.
    // (Not for a job with a GPU piece: host code cannot read the device copy back.)
    auto holder = std::find_if(job.pieces.begin(), job.pieces.end(), [&](size_t i) {
      return pieces[i].offset <= eb && ee <= pieces[i].offset + pieces[i].data.numel();
    });
    if (!via_gpu && holder != job.pieces.end()) {
      TensorPiece& h = pieces[*holder];
      char* at = static_cast<char*>(h.data.raw()) + size_t(eb - h.offset) * esize;
      file.read_entry(e, at);
      for (size_t i : job.pieces)
        if (i != *holder) copy_overlap(at, eb, e.numel(), pieces[i], esize);
    } else {
      stream([&](int64_t first, const char* bytes, int64_t count) {
        for (size_t i : job.pieces) copy_overlap(bytes, eb + first, count, pieces[i], esize);
      });
    }
  }
}

}  // namespace titan

#include "train/checkpoint_pieces.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"

namespace titan {
namespace {

std::string range_str(int64_t b, int64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; }

std::string typed_shape(DType dt, const Shape& s) { return dtype_name(dt) + shape_str(s); }

// Copy the overlap of source elements [src_first, src_first + src_count) (bytes at `src`) with
// the destination piece's range into the piece.
void copy_overlap(const char* src, int64_t src_first, int64_t src_count, TensorPiece& dst, size_t esize) {
  const int64_t b = std::max(src_first, dst.offset);
  const int64_t e = std::min(src_first + src_count, dst.offset + dst.data.numel());
  if (b >= e) return;
  char* out = static_cast<char*>(dst.data.raw()) + size_t(b - dst.offset) * esize;
  std::memcpy(out, src + size_t(b - src_first) * esize, size_t(e - b) * esize);
}

}  // namespace

CheckpointPieces::CheckpointPieces(const std::vector<std::string>& paths, std::string label)
    : label_(std::move(label)) {
  for (size_t f = 0; f < paths.size(); ++f) {
    files_.push_back(std::make_unique<TensorFileReader>(paths[f]));
    for (const TensorFileEntry& e : files_.back()->entries()) by_name_[e.name].push_back({f, &e});
  }
  for (auto& [name, refs] : by_name_) {
    std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) {
      return std::pair(a.entry->elem_offset, a.entry->numel()) < std::pair(b.entry->elem_offset, b.entry->numel());
    });
    const TensorFileEntry& first = *refs[0].entry;
    const std::string& first_path = files_[refs[0].file]->path();
    int64_t covered = 0;
    const TensorFileEntry* prev = nullptr;
    size_t prev_file = 0;
    for (const Ref& r : refs) {
      const TensorFileEntry& e = *r.entry;
      const std::string& path = files_[r.file]->path();
      TITAN_CHECK(e.dtype == first.dtype && e.full_shape == first.full_shape, path, ": tensor '", name, "' is ",
                  typed_shape(e.dtype, e.full_shape), " but ", first_path, " stores it as ",
                  typed_shape(first.dtype, first.full_shape));
      TITAN_CHECK(e.elem_offset <= covered, label_, ": tensor '", name, "' ", typed_shape(first.dtype, first.full_shape),
                  ": elements ", range_str(covered, e.elem_offset),
                  " are in no file (a rank's piece is missing; checkpoint incomplete)");
      TITAN_CHECK(e.elem_offset >= covered, path, ": tensor '", name, "' elements ",
                  range_str(e.elem_offset, e.elem_offset + e.numel()), " overlap elements ",
                  range_str(prev->elem_offset, prev->elem_offset + prev->numel()), " stored in ",
                  files_[prev_file]->path());
      covered = e.elem_offset + e.numel();
      prev = &e;
      prev_file = r.file;
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
    const bool whole = p.offset == 0 && n == full;
    TITAN_CHECK(p.data.defined() && p.data.dtype() == first.dtype && p.full_shape == first.full_shape, first_path,
                ": tensor '", p.name, "' is ", typed_shape(first.dtype, first.full_shape), " but the destination is ",
                p.data.defined() ? typed_shape(p.data.dtype(), p.full_shape) : std::string("undefined"),
                whole ? "" : " elements " + range_str(p.offset, p.offset + n));
    TITAN_CHECK(p.data.device().type == DeviceType::CPU, label_, ": destination of tensor '", p.name,
                "' is not on the CPU");
    TITAN_CHECK(p.offset >= 0 && p.offset <= full && n <= full - p.offset, label_, ": requested elements ",
                range_str(p.offset, p.offset + n), " of tensor '", p.name, "' lie outside its full shape ",
                shape_str(p.full_shape), " (", full, " elements)");
    if (n == 0) continue;
    for (const Ref& r : it->second) {
      const TensorFileEntry& e = *r.entry;
      if (e.elem_offset >= p.offset + n) break;  // sorted by first element
      if (e.elem_offset + e.numel() <= p.offset) continue;
      Job& job = jobs[{r.file, e.offset}];
      job.ref = r;
      job.pieces.push_back(i);
    }
  }
  for (auto& [key, job] : jobs) {
    const TensorFileEntry& e = *job.ref.entry;
    const TensorFileReader& file = *files_[job.ref.file];
    const size_t esize = dtype_size(e.dtype);
    const int64_t eb = e.elem_offset, ee = eb + e.numel();
    // A piece that holds the whole entry takes it straight from the file; the others copy from it.
    auto holder = std::find_if(job.pieces.begin(), job.pieces.end(), [&](size_t i) {
      return pieces[i].offset <= eb && ee <= pieces[i].offset + pieces[i].data.numel();
    });
    if (holder != job.pieces.end()) {
      TensorPiece& h = pieces[*holder];
      char* at = static_cast<char*>(h.data.raw()) + size_t(eb - h.offset) * esize;
      file.read_entry(e, at);
      for (size_t i : job.pieces)
        if (i != *holder) copy_overlap(at, eb, e.numel(), pieces[i], esize);
    } else {
      file.stream_entry(e, [&](int64_t first, const char* bytes, int64_t count) {
        for (size_t i : job.pieces) copy_overlap(bytes, eb + first, count, pieces[i], esize);
      });
    }
  }
}

}  // namespace titan

#include "data/parquet.h"

#include <fcntl.h>
#include <snappy-c.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "util/strings.h"

namespace titan::data::parquet {

namespace {

// Bounds on what one column chunk may decode to, so that a few bytes claiming billions of values
// are refused instead of allocated: level entries per page and per chunk, and value bytes.
constexpr int64_t kMaxPageEntries = int64_t(1) << 26;
constexpr size_t kMaxChunkEntries = size_t(1) << 28;
uint64_t g_max_chunk_bytes = uint64_t(1) << 31;

class FileSource final : public Source {
 public:
  explicit FileSource(const std::string& path) : Source(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0)
      if (const char* why = not_a_file_reason(st.st_mode)) fail(path, ": ", why);
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TITAN_CHECK(fd_ >= 0, path, ": cannot open for reading: ", std::strerror(errno));
    TITAN_CHECK(::fstat(fd_, &st) == 0, path, ": cannot stat: ", std::strerror(errno));
    size_ = uint64_t(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  std::string read(uint64_t off, size_t n) const override {
    TITAN_CHECK(off <= size_ && n <= size_ - off, name_, ": a read of ", n, " bytes at ", off, " past the end (",
                size_, " bytes; truncated?)");
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, out.data() + got, n - got, off_t(off + got));
      if (r < 0 && errno == EINTR) continue;
      TITAN_CHECK(r > 0, name_, ": read error: ", r < 0 ? std::strerror(errno) : "unexpected end of file");
      got += size_t(r);
    }
    return out;
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource final : public Source {
 public:
  MemorySource(std::string bytes, std::string name) : Source(std::move(name)), b_(std::move(bytes)) {}
  uint64_t size() const override { return b_.size(); }
  std::string read(uint64_t off, size_t n) const override {
    TITAN_CHECK(off <= b_.size() && n <= b_.size() - off, name_, ": a read of ", n, " bytes at ", off,
                " past the end (", b_.size(), " bytes; truncated?)");
    return b_.substr(size_t(off), n);
  }

 private:
  std::string b_;
};

uint32_t le32(const char* p) {
  return uint32_t(uint8_t(p[0])) | uint32_t(uint8_t(p[1])) << 8 | uint32_t(uint8_t(p[2])) << 16 |
         uint32_t(uint8_t(p[3])) << 24;
}

int bit_width(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) ++w;
  return w;
}

std::string join_path(const std::vector<std::string>& p) {
  std::string s;
  for (auto& x : p) s += (s.empty() ? "" : ".") + x;
  return s;
}

// The schema tree, depth first, into leaves with their levels.
void walk_schema(const std::vector<SchemaElement>& s, size_t& at, int depth, std::vector<std::string>& path, int def,
                 int rep, int def_rep, std::vector<Leaf>& out, const std::string& origin) {
  TITAN_CHECK(at < s.size(), origin, ": the schema's child counts exceed its elements (malformed footer)");
  TITAN_CHECK(depth < 64, origin, ": the schema nests deeper than 64");
  const SchemaElement& e = s[at++];
  if (e.repetition == kOptional) ++def;
  if (e.repetition == kRepeated) ++def, ++rep, def_rep = def;
  path.push_back(e.name);
  if (e.num_children == 0) {
    Leaf l;
    l.index = out.size();
    l.path = path;
    l.type = e.type;
    l.max_def = def, l.max_rep = rep, l.def_at_repeated = def_rep;
    out.push_back(std::move(l));
  } else {
    for (int32_t c = 0; c < e.num_children; ++c) walk_schema(s, at, depth + 1, path, def, rep, def_rep, out, origin);
  }
  path.pop_back();
}

// The RLE / bit-packed hybrid: `count` values of `width` bits, each at most `max`.
template <class T>
void decode_hybrid(std::string_view in, int width, size_t count, uint32_t max, std::vector<T>& out,
                   const std::string& origin, const char* what) {
  TITAN_CHECK(width >= 0 && width <= 32, origin, ": ", what, " bit width ", width, " is above 32");
  size_t p = 0;
  const size_t start = out.size();
  const size_t byte_width = size_t(width + 7) / 8;
  auto check = [&](uint64_t v) {
    TITAN_CHECK(v <= max, origin, ": ", what, " value ", v, " is above its maximum ", max);
  };
  while (out.size() - start < count) {
    uint64_t h = 0;
    for (int shift = 0;; shift += 7) {
      TITAN_CHECK(p < in.size(), origin, ": ", what, " end after ", out.size() - start, " of ", count, " values");
      TITAN_CHECK(shift < 35, origin, ": ", what, ": a run header longer than 5 bytes");
      const uint8_t c = uint8_t(in[p++]);
      h |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) break;
    }
    const size_t left = count - (out.size() - start);
    if (h & 1) {  // bit-packed groups of 8
      const uint64_t groups = h >> 1;
      TITAN_CHECK(groups * uint64_t(width) <= in.size() - p, origin, ": ", what, ": a bit-packed run past the end");
      const size_t n = size_t(std::min<uint64_t>(groups * 8, left));
      const uint8_t* b = reinterpret_cast<const uint8_t*>(in.data() + p);
      for (size_t i = 0; i < n; ++i) {
        uint64_t v = 0;
        const size_t bit = i * size_t(width);
        for (int k = 0; k < width; ++k) v |= uint64_t((b[(bit + size_t(k)) >> 3] >> ((bit + size_t(k)) & 7)) & 1) << k;
        check(v);
        out.push_back(T(v));
      }
      p += size_t(groups * uint64_t(width));
    } else {  // a run of one value
      const uint64_t run = h >> 1;
      TITAN_CHECK(byte_width <= in.size() - p, origin, ": ", what, ": an RLE run past the end");
      uint64_t v = 0;
      for (size_t k = 0; k < byte_width; ++k) v |= uint64_t(uint8_t(in[p + k])) << (8 * k);
      p += byte_width;
      check(v);
      out.insert(out.end(), size_t(std::min<uint64_t>(run, left)), T(v));
    }
  }
}

std::string decompress(int32_t codec, std::string_view in, size_t out_size, const std::string& origin) {
  if (codec == kUncompressed) {
    TITAN_CHECK(in.size() == out_size, origin, ": an uncompressed page of ", in.size(), " bytes claims ", out_size);
    return std::string(in);
  }
  TITAN_CHECK(out_size <= in.size() * 4096 + (size_t(1) << 20) && out_size <= (size_t(1) << 30), origin,
              ": a page claims ", out_size, " bytes from ", in.size(), " compressed (damaged header?)");
  std::string out(out_size, '\0');
  if (codec == kSnappy) {
    size_t n = 0;
    TITAN_CHECK(snappy_uncompressed_length(in.data(), in.size(), &n) == SNAPPY_OK && n == out_size, origin,
                ": a SNAPPY page that is damaged or not of its stated size");
    TITAN_CHECK(snappy_uncompress(in.data(), in.size(), out.data(), &n) == SNAPPY_OK && n == out_size, origin,
                ": a damaged SNAPPY page");
  } else if (codec == kZstd) {
    const size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
    TITAN_CHECK(!ZSTD_isError(n), origin, ": a damaged ZSTD page (", ZSTD_getErrorName(n), ")");
    TITAN_CHECK(n == out_size, origin, ": a ZSTD page of ", n, " bytes, stated ", out_size);
  } else if (codec == kGzip) {
    z_stream z{};
    TITAN_CHECK(inflateInit2(&z, 15 + 32) == Z_OK, origin, ": zlib init failed");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = uInt(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    const int r = inflate(&z, Z_FINISH);
    const size_t n = z.total_out;
    const std::string msg = z.msg ? z.msg : "";
    inflateEnd(&z);
    TITAN_CHECK(r == Z_STREAM_END && n == out_size, origin, ": a damaged GZIP page",
                msg.empty() ? std::string() : " (" + msg + ")");
  } else {
    fail(origin, ": pages compressed with ", codec_name(codec),
         " are not supported (UNCOMPRESSED, SNAPPY, GZIP and ZSTD are); rewrite the file with one of those");
  }
  return out;
}

// PLAIN byte arrays: n values of a 4-byte length and the bytes.
void plain_byte_arrays(std::string_view in, size_t n, LeafData& d, const std::string& origin) {
  size_t p = 0;
  for (size_t i = 0; i < n; ++i) {
    TITAN_CHECK(in.size() - p >= 4, origin, ": PLAIN values end after ", i, " of ", n);
    const uint32_t len = le32(in.data() + p);
    p += 4;
    TITAN_CHECK(len <= in.size() - p, origin, ": a PLAIN value of ", len, " bytes past the end of its page");
    TITAN_CHECK(d.bytes.size() + len <= g_max_chunk_bytes, origin, ": decodes to more than ", g_max_chunk_bytes,
                " bytes");
    d.bytes.append(in.data() + p, len);
    d.offsets.push_back(d.bytes.size());
    p += len;
  }
}

}  // namespace

void set_max_chunk_bytes(uint64_t n) { g_max_chunk_bytes = n; }

std::unique_ptr<Source> file_source(const std::string& path) { return std::make_unique<FileSource>(path); }
std::unique_ptr<Source> memory_source(std::string bytes, std::string name) {
  return std::make_unique<MemorySource>(std::move(bytes), std::move(name));
}

File::File(std::unique_ptr<Source> src) : src_(std::move(src)) {
  const std::string& n = src_->name();
  const uint64_t size = src_->size();
  TITAN_CHECK(size >= 12, n, ": not a Parquet file (", size, " bytes, too short for its magic and footer)");
  TITAN_CHECK(src_->read(0, 4) == "PAR1", n, ": not a Parquet file (no PAR1 magic at its start)");
  const std::string tail = src_->read(size - 8, 8);
  TITAN_CHECK(tail.compare(4, 4, "PAR1") == 0, n,
              ": truncated Parquet file or footer (no PAR1 magic at its end; was the copy cut short?)");
  const uint32_t len = le32(tail.data());
  TITAN_CHECK(len <= size - 12, n, ": truncated Parquet footer (", len, " bytes stated, ", size - 12, " in the file)");
  meta_ = parse_file_metadata(src_->read(size - 8 - len, len), n);
  size_t at = 0;
  const SchemaElement& root = meta_.schema[0];
  at = 1;
  std::vector<std::string> path;
  for (int32_t c = 0; c < root.num_children; ++c) walk_schema(meta_.schema, at, 0, path, 0, 0, 0, leaves_, n);
  TITAN_CHECK(at == meta_.schema.size(), n, ": the schema has ", meta_.schema.size() - at,
              " elements outside its tree (malformed footer)");
  int64_t rows = 0;
  for (const RowGroup& g : meta_.row_groups) {
    TITAN_CHECK(g.num_rows <= INT64_MAX - rows, n, ": row counts overflow");
    rows += g.num_rows;
  }
  TITAN_CHECK(rows == meta_.num_rows, n, ": the row groups hold ", rows, " rows, the footer says ", meta_.num_rows);
}

std::string File::top_level_names() const {
  std::string s;
  std::string last;
  for (const Leaf& l : leaves_) {
    if (l.path[0] == last) continue;
    last = l.path[0];
    s += (s.empty() ? "" : ", ") + last;
  }
  return s.empty() ? "none" : s;
}

LeafData File::read_leaf(size_t g, const Leaf& leaf) const {
  TITAN_CHECK(g < meta_.row_groups.size(), name(), ": no row group ", g);
  const RowGroup& rg = meta_.row_groups[g];
  const std::string origin = name() + ": row group " + std::to_string(g) + ", column '" + join_path(leaf.path) + "'";
  TITAN_CHECK(leaf.index < rg.columns.size(), origin, ": the row group has no chunk for it (", rg.columns.size(),
              " columns, the schema has ", leaves_.size(), ")");
  const ColumnChunk& c = rg.columns[leaf.index];
  TITAN_CHECK(!c.has_file_path, origin, ": the data lives in another file (file_path), which is not supported");
  TITAN_CHECK(c.path == leaf.path && c.type == leaf.type, origin, ": its chunk is for '", join_path(c.path),
              "' of type ", type_name(c.type), " (malformed footer)");
  int64_t start = c.data_page_offset;
  if (c.dictionary_page_offset > 0 && c.dictionary_page_offset < start) start = c.dictionary_page_offset;
  const uint64_t size = src_->size();
  TITAN_CHECK(start >= 4 && uint64_t(start) < size && uint64_t(c.total_compressed_size) <= size - uint64_t(start),
              origin, ": its chunk (", c.total_compressed_size, " bytes at ", start, ") lies outside the file (",
              size, " bytes; truncated?)");
  TITAN_CHECK(uint64_t(c.num_values) <= kMaxChunkEntries, origin, ": ", c.num_values, " values in one chunk, above ",
              kMaxChunkEntries);
  const std::string chunk = src_->read(uint64_t(start), size_t(c.total_compressed_size));
  LeafData d;
  LeafData dict_data;
  bool has_dict = false;
  size_t pos = 0;
  const int dw = bit_width(leaf.max_def), rw = bit_width(leaf.max_rep);
  while (d.entries < size_t(c.num_values)) {
    TITAN_CHECK(pos < chunk.size(), origin, ": its pages end after ", d.entries, " of ", c.num_values, " values");
    const PageHeader h = parse_page_header(std::string_view(chunk).substr(pos), origin + " (page header)");
    pos += h.header_bytes;
    TITAN_CHECK(size_t(h.compressed_size) <= chunk.size() - pos, origin, ": a page of ", h.compressed_size,
                " bytes past the end of its chunk");
    const std::string_view page = std::string_view(chunk).substr(pos, size_t(h.compressed_size));
    pos += size_t(h.compressed_size);
    if (h.type == kIndexPage) continue;
    if (h.type == kDictionaryPage) {
      TITAN_CHECK(!has_dict && d.entries == 0, origin, ": a second dictionary page, or one after data pages");
      TITAN_CHECK(h.encoding == kPlain || h.encoding == kPlainDictionary, origin, ": a dictionary page in encoding ",
                  h.encoding, " (PLAIN expected)");
      const std::string raw = decompress(c.codec, page, size_t(h.uncompressed_size), origin);
      plain_byte_arrays(raw, size_t(h.num_values), dict_data, origin + " (dictionary)");
      has_dict = true;
      continue;
    }
    TITAN_CHECK(h.type == kDataPage || h.type == kDataPageV2, origin, ": a page of unknown type ", h.type);
    TITAN_CHECK(h.num_values <= kMaxPageEntries && d.entries + size_t(h.num_values) <= size_t(c.num_values), origin,
                ": a page of ", h.num_values, " values exceeds its chunk's ", c.num_values);
    const size_t n = size_t(h.num_values);
    std::string raw;           // decompressed part of the page
    std::string_view levels;  // v2: the uncompressed levels
    std::string_view values;
    if (h.type == kDataPage) {
      raw = decompress(c.codec, page, size_t(h.uncompressed_size), origin);
      std::string_view rest = raw;
      auto v1_levels = [&](int width, int max, std::vector<uint8_t>& out, int32_t enc, const char* what) {
        TITAN_CHECK(enc == kRle, origin, ": ", what, " in encoding ", enc, " (only RLE is supported)");
        TITAN_CHECK(rest.size() >= 4, origin, ": ", what, " length past the end of the page");
        const uint32_t len = le32(rest.data());
        TITAN_CHECK(len <= rest.size() - 4, origin, ": ", what, " of ", len, " bytes past the end of the page");
        decode_hybrid(rest.substr(4, len), width, n, uint32_t(max), out, origin, what);
        rest = rest.substr(4 + len);
      };
      if (leaf.max_rep > 0) v1_levels(rw, leaf.max_rep, d.rep, h.rep_encoding, "repetition levels");
      if (leaf.max_def > 0) v1_levels(dw, leaf.max_def, d.def, h.def_encoding, "definition levels");
      values = rest;
    } else {
      TITAN_CHECK(size_t(h.rep_bytes) + size_t(h.def_bytes) <= page.size() &&
                      size_t(h.rep_bytes) + size_t(h.def_bytes) <= size_t(h.uncompressed_size),
                  origin, ": v2 page levels larger than the page");
      levels = page.substr(0, size_t(h.rep_bytes) + size_t(h.def_bytes));
      if (leaf.max_rep > 0) decode_hybrid(levels.substr(0, size_t(h.rep_bytes)), rw, n, uint32_t(leaf.max_rep), d.rep, origin, "repetition levels");
      if (leaf.max_def > 0) decode_hybrid(levels.substr(size_t(h.rep_bytes)), dw, n, uint32_t(leaf.max_def), d.def, origin, "definition levels");
      const std::string_view body = page.substr(levels.size());
      const size_t body_size = size_t(h.uncompressed_size) - levels.size();
      raw = h.v2_compressed ? decompress(c.codec, body, body_size, origin) : decompress(kUncompressed, body, body_size, origin);
      values = raw;
    }
    size_t present = n;
    if (leaf.max_def > 0)
      present = size_t(std::count(d.def.end() - std::ptrdiff_t(n), d.def.end(), uint8_t(leaf.max_def)));
    if (h.encoding == kPlain) {
      plain_byte_arrays(values, present, d, origin);
    } else if (h.encoding == kPlainDictionary || h.encoding == kRleDictionary) {
      TITAN_CHECK(has_dict, origin, ": dictionary-encoded values without a dictionary page");
      TITAN_CHECK(!values.empty() || present == 0, origin, ": dictionary indices missing");
      std::vector<uint32_t> idx;
      if (present > 0) {
        const uint32_t max = dict_data.values() ? uint32_t(dict_data.values() - 1) : 0;
        TITAN_CHECK(dict_data.values() > 0, origin, ": dictionary indices into an empty dictionary");
        decode_hybrid(values.substr(1), int(uint8_t(values[0])), present, max, idx, origin, "dictionary indices");
      }
      for (uint32_t i : idx) {
        const uint64_t b = dict_data.offsets[i], e = dict_data.offsets[i + 1];
        TITAN_CHECK(d.bytes.size() + (e - b) <= g_max_chunk_bytes, origin, ": decodes to more than ",
                    g_max_chunk_bytes, " bytes");
        d.bytes.append(dict_data.bytes, size_t(b), size_t(e - b));
        d.offsets.push_back(d.bytes.size());
      }
    } else {
      fail(origin, ": values in encoding ", h.encoding,
           " are not supported (PLAIN and dictionary encodings are; pyarrow writes those by default)");
    }
    d.entries += n;
  }
  return d;
}

}  // namespace titan::data::parquet

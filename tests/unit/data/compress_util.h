// gzip and zstd encoders for the data tests (the readers under test only decode).
#pragma once
#include <zlib.h>
#include <zstd.h>

#include <fstream>
#include <stdexcept>
#include <string>

namespace titan::test {

// One gzip member holding `s`.
inline std::string gzip_member(const std::string& s) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&z, uLong(s.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = uInt(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// One zstd frame holding `s`, with the content checksum the zstd tool writes by default.
inline std::string zstd_frame(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
  const size_t n = ZSTD_compress2(c, out.data(), out.size(), s.data(), s.size());
  ZSTD_freeCCtx(c);
  if (ZSTD_isError(n)) throw std::runtime_error("ZSTD_compress2");
  out.resize(n);
  return out;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace titan::test

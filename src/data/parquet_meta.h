// Parquet metadata as the reader of data/parquet.h needs it: the footer's FileMetaData (schema,
// row groups, column chunks) and page headers, decoded from the Thrift compact protocol
// (data/thrift_compact.h). Fields not listed are skipped. Field ids are parquet.thrift's.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data::parquet {

enum PhysicalType : int32_t { kBoolean = 0, kInt32 = 1, kInt64 = 2, kInt96 = 3, kFloat = 4, kDouble = 5,
                              kByteArray = 6, kFixedLenByteArray = 7 };
enum Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum Codec : int32_t { kUncompressed = 0, kSnappy = 1, kGzip = 2, kLzo = 3, kBrotli = 4, kLz4 = 5, kZstd = 6,
                       kLz4Raw = 7 };
enum Encoding : int32_t { kPlain = 0, kPlainDictionary = 2, kRle = 3, kBitPacked = 4, kDeltaBinaryPacked = 5,
                          kDeltaLengthByteArray = 6, kDeltaByteArray = 7, kRleDictionary = 8, kByteStreamSplit = 9 };
enum PageType : int32_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };
constexpr int32_t kConvertedUtf8 = 0;

const char* type_name(int32_t physical_type);
const char* codec_name(int32_t codec);

struct SchemaElement {
  int32_t type = -1;  // -1: a group
  int32_t repetition = kRequired;
  std::string name;
  int32_t num_children = 0;
  int32_t converted_type = -1;
  bool logical_string = false;  // LogicalType STRING
};

struct ColumnChunk {
  int32_t type = -1;
  std::vector<std::string> path;
  int32_t codec = kUncompressed;
  int64_t num_values = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = -1;
  int64_t dictionary_page_offset = -1;  // -1: none
  bool has_file_path = false;          // the data lives in another file (unsupported)
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t num_rows = 0;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
};

struct PageHeader {
  int32_t type = -1;
  int32_t uncompressed_size = 0, compressed_size = 0;
  // Data pages (v1 and v2) and dictionary pages.
  int32_t num_values = 0, encoding = 0;
  int32_t def_encoding = kRle, rep_encoding = kRle;  // v1
  int32_t num_rows = 0, def_bytes = 0, rep_bytes = 0;  // v2
  bool v2_compressed = true;
  size_t header_bytes = 0;  // of the header itself
};

// Errors (titan::Error) name `origin` and what is wrong.
FileMetaData parse_file_metadata(std::string_view bytes, const std::string& origin);
PageHeader parse_page_header(std::string_view bytes, const std::string& origin);

}  // namespace titan::data::parquet

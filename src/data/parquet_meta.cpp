#include "data/parquet_meta.h"

#include "core/error.h"
#include "data/thrift_compact.h"

namespace titan::data::parquet {

namespace {

using thrift::Reader;

// Calls fn(id, type) for every field of the struct that starts at r's position; fn must consume
// the field's value (or skip it).
template <class Fn>
void for_fields(Reader& r, Fn fn) {
  r.begin_struct();
  int16_t id = 0;
  uint8_t t = 0;
  while (r.next_field(&id, &t)) fn(id, t);
  r.end_struct();
}

// A struct-valued field.
void expect_struct(Reader& r, uint8_t t) {
  if (t != thrift::kStruct) r.fail_here("expected a struct, found type " + std::to_string(t));
}

template <class Fn>
void for_list_of_structs(Reader& r, uint8_t t, Fn fn) {
  uint8_t et = 0;
  const uint32_t n = r.read_list(t, &et);
  if (et != thrift::kStruct) r.fail_here("expected a list of structs");
  for (uint32_t i = 0; i < n; ++i) fn();
}

SchemaElement schema_element(Reader& r) {
  SchemaElement e;
  bool named = false;
  for_fields(r, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: e.type = r.read_i32(t); break;
      case 3: e.repetition = r.read_i32(t); break;
      case 4: e.name = std::string(r.read_binary(t)), named = true; break;
      case 5: e.num_children = r.read_i32(t); break;
      case 6: e.converted_type = r.read_i32(t); break;
      case 10:  // LogicalType, a union: field 1 is STRING
        expect_struct(r, t);
        for_fields(r, [&](int16_t lid, uint8_t lt) {
          if (lid == 1) e.logical_string = true;
          r.skip(lt);
        });
        break;
      default: r.skip(t);
    }
  });
  if (!named) r.fail_here("a schema element without a name");
  if (e.num_children < 0) r.fail_here("a negative child count");
  if (e.repetition < kRequired || e.repetition > kRepeated) r.fail_here("an unknown repetition type");
  return e;
}

ColumnChunk column_meta(Reader& r, ColumnChunk c) {
  bool typed = false;
  for_fields(r, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: c.type = r.read_i32(t), typed = true; break;
      case 3: {
        uint8_t et = 0;
        const uint32_t n = r.read_list(t, &et);
        if (et != thrift::kBinary) r.fail_here("path_in_schema is not a list of strings");
        for (uint32_t i = 0; i < n; ++i) c.path.emplace_back(r.read_elem_binary());
        break;
      }
      case 4: c.codec = r.read_i32(t); break;
      case 5: c.num_values = r.read_int(t); break;
      case 7: c.total_compressed_size = r.read_int(t); break;
      case 9: c.data_page_offset = r.read_int(t); break;
      case 11: c.dictionary_page_offset = r.read_int(t); break;
      default: r.skip(t);
    }
  });
  if (!typed || c.path.empty() || c.data_page_offset < 0 || c.num_values < 0 || c.total_compressed_size < 0)
    r.fail_here("column metadata without a type, path, data page offset or sizes");
  return c;
}

ColumnChunk column_chunk(Reader& r) {
  ColumnChunk c;
  bool has_meta = false;
  for_fields(r, [&](int16_t id, uint8_t t) {
    if (id == 1) {
      (void)r.read_binary(t);
      c.has_file_path = true;
    } else if (id == 3) {
      expect_struct(r, t);
      c = column_meta(r, c);
      has_meta = true;
    } else {
      r.skip(t);
    }
  });
  if (!has_meta) r.fail_here("a column chunk without metadata");
  return c;
}

RowGroup row_group(Reader& r) {
  RowGroup g;
  for_fields(r, [&](int16_t id, uint8_t t) {
    if (id == 1) {
      for_list_of_structs(r, t, [&] { g.columns.push_back(column_chunk(r)); });
    } else if (id == 3) {
      g.num_rows = r.read_int(t);
    } else {
      r.skip(t);
    }
  });
  if (g.num_rows < 0) r.fail_here("a row group with a negative row count");
  return g;
}

}  // namespace

const char* type_name(int32_t t) {
  static const char* names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY",
                                "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? names[t] : t == -1 ? "a group" : "an unknown type";
}

const char* codec_name(int32_t c) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return c >= 0 && c < 8 ? names[c] : "an unknown codec";
}

FileMetaData parse_file_metadata(std::string_view bytes, const std::string& origin) {
  Reader r(bytes, origin + " (footer)");
  FileMetaData m;
  bool has_schema = false;
  for_fields(r, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 2: for_list_of_structs(r, t, [&] { m.schema.push_back(schema_element(r)); }), has_schema = true; break;
      case 3: m.num_rows = r.read_int(t); break;
      case 4: for_list_of_structs(r, t, [&] { m.row_groups.push_back(row_group(r)); }); break;
      default: r.skip(t);
    }
  });
  if (!has_schema || m.schema.empty()) r.fail_here("no schema");
  return m;
}

PageHeader parse_page_header(std::string_view bytes, const std::string& origin) {
  Reader r(bytes, origin);
  PageHeader h;
  bool has_type = false;
  int sizes = 0;
  for_fields(r, [&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: h.type = r.read_i32(t), has_type = true; break;
      case 2: h.uncompressed_size = r.read_i32(t), ++sizes; break;
      case 3: h.compressed_size = r.read_i32(t), ++sizes; break;
      case 5:  // DataPageHeader
        expect_struct(r, t);
        for_fields(r, [&](int16_t f, uint8_t ft) {
          switch (f) {
            case 1: h.num_values = r.read_i32(ft); break;
            case 2: h.encoding = r.read_i32(ft); break;
            case 3: h.def_encoding = r.read_i32(ft); break;
            case 4: h.rep_encoding = r.read_i32(ft); break;
            default: r.skip(ft);
          }
        });
        break;
      case 7:  // DictionaryPageHeader
        expect_struct(r, t);
        for_fields(r, [&](int16_t f, uint8_t ft) {
          switch (f) {
            case 1: h.num_values = r.read_i32(ft); break;
            case 2: h.encoding = r.read_i32(ft); break;
            default: r.skip(ft);
          }
        });
        break;
      case 8:  // DataPageHeaderV2
        expect_struct(r, t);
        for_fields(r, [&](int16_t f, uint8_t ft) {
          switch (f) {
            case 1: h.num_values = r.read_i32(ft); break;
            case 3: h.num_rows = r.read_i32(ft); break;
            case 4: h.encoding = r.read_i32(ft); break;
            case 5: h.def_bytes = r.read_i32(ft); break;
            case 6: h.rep_bytes = r.read_i32(ft); break;
            case 7: h.v2_compressed = r.read_bool(ft); break;
            default: r.skip(ft);
          }
        });
        break;
      default: r.skip(t);
    }
  });
  if (!has_type || sizes != 2) r.fail_here("a page header without a type or sizes");
  if (h.uncompressed_size < 0 || h.compressed_size < 0 || h.num_values < 0 || h.def_bytes < 0 || h.rep_bytes < 0)
    r.fail_here("a page header with a negative size or count");
  h.header_bytes = r.pos();
  return h;
}

}  // namespace titan::data::parquet

// A reader of the Thrift compact protocol (the encoding of Parquet's footer and page headers),
// strict and bounded: every length is checked against the bytes left, nesting is limited, and a
// malformed input is a titan::Error naming `origin` and the byte offset. Only what Parquet's
// metadata uses: structs, lists, binaries, booleans and zigzag varints; sets and maps are skipped.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data::thrift {

enum Type : uint8_t {
  kStop = 0, kTrue = 1, kFalse = 2, kByte = 3, kI16 = 4, kI32 = 5, kI64 = 6, kDouble = 7,
  kBinary = 8, kList = 9, kSet = 10, kMap = 11, kStruct = 12
};

class Reader {
 public:
  Reader(std::string_view bytes, std::string origin) : b_(bytes), origin_(std::move(origin)) {}

  // Field headers of the struct being read: false at its STOP. Call begin_struct() before the
  // first field and end_struct() after the STOP, around every nested struct.
  bool next_field(int16_t* id, uint8_t* type);
  void begin_struct();
  void end_struct();

  bool read_bool(uint8_t type);  // a bool field's value is its type
  int64_t read_int(uint8_t type);  // i8/i16/i32/i64 fields
  int32_t read_i32(uint8_t type);  // an i32 field, range-checked
  std::string_view read_binary(uint8_t type);
  // A list header: element count (checked against the bytes left) and element type.
  uint32_t read_list(uint8_t type, uint8_t* elem_type);
  int64_t read_elem_int(uint8_t elem_type) { return read_varint_value(elem_type); }
  std::string_view read_elem_binary() { return binary(); }
  void skip(uint8_t type);  // any value of that type

  size_t pos() const { return p_; }
  [[noreturn]] void fail_here(const std::string& why) const;

 private:
  uint64_t varint();
  int64_t zigzag() {
    const uint64_t v = varint();
    return int64_t(v >> 1) ^ -int64_t(v & 1);
  }
  int64_t read_varint_value(uint8_t type);
  std::string_view binary();
  uint8_t byte();
  void skip_depth(uint8_t type, int depth);

  std::string_view b_;
  std::string origin_;
  size_t p_ = 0;
  int16_t last_id_ = 0;
  int16_t stack_[64] = {};
  int depth_ = 0;
};

}  // namespace titan::data::thrift

#include "data/thrift_compact.h"

#include "core/error.h"

namespace titan::data::thrift {

void Reader::fail_here(const std::string& why) const {
  fail(origin_, ": malformed Thrift metadata at byte ", p_, ": ", why);
}

uint8_t Reader::byte() {
  if (p_ >= b_.size()) fail_here("ends early");
  return static_cast<uint8_t>(b_[p_++]);
}

uint64_t Reader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t c = byte();
    v |= uint64_t(c & 0x7f) << shift;
    if (!(c & 0x80)) return v;
  }
  fail_here("a varint longer than 10 bytes");
}

void Reader::begin_struct() {
  if (depth_ >= 64) fail_here("structs nested deeper than 64");
  stack_[depth_++] = last_id_;
  last_id_ = 0;
}

void Reader::end_struct() {
  if (depth_ <= 0) fail_here("end of a struct that was not begun");
  last_id_ = stack_[--depth_];
}

bool Reader::next_field(int16_t* id, uint8_t* type) {
  const uint8_t h = byte();
  *type = h & 0x0f;
  if (*type == kStop) return false;
  if (*type > kStruct) fail_here("unknown field type " + std::to_string(*type));
  const int delta = h >> 4;
  if (delta) {
    *id = int16_t(last_id_ + delta);
  } else {
    const int64_t v = zigzag();
    if (v < INT16_MIN || v > INT16_MAX) fail_here("field id out of range");
    *id = int16_t(v);
  }
  last_id_ = *id;
  return true;
}

int64_t Reader::read_varint_value(uint8_t type) {
  switch (type) {
    case kByte: return int8_t(byte());
    case kI16:
    case kI32:
    case kI64: return zigzag();
    default: fail_here("expected an integer, found type " + std::to_string(type));
  }
}

bool Reader::read_bool(uint8_t type) {
  if (type != kTrue && type != kFalse) fail_here("expected a bool, found type " + std::to_string(type));
  return type == kTrue;
}

int64_t Reader::read_int(uint8_t type) { return read_varint_value(type); }

int32_t Reader::read_i32(uint8_t type) {
  const int64_t v = read_varint_value(type);
  if (v < INT32_MIN || v > INT32_MAX) fail_here("an i32 out of range");
  return int32_t(v);
}

std::string_view Reader::binary() {
  const uint64_t n = varint();
  if (n > b_.size() - p_) fail_here("a string of " + std::to_string(n) + " bytes past the end");
  std::string_view s = b_.substr(p_, size_t(n));
  p_ += size_t(n);
  return s;
}

std::string_view Reader::read_binary(uint8_t type) {
  if (type != kBinary) fail_here("expected a string, found type " + std::to_string(type));
  return binary();
}

uint32_t Reader::read_list(uint8_t type, uint8_t* elem_type) {
  if (type != kList && type != kSet) fail_here("expected a list, found type " + std::to_string(type));
  const uint8_t h = byte();
  *elem_type = h & 0x0f;
  uint64_t n = h >> 4;
  if (n == 15) n = varint();
  // Every element takes at least one byte (bools too, in a list).
  if (n > b_.size() - p_) fail_here("a list of " + std::to_string(n) + " elements past the end");
  if (*elem_type == kStop || *elem_type > kStruct) fail_here("unknown list element type");
  return uint32_t(n);
}

void Reader::skip(uint8_t type) { skip_depth(type, 0); }

void Reader::skip_depth(uint8_t type, int depth) {
  if (depth > 64) fail_here("values nested deeper than 64");
  switch (type) {
    case kTrue:
    case kFalse: return;
    case kByte: (void)byte(); return;
    case kI16:
    case kI32:
    case kI64: (void)varint(); return;
    case kDouble:
      if (b_.size() - p_ < 8) fail_here("ends inside a double");
      p_ += 8;
      return;
    case kBinary: (void)binary(); return;
    case kList:
    case kSet: {
      uint8_t et = 0;
      const uint32_t n = read_list(type, &et);
      for (uint32_t i = 0; i < n; ++i) {
        if (et == kTrue || et == kFalse) (void)byte();  // a bool element is a byte
        else skip_depth(et, depth + 1);
      }
      return;
    }
    case kMap: {
      const uint64_t n = varint();
      if (n == 0) return;
      if (n > b_.size() - p_) fail_here("a map past the end");
      const uint8_t kv = byte();
      for (uint64_t i = 0; i < n; ++i) {
        for (uint8_t t : {uint8_t(kv >> 4), uint8_t(kv & 0x0f)}) {
          if (t == kTrue || t == kFalse) (void)byte();
          else skip_depth(t, depth + 1);
        }
      }
      return;
    }
    case kStruct: {
      begin_struct();
      int16_t id = 0;
      uint8_t t = 0;
      while (next_field(&id, &t)) skip_depth(t, depth + 1);
      end_struct();
      return;
    }
    default: fail_here("unknown type " + std::to_string(type));
  }
}

}  // namespace titan::data::thrift

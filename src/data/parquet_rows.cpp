// ColumnRows (data/parquet.h): a string column or a list<struct<role, content>> column, a row
// group at a time, assembled from the leaves' levels.
#include <algorithm>

#include "core/error.h"
#include "data/parquet.h"
#include "data/utf8.h"

namespace titan::data::parquet {

namespace {

std::string join_path(const std::vector<std::string>& p) {
  std::string s;
  for (auto& x : p) s += (s.empty() ? "" : ".") + x;
  return s;
}

bool valid_text(std::string_view s, std::string* why, const char* what) {
  if (is_valid_utf8(s)) return true;
  *why = std::string(what) + " is not valid UTF-8";
  return false;
}

}  // namespace

ColumnRows::ColumnRows(std::shared_ptr<const File> file, const std::string& column, bool chat)
    : file_(std::move(file)), chat_(chat) {
  const std::string& n = file_->name();
  std::vector<Leaf> under;
  for (const Leaf& l : file_->leaves())
    if (l.path[0] == column) under.push_back(l);
  TITAN_CHECK(!under.empty(), n, ": no column '", column, "' (columns: ", file_->top_level_names(),
              "); choose one with [training] dataset_column");
  if (!chat) {
    const Leaf& l = under[0];
    TITAN_CHECK(under.size() == 1 && l.path.size() == 1, n, ": column '", column,
                "' is a nested column, not a string column (a chat dataset? set [training] dataset_format = \"chat\")");
    TITAN_CHECK(l.type == kByteArray, n, ": column '", column, "' is of type ", type_name(l.type),
                ", not a string column (BYTE_ARRAY); choose the text column with [training] dataset_column");
    leaves_.push_back(l);
    return;
  }
  // role and content leaves below one repeated group: [column, (list,) element..., role].
  const Leaf* role = nullptr;
  const Leaf* content = nullptr;
  for (const Leaf& l : under) {
    if (l.path.size() < 3 || l.max_rep != 1) continue;
    if (l.path.back() == "role") role = &l;
    if (l.path.back() == "content") content = &l;
  }
  TITAN_CHECK(role && content, n, ": column '", column,
              "' is not a list of {role, content} structs (the chat messages form); its leaves are ", [&] {
                std::string s;
                for (const Leaf& l : under) s += (s.empty() ? "" : ", ") + join_path(l.path);
                return s;
              }());
  TITAN_CHECK(std::equal(role->path.begin(), role->path.end() - 1, content->path.begin(), content->path.end() - 1),
              n, ": column '", column, "': role and content are not fields of one struct");
  for (const Leaf* l : {role, content})
    TITAN_CHECK(l->type == kByteArray, n, ": ", join_path(l->path), " is of type ", type_name(l->type),
                ", not a string (BYTE_ARRAY)");
  leaves_ = {*role, *content};
}

void ColumnRows::load(size_t g) {
  const std::string origin = file_->name() + ": row group " + std::to_string(g);
  const int64_t rows = rows_in(g);
  data_.clear();
  for (const Leaf& l : leaves_) data_.push_back(file_->read_leaf(g, l));
  row_value_.clear(), row_entry_.clear(), role_value_.clear(), content_value_.clear();
  if (!chat_) {
    const Leaf& l = leaves_[0];
    const LeafData& d = data_[0];
    TITAN_CHECK(int64_t(d.entries) == rows, origin, ": column '", l.path[0], "' has ", d.entries, " values for ",
                rows, " rows");
    row_value_.resize(size_t(rows));
    int64_t v = 0;
    for (size_t i = 0; i < d.entries; ++i)
      row_value_[i] = (l.max_def == 0 || d.def[i] == l.max_def) ? v++ : -1;
    TITAN_CHECK(size_t(v) == d.values(), origin, ": ", d.values(), " values for ", v, " non-null rows");
    return;
  }
  const LeafData& r = data_[0];
  const LeafData& c = data_[1];
  TITAN_CHECK(r.entries == c.entries && r.rep == c.rep, origin, ": the role and content columns disagree on the lists");
  auto values_of = [&](const Leaf& l, const LeafData& d, std::vector<int64_t>& out) {
    out.resize(d.entries);
    int64_t v = 0;
    for (size_t i = 0; i < d.entries; ++i) out[i] = (l.max_def == 0 || d.def[i] == l.max_def) ? v++ : -1;
    TITAN_CHECK(size_t(v) == d.values(), origin, ": ", d.values(), " values for ", v, " non-null entries of ",
                join_path(l.path));
  };
  values_of(leaves_[0], r, role_value_);
  values_of(leaves_[1], c, content_value_);
  for (size_t i = 0; i < r.entries; ++i) {
    // Entries of one element agree on whether the element exists.
    const bool a = r.def[i] >= leaves_[0].def_at_repeated, b = c.def[i] >= leaves_[1].def_at_repeated;
    TITAN_CHECK(a == b, origin, ": the role and content columns disagree on the list elements");
    if (r.rep[i] == 0) row_entry_.push_back(int64_t(i));
  }
  TITAN_CHECK(r.entries == 0 || r.rep[0] == 0, origin, ": the first entry continues a list");
  TITAN_CHECK(int64_t(row_entry_.size()) == rows, origin, ": column '", leaves_[0].path[0], "' has ",
              row_entry_.size(), " lists for ", rows, " rows");
  row_entry_.push_back(int64_t(r.entries));
}

bool ColumnRows::text(int64_t i, std::string* out, std::string* why) const {
  const int64_t v = row_value_[size_t(i)];
  if (v < 0) {
    *why = "the text is null";
    return false;
  }
  const LeafData& d = data_[0];
  out->assign(d.bytes, size_t(d.offsets[size_t(v)]), size_t(d.offsets[size_t(v) + 1] - d.offsets[size_t(v)]));
  return valid_text(*out, why, "the text");
}

bool ColumnRows::messages(int64_t i, std::vector<ChatMessage>* out, std::string* why) const {
  out->clear();
  const LeafData& r = data_[0];
  const LeafData& c = data_[1];
  auto value = [](const LeafData& d, int64_t v) {
    return std::string(d.bytes, size_t(d.offsets[size_t(v)]), size_t(d.offsets[size_t(v) + 1] - d.offsets[size_t(v)]));
  };
  for (int64_t e = row_entry_[size_t(i)]; e < row_entry_[size_t(i) + 1]; ++e) {
    if (r.def[size_t(e)] < leaves_[0].def_at_repeated) continue;  // a null or empty list
    const int64_t rv = role_value_[size_t(e)], cv = content_value_[size_t(e)];
    const size_t k = out->size() + 1;
    if (rv < 0 || cv < 0) {
      *why = "message " + std::to_string(k) + (rv < 0 ? " has no role" : " has no content");
      return false;
    }
    ChatMessage m{value(r, rv), value(c, cv), std::nullopt};
    if (!valid_text(m.role, why, "a role") || !valid_text(m.content, why, "a message's content")) return false;
    out->push_back(std::move(m));
  }
  if (out->empty()) {
    *why = "no messages (a null or empty list)";
    return false;
  }
  return true;
}

}  // namespace titan::data::parquet

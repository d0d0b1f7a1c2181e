// TensorBoard event files written natively: TFRecord framing around hand-encoded Event protobufs.
//
// Record:  uint64 length (little endian) | uint32 masked_crc32c(length bytes) | data[length] |
//          uint32 masked_crc32c(data)
// Event (tensorflow/core/util/event.proto):  1: double wall_time (fixed64)   2: int64 step (varint)
//          3: string file_version ("brain.Event:2", first record only)   5: Summary summary
//          7: SessionLog session_log {1: status (enum: START = 1)}
// Summary: repeated Value value = 1;  Value: 1: string tag   2: float simple_value (fixed32)
// TensorBoard's EventAccumulator reads simple_value summaries as scalars (checked with
// tools/tb_read.py). The reader below re-parses the same subset, verifying every CRC.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace titan {

class TensorBoardWriter {
 public:
  // Creates `folder` (and parents) and a new events.out.tfevents.<time>.<host>.<pid> file in it.
  explicit TensorBoardWriter(const std::string& folder);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event holding all the (tag, value) pairs of a step; flushed to the OS right away so a
  // killed run keeps its curves. wall_time < 0: now.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                   double wall_time = -1);
  void add_scalar(const std::string& tag, double value, int64_t step) { add_scalars(step, {{tag, value}}); }
  // SessionLog START at the first step a run logs. TensorBoard's reader takes a START after the
  // first one in a log folder as a restart and discards the events of that step and later ones
  // written before it: the steps a stopped run logged after its last checkpoint.
  void add_session_start(int64_t step, double wall_time = -1);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* f_ = nullptr;
};

// ---- reading back (tests, tools) ----

// Every record's payload; error naming the file on a bad length/data CRC or a truncated record.
std::vector<std::string> read_tfrecords(const std::string& path);

struct TbScalar {
  int64_t step;
  double wall_time;
  std::string tag;
  float value;
};
struct TbEvents {
  std::string file_version;  // from the first event
  std::vector<TbScalar> scalars;
};
// Decode the Event/Summary subset written above; error naming the file on malformed protobuf.
TbEvents read_tb_events(const std::string& path);

}  // namespace titan

// TensorBoard event files (report/tensorboard.h). The records, after TensorFlow's
// tensorflow/core/util/event.proto and summary.proto:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// and TFRecord's framing (tensorflow/core/lib/io/record_writer.cc).
#include "report/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "base/error.h"
#include "report/metric_keys.h"
#include "report/metrics.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;

// ---- CRC-32C ----

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}

// ---- Protobuf wire format ----

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as the host (event files are LE)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);  // length-delimited
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event(double wall_time, int64_t step) {
  std::string e;
  put_varint(e, 1 << 3 | 1);  // wall_time: fixed64
  put_fixed(e, wall_time);
  put_varint(e, 2 << 3 | 0);  // step: varint
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [key, v] : j.items()) {
    const std::string tag = prefix.empty() ? key : prefix + "/" + key;
    if (prefix.empty() && key == metric_key::kStep) continue;
    if (v.is_object()) flatten(v, tag, out);
    else if (v.is_number() && std::isfinite(v.get<double>())) out.emplace_back(tag, v.get<double>());
  }
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::vector<std::pair<std::string, double>> metrics_scalars(const nlohmann::json& record) {
  std::vector<std::pair<std::string, double>> out;
  if (record.is_object()) flatten(record, "", out);
  return out;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) user_error("{}: cannot create the TensorBoard directory ({})", dir, ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const double t = now_seconds();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}.bcdtrain", dir, static_cast<int64_t>(t), host, ::getpid());
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) user_error("{}: cannot open for writing", path_);
  std::string e = event(t, 0);
  put_bytes(e, 3, "brain.Event:2");  // file_version: what TensorBoard's reader expects first
  write_record(e);
}

void EventFileWriter::write_record(const std::string& data) {
  std::string rec;
  const uint64_t len = data.size();
  put_fixed(rec, len);
  put_fixed(rec, masked_crc32c(&len, sizeof(len)));
  rec += data;
  put_fixed(rec, masked_crc32c(data.data(), data.size()));
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  out_.flush();
  if (!out_) user_error("{}: write failed (disk full?)", path_);
}

void EventFileWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                  double wall_time) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_varint(value, 2 << 3 | 5);  // simple_value: fixed32 float
    put_fixed(value, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  std::string e = event(wall_time < 0 ? now_seconds() : wall_time, step);
  put_bytes(e, 5, summary);
  write_record(e);
  ++events_;
}

EventFileWriter open_tensorboard(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "tensorboard";
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  // Every record read first: an unreadable one stops here, before anything is written.
  const std::vector<MetricsLine> records = read_metrics_lines(metrics, "repair or delete that line (nothing was written)");
  std::error_code ec;
  std::vector<fs::path> old;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("events.out.tfevents.", 0) == 0 && name.size() > 9 &&
          name.compare(name.size() - 9, 9, ".bcdtrain") == 0)
        old.push_back(e.path());
    }
  EventFileWriter w(dir.string());
  const double t = now_seconds();
  try {
    for (const MetricsLine& l : records) w.add_scalars(l.step, metrics_scalars(l.record), t);
  } catch (...) {  // a full disk: the old files stay whole, the new one goes
    fs::remove(w.path(), ec);
    throw;
  }
  // The new file holds all that the old ones did (metrics.jsonl is the record): they go, so that
  // TensorBoard, which merges a directory's files, sees each step once.
  for (const fs::path& p : old)
    if (p != fs::path(w.path())) fs::remove(p, ec);
  return w;
}

}  // namespace bcd

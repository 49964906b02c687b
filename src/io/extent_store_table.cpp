// The extent store's table on disk (P0/extents.meta): written atomically by sync(), loaded by
// open_existing. JSON, with an XXH3-64 of its own content so a damaged table is refused, not used.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io/extent_store.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"

namespace bcd {

namespace {

constexpr const char* kFormat = "bcdtrain-extent-store";
constexpr int kVersion = 1;

std::string meta_path(const std::string& dir) { return dir + "/extents.meta"; }

uint64_t content_sum(const nlohmann::json& j) {
  const std::string text = j.dump();
  return XXH3_64bits(text.data(), text.size());
}

}  // namespace

// The table as of now: objects whose write is in flight keep their last committed checksums.
std::string ExtentStore::table_json_locked() const {
  nlohmann::json objects = nlohmann::json::array();
  for (const auto& o : objects_) {
    nlohmann::json extents = nlohmann::json::array();
    for (const Extent& e : o->extents) extents.push_back({e.file, e.offset, e.length, fmt::format("{:016x}", e.checksum)});
    objects.push_back({{"name", o->name}, {"bytes", o->bytes}, {"written", o->written}, {"failed", o->failed},
                       {"extents", std::move(extents)}});
  }
  nlohmann::json j = {{"format", kFormat},        {"version", kVersion},    {"extent_bytes", opts_.extent_bytes},
                      {"files", file_paths_},     {"file_bytes", file_bytes_}, {"next_file", next_file_},
                      {"objects", std::move(objects)}};
  j["checksum"] = fmt::format("{:016x}", content_sum(j));
  return j.dump(1) + "\n";
}

void ExtentStore::sync() {
  std::string table;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return writes_in_flight_ == 0; });
    table = table_json_locked();
  }
  // Data first, then the table that vouches for it.
  for (size_t f = 0; f < files_.size(); ++f)
    if (::fdatasync(files_[f].fd.get()) != 0) user_error("extent store: sync {}: {}", file_paths_[f], errno_text(errno));
  const std::string path = meta_path(paths_[0]);
  write_file_atomic(path, table, "extent store table");
}

void ExtentStore::load_table() {
  const std::string path = meta_path(paths_[0]);
  try {
    nlohmann::json j = read_json_file(path, kJsonStoreTable, "extent store table");
    if (j.value("format", "") != kFormat || j.value("version", 0) != kVersion)
      user_error("extent store: {} is not a version-{} extent store table", path, kVersion);
    const std::string stored_sum = j.at("checksum").get<std::string>();
    j.erase("checksum");
    if (stored_sum != fmt::format("{:016x}", content_sum(j)))
      user_error("extent store: {} is damaged (its checksum does not match its content)", path);
    const auto files = j.at("files").get<std::vector<std::string>>();
    if (files.size() != paths_.size())
      user_error("extent store: {} describes a store over {} paths, {} given", path, files.size(), paths_.size());
    opts_.extent_bytes = j.at("extent_bytes").get<uint64_t>();
    if (opts_.extent_bytes < kIoAlign || !is_aligned(opts_.extent_bytes))
      user_error("extent store: {}: bad extent size {}", path, opts_.extent_bytes);
    file_bytes_ = j.at("file_bytes").get<std::vector<uint64_t>>();
    next_file_ = j.at("next_file").get<uint32_t>();
    if (file_bytes_.size() != files_.size()) user_error("extent store: {}: file_bytes has the wrong length", path);
    for (size_t f = 0; f < files_.size(); ++f) {
      struct stat st {};
      if (::fstat(files_[f].fd.get(), &st) != 0) user_error("extent store: stat {}: {}", file_paths_[f], errno_text(errno));
      if (static_cast<uint64_t>(st.st_size) < file_bytes_[f])
        user_error("extent store: {} holds {} bytes, but {} says {}: truncated or replaced?", file_paths_[f], st.st_size,
                   path, file_bytes_[f]);
    }
    for (const auto& jo : j.at("objects")) {
      auto obj = std::make_unique<Object>();
      obj->name = jo.at("name").get<std::string>();
      obj->bytes = jo.at("bytes").get<uint64_t>();
      obj->written = jo.at("written").get<bool>();
      obj->failed = jo.at("failed").get<std::string>();
      uint64_t covered = 0;
      for (const auto& je : jo.at("extents")) {
        Extent e{je.at(0).get<uint32_t>(), je.at(1).get<uint64_t>(), je.at(2).get<uint64_t>(),
                 std::stoull(je.at(3).get<std::string>(), nullptr, 16)};
        if (e.file >= files_.size() || !is_aligned(e.offset) || !is_aligned(e.length) ||
            e.offset + e.length > file_bytes_[e.file])
          user_error("extent store: {}: object '{}' has an extent outside its files", path, obj->name);
        covered += e.length;
        obj->extents.push_back(e);
      }
      // Extent k holds bytes [k * extent_bytes, ...): all full but the last, which is padded.
      const size_t n = obj->extents.size();
      const bool full = std::all_of(obj->extents.begin(), obj->extents.end() - (n > 0 ? 1 : 0),
                                    [&](const Extent& e) { return e.length == opts_.extent_bytes; });
      if (!full || covered != align_up(obj->bytes) || n != (obj->bytes + opts_.extent_bytes - 1) / opts_.extent_bytes)
        user_error("extent store: {}: the extents of '{}' do not cover its {} bytes", path, obj->name, obj->bytes);
      if (!by_name_.emplace(obj->name, static_cast<ObjectId>(objects_.size())).second)
        user_error("extent store: {}: object '{}' appears twice", path, obj->name);
      objects_.push_back(std::move(obj));
    }
  } catch (const nlohmann::json::exception& e) {
    user_error("extent store: {}: {}", path, e.what());
  } catch (const std::logic_error& e) {  // std::stoull on a malformed checksum
    user_error("extent store: {}: bad checksum field ({})", path, e.what());
  }
}

}  // namespace bcd

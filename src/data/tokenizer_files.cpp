// A tokenizer's files (tokenizer.json or tokenizer.model, and the Hugging Face configs that travel
// with it) and the special ids those configs give.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A config file beside the tokenizer, parsed; nullopt when there is none.
std::optional<json> read_config(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  json j = read_json_file(path.string(), kJsonMetadata, "tokenizer config", /*allow_exceptions=*/false);
  if (j.is_discarded()) user_error("{}: not valid JSON; expected the Hugging Face tokenizer file of that name", path.string());
  if (!j.is_object()) user_error("{}: a JSON {}; expected an object", path.string(), j.type_name());
  return j;
}

void copy_one(const fs::path& src, const fs::path& dst) {
  std::error_code ec;
  if (fs::exists(dst, ec) && fs::equivalent(src, dst, ec)) return;
  const std::string tmp = temporary_beside(dst.string());
  fs::copy_file(src, tmp, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    user_error("{}: cannot copy {} there ({})", dst.string(), src.string(), ec.message());
  }
  commit_temporary(tmp, dst.string(), "tokenizer file");
}

}  // namespace

const std::vector<std::string>& tokenizer_config_files() {
  static const std::vector<std::string> names = {"tokenizer_config.json", "special_tokens_map.json",
                                                 "generation_config.json", "chat_template.jinja"};
  return names;
}

std::string find_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (!fs::is_directory(path, ec)) return "";
  const std::vector<std::string> forms = tokenizer_forms_in(path);
  return forms.empty() ? "" : forms.front();
}

std::vector<std::string> tokenizer_forms_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* name : {kHfTokenizerFile, kSpmTokenizerFile})
    if (fs::is_regular_file(fs::path(dir) / name, ec)) out.push_back((fs::path(dir) / name).string());
  return out;
}

bool tokenizer_matches(const std::string& file, const std::string& dir) {
  // Sizes first: a file of another size is another tokenizer, and is never read.
  std::error_code ec;
  const uintmax_t size = fs::file_size(file, ec);
  std::optional<std::string> mine;
  for (const std::string& form : tokenizer_forms_in(dir)) {
    std::error_code ec2;
    if (!ec && fs::file_size(form, ec2) != size) continue;
    if (!mine) mine = read_file(file, "tokenizer");
    if (read_file(form, "tokenizer") == *mine) return true;
  }
  return false;
}

std::vector<std::string> copy_tokenizer_files(const std::string& main, const std::string& dir, bool both_forms) {
  const fs::path src(main);
  const fs::path from = src.has_parent_path() ? src.parent_path() : fs::path(".");
  std::vector<fs::path> files = {src};
  if (both_forms)
    for (const std::string& form : tokenizer_forms_in(from.string()))
      if (fs::path(form).filename() != src.filename()) files.emplace_back(form);
  std::error_code ec;
  for (const std::string& name : tokenizer_config_files())
    if (fs::is_regular_file(from / name, ec)) files.push_back(from / name);
  std::vector<std::string> written;
  for (const fs::path& f : files) {
    const fs::path dst = fs::path(dir) / f.filename();
    copy_one(f, dst);
    written.push_back(dst.string());
  }
  return written;
}

// Special ids, in the order transformers settles them: tokenizer_config.json's bos_token /
// eos_token / pad_token (a string or {"content": ...}; null: none), else special_tokens_map.json's,
// else generation_config.json's *_token_id, else what the tokenizer itself says (a SentencePiece
// model's ids; the tokens a tokenizer.json's post-processor puts around a text). EOS ids for
// generation: that EOS and every generation_config.json eos_token_id.
void Tokenizer::read_special_ids() {
  const fs::path p(path_);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const fs::path tc_path = dir / "tokenizer_config.json", map_path = dir / "special_tokens_map.json",
                 gen_path = dir / "generation_config.json";
  const std::optional<json> tc = read_config(tc_path), map = read_config(map_path), gen = read_config(gen_path);
  const int vocab = vocab_size();

  // What the tokenizer says without its configs.
  int own_bos = -1, own_eos = -1;
  if (sp_) {
    own_bos = model_bos(), own_eos = model_eos();
  } else {
    const std::vector<int> plain = encode("a"), special = encode_special("a");
    const auto at = std::search(special.begin(), special.end(), plain.begin(), plain.end());
    if (!plain.empty() && at != special.end()) {
      if (at - special.begin() == 1) own_bos = special.front();
      if (special.end() - (at + static_cast<std::ptrdiff_t>(plain.size())) == 1) own_eos = special.back();
    }
  }

  auto token_id = [&](const fs::path& file, const json& j, const char* key) -> std::optional<int> {
    auto it = j.find(key);
    if (it == j.end()) return std::nullopt;
    if (it->is_null()) return -1;
    const json* content = &*it;
    if (it->is_object() && it->contains("content")) content = &(*it)["content"];
    if (!content->is_string())
      user_error("{}: \"{}\" is a JSON {}; expected a token string, {{\"content\": string}} or null", file.string(), key,
                 content->type_name());
    const std::string piece = content->get<std::string>();
    const int id = hf_ ? hf_->id_of(piece) : sp_piece_id(piece);
    if (id < 0)
      user_error("{}: \"{}\" is \"{}\", which {} does not hold", file.string(), key, piece, path_);
    return id;
  };
  auto id_list = [&](const json& j, const char* key) -> std::optional<std::vector<int>> {
    auto it = j.find(key);
    if (it == j.end()) return std::nullopt;
    std::vector<int> ids;
    if (it->is_null()) return ids;
    const json list = it->is_array() ? *it : json::array({*it});
    for (const json& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
        user_error("{}: \"{}\" holds {}; expected token ids in [0, {}) (the vocabulary of {})", gen_path.string(), key,
                   v.dump(), vocab, path_);
      ids.push_back(v.get<int>());
    }
    return ids;
  };
  auto settle = [&](const char* token_key, const char* id_key, int own) {
    if (tc)
      if (std::optional<int> id = token_id(tc_path, *tc, token_key)) return *id;
    if (map)
      if (std::optional<int> id = token_id(map_path, *map, token_key)) return *id;
    if (gen)
      if (std::optional<std::vector<int>> ids = id_list(*gen, id_key)) return ids->empty() ? -1 : ids->front();
    return own;
  };
  bos_ = settle("bos_token", "bos_token_id", own_bos);
  eos_ = settle("eos_token", "eos_token_id", own_eos);
  pad_ = settle("pad_token", "pad_token_id", sp_ ? model_pad() : -1);
  eos_ids_.clear();
  if (eos_ >= 0) eos_ids_.push_back(eos_);
  if (gen)
    if (std::optional<std::vector<int>> ids = id_list(*gen, "eos_token_id"))
      for (int id : *ids)
        if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);

  // The chat template: chat_template.jinja (newer transformers), else tokenizer_config.json's
  // "chat_template" (a string, or a list of {"name", "template"} whose "default" counts).
  chat_template_.clear(), chat_template_file_.clear();
  std::error_code ec;
  if (const fs::path jinja = dir / "chat_template.jinja"; fs::is_regular_file(jinja, ec)) {
    chat_template_ = read_file(jinja.string(), "chat template");
    chat_template_file_ = jinja.string();
  } else if (tc && tc->contains("chat_template")) {
    const json& t = (*tc)["chat_template"];
    if (t.is_string()) chat_template_ = t.get<std::string>();
    if (t.is_array())
      for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          chat_template_ = e["template"].get<std::string>();
    if (!t.is_null() && chat_template_.empty())
      user_error("{}: \"chat_template\" is a JSON {}; expected a string or a list of {{\"name\", \"template\"}} with a "
                 "\"default\"",
                 tc_path.string(), t.type_name());
    chat_template_file_ = tc_path.string();
  }
}

}  // namespace bcd

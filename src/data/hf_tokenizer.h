// A Hugging Face tokenizer.json tokenizer, native: encodes and decodes exactly as the reference
// `tokenizers` library (Rust) does, for the components it implements (BPE models; the
// normalizers, pre-tokenizers, decoders and post-processors listed in hf_internal.h). A file
// using anything else is refused when loaded, with one error naming the component.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bcd {

namespace hf {
struct Impl;
}

class HfTokenizer {
 public:
  // An added token (tokenizer.json "added_tokens"), with the id the reference gives it.
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special, normalized, lstrip, rstrip, single_word;
  };

  // Parses `path` once; UserError naming the file and the component on anything missing,
  // malformed or not implemented. truncation and padding are ignored: they shape batches
  // (transformers also sets them per call), documents are encoded whole here.
  static HfTokenizer load(const std::string& path);

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  // Thread-safe (the object is immutable after load; the pre-token cache locks its shards).
  // The reference's encode(text, add_special_tokens).ids; added tokens in the text are matched
  // whatever `add_special` says, which only asks for the post-processor's tokens (BOS ...).
  // UserError when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  // The reference's decode(ids, skip_special_tokens). UserError on an id outside [0, vocab_size())
  // (the reference drops those silently); ids in range without a piece are dropped as it does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // One past the highest id of the model's vocabulary and the added tokens: the size an
  // embedding table needs (len(tokenizer) when ids are dense, as they are in shipped files).
  int32_t vocab_size() const;
  // The piece of `id` (an added token's content, normalized as the reference keeps it for
  // decoding), or "" with `found` false.
  std::string piece(int32_t id, bool* found = nullptr) const;
  int32_t id_of(std::string_view piece) const;  // added tokens first, then the model; -1 if none
  const std::vector<AddedToken>& added_tokens() const;
  const std::string& path() const;

 private:
  HfTokenizer();
  std::unique_ptr<hf::Impl> impl_;
};

}  // namespace bcd

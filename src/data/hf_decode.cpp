// Decoders of tokenizer.json (tokenizers/src/decoders, and ByteLevel, Metaspace, Replace where
// they live) and post-processors (tokenizers/src/processors): TemplateProcessing, ByteLevel,
// Sequence.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/hf_internal.h"

namespace bcd::hf {

using nlohmann::json;

namespace {

// u8::from_str_radix(&token[3..5], 16) of "<0xNN>": two hex digits, or '+' and one.
int byte_fallback_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t[3] == '+') return hex(t[4]);
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

// ---- Decoders ----

Decoder Decoder::from_json(const json& j, const Where& where, int depth) {
  const auto [type, w] = component_type(j, where, "a decoder");
  Decoder d;
  if (type == "ByteLevel") {
    Fields f(j, w, {"type", "add_prefix_space", "trim_offsets", "use_regex"});  // none changes decoding
    d.kind = Kind::kByteLevel;
  } else if (type == "Metaspace") {
    Fields f(j, w, {"type", "replacement", "add_prefix_space", "prepend_scheme", "split", "str_rep"});
    d.kind = Kind::kMetaspace;
    d.replacement = f.req_string("replacement");
    one_char(d.replacement, f, "replacement");
    const std::string scheme = f.get_string("prepend_scheme", "always");
    if (scheme != "first" && scheme != "never" && scheme != "always")
      f.fail(fmt::format("unknown prepend_scheme \"{}\" (expected first, never or always)", scheme));
    if (!f.get_bool("add_prefix_space", true) && scheme != "never")
      f.fail("add_prefix_space does not match declared prepend_scheme");
    d.prepend_never = scheme == "never";
    f.get_bool("split", true);
  } else if (type == "Replace") {
    Fields f(j, w, {"type", "pattern", "content"});
    d.kind = Kind::kReplace;
    d.pattern = Pattern::from_json(f.req("pattern"), w.at("pattern"));
    d.content = f.req_string("content");
  } else if (type == "ByteFallback" || type == "Fuse") {
    Fields f(j, w, {"type"});
    d.kind = type == "Fuse" ? Kind::kFuse : Kind::kByteFallback;
  } else if (type == "Strip") {
    Fields f(j, w, {"type", "content", "start", "stop"});
    d.kind = Kind::kStrip;
    d.content = f.req_string("content");
    d.strip_char = one_char(d.content, f, "content");
    d.strip_start = f.get_int("start", 0);
    d.strip_stop = f.get_int("stop", 0);
    if (d.strip_start < 0 || d.strip_stop < 0) f.fail("\"start\" and \"stop\" must not be negative");
  } else if (type == "Sequence") {
    Fields f(j, w, {"type", "decoders"});
    d.kind = Kind::kSequence;
    check_sequence_depth(f, depth);
    for (const auto& [part, at] : f.parts("decoders")) d.children.push_back(from_json(*part, at, depth + 1));
  } else {
    load_error(w, fmt::format("the decoder \"{}\" is not implemented (implemented: ByteLevel, Metaspace, Replace, "
                              "ByteFallback, Fuse, Strip, Sequence)",
                              type));
  }
  return d;
}

void Decoder::apply(std::vector<std::string>& tokens) const {
  switch (kind) {
    case Kind::kByteLevel: {
      // Every character back to its byte; a token holding a character outside the alphabet
      // (an added token) goes as it is. The whole is read as UTF-8, lossily.
      std::string bytes, mapped;
      for (const std::string& t : tokens) {
        mapped.clear();
        bool all = true;
        for (size_t i = 0; i < t.size() && all;) {
          const int b = char_to_byte(utf8_next(t, i));
          if (b < 0) all = false;
          else mapped += static_cast<char>(b);
        }
        bytes += all ? mapped : t;
      }
      tokens.assign(1, utf8_lossy(bytes));
      break;
    }
    case Kind::kMetaspace: {
      for (size_t k = 0; k < tokens.size(); ++k) {
        std::string out;
        const std::string& t = tokens[k];
        for (size_t pos = 0; pos < t.size();) {
          if (t.compare(pos, replacement.size(), replacement) == 0) {
            if (k != 0 || prepend_never) out += ' ';
            pos += replacement.size();
          } else {
            const size_t n = utf8_len(static_cast<unsigned char>(t[pos]));
            out.append(t, pos, n);
            pos += n;
          }
        }
        tokens[k].swap(out);
      }
      break;
    }
    case Kind::kReplace: {
      thread_local std::vector<Span> m;
      for (std::string& t : tokens) {
        pattern.find_matches(t, m);
        std::string out;
        for (const Span& s : m) {
          if (s.is_match) out += content;
          else out.append(t, s.start, s.end - s.start);
        }
        t.swap(out);
      }
      break;
    }
    case Kind::kByteFallback: {
      // Runs of <0xNN> pieces become their bytes when those are valid UTF-8, else one U+FFFD each.
      std::vector<std::string> out;
      std::string run;
      size_t run_count = 0;
      auto flush = [&] {
        if (run_count == 0) return;
        if (utf8_invalid_at(run) == std::string::npos) out.push_back(run);
        else
          for (size_t i = 0; i < run_count; ++i) out.emplace_back("\xEF\xBF\xBD");
        run.clear();
        run_count = 0;
      };
      for (std::string& t : tokens) {
        const int b = byte_fallback_value(t);
        if (b >= 0) {
          run += static_cast<char>(b);
          ++run_count;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      tokens.swap(out);
      break;
    }
    case Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, all);
      break;
    }
    case Kind::kStrip: {
      for (std::string& t : tokens) {
        std::vector<std::pair<size_t, uint32_t>> chars;  // (byte offset, code point)
        for (size_t i = 0; i < t.size();) {
          const size_t b = i;
          chars.emplace_back(b, utf8_next(t, i));
        }
        size_t start_cut = 0, stop_cut = chars.size();
        for (size_t i = 0; i < chars.size() && i < static_cast<size_t>(strip_start); ++i) {
          if (chars[i].second != strip_char) break;
          start_cut = i + 1;
        }
        for (size_t i = 0; i < static_cast<size_t>(strip_stop) && i < chars.size(); ++i) {
          const size_t index = chars.size() - i - 1;
          if (chars[index].second != strip_char) break;
          stop_cut = index;
        }
        if (start_cut >= stop_cut) {
          t.clear();
          continue;
        }
        const size_t b = chars[start_cut].first;
        const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
        t = t.substr(b, e - b);
      }
      break;
    }
    case Kind::kSequence:
      for (const Decoder& d : children) d.apply(tokens);
      break;
  }
}

// ---- Post-processors ----

PostProcessor PostProcessor::from_json(const json& j, const Where& where, int depth) {
  // not a structured binding: the lambdas below capture w (C++17 lets no lambda capture one;
  // gcc allows it, clang does not)
  const std::pair<std::string, Where> typed = component_type(j, where, "a post-processor");
  const std::string& type = typed.first;
  const Where& w = typed.second;
  PostProcessor p;
  if (type == "ByteLevel") {
    Fields f(j, w, {"type", "add_prefix_space", "trim_offsets", "use_regex"});  // offsets only
    p.kind = Kind::kByteLevel;
  } else if (type == "Sequence") {
    Fields f(j, w, {"type", "processors"});
    p.kind = Kind::kSequence;
    check_sequence_depth(f, depth);
    for (const auto& [part, at] : f.parts("processors")) p.children.push_back(from_json(*part, at, depth + 1));
  } else if (type == "TemplateProcessing") {
    // The pair template is read for its shape only: pairs are never encoded here.
    Fields f(j, w, {"type", "single", "pair", "special_tokens"});
    p.kind = Kind::kTemplate;
    const json& tokens = f.req("special_tokens");
    if (!tokens.is_object()) f.fail("\"special_tokens\" must be an object");
    auto piece_of = [&](const json& e, const Where& pw, bool single) -> Piece {
      if (!e.is_object() || e.size() != 1)
        load_error(pw, fmt::format("expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}, found {}", e.dump()));
      const std::string key = e.begin().key();
      Fields pf(*e.begin(), pw.at(key), {"id", "type_id"});
      const std::string id = pf.req_string("id");
      pf.get_int("type_id", 0);
      if (key == "Sequence") {
        if (id != "A" && id != "B") pf.fail(fmt::format("unknown sequence \"{}\" (expected A or B)", id));
        if (single && id != "A") pf.fail("the single template can only hold sequence A");
        return {true, {}};
      }
      if (key != "SpecialToken") load_error(pw, fmt::format("unknown template piece \"{}\"", key));
      auto it = tokens.find(id);
      if (it == tokens.end()) pf.fail(fmt::format("the special token \"{}\" is missing from special_tokens", id));
      Fields tf(*it, w.at("special_tokens").at(id), {"id", "ids", "tokens"});
      const json& ids = tf.req("ids");
      const json& toks = tf.req("tokens");
      if (!ids.is_array() || !toks.is_array() || ids.size() != toks.size())
        tf.fail("\"ids\" and \"tokens\" must be arrays of the same length");
      Piece piece{false, {}};
      for (const json& x : ids) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= INT32_MAX)
          tf.fail(fmt::format("bad id {}", x.dump()));
        piece.ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
      return piece;
    };
    for (const char* which : {"single", "pair"}) {
      const json& t = f.req(which);
      if (!t.is_array()) f.fail(fmt::format("\"{}\" must be an array of template pieces", which));
      for (size_t i = 0; i < t.size(); ++i) {
        Piece piece = piece_of(t[i], w.at(which).at(i), std::string(which) == "single");
        if (std::string(which) == "single") p.single.push_back(std::move(piece));
      }
    }
  } else {
    load_error(w, fmt::format("the post-processor \"{}\" is not implemented (implemented: TemplateProcessing, "
                              "ByteLevel, Sequence)",
                              type));
  }
  return p;
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  switch (kind) {
    case Kind::kByteLevel: break;
    case Kind::kTemplate: {
      std::vector<int32_t> out;
      out.reserve(ids.size() + 4);
      for (const Piece& piece : single) {
        if (piece.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
        else out.insert(out.end(), piece.ids.begin(), piece.ids.end());
      }
      ids.swap(out);
      break;
    }
    case Kind::kSequence:
      for (const PostProcessor& c : children) c.apply(ids);
      break;
  }
}

}  // namespace bcd::hf

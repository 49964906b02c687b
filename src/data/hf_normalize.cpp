// Normalizers of tokenizer.json (tokenizers/src/normalizers): Unicode forms and lowercasing
// through utf8proc, Strip, StripAccents, Prepend, Replace, ByteLevel and Sequence.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/hf_internal.h"

namespace bcd::hf {

using nlohmann::json;

Normalizer Normalizer::from_json(const json& j, const Where& where, int depth) {
  const auto [type, w] = component_type(j, where, "a normalizer");
  Normalizer n;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Lowercase" ||
      type == "StripAccents" || type == "ByteLevel") {
    Fields f(j, w, {"type"});
    n.kind = type == "NFC"         ? Kind::kNFC
             : type == "NFD"       ? Kind::kNFD
             : type == "NFKC"      ? Kind::kNFKC
             : type == "NFKD"      ? Kind::kNFKD
             : type == "Lowercase" ? Kind::kLowercase
             : type == "ByteLevel" ? Kind::kByteLevel
                                   : Kind::kStripAccents;
  } else if (type == "Strip") {
    Fields f(j, w, {"type", "strip_left", "strip_right"});
    n.kind = Kind::kStrip;
    n.strip_left = f.req_bool("strip_left");
    n.strip_right = f.req_bool("strip_right");
  } else if (type == "Prepend") {
    Fields f(j, w, {"type", "prepend"});
    n.kind = Kind::kPrepend;
    n.text = f.req_string("prepend");
  } else if (type == "Replace") {
    Fields f(j, w, {"type", "pattern", "content"});
    n.kind = Kind::kReplace;
    n.pattern = Pattern::from_json(f.req("pattern"), w.at("pattern"));
    n.text = f.req_string("content");
  } else if (type == "Sequence") {
    Fields f(j, w, {"type", "normalizers"});
    n.kind = Kind::kSequence;
    check_sequence_depth(f, depth);
    for (const auto& [part, at] : f.parts("normalizers")) n.children.push_back(from_json(*part, at, depth + 1));
  } else {
    load_error(w, fmt::format("the normalizer \"{}\" is not implemented (implemented: NFC, NFD, NFKC, NFKD, "
                              "Lowercase, Strip, StripAccents, Prepend, Replace, ByteLevel, Sequence)",
                              type));
  }
  return n;
}

void Normalizer::apply(std::string& s, bool& at_origin) const {
  switch (kind) {
    case Kind::kNFC: s = normalize_form(s, NormForm::kNFC); break;
    case Kind::kNFD: s = normalize_form(s, NormForm::kNFD); break;
    case Kind::kNFKC: s = normalize_form(s, NormForm::kNFKC); break;
    case Kind::kNFKD: s = normalize_form(s, NormForm::kNFKD); break;
    case Kind::kLowercase: {
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) append_lowercase(out, utf8_next(s, i));
      s.swap(out);
      break;
    }
    case Kind::kStrip: {
      size_t b = 0, e = s.size();
      if (strip_left) {
        for (size_t i = 0; i < e;) {
          if (!is_whitespace(utf8_next(s, i))) break;
          b = i;
        }
      }
      if (strip_right) {
        // Walk back over whole characters while they are whitespace.
        while (e > b) {
          size_t start = e - 1;
          while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
          size_t i = start;
          if (!is_whitespace(utf8_next(s, i))) break;
          e = start;
        }
      }
      if (b > 0) at_origin = false;
      s = s.substr(b, e - b);
      break;
    }
    case Kind::kStripAccents: {
      std::string out;
      out.reserve(s.size());
      bool first = true;
      for (size_t i = 0; i < s.size();) {
        const size_t b = i;
        const uint32_t c = utf8_next(s, i);
        if (is_mark(c)) {
          if (first) at_origin = false;
        } else {
          out.append(s, b, i - b);
        }
        first = false;
      }
      s.swap(out);
      break;
    }
    case Kind::kPrepend:
      if (!s.empty()) s.insert(0, text);
      break;
    case Kind::kReplace: {
      thread_local std::vector<Span> m;
      pattern.find_matches(s, m);
      std::string out;
      out.reserve(s.size());
      for (const Span& sp : m) {
        if (!sp.is_match) {
          out.append(s, sp.start, sp.end - sp.start);
          continue;
        }
        // A match at the start: the new characters take the alignment of the last one replaced
        // (normalizer.rs, replace), which is the text's first only when one character was.
        if (sp.start == 0 && sp.end > 0 && (text.empty() || utf8_count(std::string_view(s).substr(0, sp.end)) > 1))
          at_origin = false;
        out += text;
      }
      s.swap(out);
      break;
    }
    case Kind::kByteLevel: {
      const auto& map = byte_to_chars();
      std::string out;
      out.reserve(s.size() * 2);
      for (unsigned char c : s) out += map[c];
      s.swap(out);
      break;
    }
    case Kind::kSequence:
      for (const Normalizer& n : children) n.apply(s, at_origin);
      break;
  }
}

}  // namespace bcd::hf

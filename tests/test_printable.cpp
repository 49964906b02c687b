// Text shown on a terminal (base/printable.h): what a terminal would act on is written out,
// streamed pieces add up to the whole, and long lines lose their middle.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "base/printable.h"

namespace bcd {
namespace {

TEST(Printable, WritesOutWhatATerminalActsOn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plain ascii, ünïcödé, 日本語\n\tand tabs", "plain ascii, ünïcödé, 日本語\n\tand tabs"},
      {"\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"},
      {"bell\x07 nul", "bell\\x07 nul"},
      {"cr\rdel\x7f", "cr\\rdel\\x7f"},
      {"c1 csi \xc2\x9b" "2J", "c1 csi \\u009b2J"},
      {"bidi \xe2\x80\xae" "evil", "bidi \\u202eevil"},
      {"bad \xff\xfe", "bad \\xff\\xfe"},
      {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},
      {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
      {"cut \xe6\x97", "cut \\xe6\\x97"},
      {"back\\slash", "back\\slash"},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(printable(in), want) << printable_line(in);
    EXPECT_EQ(printable(printable(in)), printable(in)) << "twice changes nothing: " << printable_line(in);
  }
  EXPECT_EQ(printable_line("a\nb\tc"), "a\\nb\\tc");
  EXPECT_EQ(printable_line("\x1b"), "\\x1b");
}

TEST(Printable, StreamedPiecesAddUpToTheWhole) {
  const std::string text = "ab\xe6\x97\xa5\xe6\x9c\xac \xff\x1b[1m\xf0\x9f\x98\x80 end \xe6\x97";
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("ab\xe6\x97"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xe6\x97\xa5"), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab\xff"), 3u);
  // Fed a byte at a time, a stream shows whole characters; escaped piece by piece it reads as
  // the whole text escaped at once.
  std::string held, shown;
  for (char c : text) {
    held += c;
    const size_t n = utf8_complete_prefix(held);
    shown += printable(held.substr(0, n));
    held.erase(0, n);
  }
  shown += printable(held);
  EXPECT_EQ(shown, printable(text));
}

TEST(Printable, LongLinesLoseTheirMiddle) {
  const std::string line = std::string(600, 'a') + "\xe6\x97\xa5" + std::string(600, 'b');
  const std::string cut = shorten_line(line, 200);
  EXPECT_LE(cut.size(), 200u);
  EXPECT_EQ(cut.substr(0, 10), std::string(10, 'a'));
  EXPECT_EQ(cut.substr(cut.size() - 10), std::string(10, 'b'));
  EXPECT_NE(cut.find("bytes ...]"), std::string::npos) << cut;
  EXPECT_EQ(shorten_line("short", 200), "short");
  const std::string wide = std::string(10, 'a') + std::string(300, '\xc3') ;  // not UTF-8: kept whole bytes
  EXPECT_LE(shorten_line(printable(wide), 100).size(), 100u);
}

}  // namespace
}  // namespace bcd

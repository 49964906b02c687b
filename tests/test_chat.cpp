// Tests of instruction data: JSONL record parsing and its errors, the chat templates against
// their exact layouts, and tokenization with response-only target masks (a real BPE model).
#include <gtest/gtest.h>

#include <algorithm>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/chat.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::TempDir;

constexpr const char* kFortunes = "/usr/share/games/fortunes/fortunes";  // fortunes-min

// ---- Fixtures ----

// Two turns with a system prompt: the record every template is checked on.
ChatRecord two_turns() {
  return {{{"system", "Be brief."},
           {"user", "Hi there"},
           {"assistant", "Hello! How can I help?"},
           {"user", "What is 2+2?"},
           {"assistant", "4"}}};
}

constexpr const char* kTwoTurnsJson =
    R"({"messages": [{"role": "system", "content": "Be brief."},)"
    R"( {"role": "user", "content": "Hi there"},)"
    R"( {"role": "assistant", "content": "Hello! How can I help?"},)"
    R"( {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]})";

using test::error_of;

ChatPiece text(std::string s, bool target) { return {ChatPiece::kText, std::move(s), target}; }
ChatPiece bos() { return {ChatPiece::kBos, "", false}; }
ChatPiece eos() { return {ChatPiece::kEos, "", true}; }

std::string show(const std::vector<ChatPiece>& pieces) {
  std::string out;
  for (const ChatPiece& p : pieces) {
    out += p.kind == ChatPiece::kBos ? "BOS" : p.kind == ChatPiece::kEos ? "EOS" : "";
    if (p.kind == ChatPiece::kText) out += testing::PrintToString(p.text);
    out += p.target ? " [target]\n" : "\n";
  }
  return out;
}

// ---- Templates: exact layouts ----

struct TemplateCase {
  ChatTemplate tmpl;
  std::vector<ChatPiece> pieces;         // render_chat(two_turns())
  std::string single_turn;               // render_chat_text of {user "Q", assistant "A"}
  std::vector<std::string> target_runs;  // decoded maximal runs of target tokens
};

std::vector<TemplateCase> template_cases() {
  return {
      {ChatTemplate::kPlain,
       {bos(),
        text("### System:\nBe brief.\n\n### Instruction:\nHi there\n\n### Response:\n", false),
        text("Hello! How can I help?", true), eos(),
        text("\n\n### Instruction:\nWhat is 2+2?\n\n### Response:\n", false), text("4", true),
        eos()},
       "<s>### Instruction:\nQ\n\n### Response:\nA</s>",
       {"Hello! How can I help?", "4"}},
      {ChatTemplate::kLlama2,
       {bos(), text("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST]", false),
        text(" Hello! How can I help? ", true), eos(), bos(),
        text("[INST] What is 2+2? [/INST]", false), text(" 4 ", true), eos()},
       "<s>[INST] Q [/INST] A </s>",
       {" Hello! How can I help? ", " 4 "}},
      {ChatTemplate::kLlama3,
       {bos(),
        text("<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
             "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
             false),
        text("Hello! How can I help?<|eot_id|>", true),
        text("<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
             false),
        text("4<|eot_id|>", true), eos()},
       "<s><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|></s>",
       {"Hello! How can I help?<|eot_id|>", "4<|eot_id|>"}},
      {ChatTemplate::kChatML,
       {bos(),
        text("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
             "<|im_start|>assistant\n",
             false),
        text("Hello! How can I help?<|im_end|>", true),
        text("\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", false),
        text("4<|im_end|>", true), text("\n", false), eos()},
       "<s><|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n</s>",
       {"Hello! How can I help?<|im_end|>", "4<|im_end|>", ""}},
  };
}

// gtest names a failing case by this, not by the bytes of the struct
void PrintTo(const TemplateCase& c, std::ostream* os) { *os << chat_template_name(c.tmpl); }

class ChatTemplates : public testing::TestWithParam<TemplateCase> {};

std::string case_name(const testing::TestParamInfo<TemplateCase>& info) {
  return chat_template_name(info.param.tmpl);
}

TEST_P(ChatTemplates, TwoTurnsWithSystemMatchTheFormatExactly) {
  const TemplateCase& c = GetParam();
  std::vector<ChatPiece> got = render_chat(two_turns(), c.tmpl);
  EXPECT_EQ(show(got), show(c.pieces));
  std::string joined;
  for (const ChatPiece& p : c.pieces) {
    joined += p.kind == ChatPiece::kBos ? "<s>" : p.kind == ChatPiece::kEos ? "</s>" : p.text;
  }
  EXPECT_EQ(render_chat_text(two_turns(), c.tmpl), joined);
}

TEST_P(ChatTemplates, SingleTurnWithoutSystem) {
  const TemplateCase& c = GetParam();
  ChatRecord r{{{"user", "Q"}, {"assistant", "A"}}};
  EXPECT_EQ(render_chat_text(r, c.tmpl), c.single_turn);
  std::vector<ChatPiece> pieces = render_chat(r, c.tmpl);
  ASSERT_FALSE(pieces.empty());
  EXPECT_EQ(pieces.back().kind, ChatPiece::kEos);
  EXPECT_TRUE(pieces.back().target);
  for (size_t i = 1; i < pieces.size(); ++i) {
    const ChatPiece &a = pieces[i - 1], &b = pieces[i];
    EXPECT_FALSE(a.kind == ChatPiece::kText && b.kind == ChatPiece::kText && a.target == b.target)
        << "adjacent text pieces " << i - 1 << " and " << i << " were not merged";
  }
}

INSTANTIATE_TEST_SUITE_P(Chat, ChatTemplates, testing::ValuesIn(template_cases()), case_name);

TEST(ChatTemplateNames, RoundTrip) {
  for (const TemplateCase& c : template_cases()) {
    EXPECT_EQ(chat_template_from_name(chat_template_name(c.tmpl)), c.tmpl);
  }
}

TEST(ChatTemplateNames, UnknownNameListsTheKnownOnes) {
  std::string e = error_of([] { chat_template_from_name("alpaca"); });
  for (const char* s : {"\"alpaca\"", "plain", "llama2", "llama3", "chatml"}) {
    EXPECT_NE(e.find(s), std::string::npos) << s << " missing from: " << e;
  }
}

// Meta's references strip each turn (Llama 2: the first turn after folding in the system
// prompt); ChatML and plain keep content verbatim.
TEST(ChatTemplates, LlamaFormatsStripContentOthersKeepIt) {
  ChatRecord r{{{"system", "\n S \n"}, {"user", "  Q\n"}, {"assistant", "\tA  "}}};
  EXPECT_EQ(render_chat_text(r, ChatTemplate::kLlama2),
            "<s>[INST] <<SYS>>\n\n S \n\n<</SYS>>\n\n  Q [/INST] A </s>");
  EXPECT_EQ(render_chat_text(r, ChatTemplate::kLlama3),
            "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|></s>");
  EXPECT_EQ(render_chat_text(r, ChatTemplate::kChatML),
            "<s><|im_start|>system\n\n S \n<|im_end|>\n<|im_start|>user\n  Q\n<|im_end|>\n"
            "<|im_start|>assistant\n\tA  <|im_end|>\n</s>");
  EXPECT_EQ(render_chat_text(r, ChatTemplate::kPlain),
            "<s>### System:\n\n S \n\n\n### Instruction:\n  Q\n\n\n### Response:\n\tA  </s>");
}

// ---- Records ----

TEST(ChatRecord, MessagesFormParsesInOrder) {
  ChatRecord r = parse_chat_record(kTwoTurnsJson, "f.jsonl", 1);
  ChatRecord want = two_turns();
  ASSERT_EQ(r.messages.size(), want.messages.size());
  for (size_t i = 0; i < r.messages.size(); ++i) {
    EXPECT_EQ(r.messages[i].role, want.messages[i].role) << i;
    EXPECT_EQ(r.messages[i].content, want.messages[i].content) << i;
  }
}

TEST(ChatRecord, PromptFormEqualsMessagesForm) {
  const std::pair<const char*, const char*> same[] = {
      {R"({"system": "Be brief.", "prompt": "Hi\nthere", "response": "Hello \u00e9", "id": 7})",
       R"({"messages": [{"role": "system", "content": "Be brief."},
           {"role": "user", "content": "Hi\nthere"},
           {"role": "assistant", "content": "Hello é", "weight": 1}], "source": "x"})"},
      {R"({"prompt": "Q", "response": "A"})",
       R"({"messages": [{"role": "user", "content": "Q"},)"
       R"( {"role": "assistant", "content": "A"}]})"},
      // a blank or null system prompt is no system prompt, in either form
      {R"({"system": " \n", "prompt": "Q", "response": "A"})",
       R"({"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "Q"},
           {"role": "assistant", "content": "A"}]})"},
      {R"({"system": null, "prompt": "Q", "response": "A"})",
       R"({"messages": [{"role": "user", "content": "Q"},)"
       R"( {"role": "assistant", "content": "A"}]})"},
  };
  for (const auto& [prompt_form, messages_form] : same) {
    ChatRecord a = parse_chat_record(prompt_form, "f.jsonl", 1);
    ChatRecord b = parse_chat_record(messages_form, "f.jsonl", 2);
    ASSERT_EQ(a.messages.size(), b.messages.size()) << prompt_form;
    for (size_t i = 0; i < a.messages.size(); ++i) {
      EXPECT_EQ(a.messages[i].role, b.messages[i].role) << prompt_form;
      EXPECT_EQ(a.messages[i].content, b.messages[i].content) << prompt_form;
    }
    for (const TemplateCase& c : template_cases()) {
      EXPECT_EQ(render_chat_text(a, c.tmpl), render_chat_text(b, c.tmpl)) << prompt_form;
    }
  }
  EXPECT_EQ(parse_chat_record(same[2].first, "f.jsonl", 1).messages.size(), 2u);
}

// One conversation in each form is one record: Alpaca's input joins its instruction after a
// newline and its history gives the earlier turns; ShareGPT's roles map to ours; LIMA's strings
// alternate from the user.
TEST(ChatRecord, EveryFormOfAConversationIsTheSameRecord) {
  const ChatRecord want{{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Add\n2+2"},
                         {"assistant", "4"}}};
  const char* forms[] = {
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Add\n2+2"},
          {"role": "assistant", "content": "4"}]})",
      R"({"instruction": "Add", "input": "2+2", "output": "4", "system": "Be brief.", "history": [["Hi", "Hello"]]})",
      R"({"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
          {"from": "gpt", "value": "Hello"}, {"from": "user", "value": "Add\n2+2"}, {"from": "assistant", "value": "4"}]})",
      R"({"system": "Be brief.", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
          {"from": "human", "value": "Add\n2+2"}, {"from": "gpt", "value": "4"}]})",
      R"({"system": "Be brief.", "conversations": ["Hi", "Hello", "Add\n2+2", "4"]})",
  };
  for (const char* line : forms) {
    std::string compact = line;
    compact.erase(std::remove(compact.begin(), compact.end(), '\n'), compact.end());
    const ChatRecord r = parse_chat_record(compact, "f.jsonl", 1);
    ASSERT_EQ(r.messages.size(), want.messages.size()) << line;
    for (size_t i = 0; i < r.messages.size(); ++i) {
      EXPECT_EQ(r.messages[i].role, want.messages[i].role) << line;
      EXPECT_EQ(r.messages[i].content, want.messages[i].content) << line;
    }
  }
  // An empty or null input adds nothing; a single Alpaca turn is two messages.
  for (const char* line : {R"({"instruction": "Add 2+2", "input": "", "output": "4"})",
                           R"({"instruction": "Add 2+2", "input": null, "output": "4"})",
                           R"({"instruction": "Add 2+2", "output": "4"})"}) {
    const ChatRecord r = parse_chat_record(line, "f.jsonl", 1);
    ASSERT_EQ(r.messages.size(), 2u) << line;
    EXPECT_EQ(r.messages[0].content, "Add 2+2") << line;
  }
  // A file's form: set by its first valid record, another refused naming both; bcdtrain's own
  // two forms may share a file.
  FileForm form;
  parse_chat_record(R"({"instruction": "a", "output": "b"})", "f.jsonl", 3, &form);
  EXPECT_EQ(form.form, RecordForm::kAlpaca);
  EXPECT_EQ(form.line, 3);
  const std::string e = error_of([&] { parse_chat_record(R"({"conversations": ["a", "b"]})", "f.jsonl", 4, &form); });
  EXPECT_EQ(e.rfind("f.jsonl:4: ", 0), 0u) << e;
  EXPECT_NE(e.find("LIMA conversations form"), std::string::npos) << e;
  EXPECT_NE(e.find("Alpaca form (its first record, line 3)"), std::string::npos) << e;
  FileForm native;
  parse_chat_record(R"({"prompt": "a", "response": "b"})", "f.jsonl", 1, &native);
  EXPECT_NO_THROW(parse_chat_record(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})",
                                    "f.jsonl", 2, &native));
}

struct BadRecord {
  const char* line;
  const char* says;  // a part of the message after "FILE:LINE: "
};

TEST(ChatRecord, EveryErrorNamesFileAndLineAndWhatWasExpected) {
  const BadRecord bad[] = {
      // not JSON
      {R"({"prompt": "a",)", "not valid JSON"},
      {R"(prompt: a)", "not valid JSON"},
      {"{\"prompt\": \"\xff\", \"response\": \"b\"}", "not valid JSON"},  // not UTF-8
      // not an object
      {R"(["a", "b"])", "the line is an array; expected a JSON object"},
      {R"("text")", "the line is a string; expected a JSON object"},
      {"null", "the line is null; expected a JSON object"},
      // missing keys
      {R"({"text": "a"})", "neither \"messages\" nor \"prompt\""},
      {R"({"prompt": "a"})", "has \"prompt\" but no \"response\""},
      {R"({"response": "a"})", "has \"response\" but no \"prompt\""},
      {R"({"messages": [{"role": "user"}, {"role": "assistant", "content": "b"}]})",
       "message 1 has no \"content\""},
      {R"({"messages": [{"content": "a"}, {"role": "assistant", "content": "b"}]})",
       "message 1 has no \"role\""},
      // both forms
      {R"({"prompt": "a", "response": "b", "messages": []})", "has \"messages\" and \"prompt\""},
      {R"({"system": "s", "messages": []})", "has \"messages\" and \"system\""},
      // wrong types
      {R"({"prompt": 1, "response": "b"})", "\"prompt\" is a number; expected a string"},
      {R"({"prompt": "a", "response": ["b"]})", "\"response\" is an array; expected a string"},
      {R"({"system": 3, "prompt": "a", "response": "b"})",
       "is a number; expected a string or null"},
      {R"({"prompt": null, "response": "b"})", "\"prompt\" is null; expected a string"},
      {R"({"messages": "hi"})", "\"messages\" is a string; expected an array"},
      {R"({"messages": {"role": "user"}})", "\"messages\" is an object; expected an array"},
      {R"({"messages": [["user", "a"]]})", "message 1 is an array; expected an object"},
      {R"({"messages": [{"role": "user", "content": {"text": "a"}}]})",
       "message 1 \"content\" is an object; expected a string"},
      {R"({"messages": [{"role": 2, "content": "a"}]})", "message 1 \"role\" is a number"},
      // roles
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]})",
       "message 2 has role \"bot\"; expected \"system\", \"user\" or \"assistant\""},
      {R"({"messages": [{"role": "User", "content": "a"}, {"role": "assistant", "content": "b"}]})",
       "message 1 has role \"User\""},
      // order
      {R"({"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]})",
       "message 1 has role \"assistant\"; expected \"user\""},
      {R"({"messages": [{"role": "system", "content": "s"},)"
       R"( {"role": "assistant", "content": "a"}]})",
       "message 2 has role \"assistant\"; expected \"user\""},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})",
       "message 2 has role \"user\"; expected \"assistant\""},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"},
           {"role": "assistant", "content": "b"}]})",
       "message 2 has role \"system\"; expected a system message only first"},
      // the last message is the assistant's
      {R"({"messages": [{"role": "user", "content": "a"}]})", "last message (user)"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
           {"role": "user", "content": "c"}]})",
       "last message (user) is not the assistant's"},
      {R"({"messages": [{"role": "system", "content": "s"}]})", "last message (system)"},
      {R"({"messages": [{"role": "system", "content": " "}]})", "last message (system)"},
      // empty
      {R"({"messages": []})", "\"messages\" is empty"},
      {R"({"prompt": "", "response": "b"})", "\"prompt\" (user) has empty content"},
      {R"({"prompt": "a", "response": " \n\t"})", "\"response\" (assistant) has whitespace-only"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}]})",
       "message 2 (assistant) has empty content"},
      // Alpaca
      {R"({"instruction": "a"})", "has \"instruction\" but no \"output\""},
      {R"({"output": "a"})", "has \"output\" but no \"instruction\""},
      {R"({"instruction": "a", "input": 3, "output": "b"})", "\"input\" is a number"},
      {R"({"instruction": "a", "output": "b", "history": [["q"]]})", "\"history\"[0] is an array of 1"},
      {R"({"instruction": "a", "output": "b", "history": "q"})", "\"history\" is a string"},
      {R"({"instruction": "a", "output": "b", "history": [["q", 1]]})", "\"history\"[0][1] is a number"},
      {R"({"instruction": " ", "output": "b"})", "\"instruction\" (user) has whitespace-only content"},
      // ShareGPT
      {R"({"conversations": [{"from": "human", "value": "a"}, {"from": "function_call", "value": "call f"}]})",
       "is from \"function_call\": tool turns are not supported"},
      {R"({"conversations": [{"from": "human", "value": "a"}, {"from": "observation", "value": "x"}]})",
       "\"observation\": tool turns"},
      {R"({"conversations": [{"from": "bot", "value": "a"}]})", "\"conversations\"[0] is from \"bot\""},
      {R"({"conversations": [{"from": "human"}]})", "\"conversations\"[0] has no \"value\""},
      {R"({"conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "b"}]})",
       "\"conversations\"[0] has role \"assistant\"; expected \"user\""},
      {R"({"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}, {"from": "human", "value": "c"}]})",
       "last message (user)"},
      // LIMA
      {R"({"conversations": []})", "\"conversations\" is empty"},
      {R"({"conversations": "a"})", "\"conversations\" is a string"},
      {R"({"conversations": ["a"]})", "last message (user)"},
      {R"({"conversations": ["a", 2]})", "\"conversations\"[1] is a number"},
      // two forms in one record
      {R"({"instruction": "a", "output": "b", "conversations": ["a", "b"]})", "the Alpaca and LIMA conversations forms"},
  };
  for (const BadRecord& b : bad) {
    std::string e = error_of([&] { parse_chat_record(b.line, "data/chat.jsonl", 17); });
    EXPECT_EQ(e.rfind("data/chat.jsonl:17: ", 0), 0u) << b.line << "\n  gave: " << e;
    EXPECT_NE(e.find(b.says), std::string::npos) << b.line << "\n  gave: " << e;
    EXPECT_NE(e.find("expected"), std::string::npos) << b.line << "\n  gave: " << e;
  }
}

// ---- Files ----

TEST(ChatJsonl, ReadsRecordsSkipsBlankLinesAndCountsBadOnes) {
  TempDir tmp("bcd-chat");
  const std::string path = tmp.file("d.jsonl");
  const std::string lines[] = {
      kTwoTurnsJson,                               // 1
      "",                                          // 2 blank
      R"({"prompt": "Q", "response": ""})",        // 3 bad: empty response
      "  \t\r",                                    // 4 blank
      R"({"prompt": "Q", "response": "A"})" "\r",  // 5 CRLF line end
      "not json",                                  // 6 bad
  };
  std::string file;
  for (const std::string& l : lines) file += l + "\n";
  file += R"({"prompt": "Q2", "response": "A2"})";  // 7, no final newline
  test::write_text(path, file);
  int64_t n_bad = -1;
  std::vector<ChatRecord> recs = read_chat_jsonl(path, /*skip_bad=*/true, &n_bad);
  EXPECT_EQ(n_bad, 2);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].messages.size(), 5u);
  EXPECT_EQ(recs[1].messages.back().content, "A");
  EXPECT_EQ(recs[2].messages.back().content, "A2");

  // without skip_bad the first bad record stops the read, naming its line
  std::string e = error_of([&] { read_chat_jsonl(path, false, nullptr); });
  EXPECT_EQ(e.rfind(path + ":3: ", 0), 0u) << e;

  // a file of good records gives n_bad 0
  const std::string good = tmp.file("good.jsonl");
  test::write_text(good, std::string(R"({"prompt": "Q", "response": "A"})") + "\n");
  EXPECT_EQ(read_chat_jsonl(good, true, &n_bad).size(), 1u);
  EXPECT_EQ(n_bad, 0);
}

TEST(ChatJsonl, UnreadableFileIsAUserErrorNamingIt) {
  TempDir tmp("bcd-chat");
  for (const std::string& path : {tmp.file("missing.jsonl"), tmp.path()}) {
    int64_t n_bad = 0;
    std::string e = error_of([&] { read_chat_jsonl(path, true, &n_bad); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
}

// ---- Tokens ----

// A BPE model trained once per process on the fortunes and the rendered templates, so the
// markers are merged tokens and could straddle a prompt/response boundary if split badly.
const Tokenizer& tokenizer() {
  static TempDir tmp("bcd-chat-tok");
  static const Tokenizer tok = [] {
    std::vector<std::string> docs = {test::read_text(kFortunes)};
    for (const TemplateCase& c : template_cases()) {
      for (int i = 0; i < 20; ++i) docs.push_back(render_chat_text(two_turns(), c.tmpl));
    }
    Tokenizer::train_bpe(docs, 600, tmp.file("chat.model"));
    return Tokenizer::load(tmp.file("chat.model"));
  }();
  return tok;
}

// `ids` decoded as they read in the middle of a text: sentencepiece drops the leading "▁" of
// the first piece it decodes, so a piece of known text goes first and is cut off again.
std::string decode_mid(const Tokenizer& tok, const std::vector<int>& ids) {
  std::vector<int> all = tok.encode("x");
  const std::string head = tok.decode(all);
  all.insert(all.end(), ids.begin(), ids.end());
  std::string s = tok.decode(all);
  EXPECT_EQ(s.rfind(head, 0), 0u);
  return s.substr(head.size());
}

TEST_P(ChatTemplates, TargetTokensAreTheResponsesAndTheirEndMarkers) {
  const TemplateCase& c = GetParam();
  const Tokenizer& tok = tokenizer();
  ASSERT_GE(tok.bos_id(), 0);
  ASSERT_GE(tok.eos_id(), 0);
  const std::vector<ChatPiece> pieces = render_chat(two_turns(), c.tmpl);
  const MaskedTokens mt = tokenize_chat(pieces, tok);
  ASSERT_EQ(mt.ids.size(), mt.target.size());

  // BOS and EOS ids exactly where the pieces are; every EOS trained on, no BOS
  std::vector<int> specials, want_specials;
  for (size_t i = 0; i < mt.ids.size(); ++i) {
    if (mt.ids[i] == tok.bos_id()) {
      specials.push_back(tok.bos_id());
      EXPECT_EQ(mt.target[i], 0) << "BOS at " << i;
    }
    if (mt.ids[i] == tok.eos_id()) {
      specials.push_back(tok.eos_id());
      EXPECT_EQ(mt.target[i], 1) << "EOS at " << i;
    }
  }
  for (const ChatPiece& p : pieces) {
    if (p.kind == ChatPiece::kBos) want_specials.push_back(tok.bos_id());
    if (p.kind == ChatPiece::kEos) want_specials.push_back(tok.eos_id());
  }
  EXPECT_EQ(specials, want_specials);
  EXPECT_EQ(mt.ids.front(), tok.bos_id());
  EXPECT_EQ(mt.ids.back(), tok.eos_id());

  // each maximal run of target tokens decodes to one response plus its end marker
  std::vector<std::string> runs;
  for (size_t i = 0; i < mt.ids.size();) {
    size_t j = i;
    while (j < mt.ids.size() && mt.target[j] == mt.target[i]) ++j;
    if (mt.target[i]) runs.push_back(decode_mid(tok, {mt.ids.begin() + i, mt.ids.begin() + j}));
    i = j;
  }
  EXPECT_EQ(runs, c.target_runs);

  // the whole sequence decodes to the rendered text; text after a BOS (or at the start) is
  // encoded as a document is, with sentencepiece's dummy-prefix space
  std::string want;
  bool at_start = true;
  for (const ChatPiece& p : pieces) {
    if (p.kind == ChatPiece::kText) want += (at_start ? " " : "") + p.text;
    at_start = p.kind == ChatPiece::kBos;
  }
  EXPECT_EQ(decode_mid(tok, mt.ids), want);
}

TEST(ChatTokens, PlainTextPieceAfterBosIsEncodedAsADocument) {
  const Tokenizer& tok = tokenizer();
  const std::string s = "### Instruction:\nHi there";
  MaskedTokens mt = tokenize_chat({bos(), text(s, false), eos()}, tok);
  std::vector<int> want = {tok.bos_id()};
  for (int id : tok.encode(s)) want.push_back(id);
  want.push_back(tok.eos_id());
  EXPECT_EQ(mt.ids, want);
  std::vector<uint8_t> want_target(want.size(), 0);
  want_target.back() = 1;  // the EOS
  EXPECT_EQ(mt.target, want_target);
}

}  // namespace
}  // namespace bcd

// TensorBoard event files ([train] tensorboard, `bcdtrain plot --tensorboard`): read back by
// TensorBoard's own reader (tests/tensorboard_read.py), they hold every scalar of metrics.jsonl at
// its step, once, also across a resume that repeats steps a killed run had logged.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "report/tensorboard.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST(Tensorboard, Crc32cAndItsMaskAreTensorFlows) {
  const std::string check = "123456789";  // the CRC-32C check value (RFC 3720, B.4)
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const uint32_t c = crc32c(check.data(), check.size());
  EXPECT_EQ(masked_crc32c(check.data(), check.size()), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(Tensorboard, ScalarsAreEveryFiniteNumberButTheStep) {
  const json rec = {{"step", 7}, {"loss", 2.5}, {"block", "layer.0"}, {"mfu", nullptr}, {"ok", true},
                    {"state_bytes_by_block", {{"embed", 10}, {"layer.0", 20}}}};
  const auto s = metrics_scalars(rec);
  const std::map<std::string, double> got(s.begin(), s.end());
  EXPECT_EQ(got, (std::map<std::string, double>{
                     {"loss", 2.5}, {"state_bytes_by_block/embed", 10}, {"state_bytes_by_block/layer.0", 20}}));
}

// A run with tensorboard on, checkpointed at step 4 of 8, "killed" after step 8 had been logged
// (its last checkpoint removed) and resumed: the event files TensorBoard reads hold each
// metrics.jsonl record's scalars at its step, and no step twice. `plot --tensorboard` writes the
// same from metrics.jsonl alone.
TEST(Tensorboard, EventsHoldEveryScalarOfMetricsOnceAcrossAResume) {
  const std::string python = BCD_TEST_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python with tensorboard configured (scripts/setup.sh sets BCD_TEST_PYTHON)";
  const test::RunResult v = test::run_shell(quote(python) + " -c 'import tensorboard'");
  if (v.exit_code != 0) GTEST_SKIP() << "tensorboard is not importable by " << python << ": " << v.output;
  test::TempDir tmp("bcd-tb");
  ASSERT_EQ(test::prepare_fortunes(tmp.file("data")).exit_code, 0);
  const std::string run = tmp.file("run");
  const std::string args = fmt::format(
      "train --quiet --config {} --data.path={} --train.run_dir={} --sample.prompts='[]' --train.steps=8"
      " --train.log_every=1 --train.val_every=4 --train.checkpoint_every=4 --train.tensorboard=true"
      " --model.d_model=32 --model.n_layers=2 --model.n_heads=2 --model.d_ff=64 --train.seq_len=32 --train.batch_size=2",
      test::source_path("configs/tiny.toml"), tmp.file("data"), run);
  auto r = test::run_bcdtrain(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::remove(run + "/checkpoints/step-00000008.h5");
  ASSERT_EQ(test::read_metrics(run + "/metrics.jsonl").size(), 8u);  // steps 5-8 logged before the "kill"
  r = test::run_bcdtrain("train --quiet --resume " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto read_events = [&]() {
    const test::RunResult out = test::run_shell(quote(python) + " " + quote(test::source_path("tests/tensorboard_read.py")) +
                                                " " + quote(run + "/tensorboard") + " 2>/dev/null");
    EXPECT_EQ(out.exit_code, 0) << out.output;
    return json::parse(out.output);
  };
  auto expect_metrics_in = [&](const json& events, const std::string& what) {
    SCOPED_TRACE(what);
    const auto records = test::read_metrics(run + "/metrics.jsonl");
    ASSERT_EQ(records.size(), 8u);
    std::map<std::string, std::map<int64_t, double>> want;
    for (const json& rec : records)
      for (const auto& [tag, value] : metrics_scalars(rec)) want[tag][rec["step"].get<int64_t>()] = value;
    for (const char* tag : {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"})
      EXPECT_TRUE(want.count(tag)) << tag << " is not in metrics.jsonl";
    std::set<std::string> tags;
    for (const auto& [tag, points] : events.items()) {
      tags.insert(tag);
      std::set<int64_t> steps;
      for (const json& p : points) {
        const int64_t step = p[0].get<int64_t>();
        EXPECT_TRUE(steps.insert(step).second) << tag << ": step " << step << " twice";
        ASSERT_TRUE(want[tag].count(step)) << tag << ": step " << step << " is not in metrics.jsonl";
        const double w = want[tag][step], got = p[1].get<double>();
        EXPECT_LE(std::abs(got - w), 1e-6 * std::abs(w) + 1e-30) << tag << " at step " << step;  // a float32
      }
      EXPECT_EQ(steps.size(), want[tag].size()) << tag;
    }
    std::set<std::string> want_tags;
    for (const auto& [tag, _] : want) want_tags.insert(tag);
    EXPECT_EQ(tags, want_tags);
  };
  const json events = read_events();
  expect_metrics_in(events, "written as the run went, resumed at step 5");

  int files = 0;
  for (const auto& e : fs::directory_iterator(run + "/tensorboard")) files += e.path().filename().string().find("tfevents") != std::string::npos;
  EXPECT_EQ(files, 1) << "each resume writes the events anew in one file";
  r = test::run_bcdtrain("plot --tensorboard " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(8 records of"), std::string::npos) << r.output;
  expect_metrics_in(read_events(), "plot --tensorboard");
}

// A bad line in the middle of metrics.jsonl used to end the replay there: plot --tensorboard
// wrote 2 of 12 records, deleted the older event files and exited 0. Now it names the line and
// writes nothing (the old events stay); only a torn last line is left out.
TEST(Tensorboard, ABadLineInTheMiddleIsNamedAndTheOldEventsStay) {
  test::TempDir tmp("bcd-tb-bad");
  const std::string run = tmp.file("run");
  fs::create_directories(run + "/tensorboard");
  const std::string old = run + "/tensorboard/events.out.tfevents.1.host.1.bcdtrain";
  test::write_text(old, "the events of an earlier replay");
  std::string lines;
  for (int step = 1; step <= 12; ++step) lines += fmt::format("{{\"step\": {}, \"loss\": {}}}\n", step, 10.0 - step);
  const std::string good = lines;
  lines.replace(lines.find("{\"step\": 3"), 1, "[");  // line 3 no longer JSON
  test::write_text(run + "/metrics.jsonl", lines);
  auto r = test::run_bcdtrain("plot --tensorboard " + run);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(run + "/metrics.jsonl: line 3 is not a metrics record"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_text(old), "the events of an earlier replay");
  int files = 0;
  for (const auto& e : fs::directory_iterator(run + "/tensorboard")) files += 1, (void)e;
  EXPECT_EQ(files, 1) << "no new event file";

  test::write_text(run + "/metrics.jsonl", good + "{\"step\": 13, \"lo");  // torn last line
  r = test::run_bcdtrain("plot --tensorboard " + run);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(12 records of"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(old)) << "replaced by the new file";
}

// A metrics.jsonl that is a FIFO (it would block the reader) or a link to /dev/zero (it never
// ends) used to be reported as missing: now as what it is.
TEST(Tensorboard, AMetricsFileThatIsAPipeOrADeviceIsNamedAsSuch) {
  test::TempDir tmp("bcd-tb-fifo");
  for (const char* kind : {"fifo", "zero"}) {
    const std::string run = tmp.file(kind);
    fs::create_directories(run);
    const std::string m = run + "/metrics.jsonl";
    if (std::string(kind) == "fifo") ASSERT_EQ(test::run_shell("mkfifo " + quote(m)).exit_code, 0);
    else fs::create_symlink("/dev/zero", m);
    for (const char* flags : {"--tensorboard ", ""}) {
      auto r = test::run_bcdtrain(std::string("plot ") + flags + run);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find(m + ": not a regular file (a pipe, device or directory)"), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace bcd

// Data-parallel benchmarks over real ranks (`bcdtrain launch`, Gloo over loopback).
//
//   bench_dp comm   Bytes each rank moves per step, BCD vs plain data-parallel AdamW, on the
//                   same model and ranks (both with the default sharded state), from the process
//                   group's own counters (metrics.jsonl comm_bytes_total: what the gradient's
//                   reduces into its owners and the updated weights' all-gather send). The runs
//                   cover whole block-epochs, so BCD's share is exactly its mean unit size over
//                   the model: ratio = BCD / AdamW, goal ~ 1/D for D blocks of equal size.
//   bench_dp dp     Scaling efficiency: 2 ranks x 1 thread vs 1 rank x 1 thread on the same
//                   per-rank batch (so the 2-rank run does twice the work per step). Per round
//                   both sides run back to back (alternating which goes first);
//                   ratio = median over rounds of (1-rank step time / 2-rank step time), goal
//                   >= 0.9; plus the communication left exposed after backward (ms per step),
//                   and the machine's ceiling: two independent 1-rank runs at once, no
//                   communication (machine_ceiling = 1-rank time / their time).
//
// Environment: BENCH_ROUNDS (dp: 3), BENCH_STEPS (dp: 30 per run), BENCH_DATA (a prepared
// corpus directory; default data/fortunes, prepared when missing), BENCH_EXTRA (overrides for
// every run, e.g. "--dist.overlap_forward=false").
// Last line: one JSON object.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "bench_util.h"

namespace fs = std::filesystem;
using bcd::bench::env_int;
using bcd::bench::median;

namespace {

std::string bcdtrain() { return BCD_BINARY; }

void run(const std::string& args, const std::string& log) {
  const std::string cmd = bcdtrain() + " " + args + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::string line, tail;
    while (std::getline(in, line)) tail += line + "\n";
    throw std::runtime_error("failed (" + std::to_string(status) + "): " + cmd + "\n" + tail);
  }
}

std::vector<nlohmann::json> metrics(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  if (out.empty()) throw std::runtime_error("no records in " + run_dir + "/metrics.jsonl");
  return out;
}

// Seconds per step over the records after the first (the first one carries start-up).
double step_seconds(const std::vector<nlohmann::json>& m) {
  const auto& a = m.front();
  const auto& b = m.back();
  const double tokens = b["tokens"].get<double>() - a["tokens"].get<double>();
  const double per_step = b["tokens"].get<double>() / b["step"].get<double>();
  const double seconds = b["elapsed_s"].get<double>() - a["elapsed_s"].get<double>();
  return seconds / (tokens / per_step);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "comm" && mode != "dp") {
    std::fprintf(stderr, "usage: bench_dp comm|dp\n");
    return 2;
  }
  const std::string src = BCD_SOURCE_DIR;
  const char* data_env = std::getenv("BENCH_DATA");
  const std::string data = data_env && *data_env ? data_env : src + "/data/fortunes";
  const char* extra_env = std::getenv("BENCH_EXTRA");  // more overrides for every run
  const std::string extra = extra_env ? extra_env : "";
  const std::string tmp = fs::temp_directory_path().string() + "/bcd-bench-dp";
  fs::create_directories(tmp);
  try {
    if (!fs::exists(data + "/tokens.h5"))
      run("prepare --input /usr/share/games/fortunes --out " + data + " --vocab-size 2048", tmp + "/prepare.log");
    const std::string common = "train --quiet --config " + src + "/configs/tiny.toml --data.path=" + data +
                               " --train.val_every=0 --train.val_batches=1 --sample.prompts='[]'"
                               " --train.checkpoint_every=0 " + extra + " ";

    if (mode == "comm") {
      // 8 layers, one per block: D = 10 blocks (embed, 8 layers, head); 2 visits of each.
      const int ranks = 2, n_layers = 8, k = 2, d = n_layers + 2, steps = 2 * d * k;
      const std::string shape = fmt::format(
          " --model.n_layers={} --bcd.layers_per_block=1 --bcd.switch_every={} --train.steps={} --train.batch_size=4"
          " --train.seq_len=64 --train.log_every={} --train.threads=1 ",
          n_layers, k, steps, steps);
      nlohmann::json out = {{"name", "comm"}, {"ranks", ranks}, {"blocks", d}, {"steps", steps}};
      std::map<std::string, double> per_step;
      for (const auto& [side, flag] : std::vector<std::pair<std::string, std::string>>{
               {"bcd", "--bcd.enabled=true"}, {"adamw", "--bcd.enabled=false"}}) {
        const std::string dir = tmp + "/comm-" + side;
        fs::remove_all(dir);
        run(fmt::format("launch --nproc {} {} --train.run_dir={} {} {}", ranks, common, dir, shape, flag),
            tmp + "/comm-" + side + ".log");
        const auto m = metrics(dir);
        per_step[side] = m.back()["comm_bytes_total"].get<double>() / steps;
        out[side + "_bytes_per_step"] = per_step[side];
        fmt::print("{}: {:.0f} bytes sent per rank per step (gradient reduces and weight all-gathers)\n", side, per_step[side]);
      }
      out["ratio"] = per_step["bcd"] / per_step["adamw"];
      out["one_over_d"] = 1.0 / d;
      fmt::print("{}\n", out.dump());
      return 0;
    }

    // dp
    const int rounds = env_int("BENCH_ROUNDS", 3), steps = env_int("BENCH_STEPS", 30);
    const std::string shape = fmt::format(" --train.steps={} --train.log_every={} --train.batch_size=8 --train.threads=1 "
                                          "--bcd.switch_every=5 ",
                                          steps, std::max(1, steps / 3));
    // Three sides per round, in a rotating order: one rank alone; two ranks; and, as the
    // machine's own ceiling, two independent one-rank runs at once (no communication: what
    // sharing the cores, caches and memory bandwidth costs by itself).
    std::vector<double> ratios, ceilings, one_s, two_s, pair_s, exposed_ms;
    for (int r = 0; r < rounds; ++r) {
      double t1 = 0, t2 = 0, tp = 0;
      for (int i = 0; i < 3; ++i) {
        const int side = (i + r) % 3;
        if (side == 0) {
          const std::string dir = tmp + "/dp-one";
          fs::remove_all(dir);
          run(common + " --train.run_dir=" + dir + shape, dir + ".log");
          t1 = step_seconds(metrics(dir));
        } else if (side == 1) {
          const std::string dir = tmp + "/dp-two";
          fs::remove_all(dir);
          run("launch --nproc 2 " + common + " --train.run_dir=" + dir + shape, dir + ".log");
          const auto m = metrics(dir);
          t2 = step_seconds(m);
          exposed_ms.push_back(m.back()["comm_exposed_ms_total"].get<double>() / steps);
        } else {
          const std::string a = tmp + "/dp-pair-a", b = tmp + "/dp-pair-b";
          fs::remove_all(a), fs::remove_all(b);
          // the shell runs both at once and fails when either does (their output: a.log, b.log)
          run(common + " --train.run_dir=" + a + shape + " > " + a + ".log 2>&1 & " + bcdtrain() + " " + common +
                  " --train.run_dir=" + b + shape + " > " + b + ".log 2>&1; s=$?; wait $! || exit 1; exit $s",
              tmp + "/dp-pair.log");
          tp = 0.5 * (step_seconds(metrics(a)) + step_seconds(metrics(b)));
        }
      }
      ratios.push_back(t1 / t2);
      ceilings.push_back(t1 / tp);
      one_s.push_back(t1), two_s.push_back(t2), pair_s.push_back(tp);
      fmt::print("round {}: 1 rank {:.1f} ms/step, 2 ranks {:.1f} ms/step, two 1-rank runs at once {:.1f} ms/step: "
                 "efficiency {:.3f} (machine ceiling {:.3f}), exposed comm {:.2f} ms/step\n",
                 r + 1, 1e3 * t1, 1e3 * t2, 1e3 * tp, t1 / t2, t1 / tp, exposed_ms.back());
      std::fflush(stdout);
    }
    nlohmann::json out = {{"name", "dp"},
                          {"rounds", rounds},
                          {"steps", steps},
                          {"one_rank_ms_per_step", 1e3 * median(one_s)},
                          {"two_ranks_ms_per_step", 1e3 * median(two_s)},
                          {"two_independent_runs_ms_per_step", 1e3 * median(pair_s)},
                          {"machine_ceiling", median(ceilings)},
                          {"exposed_comm_ms_per_step", median(exposed_ms)},
                          {"ratio", median(ratios)}};
    fmt::print("{}\n", out.dump());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dp: %s\n", e.what());
    return 1;
  }
  return 0;
}

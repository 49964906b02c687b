// The plots of runs' metrics.jsonl: records read and checked, the six plots' series built, a
// gnuplot script and data files per plot in a temporary directory, gnuplot (pngcairo) run on
// each, plots.json written; and train.plot, which draws a finished run's plots in-process.
#include "report/plots.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "report/metric_keys.h"

extern char** environ;

namespace bcd {

namespace fs = std::filesystem;

namespace {

using Json = nlohmann::json;
using Records = std::vector<Json>;
using Point = std::pair<double, double>;

// One colour per run, the same in every plot (Tableau 10's first eight).
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
std::string color(size_t run) { return kColors[run % std::size(kColors)]; }

// memory_peak_bytes' keys, fastest first, with each tier's dash and point type.
struct TierStyle {
  const char* name;
  int dash, point;
};
const TierStyle kTiers[] = {{"compute", 1, 7}, {"pinned", 2, 5}, {"host", 4, 9}, {"nvme", 5, 13}};

constexpr size_t kMaxName = 40;  // legend names longer than this lose their middle (the plot keeps its width)

// ---- Records ----

const Json& field(const Json& obj, const char* key) {
  static const Json kNull;
  if (!obj.is_object()) return kNull;
  const auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

// v when it is a finite number (the trainer writes null for NaN or unknown; a bool is no number).
std::optional<double> number(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\f\v";
  const size_t a = s.find_first_not_of(ws);
  return a == std::string::npos ? "" : s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// The records of one metrics.jsonl, each an object with a numeric "step"; blank lines skipped, and
// a last line cut short (no newline, not JSON) left out with a warning.
Records read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error("{}: {}", path, std::strerror(errno));
  Records records;
  std::string line;
  for (int64_t lineno = 1; read_json_line(in, &line, kJsonMetricsLine, path, lineno); ++lineno) {
    if (trim(line).empty()) continue;
    Json rec;
    try {
      rec = parse_json(line, kJsonMetricsLine, fmt::format("{}:{}", path, lineno));
    } catch (const Json::parse_error& e) {
      // The last line, without its newline: a run killed while writing it. What came before is
      // whole, and plotted.
      if (in.eof()) {
        fmt::print(stderr, "bcdtrain: warning: {}:{}: the last line is cut short (the run stopped while writing "
                           "it): left out\n", path, lineno);
        break;
      }
      const std::string why = e.what();  // the parser's account of where it broke, less its "[json.exception...] "
      const size_t at = why.find("] ");
      user_error("{}:{}: not valid JSON ({})", path, lineno, at == std::string::npos ? why : why.substr(at + 2));
    }
    if (!rec.is_object()) user_error("{}:{}: expected a JSON object, got {}", path, lineno, rec.type_name());
    if (!number(field(rec, metric_key::kStep)))
      user_error("{}:{}: no numeric \"step\" (got {})", path, lineno, field(rec, metric_key::kStep).dump());
    records.push_back(std::move(rec));
  }
  if (in.bad()) user_error("{}: read error", path);
  return records;
}

// ---- Run names ----

// Names are measured and cut in characters, so that no UTF-8 character is split: the bytes that
// do not continue one.
size_t count_chars(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}
size_t byte_of_char(const std::string& s, size_t chars) {
  size_t i = 0;
  for (size_t seen = 0; i < s.size(); ++i) {
    if ((s[i] & 0xC0) != 0x80 && seen++ == chars) break;
  }
  return i;
}

std::string elide(const std::string& name) {
  const size_t n = count_chars(name);
  if (n <= kMaxName) return name;
  return name.substr(0, byte_of_char(name, 14)) + "..." + name.substr(byte_of_char(name, n - (kMaxName - 17)));
}

// The absolute path, "." and ".." resolved lexically and no trailing slash (symlinks kept).
std::string abs_path(const std::string& dir) {
  std::string p = fs::absolute(dir).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

bool all_unique(const std::vector<std::string>& v) { return std::set<std::string>(v.begin(), v.end()).size() == v.size(); }

}  // namespace

std::vector<std::string> plot_run_names(const std::vector<std::string>& run_dirs) {
  std::vector<std::vector<std::string>> parts;
  size_t longest = 0;
  for (const std::string& d : run_dirs) {
    std::vector<std::string> p;
    const std::string a = abs_path(d);
    for (size_t start = 0;;) {  // "/a/b" -> "", "a", "b"
      const size_t slash = a.find('/', start);
      p.push_back(a.substr(start, slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    longest = std::max(longest, p.size());
    parts.push_back(std::move(p));
  }
  std::vector<std::string> names;
  for (size_t k = 1; k <= longest; ++k) {
    names.clear();
    for (const auto& p : parts) {  // the last k components
      const size_t from = p.size() - std::min(k, p.size());
      std::string n = p[from];
      for (size_t i = from + 1; i < p.size(); ++i) n += "/" + p[i];
      names.push_back(n);
    }
    if (all_unique(names)) {
      // long ones elided in the middle (batch.sh's names end in what tells them apart) while they stay unique
      std::vector<std::string> short_names;
      for (const std::string& n : names) short_names.push_back(elide(n));
      return all_unique(short_names) ? short_names : names;
    }
  }
  for (size_t i = 0; i < names.size(); ++i) names[i] += fmt::format(" ({})", i + 1);  // the same dir twice
  return names;
}

namespace {

// ---- Plots ----

struct Series {
  std::string name;
  std::vector<Point> points;
  std::string style;  // gnuplot's `with` clause
};

// One PNG: its series and the gnuplot settings around them.
struct Plot {
  std::string file, title, xlabel, ylabel;
  std::vector<Series> series;
  std::vector<std::string> extra;  // gnuplot lines before `plot`
  std::string skip_reason;

  Plot(std::string f, std::string t, std::string x, std::string y)
      : file(std::move(f)), title(std::move(t)), xlabel(std::move(x)), ylabel(std::move(y)) {}
  void add(const std::string& name, std::vector<Point> points, const std::string& style) {
    if (!points.empty()) series.push_back({name, std::move(points), style});
  }
};

struct Run {
  std::string name;
  Records records;
};

using YOf = std::function<std::optional<double>(const Json&)>;

// (x, y) of every record where both are numbers.
std::vector<Point> series_of(const Records& records, const char* x_key, const YOf& y_of) {
  std::vector<Point> pts;
  for (const Json& r : records) {
    const auto x = number(field(r, x_key));
    const auto y = y_of(r);
    if (x && y) pts.emplace_back(*x, *y);
  }
  return pts;
}
YOf key(const char* name) {
  return [name](const Json& r) { return number(field(r, name)); };
}

// A gnuplot string of s, so that no path or name is read as gnuplot code. Double quotes, as only
// they take escapes: a newline must be one (it would end the command); a backtick runs a shell
// command even inside double quotes, so it goes in as octal, like the other control bytes.
std::string quote(const std::string& s) {
  std::string q = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') q += '\\', q += ch;
    else if (c == '\n') q += "\\n";
    else if (c == '`' || c < 0x20 || c == 0x7f) q += fmt::format("\\{:03o}", c);
    else q += ch;
  }
  return q + '"';
}

std::pair<std::string, double> byte_unit(double peak) {
  constexpr double kKiB = 1024.0;
  if (peak >= kKiB * kKiB * kKiB) return {"GiB", kKiB * kKiB * kKiB};
  if (peak >= kKiB * kKiB) return {"MiB", kKiB * kKiB};
  if (peak >= kKiB) return {"KiB", kKiB};
  return {"bytes", 1.0};
}

std::pair<std::string, double> time_unit(double peak) {
  if (peak >= 3 * 3600) return {"h", 3600.0};
  if (peak >= 600) return {"min", 60.0};
  return {"s", 1.0};
}

Plot loss_plot(const std::string& file, const std::string& title, const char* x_key, const std::string& xlabel,
               const std::vector<Run>& runs, double scale = 1.0) {
  Plot p{file, title, xlabel, "loss (cross-entropy, nats/token)"};
  for (size_t i = 0; i < runs.size(); ++i) {
    struct Kind {
      const char *kind, *y_key, *style;
    };
    for (const auto& [kind, y_key, style] : {Kind{"train", metric_key::kLoss, "lines lw 1.5"},
                                             Kind{"val", metric_key::kValLoss, "linespoints lw 2 dt 2 pt 7 ps 1.2"}}) {
      std::vector<Point> pts = series_of(runs[i].records, x_key, key(y_key));
      for (Point& pt : pts) pt.first /= scale;
      p.add(fmt::format("{} {}", runs[i].name, kind), std::move(pts), fmt::format("{} lc rgb '{}'", style, color(i)));
    }
  }
  return p;
}

Plot tokens_plot(const std::vector<Run>& runs) {
  Plot p{"tokens_per_s.png", "Throughput (tokens/s)", "step", "tokens/s (since the previous record)"};
  for (size_t i = 0; i < runs.size(); ++i)
    p.add(runs[i].name, series_of(runs[i].records, metric_key::kStep, key(metric_key::kTokensPerS)), fmt::format("lines lw 1.5 lc rgb '{}'", color(i)));
  p.extra.push_back("set yrange [0:*]");
  return p;
}

Plot memory_plot(const std::vector<Run>& runs) {
  Plot p{"memory.png", "Peak memory per tier (memory_peak_bytes)", "step", ""};
  struct Found {
    std::string name;
    std::vector<Point> pts;
    size_t run;
    const TierStyle* tier;
  };
  std::vector<Found> found;
  double peak = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    for (const TierStyle& t : kTiers) {
      const char* tier = t.name;
      auto pts = series_of(runs[i].records, metric_key::kStep,
                           [tier](const Json& r) { return number(field(field(r, metric_key::kMemoryPeakBytes), tier)); });
      if (std::none_of(pts.begin(), pts.end(), [](const Point& pt) { return pt.second > 0; })) continue;
      for (const Point& pt : pts) peak = std::max(peak, pt.second);  // some y > 0: the max of them all
      found.push_back({fmt::format("{} {}", runs[i].name, tier), std::move(pts), i, &t});
    }
  }
  const auto [unit, scale] = byte_unit(peak);
  p.ylabel = fmt::format("peak bytes held ({})", unit);
  for (Found& f : found) {
    for (Point& pt : f.pts) pt.second /= scale;
    p.add(f.name, std::move(f.pts),
          fmt::format("linespoints lw 1.5 dt {} pt {} ps 0.6 pi 5 lc rgb '{}'", f.tier->dash, f.tier->point, color(f.run)));
  }
  p.extra.push_back("set yrange [0:*]");
  return p;
}

Plot stall_plot(const std::vector<Run>& runs) {
  // stall_ms and switches count since the previous record: with log_every = 1 this is the stall
  // of the switching step itself, else the mean over the record's switches.
  Plot p{"stall.png", "Staging stall per block switch", "step", "stall per switch (ms; stall_ms / switches)"};
  const YOf per_switch = [](const Json& r) -> std::optional<double> {
    const auto n = number(field(r, metric_key::kSwitches)), ms = number(field(r, metric_key::kStallMs));
    if (n && *n > 0 && ms) return *ms / *n;
    return std::nullopt;
  };
  for (size_t i = 0; i < runs.size(); ++i)
    p.add(runs[i].name, series_of(runs[i].records, metric_key::kStep, per_switch), fmt::format("linespoints lw 1 pt 7 ps 1 lc rgb '{}'", color(i)));
  p.extra.push_back("set yrange [0:*]");
  return p;
}

Plot block_plot(const std::vector<Run>& runs) {
  Plot p{"active_block.png", "Active block (BCD)", "step", "block (block_id: name)"};
  std::map<double, std::vector<std::string>> names;  // block_id -> names seen (runs may split the model differently)
  std::vector<std::pair<size_t, std::vector<Point>>> with_blocks;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto pts = series_of(runs[i].records, metric_key::kStep, key(metric_key::kBlockId));
    for (const Json& r : runs[i].records) {
      const auto id = number(field(r, metric_key::kBlockId));
      const Json& block = field(r, metric_key::kBlock);
      if (!id || block.is_null()) continue;
      auto& seen = names[std::trunc(*id) + 0.0];  // an integral id, never -0
      const std::string name = block.is_string() ? block.get<std::string>() : block.dump();
      if (std::find(seen.begin(), seen.end(), name) == seen.end()) seen.push_back(name);
    }
    if (!pts.empty()) with_blocks.emplace_back(i, std::move(pts));
  }
  // Runs drawn on one id would hide each other: each is nudged by a fraction of a tic.
  const double n = static_cast<double>(with_blocks.size());
  for (size_t k = 0; k < with_blocks.size(); ++k) {
    auto& [i, pts] = with_blocks[k];
    const double nudge = n > 1 ? (static_cast<double>(k) - (n - 1) / 2) * std::min(0.12, 0.5 / n) : 0.0;
    for (Point& pt : pts) pt.second += nudge;
    p.add(runs[i].name, std::move(pts), fmt::format("steps lw 2 lc rgb '{}'", color(i)));
  }
  if (!names.empty()) {
    std::string tics;
    for (const auto& [id, seen] : names) {
      std::string label = fmt::format("{}: ", id);
      for (size_t j = 0; j < seen.size(); ++j) label += (j ? " / " : "") + seen[j];
      tics += fmt::format("{}{} {}", tics.empty() ? "" : ", ", quote(label), id);
    }
    p.extra.push_back(fmt::format("set ytics ({})", tics));
    p.extra.push_back(fmt::format("set yrange [{}:{}]", names.begin()->first - 0.5, names.rbegin()->first + 0.5));
    p.extra.push_back("set grid noytics xtics");
  }
  return p;
}

std::vector<Plot> build_plots(const std::vector<Run>& runs) {
  double peak_s = 0;
  for (const Run& r : runs)
    for (const Json& rec : r.records)
      if (const auto t = number(field(rec, metric_key::kElapsedS))) peak_s = std::max(peak_s, *t);
  const auto [unit, scale] = time_unit(peak_s);
  std::vector<Plot> plots;
  plots.push_back(loss_plot("loss_vs_step.png", "Loss against step (train: lines, validation: points)", metric_key::kStep, "step", runs));
  plots.push_back(loss_plot("loss_vs_time.png", "Loss against wall time (train: lines, validation: points)", metric_key::kElapsedS,
                            fmt::format("wall time since the start ({})", unit), runs, scale));
  plots.push_back(tokens_plot(runs));
  plots.push_back(memory_plot(runs));
  plots.push_back(stall_plot(runs));
  plots.push_back(block_plot(runs));
  const std::map<std::string, std::string> why = {
      {"loss_vs_step.png", "no run has a loss"},
      {"loss_vs_time.png", "no run has a loss with elapsed_s"},
      {"tokens_per_s.png", "no run has tokens_per_s"},
      {"memory.png", "every tier of memory_peak_bytes is zero or absent in every run"},
      {"stall.png", "no run has a record with a block switch (switches > 0)"},
      {"active_block.png", "no run has block_id (no BCD run)"},
  };
  for (Plot& p : plots)
    if (p.series.empty()) p.skip_reason = why.at(p.file);
  return plots;
}

// ---- gnuplot ----

// The gnuplot script of `p`, drawing into `png`; its data files go into `work`.
std::string plot_script(const Plot& p, const std::string& work, const std::string& png) {
  std::string s = fmt::format(
      "set terminal pngcairo size 1100,650 font 'sans,11' noenhanced\n"
      "set output {}\nset title {} font 'sans,13'\nset xlabel {}\nset ylabel {}\n"
      "set grid lc rgb '#dddddd'\nset border 3\nset tics nomirror out\n"
      // Right of the plot, never over the data (below it collides with the x label).
      "set key outside right top vertical Left reverse width 2 box lc rgb '#bbbbbb'\n"
      "set offsets 0, 0, graph 0.05, 0\n",  // headroom above the data; y from 0 stays at 0
      quote(png), quote(p.title), quote(p.xlabel), quote(p.ylabel));
  for (const std::string& line : p.extra) s += line + "\n";
  std::string terms;
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& sr = p.series[i];
    const std::string data = fmt::format("{}/{}.{}.dat", work, fs::path(p.file).stem().string(), i);
    std::ofstream f(data);
    for (const auto& [x, y] : sr.points) f << fmt::format("{} {}\n", x, y);
    if (!f.flush()) user_error("cannot write {}: {}", data, std::strerror(errno));
    terms += fmt::format("{}{} using 1:2 with {} title {}", i ? ", \\\n     " : "", quote(data), sr.style, quote(sr.name));
  }
  return s + "plot " + terms + "\n";
}

// `name` on $PATH as an executable file, or "".
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/bin:/usr/bin";
  for (size_t start = 0;;) {
    const size_t colon = dirs.find(':', start);
    const std::string dir = dirs.substr(start, colon - start);
    const std::string file = (dir.empty() ? std::string(".") : dir) + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(file, ec) && ::access(file.c_str(), X_OK) == 0) return file;
    if (colon == std::string::npos) return "";
    start = colon + 1;
  }
}

// `argv` with stdout and stderr into one pipe: its exit status (-1: could not start; 128 + N:
// killed by signal N) and what it printed.
int run_captured(const std::vector<std::string>& argv, std::string& output) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return output = std::strerror(errno), -1;
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, write_end.get(), STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  write_end.reset();  // the child's copy is the pipe's only writer now: its exit ends the reads
  if (err != 0) {
    output = fmt::format("cannot start {}: {}", argv[0], std::strerror(err));
    return -1;
  }
  char buf[4096];
  for (ssize_t got; (got = ::read(read_end.get(), buf, sizeof(buf))) != 0;) {
    if (got > 0) output.append(buf, static_cast<size_t>(got));
    else if (errno != EINTR) break;
  }
  read_end.reset();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// gnuplot, checked able to draw our PNGs; UserError saying why not.
std::string find_gnuplot() {
  const std::string why = " (scripts/setup.sh installs it: package gnuplot-nox)";
  const std::string gnuplot = find_in_path("gnuplot");
  if (gnuplot.empty()) user_error("gnuplot not found{}", why);
  std::string output;
  if (run_captured({gnuplot, "-e", "set terminal pngcairo"}, output) != 0)
    user_error("this gnuplot has no pngcairo terminal ({}){}", trim(output), why);
  return gnuplot;
}

// A temporary directory for the scripts and data files, removed with everything in it.
struct WorkDir {
  std::string path;
  WorkDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/bcd-plot.XXXXXX";
    if (!::mkdtemp(tmpl.data())) user_error("cannot create a temporary directory {}: {}", tmpl, std::strerror(errno));
    path = tmpl;
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
};

}  // namespace

// ---- Drawing ----

PlotReport draw_plots(const std::vector<std::string>& run_dirs, const std::string& out_dir, const PlotSay& say,
                      const PlotSay& warn) {
  std::vector<Run> runs;
  for (const std::string& d : run_dirs) runs.push_back({"", read_records((fs::path(d) / "metrics.jsonl").string())});
  const std::string gnuplot = find_gnuplot();  // after the records: bad input is named first
  const std::vector<std::string> names = plot_run_names(run_dirs);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].name = names[i];
    if (runs[i].records.empty())
      warn(fmt::format("plot: {} holds no record (it adds no series)", (fs::path(run_dirs[i]) / "metrics.jsonl").string()));
  }
  const std::vector<Plot> plots = build_plots(runs);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) user_error("cannot create the directory {}: {}", out_dir, ec.message());

  nlohmann::ordered_json summary = {{"runs", nlohmann::ordered_json::array()}, {"plots", nlohmann::ordered_json::array()}};
  for (size_t i = 0; i < runs.size(); ++i)
    summary["runs"].push_back({{"name", runs[i].name}, {"dir", abs_path(run_dirs[i])}, {"records", runs[i].records.size()}});
  PlotReport report;
  {
    const WorkDir work;
    for (const Plot& p : plots) {
      const std::string png = (fs::path(out_dir) / p.file).string();
      nlohmann::ordered_json entry = {{"file", p.file}, {"title", p.title}, {"series", nlohmann::ordered_json::array()}, {"skipped", nullptr}};
      for (const Series& s : p.series) entry["series"].push_back(s.name);
      if (!p.skip_reason.empty()) {
        entry["skipped"] = p.skip_reason;
        fs::remove(png, ec);  // a PNG from an earlier call would pass for this one
        say(fmt::format("plot: skipped {}: {}", p.file, p.skip_reason));
      } else {
        const std::string gp = fmt::format("{}/{}.gp", work.path, p.file);
        std::ofstream(gp) << plot_script(p, work.path, png);
        std::string output;
        const int rc = run_captured({gnuplot, gp}, output);
        if (rc != 0 || !fs::is_regular_file(png, ec)) {
          report.failed.push_back(fmt::format("gnuplot failed on {} (exit {}): {}", p.file, rc, trim(output)));
          warn("plot: " + report.failed.back());
          entry["skipped"] = "gnuplot failed";
        } else {
          report.written.push_back(p.file);
          say(fmt::format("plot: wrote {} ({} series)", png, p.series.size()));
        }
      }
      summary["plots"].push_back(std::move(entry));
    }
  }
  const std::string json_path = (fs::path(out_dir) / "plots.json").string();
  std::ofstream out(json_path);
  out << summary.dump(1, ' ', true, nlohmann::json::error_handler_t::replace) << "\n";
  if (!out.flush()) user_error("cannot write {}: {}", json_path, std::strerror(errno));
  return report;
}

void draw_run_plots(const std::string& run_dir, const PlotSay& say) {
  const std::string out = run_dir + "/plots";
  const auto warn = [&](const std::string& why) {
    fmt::print(stderr, "bcdtrain: warning: train.plot: {}; the run is unaffected; draw them later with bcdtrain plot {}\n",
               why, run_dir);
  };
  const PlotSay quiet = [](const std::string&) {};
  PlotReport r;
  try {
    r = draw_plots({run_dir}, out, quiet, quiet);
  } catch (const std::exception& e) {  // no gnuplot, or the file system's refusal
    return warn(e.what());
  }
  if (!r.failed.empty()) {
    std::string why;
    for (const std::string& f : r.failed) why += (why.empty() ? "" : "; ") + f;
    return warn(why);
  }
  std::string files;
  for (const std::string& f : r.written) files += (files.empty() ? "" : ", ") + f;
  say(fmt::format("plots: {} PNG{} in {} ({})", r.written.size(), r.written.size() == 1 ? "" : "s", out, files));
}

}  // namespace bcd

#!/usr/bin/env python3
"""The plots of scripts/plot.sh: reads each run's metrics.jsonl, writes gnuplot data files and
scripts into a temporary directory, runs gnuplot (pngcairo) on them and writes plots.json.

Usage: plot_metrics.py OUT_DIR RUN_DIR...   (plot.sh checks flags and run dirs first)

Every plot has one series per run (and per tier for memory); a run that lacks a field (no
validation step, no switch, no BCD blocks) adds no series, and a plot left with no series is
skipped: no PNG (a stale one is removed), a line on stdout and "skipped" in plots.json.
Exit status: 0 written; 1 gnuplot failed; 2 a metrics.jsonl is malformed (file:line on stderr),
or gnuplot (with its pngcairo terminal) is missing.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

# One colour per run, the same in every plot (Tableau 10's first eight).
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
TIERS = ["compute", "pinned", "host", "nvme"]  # memory_peak_bytes' keys, fastest first
TIER_DASH = {"compute": 1, "pinned": 2, "host": 4, "nvme": 5}
TIER_POINT = {"compute": 7, "pinned": 5, "host": 9, "nvme": 13}


class MetricsError(Exception):
    pass


def number(v):
    """v as a float when it is a finite number (the trainer writes null for NaN/unknown)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def dict_of(rec, key):
    v = rec.get(key)
    return v if isinstance(v, dict) else {}


def read_records(path):
    """The records of one metrics.jsonl, each a dict with a numeric `step`; blank lines skipped."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise MetricsError(f"{path}:{lineno}: not valid JSON ({e})")
            if not isinstance(rec, dict):
                raise MetricsError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            if number(rec.get("step")) is None:
                raise MetricsError(f"{path}:{lineno}: no numeric \"step\" (got {rec.get('step')!r})")
            records.append(rec)
    return records


MAX_NAME = 40  # legend names longer than this lose their middle (the plot keeps its width)


def elide(name):
    return name if len(name) <= MAX_NAME else name[:14] + "..." + name[-(MAX_NAME - 17):]


def run_names(dirs):
    """Legend names: each run dir's last path component, or as many components as make them unique;
    long ones elided in the middle (batch.sh's names end in what tells them apart) while they stay unique."""
    parts = [os.path.normpath(os.path.abspath(d)).split(os.sep) for d in dirs]
    for k in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-k:]) for p in parts]
        if len(set(names)) == len(names):
            short = [elide(n) for n in names]
            return short if len(set(short)) == len(short) else names
    return [f"{n} ({i + 1})" for i, n in enumerate(names)]  # the same dir twice


def series_of(records, x_key, y_of):
    """(x, y) for every record where both are numbers."""
    pts = []
    for r in records:
        x, y = number(r.get(x_key)), y_of(r)
        if x is not None and y is not None:
            pts.append((x, y))
    return pts


def quote(s):
    """A gnuplot single-quoted string (a quote inside is doubled)."""
    return "'" + str(s).replace("'", "''") + "'"


def byte_unit(peak):
    for name, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if peak >= scale:
            return name, scale
    return "bytes", 1


def time_unit(peak):
    if peak >= 3 * 3600:
        return "h", 3600.0
    if peak >= 600:
        return "min", 60.0
    return "s", 1.0


class Plot:
    """One PNG: its series (name, points, gnuplot style) and the settings around them."""

    def __init__(self, file, title, xlabel, ylabel):
        self.file, self.title, self.xlabel, self.ylabel = file, title, xlabel, ylabel
        self.series = []  # (name, points, style)
        self.extra = []  # gnuplot lines before `plot`
        self.skip_reason = ""

    def add(self, name, points, style):
        if points:
            self.series.append((name, points, style))

    def script(self, work, png):
        lines = [
            "set terminal pngcairo size 1100,650 font 'sans,11' noenhanced",
            f"set output {quote(png)}",
            f"set title {quote(self.title)} font 'sans,13'",
            f"set xlabel {quote(self.xlabel)}",
            f"set ylabel {quote(self.ylabel)}",
            "set grid lc rgb '#dddddd'",
            "set border 3",
            "set tics nomirror out",
            # Right of the plot, never over the data (below it collides with the x label).
            "set key outside right top vertical Left reverse width 2 box lc rgb '#bbbbbb'",
            "set offsets 0, 0, graph 0.05, 0",  # headroom above the data; y from 0 stays at 0
        ] + self.extra
        terms = []
        for i, (name, points, style) in enumerate(self.series):
            data = os.path.join(work, f"{os.path.splitext(self.file)[0]}.{i}.dat")
            with open(data, "w") as f:
                f.writelines(f"{x!r} {y!r}\n" for x, y in points)
            terms.append(f"{quote(data)} using 1:2 with {style} title {quote(name)}")
        lines.append("plot " + ", \\\n     ".join(terms))
        return "\n".join(lines) + "\n"


# ---- The six plots ----


def loss_plot(file, title, x_key, xlabel, runs, scale=1.0):
    p = Plot(file, title, xlabel, "loss (cross-entropy, nats/token)")
    for i, (name, recs) in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        for kind, key, style in (("train", "loss", "lines lw 1.5"),
                                 ("val", "val_loss", "linespoints lw 2 dt 2 pt 7 ps 1.2")):
            pts = series_of(recs, x_key, lambda r: number(r.get(key)))
            p.add(f"{name} {kind}", [(x / scale, y) for x, y in pts], f"{style} lc rgb '{c}'")
    return p


def tokens_plot(runs):
    p = Plot("tokens_per_s.png", "Throughput (tokens/s)", "step", "tokens/s (since the previous record)")
    for i, (name, recs) in enumerate(runs):
        p.add(name, series_of(recs, "step", lambda r: number(r.get("tokens_per_s"))),
              f"lines lw 1.5 lc rgb '{COLORS[i % len(COLORS)]}'")
    p.extra.append("set yrange [0:*]")
    return p


def memory_plot(runs):
    p = Plot("memory.png", "Peak memory per tier (memory_peak_bytes)", "step", "")
    found = []
    for i, (name, recs) in enumerate(runs):
        for tier in TIERS:
            pts = series_of(recs, "step", lambda r: number(dict_of(r, "memory_peak_bytes").get(tier)))
            if any(y > 0 for _, y in pts):
                found.append((f"{name} {tier}", pts, i, tier))
    peak = max((y for _, pts, _, _ in found for _, y in pts), default=0)
    unit, scale = byte_unit(peak)
    p.ylabel = f"peak bytes held ({unit})"
    for name, pts, i, tier in found:
        p.add(name, [(x, y / scale) for x, y in pts],
              f"linespoints lw 1.5 dt {TIER_DASH[tier]} pt {TIER_POINT[tier]} ps 0.6 pi 5 "
              f"lc rgb '{COLORS[i % len(COLORS)]}'")
    p.extra.append("set yrange [0:*]")
    return p


def stall_plot(runs):
    # stall_ms and switches count since the previous record: with log_every = 1 this is the
    # stall of the switching step itself, else the mean over the record's switches.
    p = Plot("stall.png", "Staging stall per block switch", "step",
             "stall per switch (ms; stall_ms / switches)")

    def per_switch(r):
        n, ms = number(r.get("switches")), number(r.get("stall_ms"))
        return ms / n if n and n > 0 and ms is not None else None

    for i, (name, recs) in enumerate(runs):
        p.add(name, series_of(recs, "step", per_switch),
              f"linespoints lw 1 pt 7 ps 1 lc rgb '{COLORS[i % len(COLORS)]}'")
    p.extra.append("set yrange [0:*]")
    return p


def block_plot(runs):
    p = Plot("active_block.png", "Active block (BCD)", "step", "block (block_id: name)")
    names = {}  # block_id -> names seen (runs may split the model differently)
    with_blocks = []
    for i, (name, recs) in enumerate(runs):
        pts = series_of(recs, "step", lambda r: number(r.get("block_id")))
        for r in recs:
            if number(r.get("block_id")) is not None and r.get("block") is not None:
                names.setdefault(int(r["block_id"]), [])
                if str(r["block"]) not in names[int(r["block_id"])]:
                    names[int(r["block_id"])].append(str(r["block"]))
        if pts:
            with_blocks.append((i, name, pts))
    # Runs drawn on one id would hide each other: each is nudged by a fraction of a tic.
    n = len(with_blocks)
    for k, (i, name, pts) in enumerate(with_blocks):
        nudge = (k - (n - 1) / 2) * min(0.12, 0.5 / n) if n > 1 else 0.0
        p.add(name, [(x, y + nudge) for x, y in pts], f"steps lw 2 lc rgb '{COLORS[i % len(COLORS)]}'")
    if names:
        tics = ", ".join(f"{quote(str(b) + ': ' + ' / '.join(v))} {b}" for b, v in sorted(names.items()))
        p.extra += [f"set ytics ({tics})", f"set yrange [{min(names) - 0.5}:{max(names) + 0.5}]",
                    "set grid noytics xtics"]
    return p


def build_plots(runs):
    elapsed = (number(r.get("elapsed_s")) for _, recs in runs for r in recs)
    peak_s = max((t for t in elapsed if t is not None), default=0)
    unit, scale = time_unit(peak_s)
    plots = [
        loss_plot("loss_vs_step.png", "Loss against step (train: lines, validation: points)", "step",
                  "step", runs),
        loss_plot("loss_vs_time.png", "Loss against wall time (train: lines, validation: points)",
                  "elapsed_s", f"wall time since the start ({unit})", runs, scale),
        tokens_plot(runs),
        memory_plot(runs),
        stall_plot(runs),
        block_plot(runs),
    ]
    why = {
        "loss_vs_step.png": "no run has a loss",
        "loss_vs_time.png": "no run has a loss with elapsed_s",
        "tokens_per_s.png": "no run has tokens_per_s",
        "memory.png": "every tier of memory_peak_bytes is zero or absent in every run",
        "stall.png": "no run has a record with a block switch (switches > 0)",
        "active_block.png": "no run has block_id (no BCD run)",
    }
    for p in plots:
        if not p.series:
            p.skip_reason = why[p.file]
    return plots


def check_gnuplot():
    """Why gnuplot cannot draw our PNGs, or "" when it can."""
    if not shutil.which("gnuplot"):
        return "gnuplot not found"
    res = subprocess.run(["gnuplot", "-e", "set terminal pngcairo"], capture_output=True, text=True)
    return "" if res.returncode == 0 else f"this gnuplot has no pngcairo terminal ({res.stderr.strip()})"


def main(argv):
    if len(argv) < 3:
        print("usage: plot_metrics.py OUT_DIR RUN_DIR...", file=sys.stderr)
        return 2
    out, dirs = argv[1], argv[2:]
    try:
        recs = [read_records(os.path.join(d, "metrics.jsonl")) for d in dirs]
    except MetricsError as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"plot: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    gnuplot_error = check_gnuplot()
    if gnuplot_error:
        print(f"plot: {gnuplot_error} (scripts/setup.sh installs it: package gnuplot-nox)", file=sys.stderr)
        return 2
    names = run_names(dirs)
    for d, r in zip(dirs, recs):
        if not r:
            print(f"plot: {os.path.join(d, 'metrics.jsonl')} holds no record (it adds no series)", file=sys.stderr)
    runs = list(zip(names, recs))
    plots = build_plots(runs)
    os.makedirs(out, exist_ok=True)
    summary = {"runs": [{"name": n, "dir": os.path.abspath(d), "records": len(r)} for n, d, r in zip(names, dirs, recs)],
               "plots": []}
    rc = 0
    with tempfile.TemporaryDirectory(prefix="bcd-plot.") as work:
        for p in plots:
            png = os.path.join(out, p.file)
            entry = {"file": p.file, "title": p.title, "series": [s[0] for s in p.series], "skipped": None}
            if p.skip_reason:
                entry["skipped"] = p.skip_reason
                if os.path.exists(png):
                    os.remove(png)  # a PNG from an earlier call would pass for this one
                print(f"plot: skipped {p.file}: {p.skip_reason}")
            else:
                gp = os.path.join(work, p.file + ".gp")
                with open(gp, "w") as f:
                    f.write(p.script(work, png))
                res = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
                if res.returncode != 0 or not os.path.isfile(png):
                    print(f"plot: gnuplot failed on {p.file} (exit {res.returncode}): {res.stderr.strip()}",
                          file=sys.stderr)
                    rc = 1
                    entry["skipped"] = "gnuplot failed"
                else:
                    print(f"plot: wrote {png} ({len(p.series)} series)")
            summary["plots"].append(entry)
    with open(os.path.join(out, "plots.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))

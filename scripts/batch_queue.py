#!/usr/bin/env python3
"""Queue lines of scripts/batch.sh and scripts/sweep.sh: parsing, run directory names, the grid of
a sweep, and the summary of a batch. The shell scripts own the processes; this file owns the text.

Usage: batch_queue.py plan RUNS_DIR PLAN_JSON (--queue FILE | --configs CONFIG...)
           check every line, name its run directory, write PLAN_JSON and print one shell-quoted
           line per run: INDEX SKIP RUN_DIR LINE WHERE CONFIG ARG... (SKIP: 1 already finished;
           LINE: the line as batch.sh records it in RUN_DIR/batch-line)
       batch_queue.py summary PLAN_JSON RESULTS_TSV RUNS_DIR [SIGNAL]
           read each run's summary.json, print the table, write RUNS_DIR/batch-summary.md and
           .jsonl; exit status 0 all finished or skipped, 1 any other, 128+SIGNAL when given
       batch_queue.py expand CONFIG KEY=V1,V2... [KEY=...]
           the queue lines of a grid, first key slowest

Exit status 2 with one line on stderr for a bad queue file or bad sweep arguments.
"""
import hashlib
import json
import math
import os
import re
import shlex
import sys

# Keys batch.sh passes itself; a queue line may not.
RESERVED = {"--config", "--resume", "--overwrite"}
# A name part that decodes unambiguously once the parts are joined by "__": no "__" inside, no
# "_" at either end, only characters safe in a file name on any system.
PLAIN_PART = re.compile(r"[A-Za-z0-9.+=-]+(_[A-Za-z0-9.+=-]+)*")
MAX_NAME = 100  # longer names are cut to HASH_CUT characters plus "-" and the hash
HASH_CUT = 80
LINE_FILE = "batch-line"  # in each run directory: the line that claimed it (config + overrides)
KEY = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*")


class UsageError(Exception):
    pass


# ---- Queue lines ----

def parse_args(words, where):
    """Overrides of one line as normalized `--section.key=value` words (also from `--k v`)."""
    out = []
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--") or w == "--":
            raise UsageError(f"{where}: unexpected '{w}' (overrides are --section.key=value)")
        name = w.split("=", 1)[0]
        if name in RESERVED:
            raise UsageError(f"{where}: {name} is batch.sh's own (it passes --config and --resume auto)")
        if "=" not in w and "." in name and i + 1 < len(words) and not words[i + 1].startswith("--"):
            w = f"{w}={words[i + 1]}"
            i += 1
        out.append(w)
        i += 1
    return out


def read_queue(path):
    """[(where, config, overrides)] of a queue file; `#` comments and blank lines skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"queue file '{path}': {e.strerror}")
    runs = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{n}"
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise UsageError(f"{where}: {e}")
        if words:
            runs.append((where, words[0], parse_args(words[1:], where)))
    if not runs:
        raise UsageError(f"queue file '{path}' holds no runs")
    return runs


def line_text(config, overrides):
    return shlex.join([os.path.normpath(config)] + overrides)


def run_name(config, overrides):
    """`<config stem>__<key=value>__...`, or cut/sanitized with "-" and 8 hex digits of the line's
    hash when a plain name would be lossy or longer than MAX_NAME."""
    stem = os.path.basename(config)
    if stem.endswith(".toml"):
        stem = stem[: -len(".toml")]
    parts = [stem] + [w[2:] for w in overrides]
    name = "__".join(parts)
    plain = all(PLAIN_PART.fullmatch(p) for p in parts) and name[:1].isalnum()
    if plain and len(name) <= MAX_NAME:
        return name
    return hashed_name(name, config, overrides)


def hashed_name(name, config, overrides):
    safe = re.sub(r"[^A-Za-z0-9.+=_-]+", "_", name).lstrip("._-")[:HASH_CUT] or "run"
    digest = hashlib.sha1(line_text(config, overrides).encode()).hexdigest()[:8]
    return f"{safe}-{digest}"


def explicit_run_dir(overrides):
    for w in overrides:
        if w.startswith("--train.run_dir="):
            return w.split("=", 1)[1]
    return None


def claimed_by(run_dir):
    try:
        with open(os.path.join(run_dir, LINE_FILE), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def read_summary(run_dir):
    try:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
            s = json.load(f)
        return s if isinstance(s, dict) else None
    except (OSError, ValueError):
        return None


def is_finished(summary):
    return (summary is not None and summary.get("status") == "finished"
            and isinstance(summary.get("steps"), int) and summary.get("steps") == summary.get("total_steps"))


def cmd_plan(argv):
    runs_dir, plan_path, mode, *rest = argv
    if mode == "--queue":
        runs = read_queue(rest[0])
    else:
        runs = [(c, c, []) for c in rest]
    plan, taken = [], {}
    for i, (where, config, overrides) in enumerate(runs):
        text = line_text(config, overrides)
        run_dir = explicit_run_dir(overrides)
        args = list(overrides)
        if run_dir is None:
            name = run_name(config, overrides)
            run_dir = os.path.join(runs_dir, name)
            # Two configs with one file name (a/tiny.toml, b/tiny.toml): the line that claimed the
            # plain name first keeps it, the other gets the hash (stable: the claim is on disk).
            owner = claimed_by(run_dir)
            first = taken.get(os.path.normpath(run_dir), (text,))[0]
            if first != text or owner not in (None, text):
                run_dir = os.path.join(runs_dir, hashed_name(name, config, overrides))
            args.append(f"--train.run_dir={run_dir}")
        key = os.path.normpath(run_dir)
        if key in taken:
            raise UsageError(f"{where}: run directory {run_dir} is also that of {taken[key][1]}")
        taken[key] = (text, where)
        skip = is_finished(read_summary(run_dir))
        plan.append({"index": i, "where": where, "config": config, "overrides": overrides,
                     "line": text, "run_dir": run_dir, "skip": skip})
        print(shlex.join([str(i), "1" if skip else "0", run_dir, text, where, config] + args))
    with open(plan_path, "w", encoding="utf-8") as f:
        json.dump(plan, f)


# ---- Summary ----

def read_results(path):
    """{index: (rc, wall_s, log_offset, interrupted)} from the lines batch.sh appended."""
    results = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) == 4:
                    results[int(fields[0])] = (int(fields[1]), float(fields[2]), int(fields[3]))
    except OSError:
        pass
    return results


def last_error_line(run_dir, offset):
    """The last `bcdtrain: error:` line the trainer wrote to train.log in this invocation."""
    try:
        with open(os.path.join(run_dir, "train.log"), "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("bcdtrain: error:")]
    return errors[-1] if errors else None


def outcome(entry, result, signal):
    """The record of one run: status, figures from summary.json, and the error of a failure."""
    run_dir = entry["run_dir"]
    rec = {"where": entry["where"], "config": entry["config"], "overrides": entry["overrides"],
           "run_dir": run_dir, "status": None, "exit_code": None, "steps": None, "total_steps": None,
           "final_loss": None, "final_val_loss": None, "tokens_per_s": None,
           "peak_compute_bytes": None, "peak_host_bytes": None, "stall_ms": None, "wall_s": None,
           "error": None}
    summary = read_summary(run_dir) if entry["skip"] or result else None
    if summary:
        peak = summary.get("peak_bytes") or {}
        rec.update(steps=summary.get("steps"), total_steps=summary.get("total_steps"),
                   final_loss=summary.get("final_loss"), final_val_loss=summary.get("final_val_loss"),
                   tokens_per_s=summary.get("tokens_per_s"), peak_compute_bytes=peak.get("compute"),
                   peak_host_bytes=peak.get("host"), stall_ms=summary.get("stall_ms_total"),
                   wall_s=summary.get("wall_s"))
    if entry["skip"]:
        rec["status"] = "skipped"
        return rec
    if result is None:
        rec["status"] = "not_run"
        return rec
    rc, wall_s, offset = result
    rec["exit_code"] = rc
    if rec["wall_s"] is None:
        rec["wall_s"] = round(wall_s, 3)
    ours = signal is not None and rc in (128 + signal, 130, 143)
    status = summary.get("status") if summary else None
    if status == "finished" and rc == 0:
        rec["status"] = "finished"
    elif status == "stopped" or (status is None and ours):
        rec["status"] = "stopped"
    else:
        rec["status"] = "failed"
        err = summary.get("error") if summary else None
        err = err or last_error_line(run_dir, offset)
        if not err:
            how = f"killed by signal {rc - 128}" if rc > 128 else f"exit {rc}"
            err = f"{how}, no summary.json (see {os.path.join(run_dir, 'train.log')})"
        rec["error"] = err
    return rec


def human_bytes(n):
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def fmt(v, spec):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    return format(v, spec)


STATUS_TEXT = {"skipped": "skipped (already finished)", "not_run": "not run (interrupted)"}
COLUMNS = ["config", "overrides", "run dir", "status", "steps", "loss", "val loss", "tokens/s",
           "peak compute", "peak host", "stall ms", "wall s", "error"]


def table_row(r):
    steps = "-" if r["steps"] is None else f"{r['steps']}/{r['total_steps'] if r['total_steps'] is not None else '?'}"
    cells = [r["config"], " ".join(r["overrides"]), r["run_dir"], STATUS_TEXT.get(r["status"], r["status"]),
             steps, fmt(r["final_loss"], ".4f"), fmt(r["final_val_loss"], ".4f"),
             fmt(r["tokens_per_s"], ".0f"), human_bytes(r["peak_compute_bytes"]),
             human_bytes(r["peak_host_bytes"]), fmt(r["stall_ms"], ".1f"), fmt(r["wall_s"], ".1f"),
             r["error"] or ""]
    return [c.replace("|", "\\|") for c in cells]


def markdown(rows):
    cells = [COLUMNS] + [table_row(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    line = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]]) + "\n"


def cmd_summary(argv):
    plan_path, results_path, runs_dir, *sig = argv
    signal = int(sig[0]) if sig and sig[0] else None
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    results = read_results(results_path)
    rows = [outcome(e, results.get(e["index"]), signal) for e in plan]
    os.makedirs(runs_dir, exist_ok=True)
    table = markdown(rows)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tally = ", ".join(f"{n} {STATUS_TEXT.get(s, s)}" for s, n in counts.items())
    with open(os.path.join(runs_dir, "batch-summary.md"), "w", encoding="utf-8") as f:
        f.write(f"# Batch summary\n\n{tally}\n\n{table}")
    with open(os.path.join(runs_dir, "batch-summary.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(table, end="")
    print(f"batch: {tally}; {os.path.join(runs_dir, 'batch-summary.md')}", file=sys.stderr)
    if signal is not None:
        return 128 + signal
    return 0 if all(r["status"] in ("finished", "skipped") for r in rows) else 1


# ---- Sweep grid ----

def split_values(text, arg):
    """V1,V2,... with `\\,` a comma inside a value and `\\\\` a backslash."""
    values, cur, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in ",\\":
                raise UsageError(f"'{arg}': a backslash escapes only ',' or '\\' (\\, \\\\)")
            cur += text[i + 1]
            i += 2
            continue
        if c == ",":
            values.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    values.append(cur)
    if any(v == "" for v in values):
        raise UsageError(f"'{arg}': empty value")
    if len(set(values)) != len(values):
        raise UsageError(f"'{arg}': a value is listed twice")
    return values


def cmd_expand(argv):
    if not argv:
        raise UsageError("needs a CONFIG and at least one KEY=V1,V2")
    config, axes = argv[0], []
    if config.startswith("-") or "=" in config:
        raise UsageError(f"'{config}': the first argument is the config file")
    if len(argv) < 2:
        raise UsageError("needs at least one KEY=V1,V2 after the config")
    for arg in argv[1:]:
        key, sep, values = arg.partition("=")
        if not sep or not KEY.fullmatch(key):
            raise UsageError(f"'{arg}': expected section.key=V1,V2,...")
        if key in (k for k, _ in axes):
            raise UsageError(f"'{arg}': key {key} is given twice")
        if key == "train.run_dir":
            raise UsageError(f"'{arg}': batch.sh names each run's directory itself")
        axes.append((key, split_values(values, arg)))
    lines = [[]]
    for key, values in axes:  # the first key varies slowest
        lines = [line + [f"--{key}={v}"] for line in lines for v in values]
    for line in lines:
        print(shlex.join([config] + line))


def main(argv):
    commands = {"plan": cmd_plan, "summary": cmd_summary, "expand": cmd_expand}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return commands[argv[0]](argv[1:]) or 0
    except UsageError as e:
        prog = "sweep" if argv[0] == "expand" else "batch"
        print(f"{prog}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

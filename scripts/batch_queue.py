#!/usr/bin/env python3
"""Queue lines of scripts/batch.sh and scripts/sweep.sh: parsing, run directory names, the grid of
a sweep, and the summary of a batch. The shell scripts own the processes; this file owns the text.

Usage: batch_queue.py plan RUNS_DIR (--queue FILE | --configs CONFIG...)
           check every line (its config exists, its words fit an exec), name its run directory
           and print one shell-quoted entry per run, each ended by a NUL:
           INDEX RUN_DIR LINE WHERE CONFIG ARG... (LINE: the line as batch.sh records it in
           RUN_DIR/batch-line; ARG: the overrides and --train.run_dir). Writes nothing.
       batch_queue.py summary PLAN RESULTS_TSV RUNS_DIR [SIGNAL]
           PLAN: what plan printed; RESULTS_TSV: a line per trainer call batch.sh made (INDEX RC
           WALL_S LOG_OFFSET SUMMARY_SHA1 CAUSE). Reads each run's summary.json, prints the table,
           writes RUNS_DIR/batch-summary.md and .jsonl; exit status 0 all finished or skipped, 1
           any other, 128+SIGNAL when given
       batch_queue.py expand CONFIG KEY=V1,V2... [KEY=...]
           the queue lines of a grid, first key slowest

Exit status 2 with one line on stderr for a bad queue file, bad sweep arguments, or a file that
cannot be read or written.
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
# Trainer flags that make a call that trains nothing (batch.sh would read its exit 0 as a skip).
NOT_A_RUN = {"--dry-run", "--help"}
# A name part that decodes unambiguously once the parts are joined by "__": no "__" inside, no
# "_" at either end, only characters safe in a file name on any system.
PLAIN_PART = re.compile(r"[A-Za-z0-9.+=-]+(_[A-Za-z0-9.+=-]+)*")
MAX_NAME = 100  # longer names are cut to HASH_CUT characters plus "-" and the hash
HASH_CUT = 80
LINE_FILE = "batch-line"  # in each run directory: the line that claimed it (config + overrides)
KEY = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*")
# Linux's limits on what an exec passes (fs/exec.c): one string at most 32 pages with its NUL;
# all of them, with their pointers and the environment's, at most ARG_MAX (a quarter of the stack
# limit). EXEC_SLACK stands for batch.sh's own words (setpriv, the binary's path, --resume auto).
MAX_ARG_STRLEN = 32 * os.sysconf("SC_PAGE_SIZE")
EXEC_SLACK = 8192


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
        if name in NOT_A_RUN:
            raise UsageError(f"{where}: {name} trains nothing; a queue line is a run")
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
    except UnicodeDecodeError as e:
        raise UsageError(f"queue file '{path}': not UTF-8 text (byte {e.start})")
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


def config_problem(config):
    """Why `config` cannot be a run's config file, or None."""
    if os.path.isdir(config):
        return "is a directory"
    if not os.path.exists(config):
        return "not found"
    if not os.access(config, os.R_OK):
        return "cannot be read"
    return None


def check_configs(runs):
    """Every line's config exists, checked before anything runs."""
    for where, config, _ in runs:
        problem = config_problem(config)
        if problem:
            raise UsageError(f"{where}: config '{config}' {problem}" if where != config
                             else f"config '{config}' {problem}")


def check_exec_size(where, words):
    """The trainer's command line fits an exec (else it fails with E2BIG: exit 126, no output)."""
    sizes = [len(os.fsencode(w)) + 1 for w in words]
    for w, n in zip(words, sizes):
        if n > MAX_ARG_STRLEN:
            raise UsageError(f"{where}: '{w[:40]}...' is {n - 1} bytes; one argument of a program holds "
                             f"at most {MAX_ARG_STRLEN - 1} (Linux)")
    env = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in os.environ.items())
    total = sum(sizes) + 8 * len(words) + env + EXEC_SLACK
    if total > os.sysconf("SC_ARG_MAX"):
        raise UsageError(f"{where}: the line's {len(words)} words and the environment come to {total} bytes; "
                         f"a program's arguments hold at most {os.sysconf('SC_ARG_MAX')} here (ARG_MAX)")


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


def summary_sha1(run_dir):
    """sha1 of RUN_DIR/summary.json as `sha1sum` prints it, or "-" when there is none."""
    try:
        with open(os.path.join(run_dir, "summary.json"), "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError:
        return "-"


def cmd_plan(argv):
    runs_dir, mode, *rest = argv
    if mode == "--queue":
        runs = read_queue(rest[0])
    else:
        runs = [(c, c, []) for c in rest]
    check_configs(runs)
    out, taken = [], {}
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
        # A run directory is a run's alone: not the runs directory itself (its batch files, every
        # other run), and not inside or around another line's (one run's checkpoints and files in
        # another's tree).
        here = os.path.abspath(key)
        if here == os.path.abspath(runs_dir):
            raise UsageError(f"{where}: run directory {run_dir} is the runs directory itself (--runs {runs_dir})")
        for other, (_, other_where) in taken.items():
            there = os.path.abspath(other)
            if os.path.commonpath([here, there]) in (here, there):
                inner, outer = (run_dir, other) if len(here) > len(there) else (other, run_dir)
                raise UsageError(f"{where}: run directory {run_dir} nests with {other_where}'s {other} "
                                 f"({inner} is inside {outer}): give each run a directory of its own")
        taken[key] = (text, where)
        check_exec_size(where, ["train", "--config", config] + args)
        out.append(shlex.join([str(i), run_dir, text, where, config] + args) + "\0")
    # Whether a run is finished is the trainer's to say (--resume auto does nothing then): the plan
    # names directories only.
    sys.stdout.write("".join(out))


def read_plan(path):
    """The entries plan printed: [{index, run_dir, line, where, config, overrides}]."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    plan = []
    for entry in filter(None, text.split("\0")):
        index, run_dir, line, where, config, *_ = shlex.split(entry)
        plan.append({"index": int(index), "run_dir": run_dir, "where": where, "config": config,
                     "overrides": shlex.split(line)[1:]})
    return plan


# ---- Summary ----

def read_results(path):
    """{index: (rc, wall_s, log_offset, summary_sha1_before, cause)} from the lines batch.sh wrote;
    rc None when the trainer was not started (cause says why)."""
    results = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 6:
                rc = None if fields[1] == "-" else int(fields[1])
                results[int(fields[0])] = (rc, float(fields[2]), int(fields[3]), fields[4], fields[5])
    return results


def call_output(run_dir, offset):
    """What the trainer wrote to train.log in this call (from OFFSET), as lines."""
    try:
        with open(os.path.join(run_dir, "train.log"), "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def last_error_line(lines):
    """The last `bcdtrain: error:` line (from where it starts: a progress line may precede it)."""
    errors = [ln[ln.index("bcdtrain: error:"):].strip() for ln in lines if "bcdtrain: error:" in ln]
    return errors[-1] if errors else None


def outcome(entry, result, signal):
    """The record of one run: status, figures from summary.json, and the error of a failure."""
    run_dir = entry["run_dir"]
    rec = {"where": entry["where"], "config": entry["config"], "overrides": entry["overrides"],
           "run_dir": run_dir, "status": None, "exit_code": None, "steps": None, "total_steps": None,
           "final_loss": None, "final_val_loss": None, "tokens_per_s": None,
           "peak_compute_bytes": None, "peak_host_bytes": None, "stall_ms": None, "wall_s": None,
           "error": None}
    if result is None:
        rec["status"] = "not_run"
        return rec
    rc, wall_s, offset, sha1_before, cause = result
    rec["exit_code"] = rc
    # A summary.json this call did not write is another call's (or another config's: the trainer
    # refuses those, leaving it be): its figures count only where the trainer exited 0 without
    # writing one, i.e. found this config's run finished already.
    written = rc is not None and summary_sha1(run_dir) != sha1_before
    skipped = rc == 0 and not written
    summary = read_summary(run_dir) if written or skipped else None
    if summary:
        peak = summary.get("peak_bytes") or {}
        rec.update(steps=summary.get("steps"), total_steps=summary.get("total_steps"),
                   final_loss=summary.get("final_loss"), final_val_loss=summary.get("final_val_loss"),
                   tokens_per_s=summary.get("tokens_per_s"), peak_compute_bytes=peak.get("compute"),
                   peak_host_bytes=peak.get("host"), stall_ms=summary.get("stall_ms_total"),
                   wall_s=summary.get("wall_s"))
    if skipped:
        rec["status"] = "skipped"
        return rec
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
        rec["error"] = failure_text(run_dir, rc, offset, cause, summary)
    return rec


def failure_text(run_dir, rc, offset, cause, summary):
    """Why a run failed: batch.sh's cause when it could not start the trainer, else summary.json's
    error, else the trainer's last error line of this call, else how it ended."""
    if rc is None:
        return f"could not start: {cause}"
    lines = call_output(run_dir, offset)
    err = (summary.get("error") if summary else None) or last_error_line(lines)
    if err:
        return err
    if rc in (126, 127):  # the exec failed: the shell's (or setpriv's) own line says why
        said = [ln.strip() for ln in lines if ln.strip()]
        if said:
            return f"could not start: {said[-1]}"
    how = f"killed by signal {rc - 128}" if rc > 128 else f"exit {rc}"
    return f"{how}, no summary.json (see {os.path.join(run_dir, 'train.log')})"


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
    plan = read_plan(plan_path)
    results = read_results(results_path)
    rows = [outcome(e, results.get(e["index"]), signal) for e in plan]
    table = markdown(rows)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tally = ", ".join(f"{n} {STATUS_TEXT.get(s, s)}" for s, n in counts.items())
    print(table, end="")  # first: the table is shown even where the files cannot be written
    md, jsonl = (os.path.join(runs_dir, f"batch-summary.{ext}") for ext in ("md", "jsonl"))
    with open(md, "w", encoding="utf-8") as f:
        f.write(f"# Batch summary\n\n{tally}\n\n{table}")
    with open(jsonl, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"batch: {tally}; {md}", file=sys.stderr)
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
    # A queue is one run a line: a value with a line break would cut its line in two.
    for v in values:
        if any(ch in v for ch in "\n\r\0"):
            raise UsageError(f"{arg.partition('=')[0]}: the value {v!r} holds a line break or NUL "
                             "(a queue holds one run a line)")
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
    check_configs([(config, config, [])])
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
    prog = "sweep" if argv[0] == "expand" else "batch"
    try:
        return commands[argv[0]](argv[1:]) or 0
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
    except OSError as e:  # a runs directory or summary that cannot be written, a vanished file
        what = f"'{e.filename}': " if e.filename else ""
        print(f"{prog}: {what}{e.strerror or e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""The JSON summary of one scripts/gpu_check.sh call, read back from its logs directory.

Usage: gpu_check_summary.py LOGS_DIR       summarise the parts recorded under LOGS_DIR
       gpu_check_summary.py --skipped WHY  the summary of a call that found no GPU

Prints one JSON object on one line. Exit status: 0 no errors, 1 some part failed (listed in
"errors"), 3 skipped (no GPU). Layout of LOGS_DIR (written by gpu_check.sh):
  status/<part>          key=value lines: state (ok, failed, timed_out, not_run, skipped), rc,
                         seconds, limit_s, reason, log, errlog, and what a run must show:
                         expect_nvme_reads, expect_host_reads, expect_stream
  status/probe           gpu, gpus, torch, cuda, arch, and the probe's state, seconds, limit_s
  status/check           seconds (from the check's start to the summary), time_limit
  ctest-gpu.log          ctest's output; plan-full-adamw.txt: `bcdtrain plan` for full AdamW
  <run>/metrics.jsonl    the trainer's records; <run>/plan.txt: `bcdtrain plan` of that run
"""
import json
import math
import os
import re
import statistics
import sys

PARTS = ["deps", "configure", "build", "ctest_gpu", "plan_full_adamw", "corpus", "stream_off", "stream_host",
         "stream_nvme", "bcd_7b", "bcd_7b_noprefetch", "bcd_2rank"]
# Every timed part, in the order the check runs them: the GPU probe, then PARTS ("parts" in the JSON).
TIMED_PARTS = ["probe"] + PARTS
# BCD runs of the 7B shape: medians over the steps after the first switch. bcd_7b_noprefetch is
# bcd_7b reading each unit's state at its switch: prefetch_speedup compares the two.
RUNS = ["bcd_7b", "bcd_7b_noprefetch", "bcd_2rank"]
# The tiny model with its frozen layers' weights resident (off) and streamed (host, nvme homes).
# A streamed run's first logged loss must equal the resident run's exactly (the same weights give
# the same forward); later ones within LOSS_REL_TOL of it, relative to the larger of the two: the
# runs may take different kernels (an attention backend, a reduction order), which is not a wrong
# weight, and such differences grow only by rounding.
STREAM_RUNS = ["stream_off", "stream_host", "stream_nvme"]
LOSS_REL_TOL = 1e-6
# Per logged step, medians over the steps after the first switch (see window()).
MEDIAN_KEYS = ["tokens_per_s", "tflops", "mfu", "flops_per_step"]
# Peaks since the run started: the largest value any record holds.
# cuda_used_bytes: the device's own count (cudaMemGetInfo), context and libraries included.
PEAK_KEYS = ["cuda_peak_allocated_bytes", "cuda_peak_reserved_bytes", "cuda_used_bytes"]
# The compute cap of the 7B runs (memory.compute_bytes): what cuda_used_bytes is set against.
CAP_BYTES = 24 * 2**30


def read_status(out, part):
    """status/<part> as a dict, or None when the part recorded nothing."""
    path = os.path.join(out, "status", part)
    if not os.path.isfile(path):
        return None
    status = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                status[key.strip()] = value.strip()
    return status


def number(text, kind=float):
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_lines(out, rel):
    if not rel:
        return []
    try:
        with open(os.path.join(out, rel), encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def read_metrics(path):
    """Records of a metrics.jsonl by step; a torn line (a killed run) is skipped."""
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and is_number(rec.get("step")):
                    records.append(rec)
    except OSError:
        return None
    return sorted(records, key=lambda r: r["step"])


def window(records):
    """(first switch step, records after it). The first switch is the first record, after the
    first one, whose active block differs from the previous record's (or, without block ids, that
    counts a switch); its step pays for the switch and the steps before it warm up."""
    for prev, rec in zip(records, records[1:]):
        if "block_id" in rec and "block_id" in prev:
            switched = rec["block_id"] != prev["block_id"]
        else:
            switched = is_number(rec.get("switches")) and rec["switches"] > 0
        if switched:
            return rec["step"], [r for r in records if r["step"] > rec["step"]]
    return None, []


def median(records, key):
    values = [r[key] for r in records if is_number(r.get(key))]
    return statistics.median(values) if values else None


def plan_compute_bytes(lines):
    """The compute tier's total in a `bcdtrain plan` table (GiB with two decimals) as bytes."""
    header = None
    for line in lines:
        words = line.split()
        if words and words[0] == "tier" and "total" in words:
            header = words
        elif header and words and words[0] == "compute" and len(words) >= 2:
            values = [number(w) for w in words[1:]]
            at = header.index("total") - 1  # the header's first word names the tier column
            if 0 <= at < len(values) and values[at] is not None:
                return round(values[at] * 2**30)
    return None


def empty_run(status):
    """A run's summary before its records are read: every figure null."""
    run = {"state": status.get("state", "not_run") if status else "not_run",
           "skipped": status.get("reason") if status and status.get("state") == "skipped" else None,
           "seconds": number(status.get("seconds")) if status else None,
           "steps_logged": 0, "first_switch_step": None, "window_steps": 0, "switches": None}
    for key in PEAK_KEYS + MEDIAN_KEYS:
        run[key] = None
    run.update({"stall_ms_per_switch": None, "switch_wait_ms_per_switch": None, "nvme_read_bytes": None, "nvme_write_bytes": None,
                "host_read_bytes": None, "compute_peak_bytes": None, "plan_compute_bytes": None})
    return run


def summarize_run(out, name, status):
    run = empty_run(status)
    run["plan_compute_bytes"] = plan_compute_bytes(read_lines(out, f"{name}/plan.txt"))
    records = read_metrics(os.path.join(out, name, "metrics.jsonl"))
    if not records:
        return run, records
    run["steps_logged"] = len(records)
    first, win = window(records)
    run["first_switch_step"], run["window_steps"] = first, len(win)
    for key in PEAK_KEYS:
        peaks = [r[key] for r in records if is_number(r.get(key))]
        run[key] = max(peaks) if peaks else None
    for key in MEDIAN_KEYS:
        run[key] = median(win, key)
    switches = sum(r["switches"] for r in win if is_number(r.get("switches")))
    stall = sum(r["stall_ms"] for r in win if is_number(r.get("stall_ms")))
    if any("switches" in r for r in win):
        run["switches"] = switches
    wait = sum(r["switch_wait_ms"] for r in win if is_number(r.get("switch_wait_ms")))
    if switches > 0:
        run["stall_ms_per_switch"] = stall / switches
        if any(is_number(r.get("switch_wait_ms")) for r in win):
            run["switch_wait_ms_per_switch"] = wait / switches
    last = records[-1]
    staged = last.get("staged_bytes") if isinstance(last.get("staged_bytes"), dict) else {}
    run["nvme_read_bytes"] = staged.get("nvme_read")
    run["nvme_write_bytes"] = staged.get("nvme_write")
    run["host_read_bytes"] = staged.get("host_read")
    peaks = last.get("memory_peak_bytes") if isinstance(last.get("memory_peak_bytes"), dict) else {}
    run["compute_peak_bytes"] = peaks.get("compute")
    return run, records


def empty_stream_run(status):
    return {"state": status.get("state", "not_run") if status else "not_run",
            "skipped": status.get("reason") if status and status.get("state") == "skipped" else None,
            "seconds": number(status.get("seconds")) if status else None,
            "steps_logged": 0, "losses": [], "tokens_per_s": None, "stream_bytes_total": None,
            "stream_stall_ms_total": None, "stream_wait_ms_total": None, "stream_wait_ms_per_layer": None,
            "nvme_read_bytes": None,
            "losses_equal_to_off": None, "max_abs_loss_diff": None, "first_loss_equal": None,
            "max_rel_loss_diff": None}


def summarize_stream_run(out, name, status):
    """(summary, records) of a tiny run."""
    run = empty_stream_run(status)
    records = read_metrics(os.path.join(out, name, "metrics.jsonl"))
    if not records:
        return run, []
    run["steps_logged"] = len(records)
    run["losses"] = [r.get("loss") for r in records]
    run["tokens_per_s"] = median(records[1:], "tokens_per_s")  # the first step warms up
    last = records[-1]
    run["stream_bytes_total"] = last.get("stream_bytes_total")
    run["stream_stall_ms_total"] = last.get("stream_stall_ms_total")
    run["stream_wait_ms_total"] = last.get("stream_wait_ms_total")
    run["stream_wait_ms_per_layer"] = last.get("stream_wait_ms_per_layer")
    staged = last.get("staged_bytes") if isinstance(last.get("staged_bytes"), dict) else {}
    run["nvme_read_bytes"] = staged.get("nvme_read")
    return run, records


def rel_diff(x, y):
    """|x - y| relative to the larger magnitude: 0 for equal numbers, at most 2."""
    return abs(x - y) / max(abs(x), abs(y)) if x != y else 0.0


def compare_losses(run, records, off, off_records):
    """Fills the streamed run's comparison with the resident one (None where either has no
    comparable losses: none, a different count or different steps, a non-finite one) and returns
    what breaks the rule (LOSS_REL_TOL), or None."""
    a, b = run["losses"], off["losses"]
    if not a or not b or len(a) != len(b) or not all(is_number(x) for x in a + b):
        return None
    if [r["step"] for r in records] != [r["step"] for r in off_records]:
        return None
    run["losses_equal_to_off"] = a == b
    run["max_abs_loss_diff"] = max(abs(x - y) for x, y in zip(a, b))
    run["first_loss_equal"] = a[0] == b[0]
    rel = [rel_diff(x, y) for x, y in zip(a, b)]
    run["max_rel_loss_diff"] = max(rel)
    broken = []
    if not run["first_loss_equal"]:
        broken.append(f"the first logged loss (step {records[0]['step']}) is {a[0]!r}, stream_off's {b[0]!r} "
                      f"(must be equal)")
    worst = max(range(1, len(rel)), key=lambda i: rel[i], default=None)
    if worst is not None and rel[worst] > LOSS_REL_TOL:
        broken.append(f"the loss at step {records[worst]['step']} is {a[worst]!r}, stream_off's {b[worst]!r}: "
                      f"{rel[worst]:.3g} relative (at most {LOSS_REL_TOL:g})")
    return "; ".join(broken) or None


def ctest_counts(lines):
    """{passed, failed, skipped} from ctest's output, and the names of the failed tests. ctest's
    "N% tests passed" counts skipped tests (GTEST_SKIP) as passed; here they are apart."""
    counts = {"passed": None, "failed": None, "skipped": None}
    failed_names, in_failed, total = [], False, None
    for line in lines:
        m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", line)
        if m:
            counts["failed"], total = int(m.group(2)), int(m.group(3))
        if "No tests were found" in line:
            counts["failed"], total = 0, 0
        if line.startswith("The following tests FAILED:"):
            in_failed = True
            continue
        if in_failed:
            m = re.match(r"\s+\d+ - (\S+)", line)
            if m:
                failed_names.append(m.group(1))
            else:
                in_failed = False
    if total is not None:
        counts["skipped"] = sum(1 for line in lines if re.match(r"\s+\d+ - \S.* \(Skipped\)$", line))
        counts["passed"] = total - counts["failed"] - counts["skipped"]
    return counts, failed_names


def failure_detail(out, part, status):
    """One line from the part's logs that says what went wrong."""
    if part in ("configure", "build"):  # the first error: what follows it is often its echo
        for line in read_lines(out, status.get("log")):
            if re.search(r"\berror\b", line, re.IGNORECASE):
                return line.strip()[:300]
        return ""
    lines = [l.strip() for l in read_lines(out, status.get("errlog") or status.get("log")) if l.strip()]
    errors = [l for l in lines if re.search(r"\berror\b", l, re.IGNORECASE)]
    return (errors or lines or [""])[-1][:300]


def part_error(out, part, status, tests, failed_names):
    if status is None:
        return f"{part}: no status recorded (the check stopped before this part)"
    state, log = status.get("state"), status.get("log", "")
    where = f" ({log})" if log else ""
    if state == "timed_out":
        return f"{part}: timed out after {status.get('limit_s', '?')} s{where}"
    if state == "not_run":
        return f"{part}: not run: {status.get('reason', '')}"
    if state == "failed":
        if part == "ctest_gpu" and tests["failed"]:
            total = tests["failed"] + tests["passed"] + tests["skipped"]
            names = f": {', '.join(failed_names)}" if failed_names else ""
            return f"{part}: {tests['failed']} of {total} tests failed{names}{where}"
        what = status.get("reason") or f"exit {status.get('rc', '?')}"
        detail = failure_detail(out, part, status)
        errlog = status.get("errlog") or log
        return f"{part}: {what}{': ' + detail if detail else ''}{f' ({errlog})' if errlog else ''}"
    return None


def part_timing(status):
    """A part's entry in "parts": its state, its seconds and its budget (limit_s)."""
    if status is None:
        return {"state": "not_run", "seconds": None, "limit_s": None}
    return {"state": status.get("state"), "seconds": number(status.get("seconds")),
            "limit_s": number(status.get("limit_s"), int)}  # whole seconds, as the check gives them


def timed_seconds(*statuses):
    """The seconds of the parts that ran (not skipped, not run), summed; None when none did."""
    seconds = [number(s.get("seconds")) for s in statuses
               if s and s.get("state") not in ("skipped", "not_run")]
    seconds = [x for x in seconds if x is not None]
    return round(sum(seconds), 3) if seconds else None


def summarize(out):
    statuses = {p: read_status(out, p) for p in PARTS}
    probe_status = read_status(out, "probe")
    probe = probe_status or {}
    check = read_status(out, "check") or {}
    build = statuses["build"]
    ctest_lines = read_lines(out, "ctest-gpu.log") if statuses["ctest_gpu"] else []
    tests, failed_names = ctest_counts(ctest_lines)
    plan_lines = read_lines(out, "plan-full-adamw.txt") if statuses["plan_full_adamw"] else []
    fits = None
    if any(l.startswith("does not fit") for l in plan_lines):
        fits = False
    elif any(l.strip() == "fits" for l in plan_lines):
        fits = True

    errors = []
    for part in PARTS:
        e = part_error(out, part, statuses[part], tests, failed_names)
        if e:
            errors.append(e)
    if statuses["ctest_gpu"] and statuses["ctest_gpu"].get("state") == "ok" and not any(tests.values()):
        errors.append("ctest_gpu: no test labelled gpu was found (ctest-gpu.log)")
    plan_bytes = plan_compute_bytes(plan_lines)
    if statuses["plan_full_adamw"] and statuses["plan_full_adamw"].get("state") == "ok" and plan_bytes is None:
        errors.append("plan_full_adamw: no compute tier in the plan's output (plan-full-adamw.txt)")

    runs = {}
    for name in RUNS:
        status = statuses[name]
        run, records = summarize_run(out, name, status)
        runs[name] = run
        if run["state"] != "ok":
            continue
        if not records:
            errors.append(f"{name}: no records in {name}/metrics.jsonl")
        elif run["first_switch_step"] is None:
            errors.append(f"{name}: no BCD switch in {len(records)} logged steps (raise --steps)")
        elif not run["window_steps"]:
            errors.append(f"{name}: no logged step after the first switch (step {run['first_switch_step']})")
        if status.get("expect_nvme_reads") == "1" and records and not run["nvme_read_bytes"]:
            errors.append(f"{name}: no state was read back from NVMe (staged_bytes.nvme_read is "
                          f"{run['nvme_read_bytes']}): the visited blocks are not homed there ({name}/plan.txt)")
        if status.get("expect_host_reads") == "1" and records and not run["host_read_bytes"]:
            errors.append(f"{name}: no state was read back from host memory (staged_bytes.host_read is "
                          f"{run['host_read_bytes']}): the visited blocks are not homed there ({name}/plan.txt)")

    streams, stream_records = {}, {}
    for name in STREAM_RUNS:
        streams[name], stream_records[name] = summarize_stream_run(out, name, statuses[name])
    off = streams["stream_off"]
    for name in STREAM_RUNS:
        run, status = streams[name], statuses[name]
        broken = None
        if name != "stream_off":
            broken = compare_losses(run, stream_records[name], off, stream_records["stream_off"])
        if run["state"] != "ok":
            continue
        if not run["steps_logged"]:
            errors.append(f"{name}: no records in {name}/metrics.jsonl")
            continue
        if status.get("expect_stream") == "1" and not run["stream_bytes_total"]:
            errors.append(f"{name}: no weights were streamed (stream_bytes_total is {run['stream_bytes_total']}; "
                          f"{name}/plan.txt)")
        if status.get("expect_nvme_reads") == "1" and not run["nvme_read_bytes"]:
            errors.append(f"{name}: nothing was read back from NVMe (staged_bytes.nvme_read is "
                          f"{run['nvme_read_bytes']})")
        if name != "stream_off" and off["state"] == "ok":
            if run["losses_equal_to_off"] is None:
                errors.append(f"{name}: its losses cannot be compared with stream_off's "
                              f"({len(run['losses'])} and {len(off['losses'])} logged, finite and at the same steps)")
            elif broken:
                errors.append(f"{name}: losses differ from stream_off's: {broken}: streamed weights are not "
                              f"the resident ones")
    deps = statuses["deps"]
    on, off = runs["bcd_7b"]["tokens_per_s"], runs["bcd_7b_noprefetch"]["tokens_per_s"]
    used = runs["bcd_7b"]["cuda_used_bytes"]
    return {
        "gpu": probe.get("gpu") or None,
        "gpus": number(probe.get("gpus"), int),
        "torch": probe.get("torch") or None,
        "cuda": probe.get("cuda") or None,
        "skipped": None,
        "deps_s": timed_seconds(deps),
        "build_s": timed_seconds(statuses["configure"], build),  # configure and build, as one part once was
        "parts": {p: part_timing(probe_status if p == "probe" else statuses[p]) for p in TIMED_PARTS},
        "total_s": number(check.get("seconds")),
        "time_limit_s": number(check.get("time_limit"), int),
        "tests": tests,
        "runs": runs,
        "streams": streams,
        "prefetch_speedup": on / off if is_number(on) and is_number(off) and off > 0 else None,
        "cuda_used_over_cap": used / CAP_BYTES if is_number(used) else None,
        "plan_full_adamw_compute_bytes": plan_bytes,
        "plan_full_adamw_fits": fits,
        "errors": errors,
    }


def skipped_summary(why):
    return {"gpu": None, "gpus": None, "torch": None, "cuda": None, "skipped": why, "deps_s": None, "build_s": None,
            "parts": {p: {"state": "skipped", "seconds": None, "limit_s": None} for p in TIMED_PARTS},
            "total_s": None, "time_limit_s": None,
            "tests": {"passed": None, "failed": None, "skipped": None},
            "runs": {name: empty_run({"state": "skipped", "reason": why}) for name in RUNS},
            "streams": {name: empty_stream_run({"state": "skipped", "reason": why}) for name in STREAM_RUNS},
            "prefetch_speedup": None, "cuda_used_over_cap": None,
            "plan_full_adamw_compute_bytes": None, "plan_full_adamw_fits": None, "errors": []}


def main(argv):
    if len(argv) == 3 and argv[1] == "--skipped":
        print(json.dumps(skipped_summary(argv[2])))
        return 3
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        summary = summarize(argv[1])
    except Exception as e:  # the caller still gets one JSON line, naming what broke here
        summary = skipped_summary(None)
        summary["runs"] = {name: empty_run(None) for name in RUNS}
        summary["streams"] = {name: empty_stream_run(None) for name in STREAM_RUNS}
        summary["parts"] = {p: part_timing(None) for p in TIMED_PARTS}
        summary["errors"] = [f"summary: {type(e).__name__}: {e}"]
    print(json.dumps(summary))
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Reads a run's TensorBoard event files with TensorBoard's own reader (EventAccumulator) and
prints its scalars as one JSON object: {tag: [[step, value], ...]} in the order read.

Usage: tensorboard_read.py DIR     (DIR: the run's tensorboard/ directory)
Exit status: 0, 2 on bad arguments or an unreadable directory (one line, no traceback).
"""
import json
import os
import sys


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip() if argv[:1] in (["-h"], ["--help"]) else "tensorboard_read: usage: tensorboard_read.py DIR",
              file=sys.stdout if argv[:1] in (["-h"], ["--help"]) else sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    d = argv[0]
    if not os.path.isdir(d):
        print(f"tensorboard_read: {d}: not a directory", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except Exception as e:  # noqa: BLE001 - any import failure is the environment's
        print(f"tensorboard_read: cannot import tensorboard: {e}", file=sys.stderr)
        return 2
    acc = EventAccumulator(d, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Instruction records (JSONL) from Debian's fortunes, so that the fine-tuning walkthrough in
README.md and tests/scripts/test_finetune.sh need no download.

Usage: scripts/fortune_qa.py [FORTUNE_FILE_OR_DIR...] > qa.jsonl
       (default: /usr/share/games/fortunes; a directory's files, .dat and .u8 copies skipped)

Two shapes of fortune (the lines between "%" separators) become records; the others are skipped:
  - question and answer: "Q:" and "A:" turns alternating from a question and ending with an
    answer, after any heading lines (indented lines continue a turn). One turn is written as
    {"prompt", "response"}, several as {"messages": [user, assistant, ...]}.
  - a definition, as in the `definitions` file: a line "TERM:" (", n.:" and the like dropped)
    and indented lines under it, written as {"prompt": "Define \"TERM\".", "response": ...}.
Each record is written once, in file order; the counts go to stderr. Exit status: 0, 1 when no
fortune had either shape, 2 when an input cannot be read.
"""
import json
import os
import re
import sys

TURN = re.compile(r"^([QA]):\s*(.*)$")
HEADWORD = re.compile(r"^(\S.*?)(?:,\s*(?:n|v|vt|vi|adj|adv|prep|pp)\.?)?\s*:\s*$")


def fortunes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return re.split(r"(?m)^%\s*$", f.read())


def qa_record(lines):
    turns = []  # [role, text]
    for line in lines:
        m = TURN.match(line)
        if m:
            turns.append(["user" if m.group(1) == "Q" else "assistant", m.group(2).strip()])
        elif turns and line.strip():
            turns[-1][1] += " " + line.strip()
        elif turns:
            return None  # a blank line inside the exchange: two jokes in one fortune
        # lines before the first turn are a heading ("Courtroom Quote #19:"): dropped
    if len(turns) < 2 or len(turns) % 2:
        return None
    for i, (role, text) in enumerate(turns):
        if role != ("user" if i % 2 == 0 else "assistant") or not text:
            return None
    if len(turns) == 2:
        return {"prompt": turns[0][1], "response": turns[1][1]}
    return {"messages": [{"role": r, "content": t} for r, t in turns]}


def definition_record(lines):
    m = HEADWORD.match(lines[0]) if lines else None
    body = lines[1:]
    if not m or not body or not all(l[:1] in (" ", "\t") or not l.strip() for l in body):
        return None
    response = "\n".join(l.strip() for l in body).strip()
    return {"prompt": f'Define "{m.group(1)}".', "response": response} if response else None


def main(argv):
    paths = argv or ["/usr/share/games/fortunes"]
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, n) for n in os.listdir(p)
                            if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(p, n)))
        else:
            files.append(p)
    seen, counts = set(), {"question-and-answer": 0, "definition": 0}
    for path in files:
        try:
            items = fortunes(path)
        except OSError as e:
            print(f"fortune_qa.py: {path}: {e.strerror}", file=sys.stderr)
            return 2
        for fortune in items:
            lines = fortune.strip("\n").split("\n")
            r, kind = qa_record(lines), "question-and-answer"
            if r is None:
                r, kind = definition_record(lines), "definition"
            if r is None:
                continue
            line = json.dumps(r, ensure_ascii=False)
            if line not in seen:
                seen.add(line)
                counts[kind] += 1
                print(line)
    print(f"fortune_qa.py: {len(seen)} records ({counts['question-and-answer']} question-and-answer, "
          f"{counts['definition']} definitions) from {len(files)} file(s)", file=sys.stderr)
    return 0 if seen else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

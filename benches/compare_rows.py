#!/usr/bin/env python3
"""Flags the figures of a benches/all.sh run that regressed against the last run
committed to docs/benchmarks.md (its "Every side-by-side figure, one run" table).

    benches/compare_rows.py docs/benchmarks.md target/bench-all/rows.md.tsv

A figure is shardboot's own value (the reference servers' figures are not compared: they
move with the machine, not the code). A figure is flagged when it is more than 20 % worse
than the committed one, in the direction its row says is better. Figures are matched by
their name; a row new to this run, or one whose value is not a number, is listed apart.
Exit status 1 when anything regressed, so a caller can act on it.
"""

import re
import sys

THRESHOLD = 0.20
SECTION = "## Every side-by-side figure, one run"


def number(text):
    """The leading number of a table cell ("42,298", "13.2 µs", "0.157 s"), or None."""
    m = re.match(r"\s*([0-9][0-9,]*(?:\.[0-9]+)?)", text)
    return float(m.group(1).replace(",", "")) if m else None


def committed(path):
    """Figure name -> shardboot's value, and the run's date, from the committed table."""
    lines = open(path, encoding="utf-8").read().splitlines()
    try:
        start = lines.index(SECTION)
    except ValueError:
        return {}, "no committed run"
    figures, when, in_table = {}, "the committed run", False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        m = re.search(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC)", line)
        if m and not in_table:
            when = m.group(1)
        if line.startswith("|"):
            in_table = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) >= 2 and number(cells[1]) is not None:
                figures.setdefault(cells[0], number(cells[1]))
        elif in_table:
            break
    return figures, when


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, when = committed(sys.argv[1])
    regressed, new = [], []
    seen = set()
    for line in open(sys.argv[2], encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or parts[0] in seen:
            continue
        what, value, better = parts
        seen.add(what)
        now, old = number(value), before.get(what)
        if now is None or old is None or old == 0:
            new.append(what)
            continue
        change = (now - old) / old
        worse = -change if better == "higher" else change
        if worse > THRESHOLD:
            regressed.append(f"  {what}: {value} against {old:g} on {when} ({worse:.0%} worse)")
    if regressed:
        print(f"REGRESSED by more than {THRESHOLD:.0%} against {when}:")
        print("\n".join(regressed))
    else:
        print(f"no figure regressed by more than {THRESHOLD:.0%} against {when}")
    if new:
        print("not in the committed run (nothing to compare): " + "; ".join(new))
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""scripts/run_summary.py: a finished run's figures, from the summary record that ends its
metrics.jsonl (docs/formats.md#metrics-file), for the study and benchmark scripts.

    python3 scripts/run_summary.py RUN_DIR|METRICS_FILE [FIELD...]

prints the FIELDs' values on one line, tab-separated, as the file holds them; "-" for a
null (a figure the run does not have) or for a field the record lacks. Without FIELDs it
prints every field of the record, one "name<TAB>value" line each.

Exit status: 0; 1 when the metrics file is missing or unreadable, or does not end with a
summary record (the run stopped before its end, or was refused before it trained), with a
message naming the file; 2 on bad usage (a FIELD the record does not have and the format
does not name).
"""
import json
import os
import sys

METRICS_NAME = "metrics.jsonl"
# the fields of the summary record (common/run_summary.h)
FIELDS = ("first_step", "last_step", "timed_steps", "ms_per_step", "tokens_per_s", "mfu", "gflops",
          "joules_per_step", "device_peak_mib", "host_peak_mib", "data_stall_ms", "skipped_updates")


class NoSummary(Exception):
    """the run has no summary record; the message names the file"""


def metrics_path(arg):
    return os.path.join(arg, METRICS_NAME) if os.path.isdir(arg) else arg


def read_summary(path):
    """the summary record that ends the metrics file at path"""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        what = "file" if os.path.basename(path) == METRICS_NAME else "run folder or file"
        raise NoSummary(f"{path}: no such {what} (a run without -o, or one that stopped before it began)")
    except OSError as e:
        raise NoSummary(f"{path}: cannot read it: {e.strerror}")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise NoSummary(f"{path}: empty (the run stopped before its first record)")
    try:
        rec = json.loads(lines[-1])
    except ValueError:
        raise NoSummary(f"{path}: the last line is not a whole JSON record (the run was cut off while writing?)")
    if not isinstance(rec, dict) or rec.get("type") != "summary":
        kind = rec.get("type") if isinstance(rec, dict) else None
        raise NoSummary(f"{path}: does not end with a summary record (its last record is {json.dumps(kind)}: "
                        f"the run stopped before its end)")
    return rec


def text(value):
    if value is None:
        return "-"
    return json.dumps(value) if isinstance(value, (bool, list, dict)) else str(value)


def main(argv):
    if len(argv) < 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    path = metrics_path(argv[0])
    try:
        rec = read_summary(path)
    except NoSummary as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    fields = argv[1:]
    unknown = [f for f in fields if f not in rec and f not in FIELDS]
    if unknown:
        print(f"error: {', '.join(unknown)}: not a field of the summary record ({', '.join(FIELDS)})",
              file=sys.stderr)
        return 2
    if not fields:
        for k, v in rec.items():
            if k != "type":
                print(f"{k}\t{text(v)}")
        return 0
    print("\t".join(text(rec.get(f)) for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""dev/ncu_step.py: one training step of train_gpt2cu, kernel by kernel, from Nsight Compute.

Reads the CSV of
    ncu --clock-control none --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,\
dram__bytes_write.sum --csv --page raw ./train_gpt2cu ... -x 2 -v 0 -s 0 -g 0
and sums the kernels of one step (those after the first grad_norm_finish_kernel up to and
including the second: the first step's AdamW, then the second step's forward, backward and
norm) by kernel name: calls, ms, DRAM GB, TB/s, largest first. ncu serialises the kernels
and runs each at the clock an idle GPU gives it, so the sum is below a timed step.
--mark NAME: another kernel ends a step (decode_sample_kernel: a step of generation).

usage: python3 dev/ncu_step.py ncu.csv [--step K] [--mark NAME]
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short_name(name):
    """kernel name without return type, namespace noise, template arguments or parameters"""
    name = re.sub(r"\(.*$", "", name)  # parameter list
    depth, out = 0, []
    for ch in name:  # drop <...> (nested)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out).split()[-1] if "".join(out).split() else name
    return name


def read_rows(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"error: {path}: no ncu CSV header (a line starting with \"ID\") found")
    rows, units = [], {}
    for r in csv.DictReader(lines[start:]):
        if not (r.get("ID") or "").isdigit():
            units = r  # the units row
            continue
        rows.append(r)
    if not rows:
        sys.exit(f"error: {path}: the CSV holds no kernel rows")
    return rows, units


SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}


def num(r, units, key):
    """the metric in base units (seconds, bytes), whatever unit ncu printed it in"""
    v = (r.get(key) or "").replace(",", "")
    try:
        return float(v) * SCALE.get((units.get(key) or "").strip(), 1.0)
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=2, help="which step to sum (>= 2; default 2)")
    ap.add_argument("--mark", default="grad_norm_finish_kernel",
                    help="the kernel that ends a step (default grad_norm_finish_kernel)")
    a = ap.parse_args()
    if a.step < 2:
        sys.exit("error: --step must be 2 or more (a step is counted from the mark kernel of the one before)")
    rows, units = read_rows(a.csv)
    marks = [i for i, r in enumerate(rows) if short_name(r.get("Kernel Name", "")) == a.mark]
    if len(marks) < a.step:
        sys.exit(f"error: {a.csv}: {len(marks)} {a.mark} kernels, need {a.step} (profile {a.step} steps or more)")
    lo, hi = marks[a.step - 2] + 1, marks[a.step - 1] + 1
    tot = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows[lo:hi]:
        t = tot[short_name(r["Kernel Name"])]
        t[0] += 1
        t[1] += num(r, units, "gpu__time_duration.sum") * 1e3
        t[2] += (num(r, units, "dram__bytes_read.sum") + num(r, units, "dram__bytes_write.sum")) * 1e-9
    print(f"| kernel | calls | ms | DRAM GB | TB/s |\n| --- | --- | --- | --- | --- |")
    for name, (n, ms, gb) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {ms:.4f} | {gb:.2f} | {gb / ms if ms > 0 else 0:.2f} |")
    s_ms = sum(v[1] for v in tot.values())
    s_gb = sum(v[2] for v in tot.values())
    print(f"| sum | {sum(v[0] for v in tot.values())} | {s_ms:.3f} | {s_gb:.1f} | |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""scripts/plot_trace.py: one training step's timeline from a trace the trainers write with
--trace, the memory of a step from a --memory-trace file, and a checker of both formats.

A trace (docs/formats.md#trace-files) is Chrome's trace-event JSON, which Perfetto and
chrome://tracing open too; this draws one step as a picture that can go into a report: a row
per host thread, then the GPU's rows (one per CUDA stream), each span a bar coloured by the
phase it belongs to (host phases by their own name; kernels, copies and collectives by the GPU phase span
that holds them, grey outside any), the x axis in ms from the step's start. A memory trace
gives the device memory of one step at a few points, by category: drawn as stacked bars, one
per sample in order, with the peak marked.

    python3 scripts/plot_trace.py log/trace.json -o timeline.png --step 12
    python3 scripts/plot_trace.py --memory log/memory.json -o memory.png
    python3 scripts/plot_trace.py --validate log/trace.json log/memory.json

--validate checks files strictly (the kind of each is told by its keys), needs no matplotlib
and prints one line for each valid file. Drawing checks its input the same way first. Exit
status: 0 when everything was drawn or valid, 1 on an error (a message naming the file and
the first problem), 2 on bad usage, 77 when drawing was asked for but matplotlib is missing.
"""
import argparse
import json
import re
import math
import os
import sys

PROGRAMS = ("train_gpt2", "train_gpt2cu")
PHASES = ("batch", "upload", "forward", "loss", "backward", "update")
BETWEEN = ("evaluation", "sample", "checkpoint", "hellaswag")
GPU_OPS = ("kernel", "memcpy", "memset", "comm")
CATS = ("step", "phase", "between") + GPU_OPS
HOST_ONLY = ("step", "between")  # what the training loop itself does
MEMORY_CATEGORIES = ("parameters", "gradients", "optimizer state", "activations (kept)", "scratch",
                     "staging", "communication", "fp8 copies", "other (runtime, libraries)")
# Times are microseconds printed with a few decimals; a child's end computed from its own
# rounded ts and dur may pass its parent's end by a rounding step without being a real overlap.
EPS_US = 0.01
GIB = float(1 << 30)
MIB = float(1 << 20)
SKIP = 77  # the exit status the test harness reads as "could not be checked here"


class InputError(Exception):
    """a problem with one input; the message names the file"""


class NoMatplotlib(Exception):
    """drawing was asked for on a python without matplotlib"""


# ---------------------------------------------------------------- reading

def is_int(v):
    # bool is an int subclass in Python, but true/false in the file would be a writer's bug
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


def js(v):
    """a value as the file would spell it, kept short for a message"""
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def load_json(path):
    """the top-level object of a JSON file; a truncated file (a run killed while writing its
    trace) and NaN or Infinity, which JSON does not have, are errors naming the file"""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    if not data.strip():
        raise InputError(f"{path}: empty (not JSON)")

    def reject_constant(name):
        raise ValueError(f"{name} is not JSON (a non-finite number)")

    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=reject_constant)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not JSON (not UTF-8 text)")
    except ValueError as e:
        raise InputError(f"{path}: not JSON: {e}")
    if not isinstance(obj, dict):
        raise InputError(f"{path}: not a trace: the top level is a JSON {type(obj).__name__}, not an object")
    return obj


def kind_of(path, obj):
    if "memoryTrace" in obj:
        return "memory"
    if "traceEvents" in obj:
        return "trace"
    raise InputError(f"{path}: neither a trace (no \"traceEvents\") nor a memory trace (no \"memoryTrace\")")


# ---------------------------------------------------------------- the trace

class Span:
    """one complete ("X") event"""

    def __init__(self, index, ev):
        self.index = index
        self.name = ev["name"]
        self.cat = ev["cat"]
        self.pid = ev["pid"]
        self.tid = ev["tid"]
        self.ts = float(ev["ts"])
        self.dur = float(ev["dur"])
        self.end = self.ts + self.dur
        self.step = ev["args"]["step"]

    def label(self):
        return f"traceEvents[{self.index}] ({self.cat} \"{self.name}\", {self.ts:.3f}..{self.end:.3f} us)"


class Trace:
    def __init__(self, path):
        self.path = path
        self.program = None
        self.steps = None            # (first, last)
        self.process = {}            # pid -> name
        self.thread = {}             # (pid, tid) -> name
        self.spans = []
        self.n_events = 0

    def is_gpu(self, pid):
        return self.process.get(pid, "") != "host"

    def rows(self):
        """(pid, tid) of every thread with spans: host threads first, then GPU streams, each
        in pid and tid order (the order nsys and Perfetto show them)"""
        keys = {(s.pid, s.tid) for s in self.spans}
        return sorted(keys, key=lambda k: (self.is_gpu(k[0]), k[0], k[1]))

    def row_label(self, key):
        pid, tid = key
        proc = self.process.get(pid, f"pid {pid}")
        # "GPU 0 (NVIDIA H100 80GB HBM3)" is long; the card's name goes in the title instead
        proc = proc.split(" (")[0]
        return f"{proc}: {self.thread.get(key, f'tid {tid}')}"

    def gpu_name(self):
        names = sorted({n for p, n in self.process.items() if self.is_gpu(p)})
        return ", ".join(names)


def check_fields(ev, where, want, errors):
    """want: key -> (test, what it must be); False when a key is missing or wrong"""
    ok = True
    for key, (test, what) in want.items():
        if key not in ev:
            errors.append(f"{where}: no \"{key}\"")
            ok = False
        elif not test(ev[key]):
            errors.append(f"{where}: \"{key}\" is {js(ev[key])}, not {what}")
            ok = False
    return ok


def is_name(v):
    return isinstance(v, str) and v != ""


def validate_trace(path, obj):
    """(errors, Trace): the list of what is wrong (empty: valid) in the order found"""
    errors = []
    tr = Trace(path)
    for key in ("traceEvents", "displayTimeUnit", "otherData"):
        if key not in obj:
            errors.append(f"{path}: no \"{key}\"")
    if "displayTimeUnit" in obj and obj["displayTimeUnit"] != "ms":
        errors.append(f"{path}: \"displayTimeUnit\" is {js(obj['displayTimeUnit'])}, not \"ms\"")
    other = obj.get("otherData")
    if "otherData" in obj and not isinstance(other, dict):
        errors.append(f"{path}: \"otherData\" is not an object")
    elif isinstance(other, dict):
        where = f"{path}: otherData"
        check_fields(other, where, {"program": (lambda v: v in PROGRAMS, " or ".join(PROGRAMS)),
                                    "steps": (lambda v: isinstance(v, list), "[FIRST, LAST]"),
                                    "clock": (is_name, "a description of the clock")}, errors)
        tr.program = other.get("program")
        steps = other.get("steps")
        if isinstance(steps, list):
            if len(steps) != 2 or not all(is_int(s) and s >= 0 for s in steps) or steps[0] > steps[1]:
                errors.append(f"{where}: \"steps\" is {js(steps)}, not [FIRST, LAST] with 0 <= FIRST <= LAST")
            else:
                tr.steps = (steps[0], steps[1])
    events = obj.get("traceEvents")
    if "traceEvents" in obj and not isinstance(events, list):
        errors.append(f"{path}: \"traceEvents\" is not a list")
        events = None
    if events is None:
        return errors, tr
    tr.n_events = len(events)

    spans = []
    for i, ev in enumerate(events):
        where = f"{path}: traceEvents[{i}]"
        if not isinstance(ev, dict):
            errors.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        if "ph" not in ev:
            errors.append(f"{where}: no \"ph\"")
        elif ph == "M":
            check_metadata(ev, where, tr, errors)
        elif ph == "X":
            if check_span(ev, where, errors):
                spans.append(Span(i, ev))
        else:
            errors.append(f"{where}: \"ph\" is {js(ph)}, not \"M\" (metadata) or \"X\" (a span)")

    # what needs every event read first: names given anywhere in the file, steps, nesting
    for s in spans:
        where = f"{path}: {s.label()}"
        if s.pid not in tr.process:
            errors.append(f"{where}: pid {s.pid} has no process_name event")
            continue
        if (s.pid, s.tid) not in tr.thread:
            errors.append(f"{where}: pid {s.pid} tid {s.tid} has no thread_name event")
            continue
        gpu = tr.is_gpu(s.pid)
        if gpu and s.cat in HOST_ONLY:
            errors.append(f"{where}: a {s.cat} span on the GPU (\"{tr.process[s.pid]}\"); it belongs to the host")
        elif not gpu and s.cat in GPU_OPS:
            errors.append(f"{where}: a {s.cat} span on the host; it belongs to a GPU stream")
        elif tr.steps and not tr.steps[0] <= s.step <= tr.steps[1]:
            errors.append(f"{where}: step {s.step} is outside the traced steps {tr.steps[0]}..{tr.steps[1]}")
        else:
            tr.spans.append(s)
    if tr.steps:
        step_spans = {}
        for s in tr.spans:
            if s.cat == "step":
                step_spans.setdefault(s.step, []).append(s)
        for n in range(tr.steps[0], tr.steps[1] + 1):
            found = step_spans.get(n, [])
            if not found:
                errors.append(f"{path}: no span of step {n} (cat \"step\"), though otherData.steps is "
                              f"[{tr.steps[0]}, {tr.steps[1]}]")
            elif len(found) > 1:
                errors.append(f"{path}: {len(found)} spans of step {n} (traceEvents[{found[0].index}] and "
                              f"[{found[1].index}])")
    check_nesting(tr, errors)
    return errors, tr


def check_metadata(ev, where, tr, errors):
    name = ev.get("name")
    if name not in ("process_name", "thread_name"):
        errors.append(f"{where}: metadata \"name\" is {js(name)}, not \"process_name\" or \"thread_name\"")
        return
    want = {"pid": (is_int, "an integer"), "args": (lambda v: isinstance(v, dict), "an object")}
    if name == "thread_name":
        want["tid"] = (is_int, "an integer")
    if not check_fields(ev, where, want, errors):
        return
    if not check_fields(ev["args"], f"{where} args", {"name": (is_name, "a name")}, errors):
        return
    label = ev["args"]["name"]
    if name == "process_name":
        # the drawing tells host rows from GPU rows by this name
        if label != "host" and not label.startswith("GPU "):
            errors.append(f"{where}: process name {js(label)} is neither \"host\" nor \"GPU N (...)\"")
        elif tr.process.get(ev["pid"], label) != label:
            errors.append(f"{where}: pid {ev['pid']} named {js(label)}, earlier {js(tr.process[ev['pid']])}")
        else:
            tr.process[ev["pid"]] = label
    else:
        key = (ev["pid"], ev["tid"])
        if tr.thread.get(key, label) != label:
            errors.append(f"{where}: pid {key[0]} tid {key[1]} named {js(label)}, earlier {js(tr.thread[key])}")
        else:
            tr.thread[key] = label


def check_span(ev, where, errors):
    """True when the X event has everything a span needs, with sensible values"""
    name = ev.get("name")
    if isinstance(name, str):
        where = f"{where} (X \"{name}\")"
    ok = check_fields(ev, where, {
        "name": (is_name, "a name"),
        "cat": (lambda v: v in CATS, "one of " + ", ".join(CATS)),
        "pid": (is_int, "an integer"),
        "tid": (is_int, "an integer"),
        "ts": (is_num, "a finite number (microseconds)"),
        "dur": (is_num, "a finite number (microseconds)"),
        "args": (lambda v: isinstance(v, dict), "an object")}, errors)
    if "dur" in ev and is_num(ev["dur"]) and ev["dur"] < 0:
        errors.append(f"{where}: \"dur\" is {js(ev['dur'])}, negative")
        ok = False
    if isinstance(ev.get("args"), dict):
        ok = check_fields(ev["args"], f"{where} args", {
            "step": (lambda v: is_int(v) and v >= 0, "a step number")}, errors) and ok
    if not ok:
        return False
    cat = ev["cat"]
    if cat == "step" and name != f"step {ev['args']['step']}":
        errors.append(f"{where}: a step span named {js(name)}; its args say step {ev['args']['step']}, "
                      f"so \"step {ev['args']['step']}\"")
        return False
    if cat == "phase" and name not in PHASES:
        errors.append(f"{where}: phase {js(name)} is not one of {', '.join(PHASES)}")
        return False
    if cat == "between" and name not in BETWEEN:
        errors.append(f"{where}: {js(name)} is not one of {', '.join(BETWEEN)} (cat \"between\")")
        return False
    return True


def check_nesting(tr, errors):
    """On a host thread every span lies within the one around it or after it: the trainer
    opens and closes them in nested order. A GPU stream's operations are not held to it: a
    kernel launched with programmatic dependent launch (cuBLASLt's split-K reduction after its
    GEMM, for one) starts while the one before it on its stream is still finishing, and the
    GPU's phase spans each run from the first to the last operation their host phase
    launched, on whatever stream."""
    by_row = {}
    for s in tr.spans:
        by_row.setdefault((s.pid, s.tid), []).append(s)
    for key in tr.rows():
        if tr.is_gpu(key[0]):
            continue
        # parents first: earlier start, and at the same start the longer span
        spans = sorted(by_row[key], key=lambda s: (s.ts, -s.dur, s.index))
        where = f"\"{tr.thread[key]}\" (pid {key[0]}, tid {key[1]})"
        stack = []
        for s in spans:
            while stack and stack[-1].end <= s.ts + EPS_US:
                stack.pop()
            if stack and s.end > stack[-1].end + EPS_US:
                errors.append(f"{tr.path}: on the host thread {where}, {s.label()} overlaps "
                              f"{stack[-1].label()} without nesting in it")
                continue
            stack.append(s)


def trace_summary(tr):
    counts = {}
    for s in tr.spans:
        if s.cat in ("phase", "between"):
            counts[s.name] = counts.get(s.name, 0) + 1
    ops = sum(s.cat in GPU_OPS and tr.is_gpu(s.pid) for s in tr.spans)
    per = ", ".join(f"{n} {counts[n]}" for n in PHASES + BETWEEN if n in counts) or "none"
    return (f"{tr.program}, steps {tr.steps[0]}..{tr.steps[1]}: {tr.n_events} events ({len(tr.spans)} spans, "
            f"{ops} GPU operations), spans per phase: {per}")


# ---------------------------------------------------------------- the memory trace

def size_unit(peak):
    """(divisor, name): GiB for a GPU run; a small model on the CPU peaks well under a GiB,
    where GiB figures would all read 0.00"""
    return (GIB, "GiB") if peak >= GIB else (MIB, "MiB")


def bytes_text(n):
    div, unit = size_unit(n)
    return f"{n / div:.2f} {unit}"


def validate_memory(path, obj):
    """(errors, summary) of a memory trace"""
    errors = []
    ok = check_fields(obj, path, {
        "memoryTrace": (lambda v: is_int(v) and v == 1, "1 (the format's version)"),
        "program": (lambda v: v in PROGRAMS, " or ".join(PROGRAMS)),
        "step": (lambda v: is_int(v) and v >= 0, "a step number"),
        "peak_bytes": (lambda v: is_int(v) and v >= 0, "a byte count"),
        "categories": (lambda v: isinstance(v, list) and len(v) > 0, "a list of category names"),
        "allocations": (lambda v: isinstance(v, list), "a list"),
        "samples": (lambda v: isinstance(v, list) and len(v) > 0, "a list of samples, at least one")}, errors)
    cats = obj.get("categories") if isinstance(obj.get("categories"), list) else []
    for c in cats:
        if c not in MEMORY_CATEGORIES:
            errors.append(f"{path}: category {js(c)} is not one of {', '.join(MEMORY_CATEGORIES)}")
        elif cats.count(c) > 1:
            errors.append(f"{path}: category {js(c)} named twice")
            break
    known = set(cats)
    for i, a in enumerate(obj.get("allocations") if isinstance(obj.get("allocations"), list) else []):
        where = f"{path}: allocations[{i}]"
        if not isinstance(a, dict):
            errors.append(f"{where}: not an object")
            continue
        if isinstance(a.get("name"), str):
            where += f" (\"{a['name']}\")"
        check_fields(a, where, {
            "name": (is_name, "a name"),
            "category": (lambda v: v in known, "one of the file's categories"),
            "bytes": (lambda v: is_int(v) and v >= 0, "a byte count"),
            "layer": (lambda v: v is None or (is_int(v) and v >= 0), "a layer number or null")}, errors)
    samples = obj.get("samples") if isinstance(obj.get("samples"), list) else []
    totals = []  # (total, index, at) of each sample whose total adds up
    last_t = None
    for i, smp in enumerate(samples):
        where = f"{path}: samples[{i}]"
        if not isinstance(smp, dict):
            errors.append(f"{where}: not an object")
            continue
        if isinstance(smp.get("at"), str):
            where += f" (\"{smp['at']}\")"
        if not check_fields(smp, where, {
                "at": (is_name, "where in the step it was taken"),
                "t_us": (is_num, "a finite number (microseconds)"),
                "bytes": (lambda v: isinstance(v, dict), "an object of category: bytes"),
                "total": (lambda v: is_int(v) and v >= 0, "a byte count")}, errors):
            continue
        bad = False
        for c, n in smp["bytes"].items():
            if c not in known:
                errors.append(f"{where}: bytes of {js(c)}, which is not in \"categories\"")
                bad = True
            elif not (is_int(n) and n >= 0):
                errors.append(f"{where}: bytes of \"{c}\" is {js(n)}, not a byte count")
                bad = True
        if bad:
            continue
        parts = sum(smp["bytes"].values())
        if smp["total"] != parts:
            errors.append(f"{where}: \"total\" is {smp['total']}, but its categories sum to {parts}")
            continue
        if last_t is not None and smp["t_us"] < last_t:
            errors.append(f"{where}: \"t_us\" {smp['t_us']} is before the sample before it ({last_t}); "
                          f"samples are in the order taken")
        last_t = smp["t_us"]
        totals.append((smp["total"], i, smp["at"]))
    summary = ""
    if ok and totals and len(totals) == len(samples):
        top, i, at = max(totals, key=lambda t: (t[0], -t[1]))
        if obj["peak_bytes"] != top:
            errors.append(f"{path}: \"peak_bytes\" is {obj['peak_bytes']}, but the largest sample total is "
                          f"{top} (samples[{i}], \"{at}\")")
        summary = (f"{obj['program']} step {obj['step']}: {len(samples)} samples, peak {bytes_text(top)} "
                   f"({top} bytes) at \"{at}\", {len(obj['allocations'])} allocations")
    return errors, summary


# ---------------------------------------------------------------- drawing

def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise NoMatplotlib(f"matplotlib is not installed for this python ({sys.executable}): "
                           f"pip install matplotlib, or run scripts/install_deps.sh (--validate needs none)")
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    return plt


def phase_colours():
    """a fixed colour per phase and per work between steps, so pictures of different runs
    and steps can be compared at a glance"""
    tab = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#bcbd22", "#17becf", "#393b79"]
    return dict(zip(PHASES + BETWEEN, tab))


OUTSIDE = "#b0b0b0"  # GPU work outside any phase span


def depths(spans):
    """(index -> depth within the row, 0 outermost; the indices of spans that hold others), by
    the rule of the check. A span that overlaps the one before it without nesting (the GPU's
    phase spans may) is drawn a level down, smaller, so both stay visible."""
    depth, parents = {}, set()
    stack = []
    for s in sorted(spans, key=lambda s: (s.ts, -s.dur, s.index)):
        while stack and stack[-1].end <= s.ts + EPS_US:
            stack.pop()
        depth[s.index] = len(stack)
        if stack and s.end <= stack[-1].end + EPS_US:
            parents.add(stack[-1].index)
        stack.append(s)
    return depth, parents


def colour_keys(tr, spans):
    """index -> the phase (or between) name a span is coloured by, None for grey: phase and
    between spans by their own name; other work by the innermost phase span of the same
    process that holds it (GPU kernels by the GPU phase span of the kernels a phase
    launched, whatever stream that span is drawn on)"""
    phases = {}
    for s in spans:
        if s.cat == "phase":
            phases.setdefault(s.pid, []).append(s)
    out = {}
    for s in spans:
        if s.cat in ("phase", "between"):
            out[s.index] = s.name
        elif s.cat == "step":
            out[s.index] = "step"
        else:
            holders = [p for p in phases.get(s.pid, ())
                       if p.ts <= s.ts + EPS_US and s.end <= p.end + EPS_US]
            out[s.index] = min(holders, key=lambda p: p.dur).name if holders else None
    return out


def step_spans(tr, step):
    return [s for s in tr.spans if s.step == step]


def draw_timeline(tr, step, out):
    spans = step_spans(tr, step)
    main = next(s for s in spans if s.cat == "step")
    plt = pyplot()
    from matplotlib.patches import Patch

    rows = [k for k in tr.rows() if any((s.pid, s.tid) == k for s in spans)]
    colours = phase_colours()
    keys = colour_keys(tr, spans)
    fig_h = 1.6 + 0.45 * len(rows)
    fig, ax = plt.subplots(figsize=(14, max(3.0, fig_h)))
    used = set()
    t0 = main.ts
    for y, row in enumerate(rows):
        mine = [s for s in spans if (s.pid, s.tid) == row]
        depth, parents = depths(mine)
        # bars grouped by their look, so that thousands of kernels are one call each
        groups = {}
        for s in mine:
            key = keys[s.index]
            used.add(key)
            if key == "step":
                face, edge = "white", "black"
            else:
                face, edge = colours.get(key, OUTSIDE), "none"
            d = depth[s.index]
            height = 0.8 * 0.8 ** d
            # a span holding others is drawn faint, so what runs inside it shows
            alpha = 1.0 if key == "step" else (0.35 if s.index in parents else 0.95)
            hatch = "...." if s.cat in ("memcpy", "memset") else "xxx" if s.cat == "comm" else None
            groups.setdefault((d, face, edge, alpha, height, hatch), []).append(
                ((s.ts - t0) / 1e3, max(s.dur / 1e3, 1e-6)))
        for (d, face, edge, alpha, height, hatch), bars in sorted(groups.items(), key=lambda g: g[0][0]):
            ax.broken_barh(bars, (y - height / 2, height), facecolors=face, edgecolors=edge, alpha=alpha,
                           linewidth=0.6 if edge != "none" else 0, hatch=hatch, zorder=2 + d)
    ax.axvline(0, color="black", lw=0.6, ls=":")
    ax.axvline(main.dur / 1e3, color="black", lw=0.6, ls=":")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([tr.row_label(r) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # host threads on top
    lo = min(s.ts for s in spans)
    hi = max(s.end for s in spans)
    pad = (hi - lo) / 1e3 * 0.01
    ax.set_xlim((lo - t0) / 1e3 - pad, (hi - t0) / 1e3 + pad)
    ax.set_xlabel(f"ms from the start of step {step}")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(facecolor=colours[n], label=n) for n in PHASES + BETWEEN if n in used]
    if None in used:
        handles.append(Patch(facecolor=OUTSIDE, label="outside any phase"))
    if any(s.cat in ("memcpy", "memset") for s in spans):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="....", label="copy / memset"))
    if any(s.cat == "comm" for s in spans):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="xxx", label="communication"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    gpu = tr.gpu_name()
    ax.set_title(f"{tr.program}" + (f" on {gpu}" if gpu else "") + f": step {step}, {main.dur / 1e3:.3f} ms")
    fig.tight_layout()
    save(plt, fig, out)
    return rows, main


MICRO_STEP = re.compile(r" \(micro-step (\d+)\)$")


def fold_micro_steps(samples):
    """What the memory picture draws: the samples in order, except that a micro-step whose
    samples repeat the micro-step before it, phase for phase and byte for byte, is left out;
    each run of such micro-steps leaves a label in its place (a trainer that allocates its
    buffers once shows the same bars every micro-step, and 16 or 128 copies of them would
    squeeze the picture)."""
    groups = []  # [micro-step or None, its samples]
    for s in samples:
        m = MICRO_STEP.search(s["at"])
        k = int(m.group(1)) if m else None
        if groups and k is not None and groups[-1][0] == k:
            groups[-1][1].append(s)
        else:
            groups.append([k, [s]])
    key = lambda g: [(MICRO_STEP.sub("", s["at"]), s["bytes"]) for s in g]
    shown, run = [], []
    for i, (k, g) in enumerate(groups):
        prev = groups[i - 1] if i else None
        if k is not None and prev is not None and prev[0] is not None and key(g) == key(prev[1]):
            run.append(k)
            continue
        if run:
            shown.append(f"micro-step{'s %d-%d' % (run[0], run[-1]) if len(run) > 1 else ' %d' % run[0]}: "
                         f"as micro-step {run[0] - 1}")
            run = []
        shown.extend(g)
    if run:
        shown.append(f"micro-steps {run[0]}-{run[-1]}: as micro-step {run[0] - 1}")
    return shown


def draw_memory(obj, out):
    plt = pyplot()
    shown = fold_micro_steps(obj["samples"])
    samples = [s for s in shown if isinstance(s, dict)]
    cats = [c for c in obj["categories"] if any(s["bytes"].get(c, 0) for s in samples)]
    palette = plt.get_cmap("tab10")
    colour = {c: palette(i % 10) for i, c in enumerate(MEMORY_CATEGORIES)}
    div, unit = size_unit(obj["peak_bytes"])
    x = [i for i, s in enumerate(shown) if isinstance(s, dict)]
    fig, ax = plt.subplots(figsize=(min(30.0, max(7.0, 1.0 + 0.7 * len(shown))), 5.2))
    base = [0.0] * len(samples)
    handles = []
    for c in cats:
        h = [s["bytes"].get(c, 0) / div for s in samples]
        handles.append(ax.bar(x, h, bottom=base, color=colour[c], label=c, width=0.7))
        base = [b + v for b, v in zip(base, h)]
    peak = obj["peak_bytes"] / div
    at = next(s["at"] for s in samples if s["total"] == obj["peak_bytes"])
    ax.axhline(peak, color="black", lw=1.0, ls="--")
    ax.text(len(shown) - 0.45, peak, f"peak {peak:.2f} {unit} ({at})", ha="right", va="bottom", fontsize=9)
    for i, s in enumerate(shown):
        if not isinstance(s, dict):
            ax.text(i, peak * 0.5, s, ha="center", va="center", rotation=90, fontsize=8, color="dimgray")
    ax.set_xticks(range(len(shown)))
    ax.set_xticklabels([s["at"] if isinstance(s, dict) else "..." for s in shown], rotation=30, ha="right",
                       fontsize=8)
    ax.set_xlim(-0.6, len(shown) - 0.4)
    ax.set_ylim(0, peak * 1.12 if peak > 0 else 1)
    ax.set_ylabel(f"device memory, {unit}" if obj["program"] == "train_gpt2cu" else f"memory, {unit}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    # top to bottom as the bars are stacked
    ax.legend(handles=handles[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"{obj['program']}: memory during step {obj['step']}, peak {peak:.2f} {unit}")
    fig.tight_layout()
    save(plt, fig, out)
    return bytes_text(obj["peak_bytes"]), at


def save(plt, fig, out):
    try:
        fig.savefig(out, dpi=100)
    except (OSError, ValueError) as e:
        raise InputError(f"{out}: cannot write the picture: {e}")
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- command line

def checked(path, want=None):
    """(kind, object, Trace or None, summary) of a file, or InputError with its first problem"""
    obj = load_json(path)
    kind = kind_of(path, obj)
    if want == "trace" and kind == "memory":
        raise InputError(f"{path}: a memory trace, not a timeline trace (draw it with --memory)")
    if want == "memory" and kind == "trace":
        raise InputError(f"{path}: a timeline trace, not a memory trace (draw it without --memory)")
    if kind == "trace":
        errors, tr = validate_trace(path, obj)
        summary = "" if errors else trace_summary(tr)
    else:
        errors, summary = validate_memory(path, obj)
        tr = None
    if errors:
        more = f" (and {len(errors) - 1} more problem(s); --validate lists them)" if len(errors) > 1 else ""
        raise InputError(errors[0] + more)
    return kind, obj, tr, summary


def validate_file(path):
    """(errors, summary) of a file of either kind"""
    try:
        obj = load_json(path)
        if kind_of(path, obj) == "memory":
            errors, summary = validate_memory(path, obj)
            return errors, "memory trace of " + summary
        errors, tr = validate_trace(path, obj)
        return errors, ("" if errors else "trace of " + trace_summary(tr))
    except InputError as e:
        return [str(e)], ""


def validate_files(paths):
    bad = 0
    for path in paths:
        errors, summary = validate_file(path)
        if errors:
            bad += 1
            # the first problem comes first: later ones are often its consequences
            for e in errors[:20]:
                print(f"error: {e}", file=sys.stderr)
            if len(errors) > 20:
                print(f"error: {path}: and {len(errors) - 20} more problem(s)", file=sys.stderr)
        else:
            print(f"{path}: valid: {summary}")
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Draw one training step's timeline from a trainer's --trace file, or a step's memory "
                    "from a --memory-trace file, or check such files with --validate.",
        epilog="example: python3 scripts/plot_trace.py log/trace.json -o timeline.png --step 12")
    p.add_argument("trace", nargs="*", metavar="TRACE.json",
                   help="a --trace file to draw (with --validate: any number of files of either kind)")
    p.add_argument("-o", "--output", metavar="PNG",
                   help="the picture to write (default: timeline.png, or memory.png with --memory)")
    p.add_argument("--step", type=int, metavar="S", help="the step to draw (default: the first traced step)")
    p.add_argument("--memory", metavar="MEMTRACE.json", help="draw this --memory-trace file instead")
    p.add_argument("--validate", action="store_true",
                   help="check the files strictly and print a summary of each instead of drawing")
    args = p.parse_args(argv)

    if args.validate:
        paths = list(args.trace) + ([args.memory] if args.memory else [])
        if not paths:
            p.error("--validate needs at least one file")
        if args.output or args.step is not None:
            p.error("--validate draws nothing: -o and --step do not apply")
        return validate_files(paths)
    if args.memory and args.trace:
        p.error("give a trace or --memory MEMTRACE.json, not both (one picture a run)")
    if not args.memory and len(args.trace) != 1:
        p.error("give one trace to draw (or --validate FILE...)")
    if args.memory and args.step is not None:
        p.error("--step applies to a trace; a memory trace holds one step")
    try:
        if args.memory:
            out = args.output or "memory.png"
            _, obj, _, _ = checked(args.memory, "memory")
            peak, at = draw_memory(obj, out)
            print(f"{args.memory}: {obj['program']} step {obj['step']}, {len(obj['samples'])} samples, "
                  f"peak {peak} at \"{at}\"")
        else:
            path = args.trace[0]
            out = args.output or "timeline.png"
            _, _, tr, _ = checked(path, "trace")
            step = tr.steps[0] if args.step is None else args.step
            if not tr.steps[0] <= step <= tr.steps[1]:
                raise InputError(f"{path}: step {step} is not traced (steps {tr.steps[0]}..{tr.steps[1]})")
            rows, main_span = draw_timeline(tr, step, out)
            n = len(step_spans(tr, step))
            print(f"{path}: {tr.program} step {step}, {main_span.dur / 1e3:.3f} ms, {n} spans on {len(rows)} "
                  f"rows ({sum(not tr.is_gpu(r[0]) for r in rows)} host threads, "
                  f"{sum(tr.is_gpu(r[0]) for r in rows)} GPU rows)")
    except NoMatplotlib as e:
        print(f"error: {e}", file=sys.stderr)
        return SKIP
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

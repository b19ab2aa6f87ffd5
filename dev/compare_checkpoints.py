#!/usr/bin/env python3
"""dev/compare_checkpoints.py: are two runs' checkpoints of one step the same?

    python3 dev/compare_checkpoints.py A_DIR B_DIR STEP

Compares, between the run directories A_DIR and B_DIR (each a trainer's -o):
  - model_<step>.bin byte for byte;
  - state_<step>.bin and every state_<step>.rank<r>.bin byte for byte, except the header
    slots that two otherwise identical runs fill differently (STATE_IGNORED below); the
    set of state files must be the same in both;
  - metrics.jsonl: the "step" records up to STEP (every field but the timings), the "val"
    and "hellaswag" records up to STEP, and the "run" records (all but the commit), each
    number as the text the trainer wrote; records of other types (a run's closing summary
    of timings and memory) are not compared.
Layouts: docs/formats.md (model checkpoint, training state, metrics file), which follows
common/checkpoint.h. Prints a line per item and a verdict; exits 0 when everything is
identical, 1 when something differs, 2 on a usage error or a file that is missing or
cannot be read (named in the message).
"""
import json
import os
import re
import struct
import sys

HEADER_BYTES = 1024
CHUNK = 16 << 20

MODEL_MAGIC = 20240326
STATE_MAGIC = 20241202
OUTLIER_WINDOW = 128  # common/outlier.h: floats in each of the -sl / -sg windows

# State header slots that differ between two runs that computed the same thing:
#   [14..15] main.log's length: its step lines hold timings, and "checkpoint written:" the
#            -o path, so the length follows the wall clock and the directory's name;
#   [67..68] metrics.jsonl's length: the step records hold "ms", "tokens_per_s", "mfu",
#            "elapsed_s" and the run record the commit;
#   [251]    the CRC-32C over the whole file, these slots included (the body it also covers
#            is compared directly).
# Nothing else in the state depends on time or console text: the sampling RNG, the loader
# position, the settings, the loss scaler, the outlier windows and the FP8 history come from
# the seed, the data and the arithmetic; [16] is the model file's CRC, which only the
# model's bytes decide (and the model file itself is compared whole, its CRC included).
STATE_IGNORED = {14, 15, 67, 68, 251}

STATE_SLOTS = {
    0: "magic", 1: "version", 2: "steps completed", 3: "master weights present",
    4: "world size", 5: "rank", 6: "loader position bytes", 7: "loss scaler clean steps",
    8: "optimizer elements n", 9: "optimizer elements n", 10: "sampling RNG", 11: "sampling RNG",
    12: "loss scale", 13: "skipped updates in a row", 16: "model file checksum",
    64: "skipped updates since the start", 65: "values in the loss window",
    66: "values in the gradient-norm window", 69: "FP8 scaling floats K", 250: "checksum tag",
}
for _i, _name in enumerate(["steps (-x)", "B (-b)", "T (-t)", "tokens per step (-d)", "peak lr (-l)",
                            "schedule (-k)", "warmup (-u)", "final lr fraction (-q)", "wsd decay fraction",
                            "weight decay (-c)", "grad clip", "ranks", "seed", "shuffle", "overfit (-a)"]):
    STATE_SLOTS[17 + _i] = "setting " + _name
for _i in range(32, 64):
    STATE_SLOTS[_i] = "data loader position"

MODEL_SLOTS = {0: "magic", 1: "version", 2: "maxT", 3: "V", 4: "layers", 5: "heads", 6: "channels",
               7: "padded V", 250: "checksum tag", 251: "CRC-32C"}

# the step record's fields that measure time rather than the computation
STEP_TIMING = {"ms", "tokens_per_s", "mfu", "elapsed_s"}


class Unreadable(Exception):
    """a file that is missing or cannot be parsed: exit 2"""


def slot_name(names, i):
    return "header slot [%d] (%s)" % (i, names.get(i, "reserved"))


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        return raw, None
    return raw, struct.unpack("<256i", raw)


def model_regions(h):
    """(name, first byte, element bytes, elements) of each tensor, in file order"""
    maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
    elem = 4 if h[1] == 3 else 2
    shapes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
              ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C),
              ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C), ("fcb", L * 4 * C),
              ("fcprojw", L * C * 4 * C), ("fcprojb", L * C), ("lnfw", C), ("lnfb", C)]
    out, off = [], HEADER_BYTES
    for name, n in shapes:
        out.append((name, off, elem, n))
        off += elem * n
    return out


def state_regions(h):
    n = (h[8] & 0xffffffff) | (h[9] << 32)
    parts = [("AdamW m", n), ("AdamW v", n)]
    if h[3]:
        parts.append(("fp32 master weights", n))
    if h[1] >= 2:
        parts += [("recent losses (-sl window)", OUTLIER_WINDOW), ("recent gradient norms (-sg window)", OUTLIER_WINDOW)]
    if h[1] >= 3 and h[69] > 0:
        parts.append(("FP8 scaling state", h[69]))
    out, off = [], HEADER_BYTES
    for name, count in parts:
        out.append((name, off, 4, count))
        off += 4 * count
    return out


def where(regions, offset):
    for name, start, elem, count in regions:
        if start <= offset < start + elem * count:
            return "%s[%d] (byte %d)" % (name, (offset - start) // elem, offset)
    return "byte %d (past the layout its header gives)" % offset


def first_body_difference(pa, pb, start):
    """offset of the first byte at or after start where the files differ, or None; a file
    that ends first differs at its end"""
    with open(pa, "rb") as fa, open(pb, "rb") as fb:
        fa.seek(start)
        fb.seek(start)
        off = start
        while True:
            a = fa.read(CHUNK)
            b = fb.read(CHUNK)
            if a != b:
                n = min(len(a), len(b))
                lo = 0
                # halve the window until the first differing byte: bytes comparisons stay in C
                hi = n
                while hi - lo > 64:
                    mid = (lo + hi) // 2
                    if a[lo:mid] != b[lo:mid]:
                        hi = mid
                    else:
                        lo = mid
                for i in range(lo, n):
                    if a[i] != b[i]:
                        return off + i
                return off + n
            if not a:
                return None
            off += len(a)


def compare_binary(name, pa, pb, names, regions_of, ignored, ignored_text=""):
    """(identical?, item, detail) for one checkpoint file present in both directories"""
    raw_a, ha = read_header(pa)
    raw_b, hb = read_header(pb)
    if ha is None or hb is None:
        short = pa if ha is None else pb
        raise Unreadable("%s: shorter than its %d-byte header" % (short, HEADER_BYTES))
    size_a, size_b = os.path.getsize(pa), os.path.getsize(pb)
    slots = [i for i in range(256) if ha[i] != hb[i] and i not in ignored]
    body = first_body_difference(pa, pb, HEADER_BYTES)
    problems = []
    if size_a != size_b:
        problems.append("%d bytes against %d" % (size_a, size_b))
    if slots:
        shown = ", ".join("%s %d vs %d" % (slot_name(names, i), ha[i], hb[i]) for i in slots[:3])
        problems.append(shown + (" and %d more slots" % (len(slots) - 3) if len(slots) > 3 else ""))
    if body is not None:
        problems.append("first differing byte in " + where(regions_of(ha), body))
    if problems:
        return False, name, "; ".join(problems)
    left_out = ", header slots %s left out" % ignored_text if ignored_text else ""
    return True, name, "%d bytes%s" % (size_a, left_out)


def read_metrics(path, step):
    """the records of metrics.jsonl, numbers kept as the text written, by type"""
    recs = {"run": [], "step": [], "val": [], "hellaswag": []}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Unreadable("%s: %s" % (path, e.strerror or e))
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line, parse_float=str, parse_int=str)
        except ValueError as e:
            raise Unreadable("%s line %d: not JSON (%s)" % (path, no, e))
        if not isinstance(r, dict):
            raise Unreadable("%s line %d: not a JSON object" % (path, no))
        kind = r.get("type")
        if kind not in recs:  # a summary of timings and memory, or a type yet to come
            continue
        if kind != "run":
            try:
                if int(r.get("step")) > step:
                    continue
            except (TypeError, ValueError):
                raise Unreadable("%s line %d: a %s record without a step number" % (path, no, kind))
        recs[kind].append(r)
    return recs


def flat(r, prefix=""):
    """a record with its nested objects' fields as "outer.inner" keys, so that a difference
    names the one field"""
    out = {}
    for k, v in r.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def compare_records(kind, ra, rb, skip):
    """(identical?, item, detail) for the records of one type"""
    a = [flat(r) for r in ra[kind]]
    b = [flat(r) for r in rb[kind]]
    fields = sorted({k for r in a + b for k in r} - skip - {"type"})
    label = "metrics.jsonl %s records" % kind
    for i, (x, y) in enumerate(zip(a, b)):
        for k in fields:
            if x.get(k) != y.get(k):
                at = "step %s" % x.get("step") if kind != "run" else "record %d" % (i + 1)
                return False, label, "at %s: %s %s vs %s" % (at, k, json.dumps(x.get(k)), json.dumps(y.get(k)))
    if len(a) != len(b):
        return False, label, "%d records against %d" % (len(a), len(b))
    if not a:
        return True, label, "none in either"
    span = ""
    if kind != "run":
        span = ", steps %s..%s" % (a[0]["step"], a[-1]["step"])
    what = ", ".join(fields)
    if kind == "run":
        what = "every field but the commit"
    elif kind == "step":
        what += "; the timings left out"
    return True, label, "%d record%s%s (%s)" % (len(a), "" if len(a) == 1 else "s", span, what)


def main(argv):
    if len(argv) != 4 or not re.fullmatch(r"[0-9]+", argv[3]):
        print("usage: %s A_DIR B_DIR STEP" % argv[0], file=sys.stderr)
        return 2
    da, db, step = argv[1], argv[2], int(argv[3])
    for d in (da, db):
        if not os.path.isdir(d):
            print("error: %s is not a directory" % d, file=sys.stderr)
            return 2
    tag = "%08d" % step
    model = "model_%s.bin" % tag
    state = "state_%s.bin" % tag
    shard = re.compile(r"state_%s\.rank([0-9]+)\.bin$" % tag)
    for d in (da, db):
        for f in (model, state, "metrics.jsonl"):
            if not os.path.isfile(os.path.join(d, f)):
                print("error: %s is missing" % os.path.join(d, f), file=sys.stderr)
                return 2
    shards_a = {f for f in os.listdir(da) if shard.match(f)}
    shards_b = {f for f in os.listdir(db) if shard.match(f)}
    results = []
    try:
        results.append(compare_binary(model, os.path.join(da, model), os.path.join(db, model), MODEL_SLOTS,
                                      model_regions, set()))
        for f in [state] + sorted(shards_a | shards_b, key=lambda s: int(shard.match(s).group(1))):
            if f in shards_a and f not in shards_b or f in shards_b and f not in shards_a:
                have, lack = (da, db) if f in shards_a else (db, da)
                results.append((False, f, "in %s only, not in %s" % (have, lack)))
                continue
            results.append(compare_binary(f, os.path.join(da, f), os.path.join(db, f), STATE_SLOTS, state_regions,
                                          STATE_IGNORED, "[14..15], [67..68], [251]"))
        ma = read_metrics(os.path.join(da, "metrics.jsonl"), step)
        mb = read_metrics(os.path.join(db, "metrics.jsonl"), step)
    except Unreadable as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("error: %s: %s" % (e.filename, e.strerror), file=sys.stderr)
        return 2
    results.append(compare_records("step", ma, mb, STEP_TIMING))
    results.append(compare_records("val", ma, mb, set()))
    results.append(compare_records("hellaswag", ma, mb, set()))
    # the run record names the commit the binary was built from, which is what differs
    results.append(compare_records("run", ma, mb, {"git"}))
    for same, item, detail in results:
        print("%s: %s: %s" % (item, "identical" if same else "DIFFERENT", detail))
    bad = [(item, detail) for same, item, detail in results if not same]
    if bad:
        print("DIFFERENT: %s: %s (%d of %d items differ)" % (bad[0] + (len(bad), len(results))))
        return 1
    print("identical: step %d of %s and %s (%d items)" % (step, da, db, len(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

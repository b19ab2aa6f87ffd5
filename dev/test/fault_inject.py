#!/usr/bin/env python3
"""fault_inject.py: random fault scenarios against the CPU trainer's run directory.

Each scenario plants files the trainer does not own in -o (names that look like
checkpoints, a directory, a symbolic link), runs ./train_gpt2 on a tiny model with one
fault (a file-system call in -o failing with EIO or ENOSPC, or killed before it, or a write
torn in half, through build/libfault_shim.so; or a kill -9 at a random moment, a checkpoint
file damaged between runs, the directory renamed under a running run), restarts it with
-y 1 until it completes, and checks what docs/reliability.md promises:

  (a) no planted file is changed, removed or added to, and no name the run does not own appears;
  (b) after every process, the newest intact checkpoint that existed before (or a newer one)
      still exists, and no checkpoint-named file is torn;
  (c) a completed run's last model file equals an uninterrupted run's, byte for byte;
  (d) a process that fails (not one killed on purpose) exits non-zero with an "error:" line,
      after a failed checkpoint write removing its temporary file and naming the step -y 1
      resumes from.

Python standard library only. The CRC-32C of the checkpoints is the shim library's, through
ctypes, checked at start against the pure-Python one here: that one alone runs at about
11 MB/s, and a scenario reads tens of MB of checkpoints.

  fault_inject.py [--scenarios N] [--seed S] [--jobs J] [--keep] [--report FILE] [--verbose]
                   (N drawn scenarios, after the REGRESSION_SEEDS, which every run repeats)
  fault_inject.py --replay SEED     one scenario, its commands printed, its directory kept
"""
import argparse
import concurrent.futures
import ctypes
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TRAINER = "./train_gpt2"
SHIM = os.path.join(ROOT, "build", "libfault_shim.so")
WORK = os.path.join("build", "fault_inject")
STEPS = 12
# a model of 1 layer and 8 channels keeps a checkpoint at 4.8 MB and a run at ~0.15 s: the
# vocabulary (50257, Tiny Shakespeare's tokens) is most of it
MODEL = ["-e", "l1h1c8t16", "-b", "2", "-t", "16", "-s", "0", "-v", "0", "-x", str(STEPS)]
OPTION_SETS = {
    "n3": ["-n", "3"],
    "n3-nk1": ["-n", "3", "-nk", "1"],
    "n2-nk2": ["-n", "2", "-nk", "2"],
    "n2-nk1-nm4": ["-n", "2", "-nk", "1", "-nm", "4"],
}
MAX_RESTARTS = 5
# scenarios that once found a defect, run first by every run of the suite: a failure in the
# first checkpoint's state rename (365822119) and in the directory's fsync just after its model
# rename (407908088), each of which left a model without a state that -y 1 refused for ever; a
# failed removal of a stale temporary at a resume's start, which left a damaged newer
# checkpoint under its name (1992506034); a lock file's write cut short by a kill, which the
# next start took for another program's (1900122868)
REGRESSION_SEEDS = [365822119, 407908088, 1992506034, 1900122868]
PROCESS_TIMEOUT = 120
ACTIONS = ["eio", "enospc", "kill", "torn"]
KINDS = [("fault", 45), ("resume-fault", 15), ("kill-delay", 10), ("kill-file", 10), ("damage", 12),
         ("rename-dir", 8)]

CKPT_MAGIC, STATE_MAGIC, CKSUM_TAG = 20240326, 20241202, 0x43524332
OUTLIER_WINDOW = 128
CKPT_NAME = re.compile(r"^(model|state)_(\d{8})(?:\.rank(\d+))?\.bin$")
_CK = r"(?:model_\d{8}\.bin|state_\d{8}\.bin|state_\d{8}\.rank\d+\.bin)"
# the names a run owns in -o (docs/reliability.md); anything else is the user's
# (a file set aside under a name taken already gets ".2", ".3", ...: set-aside files stay)
OWNED = re.compile(r"^(?:%s(?:\.tmp|\.corrupt(?:\.\d+)?|\.orphan(?:\.\d+)?)?|main\.log|metrics\.jsonl|\.lock)$" % _CK)
ASIDE = re.compile(r"^%s\.(?:corrupt|orphan)(?:\.\d+)?$" % _CK)
# the failure counts of the report, and what each means
CAUSES = {
    "lost": "lost intact checkpoints",
    "foreign": "foreign files touched",
    "torn": "torn files",
    "differs": "runs differing from the uninterrupted one",
    "bad-exit": "processes failing silently or ignoring a failure",
    "tmp-left": "temporaries left by a failed write",
    "hint": "failed writes not naming the step -y 1 resumes from",
    "aside": "set-aside files removed or changed",
    "incomplete": "runs not completed in %d restarts" % MAX_RESTARTS,
}


# ---------------------------------------------------------------------------------------
# CRC-32C and the checkpoint checks of docs/formats.md

def _py_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_PY_TABLE = _py_table()


def py_crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    t = _PY_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _load_fast_crc():
    try:
        lib = ctypes.CDLL(SHIM)
        f = lib.fault_crc32c
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
    f.restype = ctypes.c_uint32
    sample = random.Random(7).randbytes(70001)
    # the fast one must agree with the definition before it checks anything
    if f(0, b"123456789", 9) != 0xE3069283 or f(0, sample, len(sample)) != py_crc32c(sample):
        sys.exit("error: %s: fault_crc32c disagrees with the pure-Python CRC-32C" % SHIM)
    return lambda data, crc=0: f(crc, data, len(data))


crc32c = py_crc32c
_cache_lock = threading.Lock()
_file_cache = {}


def _file_key(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def header_crc(data):
    """The CRC of a file of ours: header with slot 251 as zero, then the body."""
    return crc32c(data[1024:], crc32c(data[:1004] + b"\0\0\0\0" + data[1008:1024]))


def check_file(path, name):
    """(ok, why, crc) for one checkpoint-named file on its own: header, length, checksum."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return False, "cannot stat: %s" % e.strerror, 0
    key = _file_key(st)
    with _cache_lock:
        if key in _file_cache:
            return _file_cache[key]
    try:
        result = _check_file_uncached(path, name, st)
    except OSError as e:  # removed or renamed meanwhile (a run still going, under -nk)
        return False, "cannot read: %s" % e.strerror, 0
    with _cache_lock:
        _file_cache[key] = result
    return result


def _check_file_uncached(path, name, st):
    if not stat.S_ISREG(st.st_mode):
        return False, "not a regular file", 0
    if st.st_size < 1024:
        return False, "%d bytes, shorter than the header" % st.st_size, 0
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack_from("<256i", data, 0)
    m = CKPT_NAME.match(name)
    if m.group(1) == "model":
        if h[0] != CKPT_MAGIC or h[1] not in (3, 5):
            return False, "bad magic or version", 0
        maxT, _, L, NH, C, Vp = h[2:8]
        if min(maxT, L, NH, C, Vp) <= 0 or max(maxT, L, NH, C, Vp) > 1 << 20:
            return False, "bad shape", 0
        n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
        expect = 1024 + n * (4 if h[1] == 3 else 2)
    else:
        if h[0] != STATE_MAGIC or not 1 <= h[1] <= 3:
            return False, "bad magic or version", 0
        if h[2] != int(m.group(2)):
            return False, "header says step %d" % h[2], 0
        n = struct.unpack_from("<q", data, 32)[0]
        expect = 1024 + 4 * n * (3 if h[3] else 2) + (8 * OUTLIER_WINDOW if h[1] >= 2 else 0) + \
            (4 * h[69] if h[1] >= 3 else 0)
    if len(data) != expect:
        return False, "%d bytes, its header implies %d" % (len(data), expect), 0
    if h[250] != CKSUM_TAG:
        return False, "no checksum tag (every file this trainer writes has one)", 0
    crc = header_crc(data)
    if crc != h[251] & 0xFFFFFFFF:
        return False, "checksum mismatch", 0
    return True, "", crc


def intact_steps(d, names):
    """The steps whose model and state files are each intact and were written together."""
    steps = []
    for name in names:
        m = CKPT_NAME.match(name)
        if not m or m.group(1) != "state" or m.group(3) is not None:
            continue
        step = int(m.group(2))
        model = "model_%08d.bin" % step
        if model not in names:
            continue
        ok_s, _, _ = check_file(os.path.join(d, name), name)
        ok_m, _, model_crc = check_file(os.path.join(d, model), model)
        if not (ok_s and ok_m):
            continue
        try:
            with open(os.path.join(d, name), "rb") as f:
                paired = struct.unpack("<256I", f.read(1024))[16]
        except (OSError, struct.error):
            continue
        if paired and model_crc and paired != model_crc:
            continue
        steps.append(step)
    return sorted(steps)


def sha1_file(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


# ---------------------------------------------------------------------------------------
# The user's files, planted in -o before a run

def plant(d, rng, outside):
    """Files with checkpoint-like names the trainer never writes; returns their snapshot."""
    os.makedirs(d, exist_ok=True)
    files = {"model_best.bin": 3000, "model_ finetuned.bin": 2048, "state_of_the_art.bin": 1500,
             "model_1.bin": 1024, "model_00000003.bin.bak": 4096}
    for name, size in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(rng.randbytes(size))
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("lr 3e-4 looked best; keep model_best.bin\n")
    os.mkdir(os.path.join(d, "model_archive.bin"))
    os.mkdir(os.path.join(d, "state_old.bin"))
    with open(os.path.join(d, "state_old.bin", "state_00000003.bin"), "wb") as f:
        f.write(rng.randbytes(2048))
    if not os.path.exists(outside):
        with open(outside, "wb") as f:
            f.write(rng.randbytes(1000))
    os.symlink(os.path.join("..", os.path.basename(outside)), os.path.join(d, "model_link.bin"))
    # only these names: a run still writing into d (renamed under it) may add its own
    return snapshot(d, list(files) + ["notes.txt", "model_archive.bin", "state_old.bin", "model_link.bin"], outside)


def snapshot(d, names, outside):
    snap = {}
    for name in names:
        p = os.path.join(d, name)
        if os.path.islink(p):
            snap[name] = ("link", os.readlink(p))
        elif os.path.isdir(p):
            snap[name] = ("dir", sorted(os.listdir(p)))
            for inner in os.listdir(p):
                snap[name + "/" + inner] = ("file", sha1_file(os.path.join(p, inner)))
        else:
            snap[name] = ("file", sha1_file(p))
    snap["../" + os.path.basename(outside)] = ("file", sha1_file(outside))
    return snap


def check_planted(d, snap):
    """What changed among the planted files, and the names in d nobody owns: (changes, count)."""
    changes, checked = [], 0
    for rel, (kind, value) in snap.items():
        p = os.path.normpath(os.path.join(d, rel))
        checked += 1
        try:
            if kind == "link":
                now = os.readlink(p) if os.path.islink(p) else None
            elif kind == "dir":
                now = sorted(os.listdir(p)) if os.path.isdir(p) and not os.path.islink(p) else None
            else:
                now = sha1_file(p) if os.path.isfile(p) and not os.path.islink(p) else None
        except OSError:
            now = None
        if now is None:
            changes.append("%s: removed or replaced" % rel)
        elif now != value:
            changes.append("%s: changed" % rel)
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    for name in names:
        if name not in snap and not OWNED.match(name):
            changes.append("%s: created, a name the run does not own" % name)
    return changes, checked


# ---------------------------------------------------------------------------------------
# Runs

def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULT_") and k != "LD_PRELOAD"}
    env["OMP_NUM_THREADS"] = "1"
    return env


def trainer_cmd(opts, d):
    return [TRAINER] + MODEL + OPTION_SETS[opts] + ["-o", d, "-y", "1"]


def shell_text(cmd, env_extra):
    q = lambda s: s if re.match(r"^[\w./=:+-]+$", s) else "'" + s.replace("'", "'\\''") + "'"
    return " ".join(["%s=%s" % (k, q(v)) for k, v in env_extra.items()] + [q(c) for c in cmd])


class Proc:
    """One trainer process of a scenario and what became of it."""

    def __init__(self, sc, cmd, env_extra, tag):
        self.sc, self.cmd, self.env_extra, self.tag = sc, cmd, env_extra, tag
        self.harness_killed = False
        self.out = os.path.join(sc.w, "%s.out" % tag)
        self.err = os.path.join(sc.w, "%s.err" % tag)
        env = base_env()
        env.update(env_extra)
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=o, stderr=e)

    def kill(self):
        if self.p.poll() is None:
            self.harness_killed = True
            self.p.send_signal(signal.SIGKILL)

    def wait(self):
        try:
            self.rc = self.p.wait(timeout=PROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            self.rc = self.p.wait()
            self.harness_killed = False
            self.sc.problem("bad-exit", "%s: still running after %d s" % (self.tag, PROCESS_TIMEOUT))
        if self.harness_killed and self.rc != -signal.SIGKILL:
            self.harness_killed = False  # it ended by itself just before the kill
        with open(self.err, errors="replace") as f:
            self.stderr = f.read()
        self.fault = None  # (action, op, path, rename's destination or open's r/w) of the shim's fault
        log = self.env_extra.get("FAULT_LOG")
        self.ops = []
        if log and os.path.exists(log):
            with open(log, errors="replace") as f:
                lines = [ln.rstrip("\n").split("\t") for ln in f]
            for parts in lines:
                if parts[0] == "fault":  # the call before it is the one that got the fault
                    op = self.ops.pop()
                    self.fault = (parts[1], op[0], op[1], op[2] if len(op) > 2 else "")
                    break
                self.ops.append(parts)
        self.sc.trace("%s: %s\n    -> %s%s" % (self.tag, shell_text(self.cmd, self.env_extra), self.exit_text(),
                                               "" if not self.fault else "; fault %s on %s %s" % self.fault[:3]))
        return self

    def exit_text(self):
        if self.rc < 0:
            what = "killed by signal %d%s" % (-self.rc, " (the harness)" if self.harness_killed else "")
        else:
            what = "exit %d" % self.rc
        errs = [ln for ln in self.stderr.splitlines() if "error:" in ln]
        return what + (": " + errs[0][:300] if errs else "")

    def resumed_step(self):
        """The step this process said it resumed from, or None."""
        try:
            with open(self.out, errors="replace") as f:
                m = re.search(r"^resumed from .* at step (\d+)$", f.read(), re.M)
        except OSError:
            return None
        return int(m.group(1)) if m else None

    def completed_steps(self):
        """The checkpoints whose state file was renamed into place before the fault (the
        calls the shim logged went ahead: only the one that got the fault did not)."""
        done = []
        for parts in self.ops:
            if parts[0] == "rename" and len(parts) > 2:
                m = CKPT_NAME.match(os.path.basename(parts[2]))
                if m and m.group(1) == "state" and m.group(3) is None:
                    done.append(int(m.group(2)))
        return done


class Recorder:
    """What a set of processes did (the trace) and what went wrong (the problems)."""

    def __init__(self, w, echo=False):
        self.w, self.echo, self.lines, self.problems, self.n_proc = w, echo, [], [], 0

    def trace(self, line):
        self.lines.append(line)
        if self.echo:
            print(line, flush=True)

    def problem(self, cause, what):
        self.problems.append((cause, what))
        self.trace("  FAIL %s: %s" % (cause, what))

    def tag(self):
        self.n_proc += 1
        return "p%d" % self.n_proc


class Reference:
    """An uninterrupted run of one option set, and how many calls of each kind it makes."""

    def __init__(self, opts, rng):
        self.opts = opts
        w = os.path.join(WORK, "ref-" + opts)
        shutil.rmtree(w, ignore_errors=True)
        os.makedirs(w)
        sc = Recorder(w)
        d = os.path.join(w, "run")
        plant(d, rng, os.path.join(w, "elsewhere"))
        t0 = time.monotonic()
        p = Proc(sc, trainer_cmd(opts, d), {}, "reference").wait()
        self.wall = time.monotonic() - t0
        final = os.path.join(d, "model_%08d.bin" % STEPS)
        if p.rc != 0 or not os.path.exists(final):
            sys.exit("error: the uninterrupted run of %s failed: %s\n%s" % (opts, p.exit_text(), p.stderr[-2000:]))
        self.final_sha1 = sha1_file(final)
        names = os.listdir(d)
        steps = intact_steps(d, names)
        for name in names:  # every checkpoint file the trainer wrote must pass this checker
            if CKPT_NAME.match(name) and not check_file(os.path.join(d, name), name)[0]:
                sys.exit("error: %s/%s, written by an uninterrupted run, fails this script's check: %s"
                         % (d, name, check_file(os.path.join(d, name), name)[1]))
        if STEPS not in steps:
            sys.exit("error: the uninterrupted run of %s left no intact checkpoint of step %d" % (opts, STEPS))
        # the same run under the shim, only logging: its calls, and the shim changes nothing
        d2 = os.path.join(w, "count")
        plant(d2, rng, os.path.join(w, "elsewhere"))
        p2 = Proc(sc, trainer_cmd(opts, d2), {"LD_PRELOAD": SHIM, "FAULT_DIR": os.path.realpath(d2),
                                              "FAULT_LOG": os.path.join(w, "count.log")}, "count").wait()
        if p2.rc != 0 or sha1_file(os.path.join(d2, "model_%08d.bin" % STEPS)) != self.final_sha1:
            sys.exit("error: under the shim (logging only) the run of %s differs: %s" % (opts, p2.exit_text()))
        self.counts = count_ops(p2.ops)
        self.targets = sorted({os.path.basename(x) for parts in p2.ops if parts[0] == "rename"
                               for x in parts[1:3]})


def count_ops(ops):
    counts = {}
    for parts in ops:
        counts[parts[0]] = counts.get(parts[0], 0) + 1
    counts["any"] = len(ops)
    return counts


def draw_fault(rng, counts):
    ops = sorted(op for op, n in counts.items() if n > 0)
    if not ops:
        return None
    op = rng.choice(ops)
    return op, rng.randint(1, counts[op]), rng.choice(ACTIONS)


def fault_env(d, log, fault=None):
    env = {"LD_PRELOAD": SHIM, "FAULT_DIR": os.path.realpath(d), "FAULT_LOG": log}
    if fault:
        env.update({"FAULT_OP": fault[0], "FAULT_AT": str(fault[1]), "FAULT_ACTION": fault[2]})
    return env


# ---------------------------------------------------------------------------------------
# Scenarios

class Scenario(Recorder):
    def __init__(self, seed, refs, echo=False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.opts = self.rng.choice(sorted(OPTION_SETS))
        self.kind = self.rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
        super().__init__(os.path.join(WORK, "s%d" % seed), echo)
        self.injected = []  # (kind for the counts, description); only what happened
        self.files_compared = 0
        self.ref = refs[self.opts]

    def inject(self, kind, what, happened=True):
        self.injected.append((kind if happened else None, what if happened else what + " (did not happen)"))

    def describe(self):
        return "%s %s" % (self.kind, self.opts) + (" [%s]" % ", ".join(w for _, w in self.injected)
                                                   if self.injected else "")

    # --- the oracle, after every process ---------------------------------------------

    class Dir:
        """One run directory's history: its planted files, its floor, the files damaged on purpose."""

        def __init__(self, path, snap):
            self.path, self.snap, self.floor, self.damaged, self.aside = path, snap, -1, {}, {}
            # the harness damaged the only checkpoint: -y 1 may refuse to start over
            # (docs/reliability.md), so a refusal ends the scenario
            self.refusal_ok = False

    def observe(self, rd, p=None):
        d = rd.path
        changes, checked = check_planted(d, rd.snap)
        self.files_compared += checked
        for c in changes:
            self.problem("foreign", "%s: %s" % (os.path.basename(d), c))
        try:
            names = set(os.listdir(d))
        except OSError:
            names = set()
        steps = intact_steps(d, names)
        newest = steps[-1] if steps else -1
        floor = rd.floor
        if p is not None and p.fault:
            done = p.completed_steps()
            if done:
                floor = max(floor, max(done))
        if newest < floor:
            self.problem("lost", "%s: the newest intact checkpoint is %s, step %d was intact before%s" % (
                os.path.basename(d), "step %d" % newest if newest >= 0 else "none", floor,
                " (after %s)" % p.tag if p else ""))
        rd.floor = newest  # after a loss, later losses are counted from what is left
        resumed = p.resumed_step() if p is not None else None
        for name in sorted(names):
            m = CKPT_NAME.match(name)
            if not m:
                continue
            path = os.path.join(d, name)
            ok, why, _ = check_file(path, name)
            if ok or not os.path.lexists(path):
                continue
            if name in rd.damaged and os.path.isfile(path) and sha1_file(path) == rd.damaged[name]:
                # damaged here on purpose: the trainer looks at it only when it is newer than
                # the checkpoint a run resumes from, and must then set it aside
                if resumed is None or int(m.group(2)) <= resumed:
                    continue
                why = "damaged by this script, newer than step %d which %s resumed from, not set aside" % (
                    resumed, p.tag)
            self.problem("torn", "%s/%s: %s" % (os.path.basename(d), name, why))
        for name in names:  # what a run sets aside it never removes
            if ASIDE.match(name) and name not in rd.aside:
                try:
                    rd.aside[name] = sha1_file(os.path.join(d, name))
                except OSError:
                    pass
        for name, digest in rd.aside.items():
            try:
                same = sha1_file(os.path.join(d, name)) == digest
            except OSError:
                same = False
            if not same:
                self.problem("aside", "%s/%s: set aside earlier, now removed or changed" % (os.path.basename(d), name))
        rd.aside = {n: h for n, h in rd.aside.items() if n in names}
        if p is not None:
            self.check_exit(rd, p)

    def check_exit(self, rd, p):
        fault = p.fault
        act = fault[0] if fault else None
        if p.rc == -signal.SIGKILL and (p.harness_killed or act in ("kill", "torn")):
            return
        if p.rc < 0:
            self.problem("bad-exit", "%s: killed by signal %d" % (p.tag, -p.rc))
            return
        said = "error:" in p.stderr
        if p.rc > 0 and not said:
            self.problem("bad-exit", "%s: exit %d without an 'error:' line: %s" % (
                p.tag, p.rc, p.stderr.strip()[-200:] or "(stderr empty)"))
        if act not in ("eio", "enospc"):
            return
        _, op, path, extra = fault
        name = os.path.basename(extra if op == "rename" else path)
        # a failed write of a checkpoint (its temporary, its rename, the directory's fsync)
        # must stop the run; other calls (a read, a prune, the logs' cut) may be survived
        # when said
        if os.path.realpath(path) == os.path.realpath(rd.path):
            # the directory's fsync that makes a checkpoint's rename durable, or another one
            before = p.ops[-1] if p.ops else [""]
            ckpt = before[0] == "rename" and len(before) > 2 and CKPT_NAME.match(os.path.basename(before[2]))
        else:
            ckpt = CKPT_NAME.match(name.removesuffix(".tmp"))
        must_stop = ckpt and (op in ("write", "fsync", "rename") or (op == "open" and extra == "w"))
        if p.rc > 0 and must_stop and not re.search(r"-y 1|no checkpoint", p.stderr):
            self.problem("hint", "%s: %s of %s failed (%s): the error does not name the step -y 1 resumes from: %s" % (
                p.tag, op, name, act, p.exit_text()))
        if p.rc == 0 and must_stop:
            self.problem("bad-exit", "%s: %s of %s failed (%s) and the run exited 0" % (p.tag, op, name, act))
        elif p.rc == 0 and not said and "warning:" not in p.stderr:
            self.problem("bad-exit", "%s: %s of %s failed (%s), exit 0 and nothing said" % (p.tag, op, name, act))
        tmp = path if path.endswith(".tmp") and op not in ("unlink", "truncate") else None
        if p.rc > 0 and tmp and os.path.exists(tmp):
            self.problem("tmp-left", "%s: %s failed (%s %s) and %s is still there" % (
                p.tag, op, act, os.path.basename(tmp), os.path.basename(tmp)))

    def check_final(self, rd, p):
        final = os.path.join(rd.path, "model_%08d.bin" % STEPS)
        self.files_compared += 1
        if not os.path.isfile(final):
            self.problem("differs", "%s exited 0 but %s/model_%08d.bin is missing" % (
                p.tag, os.path.basename(rd.path), STEPS))
        elif sha1_file(final) != self.ref.final_sha1:
            self.problem("differs", "%s: %s/model_%08d.bin differs from the uninterrupted run's" % (
                p.tag, os.path.basename(rd.path), STEPS))

    # --- running -----------------------------------------------------------------------

    def launch(self, rd, env=None):
        return Proc(self, trainer_cmd(self.opts, rd.path), env or {}, self.tag())

    def restart_until_done(self, rd, first=None):
        """first: the process already run (its outcome observed); restarts with -y 1."""
        if first is not None and first.rc == 0:
            self.check_final(rd, first)
            return
        for _ in range(MAX_RESTARTS):
            p = self.launch(rd).wait()
            self.observe(rd, p)
            if p.rc == 0:
                self.check_final(rd, p)
                return
            if rd.refusal_ok and p.rc > 0 and "error:" in p.stderr:
                self.trace("  refused, as it may when no checkpoint is intact")
                return
        self.problem("incomplete", "%s: not completed after %d restarts: %s" % (
            os.path.basename(rd.path), MAX_RESTARTS, p.exit_text()))

    def new_dir(self, name):
        d = os.path.join(self.w, name)
        return Scenario.Dir(d, plant(d, self.rng, os.path.join(self.w, "elsewhere")))

    def damage(self, rd):
        names = sorted(n for n in os.listdir(rd.path) if CKPT_NAME.match(n))
        if not names:
            return
        name = self.rng.choice(names)
        path = os.path.join(rd.path, name)
        size = os.path.getsize(path)
        if self.rng.random() < 0.5:
            at = self.rng.randrange(size)
            with open(path, "r+b") as f:
                f.seek(at)
                b = f.read(1)[0]
                f.seek(at)
                f.write(bytes([b ^ (1 << self.rng.randrange(8))]))
            self.inject("byte flipped", "flip %s byte %d" % (name, at))
        else:
            at = self.rng.randrange(size)
            os.truncate(path, at)
            self.inject("file truncated", "truncate %s to %d" % (name, at))
        self.trace("damaged: " + self.injected[-1][1])
        rd.damaged[name] = sha1_file(path)
        steps = intact_steps(rd.path, set(os.listdir(rd.path)))
        rd.refusal_ok = not steps and rd.floor >= 0
        rd.floor = steps[-1] if steps else -1  # the harness itself destroyed what was newer

    def run(self):
        shutil.rmtree(self.w, ignore_errors=True)
        os.makedirs(self.w)
        rd = self.new_dir("run")
        getattr(self, "run_" + self.kind.replace("-", "_"))(rd)
        return self

    def run_fault(self, rd):
        fault = draw_fault(self.rng, self.ref.counts)
        p = self.launch(rd, fault_env(rd.path, os.path.join(self.w, "fault.log"), fault)).wait()
        self.inject(fault[2], "%s #%d %s" % fault, p.fault is not None)
        self.observe(rd, p)
        self.restart_until_done(rd, p)

    def run_resume_fault(self, rd):
        # a first run killed at a call of its own, maybe a damaged file, then the fault in
        # the resume: the calls a resume makes (reads, set-asides, cutting the logs)
        k = self.rng.randint(1, self.ref.counts["any"])
        p = self.launch(rd, fault_env(rd.path, os.path.join(self.w, "kill.log"), ("any", k, "kill"))).wait()
        self.inject("kill", "kill at call #%d" % k, p.fault is not None)
        self.observe(rd, p)
        if p.rc == 0:
            self.restart_until_done(rd, p)
            return
        if self.rng.random() < 0.5:
            self.damage(rd)
        copy = os.path.join(self.w, "count")
        shutil.copytree(rd.path, copy, symlinks=True)
        cp = Proc(self, trainer_cmd(self.opts, copy), fault_env(copy, os.path.join(self.w, "count.log")),
                  self.tag()).wait()
        fault = draw_fault(self.rng, count_ops(cp.ops))
        shutil.rmtree(copy, ignore_errors=True)
        if fault is None:
            self.restart_until_done(rd)
            return
        p = self.launch(rd, fault_env(rd.path, os.path.join(self.w, "fault.log"), fault)).wait()
        self.inject(fault[2], "resume %s #%d %s" % fault, p.fault is not None)
        self.observe(rd, p)
        self.restart_until_done(rd, p)

    def run_kill_delay(self, rd):
        delay = self.rng.uniform(0, 1.2 * self.ref.wall)
        p = self.launch(rd)
        try:
            p.p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.kill()
        p.wait()
        self.inject("kill -9 from outside", "kill -9 after %.3f s" % delay, p.harness_killed)
        self.observe(rd, p)
        self.restart_until_done(rd, p)

    def wait_for_file(self, p, d, name):
        path = os.path.join(d, name)
        while p.p.poll() is None:
            if os.path.lexists(path):
                return True
            time.sleep(0.001)
        return False

    def run_kill_file(self, rd):
        name = self.rng.choice(self.ref.targets)
        p = self.launch(rd)
        if self.wait_for_file(p, rd.path, name):
            p.kill()
        p.wait()
        self.inject("kill -9 from outside", "kill -9 when %s appears" % name, p.harness_killed)
        self.observe(rd, p)
        self.restart_until_done(rd, p)

    def run_damage(self, rd):
        if self.rng.random() < 0.5:
            p = self.launch(rd).wait()
        else:
            k = self.rng.randint(1, self.ref.counts["any"])
            p = self.launch(rd, fault_env(rd.path, os.path.join(self.w, "kill.log"), ("any", k, "kill"))).wait()
            self.inject("kill", "kill at call #%d" % k, p.fault is not None)
        self.observe(rd, p)
        self.damage(rd)
        self.restart_until_done(rd)

    def run_rename_dir(self, rd):
        old = Scenario.Dir(rd.path + "_old", rd.snap)
        p = self.launch(rd)
        # the run holds the directory once its lock file is there: renamed before, the run would make a new one
        self.wait_for_file(p, rd.path, ".lock")
        if self.rng.random() < 0.5:
            delay = self.rng.uniform(0, self.ref.wall)
            try:
                p.p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                pass
            when = "after %.3f s" % delay
        else:
            name = self.rng.choice(self.ref.targets)
            self.wait_for_file(p, rd.path, name)
            when = "when %s appeared" % name
        os.rename(rd.path, old.path)
        running = p.p.poll() is None
        self.inject("directory renamed", "mv run run_old %s" % when, running)
        self.trace("renamed %s to %s %s" % (rd.path, old.path, when))
        steps = intact_steps(old.path, set(os.listdir(old.path)))
        old.floor = steps[-1] if steps else -1
        new = self.new_dir("run")  # a new run there, with its own user files, beside the old one
        q = self.launch(new)
        p.wait()
        self.observe(old, p)
        if p.rc == 0:
            self.check_final(old, p)
        q.wait()
        self.observe(new, q)
        self.restart_until_done(new, q)
        self.observe(old)


# ---------------------------------------------------------------------------------------

def main():
    global crc32c, TRAINER
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep every scenario's directory")
    ap.add_argument("--report", help="write the counts as JSON here")
    ap.add_argument("--replay", type=int, metavar="SEED", help="run the one scenario of this seed, printing it")
    ap.add_argument("--verbose", action="store_true", help="a line for every scenario")
    ap.add_argument("--trainer", default="./train_gpt2", help="the CPU trainer to test (default %(default)s)")
    a = ap.parse_args()
    os.chdir(ROOT)
    TRAINER = a.trainer
    for path, how in ((TRAINER, "make train_gpt2"), (SHIM, "make build/libfault_shim.so")):
        if not os.path.exists(path):
            sys.exit("error: %s is missing: %s builds it" % (path, how))
    crc32c = _load_fast_crc() or py_crc32c
    if subprocess.run(["./dev/data/tinyshakespeare.sh"], stdout=subprocess.DEVNULL).returncode != 0:
        shards = ["data/tinyshakespeare/tiny_shakespeare_%s_000000.bin" % s for s in ("train", "val")]
        if not all(os.path.exists(s) for s in shards):
            sys.exit("error: ./dev/data/tinyshakespeare.sh failed")
        # the shards are the data here, not what is tested: a stale ./prepro need not stop it
        print("warning: ./dev/data/tinyshakespeare.sh failed; using the shards already in data/tinyshakespeare")
    t0 = time.monotonic()
    if a.replay is None:
        shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK, exist_ok=True)
    # a copy: the trainer may be rebuilt while the scenarios run, and one run must test one build
    snap = os.path.join(WORK, "train_gpt2")
    shutil.copy2(TRAINER, snap)
    TRAINER = "./" + snap
    refs = {opts: Reference(opts, random.Random(a.seed)) for opts in OPTION_SETS}
    if a.replay is not None:
        seeds, keep = [a.replay], True
    else:
        master = random.Random(a.seed)
        seeds, keep = REGRESSION_SEEDS + [master.getrandbits(31) for _ in range(a.scenarios)], a.keep

    def one(seed):
        sc = Scenario(seed, refs, echo=a.replay is not None)
        try:
            sc.run()
        except Exception as e:  # a scenario that breaks the harness is a failure, not a crash of all
            sc.problem("harness", "%s: %s" % (type(e).__name__, e))
        if not keep and not sc.problems:
            shutil.rmtree(sc.w, ignore_errors=True)
        elif not keep:
            with open(os.path.join(sc.w, "trace.txt"), "w") as f:
                f.write("\n".join(sc.lines) + "\n")
        return sc

    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for sc in pool.map(one, seeds):
            results.append(sc)
            if sc.problems:
                causes = sorted({c for c, _ in sc.problems})
                print("FAIL seed %d (%s): %s: %s | repro: python3 dev/test/fault_inject.py --replay %d" % (
                    sc.seed, sc.describe(), ",".join(causes), sc.problems[0][1], sc.seed), flush=True)
            elif a.verbose:
                print("ok   seed %d (%s)" % (sc.seed, sc.describe()), flush=True)
    took = time.monotonic() - t0

    injected = {}
    for sc in results:
        for kind, _ in sc.injected:
            if kind:
                injected[kind] = injected.get(kind, 0) + 1
    causes = list(CAUSES) + ["harness"]
    failures = {c: [sc for sc in results if any(p[0] == c for p in sc.problems)] for c in causes}
    failed = [sc for sc in results if sc.problems]
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"driver": round(me.ru_utime + me.ru_stime, 1), "trainers": round(kids.ru_utime + kids.ru_stime, 1)}
    report = {
        "scenarios": len(results), "passed": len(results) - len(failed), "failed": len(failed),
        "seconds": round(took, 1), "cpu_seconds": cpu, "jobs": a.jobs, "seed": a.seed,
        "trainer_processes": sum(sc.n_proc for sc in results),
        "faults_injected": dict(sorted(injected.items())),
        "files_compared": sum(sc.files_compared for sc in results),
        "failures": {CAUSES.get(c, c): len(f) for c, f in failures.items() if f or c in CAUSES},
        "failing_scenarios": [{"seed": sc.seed, "scenario": sc.describe(),
                               "problems": ["%s: %s" % p for p in sc.problems]} for sc in failed],
    }
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    print()
    print("%d scenarios in %.1f s, %d jobs, %d trainer processes (CPU: driver %.1f s, trainers %.1f s)" % (
        len(results), took, a.jobs, report["trainer_processes"], cpu["driver"], cpu["trainers"]))
    print("faults injected: %s" % ", ".join("%s %d" % kv for kv in sorted(injected.items())))
    print("files compared: %d" % report["files_compared"])
    for c in causes:
        if failures[c] or c in CAUSES:
            print("%-52s %d" % (CAUSES.get(c, "scenarios the harness could not run") + ":", len(failures[c])))
    for c in causes:  # each cause once, with a few scenarios to replay
        for sc in failures[c][:3]:
            what = next(w for cause, w in sc.problems if cause == c)
            print("  %s: seed %d (%s): %s" % (c, sc.seed, sc.describe(), what[:300]))
    print("%d passed, %d failed" % (len(results) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

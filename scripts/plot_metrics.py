#!/usr/bin/env python3
"""scripts/plot_metrics.py: loss curves of training runs as a PNG, and a checker of metrics.jsonl files.

Each input is a run directory (its metrics.jsonl is read), a metrics.jsonl written by
./train_gpt2 or ./train_gpt2cu with -o, or the saved stdout of dev/train_gpt2_torch.py
(`python3 dev/train_gpt2_torch.py ... > torch.log`). Every run gets one colour: its train
loss raw (thin, faint) and smoothed (an exponential moving average over about N steps),
and its validation losses as markers, against steps and against tokens (two panels), or
against one of them with --x. HellaSwag scores (-h 1), where a run has them, get a panel
of their own against steps.

A resumed run's file holds one header per part; a step logged again after a resume
replaces the earlier record of that step, and what the earlier part logged after the
resume point is dropped. null values (non-finite numbers) leave gaps.

    python3 scripts/plot_metrics.py log/d12 log/d12_lr1e-3 -o loss.png --labels base,lr1e-3
    python3 scripts/plot_metrics.py log/d12/metrics.jsonl torch.log -o loss.png --x tokens --smooth 50
    python3 scripts/plot_metrics.py --validate log/d12/metrics.jsonl

--validate checks files strictly (what the trainers' tests call): every line a JSON object
ending in a newline, the run header first, every field the format names present with its
type, numbers finite or null, steps increasing within each header's part, a resumed
part starting after what the file kept, and a run's summary record last in its part, its
window ending at the part's last step. It needs no matplotlib. Exit status: 0 when
everything was plotted or valid, 1 on an error (a message naming the file), 2 on bad usage.
"""
import argparse
import json
import math
import os
import re
import sys

METRICS_NAME = "metrics.jsonl"
# the step line of dev/train_gpt2_torch.py, and of the trainers' main.log, which looks the same
TORCH_STEP_RE = re.compile(r"^step\s+(\d+)/\d+\s+\|\s+loss\s+(\S+)\s+\|")
TORCH_MS_RE = re.compile(r"\|\s+([0-9.]+)\s+ms\s+\|\s+([0-9.]+)\s+tok/s")
TORCH_MODEL_RE = re.compile(r"^model: .*\bB=(\d+) T=(\d+)")
TORCH_ACCUM_RE = re.compile(r"\((\d+) tokens/step\)")  # with --grad-accum: B*T*N tokens a step
TEXT_VAL_RE = re.compile(r"^val loss\s+(\S+)\s+\(step (\d+)\)")


class InputError(Exception):
    """a problem with one input; the message names the file"""


# ---------------------------------------------------------------- reading

def is_int(v):
    # bool is an int subclass in Python, but true/false in the file would be a writer's bug
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (is_int(v) or isinstance(v, float)) and not isinstance(v, bool) and math.isfinite(v)


def finite_or_none(v):
    return float(v) if is_num(v) else None


def resolve(path):
    """a run directory stands for its metrics.jsonl"""
    if os.path.isdir(path):
        inner = os.path.join(path, METRICS_NAME)
        if not os.path.isfile(inner):
            raise InputError(f"{path}: a directory without {METRICS_NAME} (was the run started with -o {path}?)")
        return inner
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or directory")
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file")
    return path


def read_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    # a binary file is reported as "not JSONL" further on instead of as a decoding crash
    return data.decode("utf-8", errors="replace")


def short(text, n=60):
    text = text.strip()
    return repr(text if len(text) <= n else text[:n] + "...")


class Run:
    """one input's curves: train loss by step (None where it was null), tokens by step,
    validation loss and HellaSwag accuracy by step"""

    def __init__(self, path, kind):
        self.path = path
        self.kind = kind  # "metrics" or "log"
        self.loss = {}
        self.tokens = {}
        self.val = {}
        self.hellaswag = {}
        self.total_batch = None  # tokens per step, to place evaluations that have no step record
        self.label = None

    def steps(self):
        return sorted(self.loss)

    def tokens_at(self, step):
        """tokens seen after step, from the step records (nearest known step plus whole steps)"""
        if step in self.tokens:
            return self.tokens[step]
        known = sorted(self.tokens)
        if not known:
            return None
        near = min(known, key=lambda s: abs(s - step))
        per_step = self.total_batch
        if per_step is None and len(known) > 1:
            per_step = (self.tokens[known[-1]] - self.tokens[known[0]]) / (known[-1] - known[0])
        if per_step is None:
            return None
        return self.tokens[near] + (step - near) * per_step


def parse_jsonl_lines(path, text, strict):
    """(line number, object) for each line. Not strict (plotting): blank lines are passed over
    and a cut-off last line (a run killed while writing it) is dropped with a warning."""
    lines = text.split("\n")
    ends_complete = text.endswith("\n")
    if ends_complete:
        lines.pop()  # the empty string after the final newline
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out = []

    def reject_constant(name):
        # Python's json reads NaN and Infinity, which JSON does not have
        raise ValueError(f"{name} is not JSON (write null)")

    for i, line in enumerate(lines):
        n = i + 1
        if not line.strip():
            if strict:
                raise InputError(f"{path}:{n}: an empty line")
            continue
        try:
            obj = json.loads(line, parse_constant=reject_constant if strict else (lambda name: None))
        except ValueError as e:
            if not strict and i == last and not ends_complete and out:
                print(f"warning: {path}:{n}: the last line is cut off (the run stopped while writing it); "
                      f"left out", file=sys.stderr)
                break
            if not out:
                raise InputError(f"{path}: not JSONL: line {n} is not JSON ({short(line)})")
            raise InputError(f"{path}:{n}: not JSON: {e} ({short(line)})")
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{n}: not a JSON object ({short(line)})")
        out.append((n, obj))
    if strict and text and not ends_complete:
        raise InputError(f"{path}:{len(lines)}: the last line has no newline (cut off?)")
    return out


def load_metrics(path, text):
    run = Run(path, "metrics")
    for n, rec in parse_jsonl_lines(path, text, strict=False):
        kind = rec.get("type")
        step = rec.get("step")
        if kind == "run":
            config = rec.get("config") if isinstance(rec.get("config"), dict) else {}
            if is_int(config.get("total_batch")):
                run.total_batch = config["total_batch"]
            resumed = rec.get("resumed_from")
            if is_int(resumed):
                # what a crashed part logged after its checkpoint is not part of the run
                for table in (run.loss, run.tokens, run.val, run.hellaswag):
                    for s in [s for s in table if s > resumed]:
                        del table[s]
            elif run.loss or run.val:
                # the trainers start metrics.jsonl afresh for a new run; a second fresh header
                # means files were joined by hand: the last run is the one plotted
                print(f"warning: {path}:{n}: a new run (not a resume) starts here; plotting it alone",
                      file=sys.stderr)
                run.loss.clear()
                run.tokens.clear()
                run.val.clear()
                run.hellaswag.clear()
        elif kind == "step" and is_int(step):
            run.loss[step] = finite_or_none(rec.get("loss"))
            tokens = rec.get("tokens")
            if is_num(tokens):
                run.tokens[step] = float(tokens)
            else:
                run.tokens.pop(step, None)
        elif kind == "val" and is_int(step):
            run.val[step] = finite_or_none(rec.get("val_loss"))
        elif kind == "hellaswag" and is_int(step):
            run.hellaswag[step] = finite_or_none(rec.get("accuracy"))
    if not run.loss:
        raise InputError(f"{path}: no step records (a run that has not finished a step yet?)")
    return run


def parse_float(text):
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def load_log(path, text):
    """dev/train_gpt2_torch.py's stdout: 'step    N/S | loss X | norm X | X ms | X tok/s | ...';
    tokens per step from its 'model: ... B=.. T=..' line ('(N tokens/step)' there with
    gradient accumulation), else from ms and tok/s"""
    run = Run(path, "log")
    tokens = 0.0
    for line in text.splitlines():
        m = TORCH_MODEL_RE.match(line)
        if m:
            acc = TORCH_ACCUM_RE.search(line)
            run.total_batch = int(acc.group(1)) if acc else int(m.group(1)) * int(m.group(2))
            continue
        m = TEXT_VAL_RE.match(line)
        if m:
            run.val[int(m.group(2))] = parse_float(m.group(1))
            continue
        m = TORCH_STEP_RE.match(line)
        if not m:
            continue
        step = int(m.group(1))
        run.loss[step] = parse_float(m.group(2))
        if run.total_batch is not None:
            run.tokens[step] = float(step * run.total_batch)
        else:
            t = TORCH_MS_RE.search(line)
            if t:
                tokens += round(float(t.group(1)) / 1e3 * float(t.group(2)))
                run.tokens[step] = tokens
    return run


def load(path):
    real = resolve(path)
    text = read_text(real)
    if not text.strip():
        raise InputError(f"{real}: empty (no step records)")
    first = text.lstrip()[:1]
    if first == "{":
        return load_metrics(real, text)
    run = load_log(real, text)
    if run.loss:
        return run
    if any(TORCH_MODEL_RE.match(line) for line in text.splitlines()):
        raise InputError(f"{real}: a dev/train_gpt2_torch.py log without step lines")
    raise InputError(f"{real}: neither JSONL (line 1 is not a JSON object: {short(text.splitlines()[0])}) "
                     f"nor a dev/train_gpt2_torch.py log")


def default_label(arg, real):
    """the run directory's name; for another file, its name without the extension"""
    arg = arg.rstrip("/") or arg
    if os.path.isdir(arg):
        return os.path.basename(os.path.abspath(arg))
    if os.path.basename(real) == METRICS_NAME:
        return os.path.basename(os.path.dirname(os.path.abspath(real))) or METRICS_NAME
    return os.path.splitext(os.path.basename(real))[0]


# ---------------------------------------------------------------- validation

PROGRAMS = ("train_gpt2", "train_gpt2cu")
BUILDS = ("fp32", "bf16", "fp16")
MODEL_INTS = ("layers", "heads", "channels", "max_seq_len", "vocab", "params")
CONFIG_INTS = ("batch", "seq_len", "total_batch", "max_steps", "warmup", "ranks", "seed")
CONFIG_NUMS = ("lr", "final_lr_fraction", "weight_decay", "grad_clip")
STEP_NUMS = ("loss", "norm", "lr", "ms", "tokens_per_s", "mfu", "elapsed_s")
SUMMARY_INTS = ("first_step", "last_step", "timed_steps", "skipped_updates")
SUMMARY_NUMS = ("ms_per_step", "tokens_per_s", "mfu", "gflops", "joules_per_step", "device_peak_mib",
                "host_peak_mib", "data_stall_ms")


def check_fields(rec, ints, nums, where, errors, positive=()):
    for k in ints:
        if k not in rec:
            errors.append(f"{where}: no \"{k}\"")
        elif not is_int(rec[k]):
            errors.append(f"{where}: \"{k}\" is {json.dumps(rec[k])}, not an integer")
        elif k in positive and rec[k] < 1:
            errors.append(f"{where}: \"{k}\" is {rec[k]}, not positive")
    for k in nums:
        if k not in rec:
            errors.append(f"{where}: no \"{k}\"")
        elif rec[k] is not None and not is_num(rec[k]):
            errors.append(f"{where}: \"{k}\" is {json.dumps(rec[k])}, not a finite number or null")


def check_header(rec, where, errors):
    if rec.get("program") not in PROGRAMS:
        errors.append(f"{where}: \"program\" is {json.dumps(rec.get('program'))}, not one of {', '.join(PROGRAMS)}")
    if rec.get("build") not in BUILDS:
        errors.append(f"{where}: \"build\" is {json.dumps(rec.get('build'))}, not one of {', '.join(BUILDS)}")
    if not isinstance(rec.get("git"), str) or not rec.get("git"):
        errors.append(f"{where}: \"git\" is {json.dumps(rec.get('git'))}, not a commit or \"unknown\"")
    model, config = rec.get("model"), rec.get("config")
    if not isinstance(model, dict):
        errors.append(f"{where}: \"model\" is missing or not an object")
    else:
        check_fields(model, MODEL_INTS, (), where + " model", errors, positive=MODEL_INTS)
    if not isinstance(config, dict):
        errors.append(f"{where}: \"config\" is missing or not an object")
    else:
        check_fields(config, CONFIG_INTS, CONFIG_NUMS, where + " config", errors,
                     positive=("batch", "seq_len", "total_batch", "max_steps", "ranks"))
        if not isinstance(config.get("schedule"), str) or not config.get("schedule"):
            errors.append(f"{where} config: \"schedule\" is missing or not a name")
        if is_int(config.get("warmup")) and config["warmup"] < 0:
            errors.append(f"{where} config: \"warmup\" is negative")
        b, t, r, d = (config.get(k) for k in ("batch", "seq_len", "ranks", "total_batch"))
        # the trainers refuse a total batch that the ranks' B x T does not divide
        if all(is_int(v) and v > 0 for v in (b, t, r, d)) and d % (b * t * r):
            errors.append(f"{where} config: total_batch {d} is not a multiple of batch x seq_len x ranks "
                          f"({b} x {t} x {r})")
        if isinstance(model, dict) and is_int(t) and is_int(model.get("max_seq_len")) and t > model["max_seq_len"]:
            errors.append(f"{where}: config seq_len {t} is above the model's max_seq_len {model['max_seq_len']}")
    if "resumed_from" not in rec:
        errors.append(f"{where}: no \"resumed_from\" (null for a fresh run)")
    elif rec["resumed_from"] is not None and not (is_int(rec["resumed_from"]) and rec["resumed_from"] >= 0):
        errors.append(f"{where}: \"resumed_from\" is {json.dumps(rec['resumed_from'])}, not null or a step")


def check_summary(rec, where, part_last_step, errors):
    """a run's summary record; part_last_step: the last step record of its part (None: none)"""
    check_fields(rec, SUMMARY_INTS, SUMMARY_NUMS, where, errors)
    first, last, timed = (rec.get(k) for k in ("first_step", "last_step", "timed_steps"))
    if not all(is_int(v) for v in (first, last, timed)):
        return
    if timed < 0 or first != last - timed + 1:
        errors.append(f"{where}: the window first_step {first} .. last_step {last} does not hold "
                      f"timed_steps {timed}")
    if part_last_step is not None and last != part_last_step:
        errors.append(f"{where}: the summary's last_step is {last}, but its part's last step is {part_last_step}")
    if is_int(rec.get("skipped_updates")) and rec["skipped_updates"] < 0:
        errors.append(f"{where}: \"skipped_updates\" is negative")


def validate(path):
    """the list of what is wrong with the metrics.jsonl at path (empty: valid), and a summary"""
    text = read_text(path)
    if not text:
        return [f"{path}: empty"], ""
    errors = []
    try:
        records = parse_jsonl_lines(path, text, strict=True)
    except InputError as e:
        return [str(e)], ""
    headers = n_steps = n_vals = n_hellaswag = n_summaries = 0
    kept_max = None      # the largest step of any record before the current part
    last_step = last_val = last_hs = None  # within the current part
    summary_line = None  # the line of the current part's summary record
    header_model = None
    for n, rec in records:
        where = f"{path}:{n}"
        kind = rec.get("type")
        if n == records[0][0] and kind != "run":
            errors.append(f"{where}: the first record is {json.dumps(kind)}, not the \"run\" header")
        if summary_line is not None and kind != "run":
            errors.append(f"{where}: a {json.dumps(kind)} record after the summary record of line {summary_line}, "
                          f"which ends its part")
        if kind == "run":
            summary_line = None
            headers += 1
            check_header(rec, where, errors)
            resumed = rec.get("resumed_from")
            seen = [s for s in (last_step, last_val, last_hs, kept_max) if s is not None]
            if headers > 1:
                if not is_int(resumed):
                    errors.append(f"{where}: a second header that is not a resume (\"resumed_from\": null); "
                                  f"a fresh run starts the file over")
                elif seen and max(seen) > resumed:
                    errors.append(f"{where}: resumed from step {resumed}, but the file still holds step "
                                  f"{max(seen)} (not cut back to the checkpoint)")
                if header_model is not None and rec.get("model") != header_model:
                    errors.append(f"{where}: the resumed part's model differs from the earlier part's")
            if headers == 1 or header_model is None:
                header_model = rec.get("model")
            kept_max = max(seen) if seen else None
            last_step = last_val = last_hs = None
            continue
        if kind == "summary":
            n_summaries += 1
            summary_line = n
            check_summary(rec, where, last_step, errors)
            continue
        if kind not in ("step", "val", "hellaswag"):
            errors.append(f"{where}: unknown \"type\" {json.dumps(kind)}")
            continue
        step = rec.get("step")
        if not is_int(step) or step < 0:
            errors.append(f"{where}: \"step\" is {json.dumps(step)}, not a step number")
            continue
        if kind == "step":
            n_steps += 1
            check_fields(rec, ("tokens", "skipped"), STEP_NUMS, where, errors)
            if rec.get("skipped") not in (0, 1) or isinstance(rec.get("skipped"), bool):
                errors.append(f"{where}: \"skipped\" is {json.dumps(rec.get('skipped'))}, not 0 or 1")
            elif rec["skipped"] == 0:
                # an update is applied only when the loss and the gradient norm are finite
                for k in ("loss", "norm"):
                    if k in rec and rec[k] is None:
                        errors.append(f"{where}: \"{k}\" is null but the update is not marked skipped")
            if is_int(rec.get("tokens")) and rec["tokens"] < 0:
                errors.append(f"{where}: \"tokens\" is negative")
            if last_step is not None and step <= last_step:
                errors.append(f"{where}: step {step} after step {last_step} in the same part")
            elif last_val is not None and step < last_val:
                errors.append(f"{where}: step {step} after the evaluation of step {last_val}")
            elif last_step is None and kept_max is not None and step <= kept_max:
                errors.append(f"{where}: step {step} logged again (the file kept up to step {kept_max})")
            last_step = step
        elif kind == "val":
            n_vals += 1
            check_fields(rec, (), ("val_loss",), where, errors)
            if last_val is not None and step <= last_val:
                errors.append(f"{where}: evaluation of step {step} after the evaluation of step {last_val}")
            elif last_step is not None and step < last_step:
                errors.append(f"{where}: evaluation of step {step} after step {last_step}")
            last_val = step
        else:
            n_hellaswag += 1
            check_fields(rec, ("correct", "examples"), ("accuracy",), where, errors)
            c, n_ex = rec.get("correct"), rec.get("examples")
            if is_int(c) and is_int(n_ex) and not 0 <= c <= n_ex:
                errors.append(f"{where}: \"correct\" {c} is not within 0..{n_ex} examples")
            if last_hs is not None and step <= last_hs:
                errors.append(f"{where}: HellaSwag of step {step} after the HellaSwag of step {last_hs}")
            elif last_step is not None and step < last_step:
                errors.append(f"{where}: HellaSwag of step {step} after step {last_step}")
            last_hs = step
    summary = (f"{headers} header(s), {n_steps} step record(s), {n_vals} evaluation(s)"
               + (f", {n_hellaswag} HellaSwag score(s)" if n_hellaswag else "")
               + (f", {n_summaries} summary record(s)" if n_summaries else ""))
    return errors, summary


# ---------------------------------------------------------------- plotting

def ema(values, window):
    """exponential moving average with span `window` (weight 2/(window+1)), debiased so that
    the first values are not pulled towards zero"""
    a = 2.0 / (window + 1)
    m = w = 0.0
    out = []
    for v in values:
        m = (1 - a) * m + a * v
        w = (1 - a) * w + a
        out.append(m / w)
    return out


def token_text(v, _pos=None):
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:g}{unit}"
    return f"{v:g}"


def curves(run, axis):
    """(x, loss with NaN for null) of the train loss, and (x, loss) of the evaluations, against
    'steps' or 'tokens'; points without a token count are left out on the tokens axis"""
    def x_of(step):
        return float(step) if axis == "steps" else run.tokens_at(step)
    tx, ty = [], []
    for s in run.steps():
        x = x_of(s)
        if x is not None:
            tx.append(x)
            ty.append(run.loss[s] if run.loss[s] is not None else float("nan"))
    vx, vy = [], []
    for s in sorted(run.val):
        x = x_of(s)
        if x is not None and run.val[s] is not None:
            vx.append(x)
            vy.append(run.val[s])
    return tx, ty, vx, vy


def plot(runs, out, axes_wanted, window, title):
    try:
        import matplotlib
    except ImportError:
        raise InputError("matplotlib is not installed for this python "
                         f"({sys.executable}): pip install matplotlib, or run scripts/install_deps.sh")
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(runs) > len(colours):
        colours = [plt.get_cmap("tab20")(i % 20) for i in range(len(runs))]
    with_hs = any(v is not None for run in runs for v in run.hellaswag.values())
    panels = len(axes_wanted) + with_hs
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.6), squeeze=False)
    if with_hs:  # HellaSwag accuracy against steps, beside the loss panels
        ax = axes[0][-1]
        for k, run in enumerate(runs):
            pts = sorted((s, v) for s, v in run.hellaswag.items() if v is not None)
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], "o-", color=colours[k % len(colours)], ms=4)
        ax.axhline(0.25, color="grey", lw=0.8, ls="--", label="chance (0.25)")
        ax.set_xlabel("step")
        ax.set_ylabel("HellaSwag accuracy")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    for ax, axis in zip(axes[0], axes_wanted):
        for k, run in enumerate(runs):
            c = colours[k % len(colours)]
            tx, ty, vx, vy = curves(run, axis)
            if window > 1:
                ax.plot(tx, ty, color=c, lw=0.7, alpha=0.3)
                fin = [(x, y) for x, y in zip(tx, ty) if not math.isnan(y)]
                if fin:
                    ax.plot([x for x, _ in fin], ema([y for _, y in fin], window), color=c, lw=1.6)
            else:
                ax.plot(tx, ty, color=c, lw=1.2)
            if vx:
                ax.plot(vx, vy, "o", color=c, ms=5, mec="black", mew=0.6, zorder=3)
        ax.set_xlabel("step" if axis == "steps" else "tokens")
        ax.set_ylabel("loss")
        if axis == "tokens":
            ax.xaxis.set_major_formatter(FuncFormatter(token_text))
        ax.grid(True, alpha=0.3)
    # one legend: a colour per run, then what each line style means
    handles = [Line2D([], [], color=colours[k % len(colours)], lw=2, label=run.label) for k, run in enumerate(runs)]
    if window > 1:
        handles += [Line2D([], [], color="grey", lw=0.7, alpha=0.5, label="train loss"),
                    Line2D([], [], color="grey", lw=1.6, label=f"train loss, EMA {window}")]
    else:
        handles.append(Line2D([], [], color="grey", lw=1.2, label="train loss"))
    if any(v is not None for run in runs for v in run.val.values()):
        handles.append(Line2D([], [], color="grey", marker="o", ls="", mec="black", label="val loss"))
    axes[0][len(axes_wanted) - 1].legend(handles=handles, loc="upper right", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except (OSError, ValueError) as e:
        raise InputError(f"{out}: cannot write the plot: {e}")
    finally:
        plt.close(fig)


def auto_window(runs):
    """about a fiftieth of the longest run, so that long runs come out smooth and short ones raw"""
    return max(1, round(max(len(r.loss) for r in runs) / 50))


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Plot train and val loss of runs (run directories, metrics.jsonl files, or "
                    "dev/train_gpt2_torch.py logs), or check metrics.jsonl files with --validate.",
        epilog="example: python3 scripts/plot_metrics.py log/a log/b torch.log -o loss.png --labels a,b,torch")
    p.add_argument("inputs", nargs="+", metavar="RUN", help="run directory, metrics.jsonl or train_gpt2_torch.py log")
    p.add_argument("-o", "--output", metavar="PNG", help="the image to write (required unless --validate)")
    p.add_argument("--labels", help="comma-separated legend labels, one per input (default: the directory names)")
    p.add_argument("--x", choices=("steps", "tokens"), help="one panel against this (default: both)")
    p.add_argument("--smooth", type=int, metavar="N",
                   help="EMA window in steps, 1 for none (default: about 1/50 of the longest run)")
    p.add_argument("--title", help="a title above the plot")
    p.add_argument("--validate", action="store_true",
                   help="check that each input is a well-formed metrics.jsonl instead of plotting")
    args = p.parse_args(argv)

    if args.validate:
        bad = 0
        for arg in args.inputs:
            path = arg
            try:
                path = resolve(arg)
                errors, summary = validate(path)
            except InputError as e:
                errors, summary = [str(e)], ""
            if errors:
                bad += 1
                for e in errors[:20]:
                    print(f"error: {e}", file=sys.stderr)
                if len(errors) > 20:
                    print(f"error: {path}: and {len(errors) - 20} more", file=sys.stderr)
            else:
                print(f"{path}: valid: {summary}")
        return 1 if bad else 0

    if not args.output:
        p.error("-o PNG is required (or --validate)")
    if args.smooth is not None and args.smooth < 0:
        p.error("--smooth must be 0 or more")
    labels = None
    if args.labels is not None:
        labels = args.labels.split(",")
        if len(labels) != len(args.inputs):
            print(f"error: --labels gives {len(labels)} label(s) for {len(args.inputs)} input(s)", file=sys.stderr)
            return 1
    try:
        runs = []
        for i, arg in enumerate(args.inputs):
            run = load(arg)
            run.label = labels[i] if labels else default_label(arg, run.path)
            runs.append(run)
        if not labels:
            # two runs with the same directory name (a/run, b/run) are told apart by their paths
            names = [r.label for r in runs]
            for r, arg in zip(runs, args.inputs):
                if names.count(r.label) > 1:
                    r.label = os.path.normpath(arg)
        window = args.smooth if args.smooth is not None else auto_window(runs)
        axes_wanted = [args.x] if args.x else ["steps", "tokens"]
        plot(runs, args.output, axes_wanted, window, args.title)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for r in runs:
        steps = r.steps()
        nulls = sum(v is None for v in r.loss.values())
        extra = f", {nulls} with a null loss" if nulls else ""
        print(f"{r.label}: {len(steps)} steps ({steps[0]}..{steps[-1]}{extra}), {len(r.val)} evaluations "
              f"({r.path})")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

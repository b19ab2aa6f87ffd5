#!/usr/bin/env python3
"""dev/test/test_plot_metrics.py: scripts/plot_metrics.py on made-up runs: metrics.jsonl files (one
resumed, with nulls), a dev/train_gpt2_torch.py log and a run directory are plotted into PNGs whose
signature and IHDR size are checked; bad inputs (a missing file, garbage, a file without step
records) fail with exit 1 and the file named; a resumed file is read as one run; and --validate
accepts well-formed files and rejects each kind of malformed one with its reason.

    python3 dev/test/test_plot_metrics.py                  # the made-up cases
    python3 dev/test/test_plot_metrics.py --validate FILE  # also a trainer's real metrics.jsonl

Last line "N passed, M failed"; exit 0, 1 on a failure, 77 when all the checks that could run
passed but matplotlib is missing (the plotting checks need it; the validator does not).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pychecks import check, finish, have_matplotlib, png_size  # noqa: E402
TOOL = os.path.normpath(os.path.join(HERE, "..", "..", "scripts", "plot_metrics.py"))



def tool(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- made-up inputs

def header(resumed_from=None, total_batch=4096, **over):
    rec = {"type": "run", "program": "train_gpt2cu", "build": "bf16", "git": "abc1234",
           "model": {"layers": 2, "heads": 4, "channels": 64, "max_seq_len": 64, "vocab": 50257, "params": 3300000},
           "config": {"batch": 4, "seq_len": 64, "total_batch": total_batch, "max_steps": 60, "lr": 0.0006,
                      "schedule": "cosine", "warmup": 5, "final_lr_fraction": 0.1, "weight_decay": 0.1,
                      "grad_clip": 1.0, "skip_loss_z": None, "ranks": 2, "seed": 1337},
           "resumed_from": resumed_from}
    rec.update(over)
    return rec


def step(n, loss, total_batch=4096, **over):
    rec = {"type": "step", "step": n, "loss": loss, "norm": 1.5, "lr": 6e-4, "ms": 12.5,
           "tokens_per_s": 327680.0, "mfu": None, "tokens": n * total_batch, "skipped": 0, "elapsed_s": 0.0125 * n}
    rec.update(over)
    return rec


def val(n, loss):
    return {"type": "val", "step": n, "val_loss": loss}


def hellaswag(n, correct, examples=400):
    return {"type": "hellaswag", "step": n, "accuracy": correct / examples, "correct": correct,
            "examples": examples}


def summary(last, timed, **over):
    rec = {"type": "summary", "first_step": last - timed + 1, "last_step": last, "timed_steps": timed,
           "ms_per_step": 12.5, "tokens_per_s": 327680.0, "mfu": 0.41, "gflops": None, "joules_per_step": 9.5,
           "device_peak_mib": 2048.0, "host_peak_mib": 900.0, "data_stall_ms": 0.02, "skipped_updates": 0}
    rec.update(over)
    return rec


def curve(n, base=11.0):
    return round(base * 0.97 ** n + 3.0 + 0.05 * ((n * 7919) % 13) / 13, 6)


def write_jsonl(path, records, tail="\n"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + tail)
    return path


def plain_run(d):
    """60 steps with an evaluation (val loss and HellaSwag) every 20, one step with a
    non-finite loss and norm (null, update skipped), a null MFU throughout and one null val loss"""
    recs = [header()]
    for n in range(1, 61):
        if n == 33:
            recs.append(step(n, None, norm=None, skipped=1))
        else:
            recs.append(step(n, curve(n)))
        if n % 20 == 0:
            recs.append(val(n, curve(n) + 0.1 if n != 40 else None))
            recs.append(hellaswag(n, 100 + n))
    return write_jsonl(os.path.join(d, "runA", "metrics.jsonl"), recs)


def resumed_run(d):
    """steps 1..30 written, checkpoint at 20, resumed: the file cut back to step 20, a second
    header, steps 21..45 (losses 0.5 lower, to tell the parts apart)"""
    recs = [header()] + [step(n, curve(n)) for n in range(1, 21)] + [val(20, 5.0)]
    recs += [header(resumed_from=20)] + [step(n, curve(n) - 0.5) for n in range(21, 41)] + [val(40, 4.0)]
    recs += [step(n, curve(n) - 0.5) for n in range(41, 46)]
    return write_jsonl(os.path.join(d, "runB", "metrics.jsonl"), recs)


def uncut_resume(d):
    """a resume whose earlier part still holds steps after its checkpoint (21..30) and logs
    step 25 twice in the later part: what the plot must drop or replace"""
    recs = [header()] + [step(n, 9.0) for n in range(1, 31)]
    recs += [header(resumed_from=20)] + [step(n, 7.0) for n in range(21, 26)]
    recs += [header(resumed_from=24)] + [step(n, 6.0) for n in range(25, 28)]
    return write_jsonl(os.path.join(d, "uncut", "metrics.jsonl"), recs)


def torch_log(d, accum=1, name="torch.log"):
    """what `python3 dev/train_gpt2_torch.py ... > torch.log` saves (B=4 T=64: 256 tokens a
    micro-batch; with accum > 1 the model line names the tokens a step, as --grad-accum writes it)"""
    lines = ["device: NVIDIA H200, 143156 MiB; torch 2.5.1",
             "model: d12 L=12 H=12 C=768, 124.44M parameters (real vocab, wte once); B=4 T=64, 40 steps, "
             "compile full, data random" + ("; grad accum %d (%d tokens/step), checkpoint none" % (accum, 256 * accum)
                                            if accum > 1 else "")]
    for n in range(1, 41):
        loss = "nan" if n == 7 else "%.6f" % curve(n, 10.5)
        lines.append("step %4d/%d | loss %s | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%"
                     % (n, 40, loss, 1.2, 20.0, 256 / 0.02, 45.0))
    lines += ["mean over steps 11..40: 20.0 ms/step, 12800 tok/s, MFU 45.0%",
              "energy: not measured (no NVML)", 'SUMMARY {"program": "pytorch", "steps": 40}']
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def load_module():
    spec = importlib.util.spec_from_file_location("plot_metrics", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- checks

def check_reading(d, a, b, uncut, tlog):
    print("reading runs (no matplotlib needed):")
    pm = load_module()
    ra = pm.load(os.path.dirname(a))
    check("a run directory is read through its metrics.jsonl", ra.path == a and len(ra.loss) == 60)
    check("a null loss stays a gap (None), the evaluations by step, a null val loss kept as None",
          ra.loss[33] is None and ra.val == {20: curve(20) + 0.1, 40: None, 60: curve(60) + 0.1})
    rb = pm.load(b)
    check("a resumed run is one run: steps 1..45, the second part's losses from step 21",
          rb.steps() == list(range(1, 46)) and rb.loss[20] == curve(20) and rb.loss[21] == curve(21) - 0.5)
    ru = pm.load(uncut)
    check("steps after the resume point dropped from the earlier part, later records replace earlier ones",
          ru.steps() == list(range(1, 28)) and ru.loss[20] == 9.0 and ru.loss[22] == 7.0
          and ru.loss[25] == 6.0 and ru.loss[27] == 6.0)
    rt = pm.load(tlog)
    check("the PyTorch log: 40 steps, 'nan' as a gap, tokens = step x B x T",
          rt.steps() == list(range(1, 41)) and rt.loss[7] is None and rt.tokens[40] == 40 * 256)
    rg = pm.load(torch_log(d, accum=8, name="torch_accum.log"))
    check("a PyTorch log with --grad-accum 8: tokens = step x B x T x 8", rg.tokens[40] == 40 * 256 * 8)
    check("an evaluation between step records is placed on the tokens axis",
          ra.tokens_at(20) == 20 * 4096 and rb.tokens_at(100) == 100 * 4096)


def check_validator(d, a, b, uncut, real):
    print("--validate:")
    for name, path in (("a plain run", a), ("a resumed run cut back to its checkpoint", b)):
        rc, out, err = tool("--validate", path)
        check(f"{name} is valid", rc == 0 and "valid" in out, out + err)
    rc, out, err = tool("--validate", os.path.dirname(a))
    check("a run directory is validated through its metrics.jsonl", rc == 0 and a in out, out + err)

    good = [header()] + [step(n, 5.0) for n in (1, 2, 3)]
    # a finished run ends with its summary; resuming the finished run adds a part without steps
    ended = good + [summary(3, 2), header(resumed_from=3), summary(3, 0, ms_per_step=None, tokens_per_s=None)]
    path = write_jsonl(os.path.join(d, "ended", "metrics.jsonl"), ended)
    rc, out, err = tool("--validate", path)
    check("a run ending with its summary, then resumed when finished, is valid",
          rc == 0 and "2 summary record(s)" in out, out + err)
    bad_cases = [
        ("a step after the summary", good + [summary(3, 2), step(4, 5.0)], "\n", "after the summary record of line 5"),
        ("a summary whose window does not hold its steps", good + [summary(3, 2, first_step=1)], "\n",
         "does not hold timed_steps 2"),
        ("a summary that does not end at the part's last step", good + [summary(4, 2)], "\n",
         "its part's last step is 3"),
        ("a summary without a figure", good + [{k: v for k, v in summary(3, 2).items() if k != "mfu"}], "\n",
         'no "mfu"'),
        ("a NaN literal", good[:2] + ['{"type": "step", "step": 2, "loss": NaN, "norm": 1, "lr": 1, "ms": 1, '
                                      '"tokens_per_s": 1, "mfu": null, "tokens": 8192, "skipped": 1, '
                                      '"elapsed_s": 1}'], "\n", "NaN is not JSON"),
        # 1e999 is valid JSON that reads as infinity
        ("an infinite number", good + [json.dumps(step(4, 5.0)).replace("5.0", "1e999")], "\n",
         "not a finite number"),
        ("Infinity", good + [json.dumps(step(4, float("inf")))], "\n", "Infinity is not JSON"),
        ("a missing field", good + [{k: v for k, v in step(4, 5.0).items() if k != "norm"}], "\n", 'no "norm"'),
        ("a token count written as a float", good + [step(4, 5.0, tokens=1.04858e+06)], "\n", "not an integer"),
        ("a step record before the header", [step(1, 5.0)] + good, "\n", "not the \"run\" header"),
        ("steps going back", good + [step(2, 5.0)], "\n", "step 2 after step 3"),
        ("a null loss on an applied update", good + [step(4, None)], "\n", "not marked skipped"),
        ("a header without resumed_from", [{k: v for k, v in header().items() if k != "resumed_from"}] + good[1:],
         "\n", 'no "resumed_from"'),
        ("a model field missing", [header(model={"layers": 2})] + good[1:], "\n", 'no "heads"'),
        ("a resume not cut back to its checkpoint", good + [header(resumed_from=2), step(3, 5.0)], "\n",
         "not cut back"),
        ("a resume with another model", good + [header(resumed_from=3, model=dict(header()["model"], layers=4))],
         "\n", "model differs"),
        ("an unknown record type", good + [{"type": "stepp", "step": 4}], "\n", "unknown \"type\""),
        ("more HellaSwag answers right than examples", good + [hellaswag(3, 401)], "\n", "not within 0..400"),
        ("a HellaSwag score without its count", good + [{k: v for k, v in hellaswag(3, 9).items() if k != "correct"}],
         "\n", 'no "correct"'),
        ("a HellaSwag score of an earlier step", good + [hellaswag(2, 9)], "\n", "HellaSwag of step 2 after step 3"),
        ("a last line without its newline", good, "", "no newline"),
        ("an empty line", good[:2] + [""] + good[2:], "\n", "empty line"),
    ]
    for i, (what, recs, tail, reason) in enumerate(bad_cases):
        path = write_jsonl(os.path.join(d, "bad", f"case{i}", "metrics.jsonl"), recs, tail)
        rc, out, err = tool("--validate", path)
        check(f"rejected: {what}", rc == 1 and path in err and reason in err, f"exit {rc}\n" + out + err)
    rc, out, err = tool("--validate", uncut)
    check("rejected: a resumed file that still holds steps after the checkpoint",
          rc == 1 and "not cut back" in err, out + err)
    garbage = os.path.join(d, "garbage.bin")
    with open(garbage, "wb") as f:
        f.write(bytes(range(256)) * 4)
    rc, out, err = tool("--validate", garbage)
    check("rejected: a binary file, named", rc == 1 and garbage in err, out + err)
    missing = os.path.join(d, "nowhere", "metrics.jsonl")
    rc, out, err = tool("--validate", missing)
    check("rejected: a missing file, named", rc == 1 and missing in err and "no such file" in err, out + err)
    if real:
        rc, out, err = tool("--validate", real)
        check(f"the real file {real} is valid", rc == 0, out + err)


def check_plots(d, a, b, tlog, real):
    print("plots:")
    out_png = os.path.join(d, "two.png")
    rc, out, err = tool(os.path.dirname(a), b, tlog, "-o", out_png, "--title", "three runs")
    size = png_size(out_png)
    check("three runs (a directory, a resumed metrics.jsonl, a PyTorch log) plotted", rc == 0, out + err)
    check("a whole PNG, two loss panels and the HellaSwag panel side by side (wide)", size is not None
          and 900 <= size[0] <= 3000 and 300 <= size[1] <= 1200 and size[0] > 3 * size[1], f"size {size}")
    check("default labels: the directory names and the log's name",
          all(f"{lab}:" in out for lab in ("runA", "runB", "torch")), out)
    one_png = os.path.join(d, "one.png")
    rc, out, err = tool(a, b, "-o", one_png, "--x", "tokens", "--smooth", "5", "--labels", "plain,resumed")
    one = png_size(one_png)
    check("--x tokens: one loss panel and the HellaSwag one, narrower than three", rc == 0 and one is not None
          and size is not None and one[0] < size[0] * 0.8 and one[1] >= 300, f"size {one}\n" + out + err)
    check("--labels used", "plain:" in out and "resumed:" in out, out)
    raw_png = os.path.join(d, "raw.png")
    rc, out, err = tool(a, "-o", raw_png, "--x", "steps", "--smooth", "1")
    check("--smooth 1 (no smoothing) plots", rc == 0 and png_size(raw_png) is not None, out + err)

    cut = write_jsonl(os.path.join(d, "killed", "metrics.jsonl"),
                      [header()] + [step(n, curve(n)) for n in (1, 2, 3)] + ['{"type": "step", "st'], "")
    rc, out, err = tool(cut, "-o", os.path.join(d, "killed.png"))
    check("a last line cut off by a kill: plotted with a warning", rc == 0 and "cut off" in err, out + err)
    if real:
        rc, out, err = tool(real, "-o", os.path.join(d, "real.png"))
        check(f"the real file {real} plotted", rc == 0 and png_size(os.path.join(d, "real.png")) is not None,
              out + err)

    print("errors:")
    missing = os.path.join(d, "no_such_run")
    rc, out, err = tool(a, missing, "-o", os.path.join(d, "x.png"))
    check("a missing input: exit 1, named", rc == 1 and missing in err, err)
    garbage = os.path.join(d, "garbage.txt")
    with open(garbage, "w") as f:
        f.write("this is not\na metrics file\n")
    rc, out, err = tool(garbage, "-o", os.path.join(d, "x.png"))
    check("a text file that is neither: exit 1, named, 'not JSONL'", rc == 1 and garbage in err
          and "JSONL" in err, err)
    broken = write_jsonl(os.path.join(d, "broken", "metrics.jsonl"), [header(), "{not json", step(1, 5.0)])
    rc, out, err = tool(broken, "-o", os.path.join(d, "x.png"))
    check("a bad line in the middle: exit 1, the file and line named", rc == 1 and f"{broken}:2" in err, err)
    empty_run = write_jsonl(os.path.join(d, "fresh", "metrics.jsonl"), [header()])
    rc, out, err = tool(empty_run, "-o", os.path.join(d, "x.png"))
    check("no step records: exit 1, named", rc == 1 and empty_run in err and "no step records" in err, err)
    nodir = os.path.join(d, "emptydir")
    os.makedirs(nodir)
    rc, out, err = tool(nodir, "-o", os.path.join(d, "x.png"))
    check("a directory without metrics.jsonl: exit 1, named", rc == 1 and nodir in err, err)
    rc, out, err = tool(a, "-o", os.path.join(d, "x.png"), "--labels", "one,two")
    check("--labels of the wrong count: exit 1", rc == 1 and "--labels" in err, err)
    bad_out = os.path.join(d, "no_dir", "x.png")
    rc, out, err = tool(a, "-o", bad_out)
    check("an output in a missing directory: exit 1, named", rc == 1 and bad_out in err, err)
    check("no PNG left behind by the failures", not os.path.exists(os.path.join(d, "x.png")))
    rc, out, err = tool(a)
    check("no -o: a usage error", rc == 2 and "-o" in err, err)
    rc, out, err = tool("--help")
    check("--help", rc == 0 and "--validate" in out and "--smooth" in out, out + err)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--validate", metavar="FILE", help="also validate and plot this real metrics.jsonl")
    args = p.parse_args()
    have_mpl = have_matplotlib()
    with tempfile.TemporaryDirectory(prefix="plot_metrics_") as d:
        a, b, uncut, tlog = plain_run(d), resumed_run(d), uncut_resume(d), torch_log(d)
        check_reading(d, a, b, uncut, tlog)
        check_validator(d, a, b, uncut, args.validate)
        if have_mpl:
            check_plots(d, a, b, tlog, args.validate)
    return finish(have_mpl)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""dev/test/test_plot_trace.py: scripts/plot_trace.py on made-up traces: a CPU trainer's (host
only) and a GPU trainer's (two host threads, three CUDA streams whose kernels, copies and
collectives overlap across streams, and a split-K reduction starts before its GEMM on the same
stream has ended, as programmatic dependent launch lets it) are valid, and so is a memory trace; each malformed variant
(not JSON, missing keys, a negative dur, a span without pid, tid, ts or dur, spans on one host
thread that overlap without nesting, a sample whose total is not
the sum of its categories, a wrong peak_bytes, ...) is refused naming the file and the problem;
the rows come host threads first, GPU work takes the colour of the GPU phase span that holds it;
timelines and memory charts are written as whole PNGs, and without matplotlib drawing exits 77.

    python3 dev/test/test_plot_trace.py                  # the made-up cases
    python3 dev/test/test_plot_trace.py --validate FILE  # also a trainer's real trace or memory trace

Last line "N passed, M failed"; exit 0, 1 on a failure, 77 when all the checks that could run
passed but matplotlib is missing (the drawing checks need it; the validator does not).
"""
import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pychecks import check, finish, have_matplotlib, png_size  # noqa: E402
TOOL = os.path.normpath(os.path.join(HERE, "..", "..", "scripts", "plot_trace.py"))



def tool(*args, cwd=None, hide_matplotlib=False):
    cmd = [sys.executable, TOOL, *args]
    if hide_matplotlib:
        # a python on which `import matplotlib` fails, whatever this machine has installed
        cmd = [sys.executable, "-c",
               "import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')", TOOL, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj, indent=1))
    return path


# ---------------------------------------------------------------- made-up traces

HOST, GPU = 0, 1
MAIN, LOADER = 100, 101
PHASES_ROW, COMPUTE, COPIES, COMM = 0, 7, 13, 14


def meta_process(pid, name):
    return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}


def meta_thread(pid, tid, name):
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def span(name, cat, pid, tid, ts, dur, step, **args):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": float(ts), "dur": float(dur),
            "args": dict(step=step, **args)}


def host_step(step, t, tid=MAIN):
    """a step of 1000 us on one host thread, its phases one after another inside it"""
    evs = [span(f"step {step}", "step", HOST, tid, t, 1000, step)]
    for name, a, b in (("batch", 0, 50), ("upload", 50, 80), ("forward", 80, 300), ("loss", 300, 340),
                       ("backward", 340, 800), ("update", 800, 950)):
        evs.append(span(name, "phase", HOST, tid, t + a, b - a, step))
    return evs


def cpu_trace():
    """the CPU trainer: steps 1..3 on the main thread, an evaluation after step 2"""
    evs = [meta_process(HOST, "host"), meta_thread(HOST, MAIN, "main thread")]
    for i, step in enumerate((1, 2, 3)):
        evs += host_step(step, 5000.0 + i * 1300)
    evs.append(span("evaluation", "between", HOST, MAIN, 5000.0 + 1300 + 1050, 200, 2))
    return {"traceEvents": evs, "displayTimeUnit": "ms",
            "otherData": {"program": "train_gpt2", "steps": [1, 3], "clock": "CLOCK_MONOTONIC, us"}}


def gpu_step(step, t):
    """what the GPU runs for one host step starting at t: each phase's span on a row of its own,
    from the first to the last operation it launched; the upload's copy on the copy stream; the
    forward's, loss's and backward's kernels on the compute stream; during the backward two NCCL
    kernels on the communication stream that overlap compute kernels, the second still running
    when the update starts (so the backward's span overlaps the update's); during the update an
    offload copy beside its kernels; a memset after the update, outside any phase"""
    evs = [span("upload", "phase", GPU, PHASES_ROW, t + 60, 40, step),
           span("cudaMemcpyAsync HtoD", "memcpy", GPU, COPIES, t + 60, 40, step, bytes=65536),
           span("forward", "phase", GPU, PHASES_ROW, t + 100, 318, step)]
    evs += [span(f"forward_kernel_{i}", "kernel", GPU, COMPUTE, t + 100 + 32 * i, 30, step) for i in range(10)]
    # programmatic dependent launch: the reduction starts while its GEMM is finishing
    evs[-1]["dur"] = 20.0
    evs.append(span("splitKreduce_kernel", "kernel", GPU, COMPUTE, t + 100 + 32 * 9 + 19.7, 8, step))
    evs += [span("loss", "phase", GPU, PHASES_ROW, t + 420, 50, step),
            span("fused_classifier", "kernel", GPU, COMPUTE, t + 420, 25, step),
            span("loss_reduce", "kernel", GPU, COMPUTE, t + 445, 25, step),
            span("backward", "phase", GPU, PHASES_ROW, t + 470, 450, step)]
    evs += [span(f"backward_kernel_{i}", "kernel", GPU, COMPUTE, t + 470 + 33 * i, 30, step) for i in range(12)]
    evs += [span("ncclDevKernel_ReduceScatter", "comm", GPU, COMM, t + 600, 100, step),
            span("ncclDevKernel_AllReduce", "comm", GPU, COMM, t + 750, 170, step),
            span("update", "phase", GPU, PHASES_ROW, t + 900, 80, step),
            span("adamw_kernel", "kernel", GPU, COMPUTE, t + 900, 40, step),
            span("copy_and_cast", "kernel", GPU, COMPUTE, t + 940, 35, step),
            span("cudaMemcpyAsync DtoH (offload)", "memcpy", GPU, COPIES, t + 910, 50, step),
            span("cudaMemsetAsync", "memset", GPU, COMPUTE, t + 985, 5, step)]
    return evs


def gpu_trace():
    """the GPU trainer: steps 11..12, the batch read on the loader thread, the GPU's phases and
    three streams"""
    evs = [meta_process(HOST, "host"), meta_thread(HOST, MAIN, "main thread"),
           meta_thread(HOST, LOADER, "loader thread"),
           meta_process(GPU, "GPU 0 (NVIDIA H100 80GB HBM3)"),
           meta_thread(GPU, PHASES_ROW, "phases (from their launches)"),
           meta_thread(GPU, COMPUTE, "stream 7 (compute)"),
           meta_thread(GPU, COPIES, "stream 13 (copies: offload)"),
           meta_thread(GPU, COMM, "stream 14 (communication)")]
    for i, step in enumerate((11, 12)):
        t = 20000.0 + i * 1100
        evs += host_step(step, t)
        evs.append(span("batch", "phase", HOST, LOADER, t - 400, 300, step))
        evs += gpu_step(step, t)
    # a thread's name may come after its spans (a writer that learns the GPU late names it last)
    evs.append(evs.pop(3))
    return {"traceEvents": evs, "displayTimeUnit": "ms",
            "otherData": {"program": "train_gpt2cu", "steps": [11, 12], "clock": "CLOCK_MONOTONIC, us"}}


CATEGORIES = ["parameters", "gradients", "optimizer state", "activations (kept)", "scratch", "staging",
              "communication", "fp8 copies", "other (runtime, libraries)"]


def memory_trace():
    """a step of the GPU trainer: activations grow in the forward and are freed in the backward"""
    g = 1 << 30
    fixed = {"parameters": g // 4, "gradients": g // 4, "optimizer state": 3 * g // 2, "scratch": g // 8,
             "staging": 1 << 20, "communication": 1 << 24, "fp8 copies": 0, "other (runtime, libraries)": g // 2}
    acts = (("start of step", 0), ("after forward", 9 * g), ("after loss", 10 * g), ("after backward", g),
            ("after update", 0))
    samples = []
    for i, (at, a) in enumerate(acts):
        b = dict(fixed, **{"activations (kept)": a})
        samples.append({"at": at, "t_us": 1000.0 * i, "bytes": b, "total": sum(b.values())})
    allocs = [{"name": "wte", "category": "parameters", "bytes": g // 8, "layer": None},
              {"name": "ln1", "category": "activations (kept)", "bytes": 1 << 22, "layer": 0},
              {"name": "ln1", "category": "activations (kept)", "bytes": 1 << 22, "layer": 1},
              {"name": "adamw m", "category": "optimizer state", "bytes": g // 2, "layer": None}]
    return {"memoryTrace": 1, "program": "train_gpt2cu", "step": 11,
            "peak_bytes": max(s["total"] for s in samples), "categories": CATEGORIES,
            "allocations": allocs, "samples": samples}


def cpu_memory_trace():
    """the CPU trainer's: fewer categories, bytes given only where not zero"""
    samples = [{"at": "start of step", "t_us": 0.0, "bytes": {"parameters": 4000, "optimizer state": 8000},
                "total": 12000},
               {"at": "after forward", "t_us": 10.5, "bytes": {"parameters": 4000, "optimizer state": 8000,
                                                                "activations (kept)": 30000}, "total": 42000}]
    return {"memoryTrace": 1, "program": "train_gpt2", "step": 1, "peak_bytes": 42000,
            "categories": ["parameters", "gradients", "optimizer state", "activations (kept)"],
            "allocations": [], "samples": samples}


def peak_gib(mem):
    """the peak as the tool must print it, from the samples rather than from peak_bytes"""
    return f"{max(s['total'] for s in mem['samples']) / (1 << 30):.2f}"


def find(trace, **match):
    """the index of the first event with these fields"""
    for i, ev in enumerate(trace["traceEvents"]):
        if all(ev.get(k) == v for k, v in match.items()):
            return i
    raise KeyError(match)


def load_module():
    spec = importlib.util.spec_from_file_location("plot_trace", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- checks

def check_logic(cpu, gpu):
    print("reading and colouring (no matplotlib needed):")
    pt = load_module()
    errors, tr = pt.validate_trace("gpu.json", gpu)
    check("the GPU-like trace reads without errors", errors == [], "\n".join(errors))
    if errors:
        return
    rows = tr.rows()
    check("rows: the host's main and loader threads first, then the GPU's phases and streams 7, 13, 14",
          rows == [(HOST, MAIN), (HOST, LOADER), (GPU, PHASES_ROW), (GPU, COMPUTE), (GPU, COPIES), (GPU, COMM)],
          str(rows))
    check("row labels name the process and the thread",
          tr.row_label((GPU, COMM)) == "GPU 0: stream 14 (communication)"
          and tr.row_label((HOST, MAIN)) == "host: main thread", tr.row_label((GPU, COMM)))
    spans = pt.step_spans(tr, 12)
    keys = pt.colour_keys(tr, spans)
    by_name = {s.name: keys[s.index] for s in spans if s.pid == GPU}
    check("a kernel takes the colour of the GPU phase span around it",
          by_name["forward_kernel_3"] == "forward" and by_name["loss_reduce"] == "loss"
          and by_name["adamw_kernel"] == "update", str(by_name))
    check("work on another stream takes the colour of the GPU phase span of its time (NCCL in the "
          "backward, the offload copy in the update)",
          by_name["ncclDevKernel_AllReduce"] == "backward"
          and by_name["cudaMemcpyAsync DtoH (offload)"] == "update", str(by_name))
    check("a memset outside every GPU phase span is grey (None)", by_name["cudaMemsetAsync"] is None,
          str(by_name))
    check("only step 12's spans are drawn for --step 12", spans and all(s.step == 12 for s in spans)
          and len(spans) == len([s for s in tr.spans if s.step == 11]))
    check_fold(pt)
    errors, tr = pt.validate_trace("cpu.json", cpu)
    check("the CPU-like trace: one row, the main thread",
          errors == [] and tr.rows() == [(HOST, MAIN)], "\n".join(errors))


def check_fold(pt):
    """the memory picture leaves out micro-steps that repeat the one before them"""
    def sample(at, act):
        return {"at": at, "t_us": 0.0, "bytes": {"parameters": 10, "activations (kept)": act}, "total": 10 + act}
    samples = [sample("start of step", 5)]
    for k in range(1, 6):
        act = 7 if k == 4 else 5  # micro-step 4 differs from 3
        samples += [sample(f"after forward (micro-step {k})", act), sample(f"after backward (micro-step {k})", 5)]
    samples.append(sample("after update (micro-step 5)", 5))
    shown = [s if isinstance(s, str) else s["at"] for s in pt.fold_micro_steps(samples)]
    want = ["start of step", "after forward (micro-step 1)", "after backward (micro-step 1)",
            "micro-steps 2-3: as micro-step 1", "after forward (micro-step 4)", "after backward (micro-step 4)",
            "after forward (micro-step 5)", "after backward (micro-step 5)", "after update (micro-step 5)"]
    check("memory picture: micro-steps 2-3 repeat micro-step 1 and are folded; 4 differs and 5 ends with the "
          "update, so both are drawn", shown == want, str(shown))


def trace_cases(cpu, gpu):
    """(what, the file's text, what the message must say); each breaks one rule"""
    cases = []

    def variant(what, base, change, reason):
        t = copy.deepcopy(base)
        change(t)
        cases.append((what, json.dumps(t), reason))

    good = json.dumps(gpu)
    cases.append(("not JSON (a trace cut off while written)", good[:len(good) // 2], "not JSON"))
    cases.append(("an empty file", "", "not JSON"))
    cases.append(("a NaN literal", good.replace('"dur": 30.0', '"dur": NaN', 1), "NaN is not JSON"))
    cases.append(("a JSON list, not an object", "[]", "not an object"))
    variant("no traceEvents", gpu, lambda t: t.pop("traceEvents"), 'no "traceEvents"')
    variant("no otherData", gpu, lambda t: t.pop("otherData"), 'no "otherData"')
    variant("no displayTimeUnit", gpu, lambda t: t.pop("displayTimeUnit"), 'no "displayTimeUnit"')
    variant("otherData without the program", gpu, lambda t: t["otherData"].pop("program"), 'no "program"')
    variant("otherData without the clock", gpu, lambda t: t["otherData"].pop("clock"), 'no "clock"')
    variant("steps not [FIRST, LAST]", gpu, lambda t: t["otherData"].update(steps=[12, 11]), "not [FIRST, LAST]")
    variant("displayTimeUnit not ms", gpu, lambda t: t.update(displayTimeUnit="ns"), 'not "ms"')
    variant("a negative dur", gpu, lambda t: t["traceEvents"][find(t, name="forward_kernel_2")].update(dur=-3.5),
            '"dur" is -3.5, negative')
    for key in ("pid", "tid", "ts", "dur"):
        variant(f"an X event without {key}", gpu,
                lambda t, key=key: t["traceEvents"][find(t, name="backward_kernel_1")].pop(key), f'no "{key}"')
    variant("a span's args without the step", gpu,
            lambda t: t["traceEvents"][find(t, name="adamw_kernel")]["args"].pop("step"), 'no "step"')
    variant("an unknown ph", gpu, lambda t: t["traceEvents"][find(t, name="loss_reduce")].update(ph="B"),
            'not "M" (metadata) or "X"')
    variant("an unknown cat", gpu, lambda t: t["traceEvents"][find(t, name="loss_reduce")].update(cat="cuda"),
            '"cat" is "cuda"')
    variant("an unknown phase", gpu, lambda t: t["traceEvents"][find(t, name="update", pid=HOST)].update(
        name="optimizer"), 'phase "optimizer" is not one of')
    variant("a step span misnamed", gpu, lambda t: t["traceEvents"][find(t, name="step 12")].update(
        name="step 13"), 'so "step 12"')
    variant("a traced step without its span", gpu, lambda t: t["traceEvents"].pop(find(t, name="step 12")),
            "no span of step 12")
    variant("a span of a step that is not traced", gpu,
            lambda t: t["traceEvents"][find(t, name="adamw_kernel")]["args"].update(step=13),
            "outside the traced steps 11..12")
    variant("a span on a thread without a thread_name", gpu,
            lambda t: t["traceEvents"][find(t, name="adamw_kernel")].update(tid=99), "tid 99 has no thread_name")
    variant("a process named neither host nor GPU", gpu,
            lambda t: t["traceEvents"][find(t, name="process_name", pid=GPU)]["args"].update(name="device"),
            "neither \"host\" nor \"GPU N")
    variant("a kernel on the host", gpu,
            lambda t: t["traceEvents"][find(t, name="adamw_kernel")].update(pid=HOST, tid=LOADER),
            "belongs to a GPU stream")
    variant("an NCCL kernel on the host", gpu,
            lambda t: t["traceEvents"][find(t, name="ncclDevKernel_AllReduce")].update(pid=HOST, tid=LOADER),
            "a comm span on the host")
    # host spans that overlap without nesting: the forward runs past the start of the loss
    variant("spans on one host thread that overlap without nesting (CPU trace)", cpu,
            lambda t: t["traceEvents"][find(t, name="forward", args={"step": 2})].update(dur=250.0),
            "overlaps traceEvents")
    variant("a phase that leaves its step (GPU trace, main thread)", gpu,
            lambda t: t["traceEvents"][find(t, name="update", pid=HOST, args={"step": 11})].update(dur=300.0),
            "without nesting in it")
    return cases


def memory_cases(mem):
    cases = []

    def variant(what, change, reason):
        t = copy.deepcopy(mem)
        change(t)
        cases.append((what, json.dumps(t), reason))

    good = json.dumps(mem)
    cases.append(("a memory trace that is not JSON", good[:-40], "not JSON"))
    variant("a sample whose total is not the sum of its categories",
            lambda t: t["samples"][2].update(total=t["samples"][2]["total"] + 1), "but its categories sum to")
    variant("a peak_bytes other than the largest total", lambda t: t.update(peak_bytes=t["peak_bytes"] - 1024),
            '"peak_bytes" is')
    for key in ("samples", "peak_bytes", "categories"):
        variant(f"a memory trace without {key}", lambda t, key=key: t.pop(key), f'no "{key}"')
    variant("a sample without its total", lambda t: t["samples"][1].pop("total"), 'no "total"')
    variant("bytes of a category the file does not list",
            lambda t: t["samples"][0]["bytes"].update(cache=5), 'bytes of "cache", which is not in "categories"')
    variant("an allocation in an unlisted category", lambda t: t["allocations"][1].update(category="weights"),
            "not one of the file's categories")
    variant("a negative byte count", lambda t: t["samples"][0]["bytes"].update(scratch=-1), "not a byte count")
    variant("samples out of time order", lambda t: t["samples"][3].update(t_us=0.5), "in the order taken")
    variant("another version", lambda t: t.update(memoryTrace=2), '"memoryTrace" is 2')
    return cases


def check_validator(d, cpu_path, gpu_path, mem_path, cpu_mem_path, cpu, gpu, mem, real):
    print("--validate:")
    rc, out, err = tool("--validate", cpu_path)
    check("the CPU-like trace is valid, its summary counting 3 steps' phases and the evaluation",
          rc == 0 and f"{cpu_path}: valid" in out and "steps 1..3" in out and "forward 3" in out
          and "evaluation 1" in out, out + err)
    rc, out, err = tool("--validate", gpu_path)
    check("the GPU-like trace (kernels overlapping across streams, GPU phase spans overlapping, a name after "
          "its spans) is valid; host and GPU phase spans counted",
          rc == 0 and "steps 11..12" in out and "forward 4" in out and "batch 4" in out and "GPU operations" in out,
          out + err)
    rc, out, err = tool("--validate", mem_path, "--memory", cpu_mem_path)
    check("memory traces are valid: samples and the peak named",
          rc == 0 and f"5 samples, peak {peak_gib(mem)} GiB" in out and '"after loss"' in out
          and "2 samples, peak 0.04 MiB" in out, out + err)
    rc, out, err = tool("--validate", cpu_path, gpu_path, mem_path, hide_matplotlib=True)
    check("--validate needs no matplotlib", rc == 0 and out.count("valid") == 3, out + err)

    for i, (what, text, reason) in enumerate(trace_cases(cpu, gpu) + memory_cases(mem)):
        path = write_json(os.path.join(d, "bad", f"case{i}.json"), text)
        rc, out, err = tool("--validate", path)
        first = err.splitlines()[0] if err else ""
        check(f"rejected: {what}", rc == 1 and first.startswith(f"error: {path}") and reason in first,
              f"exit {rc}, want {reason!r} on the first line\n" + out + err)
    neither = write_json(os.path.join(d, "neither.json"), {"events": []})
    rc, out, err = tool("--validate", neither)
    check("rejected: a JSON object of neither kind", rc == 1 and neither in err and "neither a trace" in err, err)
    missing = os.path.join(d, "nowhere", "trace.json")
    rc, out, err = tool("--validate", missing, gpu_path)
    check("a missing file refused, named; the other file still checked",
          rc == 1 and missing in err and "no such file" in err and f"{gpu_path}: valid" in out, out + err)
    for path in real:
        rc, out, err = tool("--validate", path)
        check(f"the real file {path} is valid", rc == 0, out + err)


def check_no_matplotlib(d, gpu_path, mem_path):
    print("without matplotlib:")
    out_png = os.path.join(d, "hidden.png")
    rc, out, err = tool(gpu_path, "-o", out_png, hide_matplotlib=True)
    check("drawing a timeline says matplotlib is missing and exits 77, writing nothing",
          rc == 77 and "matplotlib" in err and not os.path.exists(out_png), f"exit {rc}\n" + out + err)
    rc, out, err = tool("--memory", mem_path, "-o", out_png, hide_matplotlib=True)
    check("drawing a memory trace likewise", rc == 77 and "matplotlib" in err and not os.path.exists(out_png),
          f"exit {rc}\n" + out + err)
    bad = write_json(os.path.join(d, "bad_for_drawing.json"), "{\"traceEvents\": [")
    rc, out, err = tool(bad, "-o", out_png, hide_matplotlib=True)
    check("a broken trace is refused before matplotlib is needed", rc == 1 and bad in err, f"exit {rc}\n" + err)


def check_usage(d, gpu_path, mem_path):
    print("usage:")
    rc, out, err = tool()
    check("no file: a usage error", rc == 2 and "usage" in err, err)
    rc, out, err = tool(gpu_path, "--memory", mem_path)
    check("a trace and --memory together: a usage error", rc == 2 and "not both" in err, err)
    rc, out, err = tool("--memory", mem_path, "--step", "3")
    check("--step with --memory: a usage error", rc == 2 and "--step" in err, err)
    rc, out, err = tool("--help")
    check("--help names --validate, --memory and --step",
          rc == 0 and all(k in out for k in ("--validate", "--memory", "--step")), out + err)


def check_drawing(d, cpu_path, gpu_path, mem_path, cpu_mem_path, mem, real):
    print("drawing:")
    png = os.path.join(d, "cpu.png")
    rc, out, err = tool(cpu_path, "-o", png)
    size = png_size(png)
    check("the CPU-like trace: the first traced step on one host row, a whole PNG",
          rc == 0 and "train_gpt2 step 1," in out and "1 host threads, 0 GPU rows" in out
          and size is not None and size[0] > size[1], f"size {size}\n" + out + err)
    png = os.path.join(d, "gpu.png")
    rc, out, err = tool(gpu_path, "-o", png, "--step", "12")
    gsize = png_size(png)
    check("the GPU-like trace, --step 12: 2 host threads and 4 GPU rows, a whole PNG taller than the CPU one",
          rc == 0 and "train_gpt2cu step 12, 1.000 ms" in out and "2 host threads, 4 GPU rows" in out
          and gsize is not None and size is not None and gsize[1] > size[1], f"size {gsize}\n" + out + err)
    work = os.path.join(d, "cwd")
    os.makedirs(work)
    rc, out, err = tool(gpu_path, cwd=work)
    check("without -o: timeline.png", rc == 0 and png_size(os.path.join(work, "timeline.png")) is not None,
          out + err)
    rc, out, err = tool("--memory", mem_path, cwd=work)
    check("--memory without -o: memory.png, the peak named",
          rc == 0 and png_size(os.path.join(work, "memory.png")) is not None
          and f'peak {peak_gib(mem)} GiB at "after loss"' in out, out + err)
    png = os.path.join(d, "cpu_memory.png")
    rc, out, err = tool("--memory", cpu_mem_path, "-o", png)
    check("a CPU memory trace with four categories drawn, its small peak in MiB",
          rc == 0 and png_size(png) is not None and 'peak 0.04 MiB at "after forward"' in out, out + err)
    for i, path in enumerate(real):
        png = os.path.join(d, f"real{i}.png")
        with open(path) as f:
            is_memory = "memoryTrace" in json.load(f)
        rc, out, err = tool(*(["--memory", path] if is_memory else [path]), "-o", png)
        check(f"the real file {path} drawn", rc == 0 and png_size(png) is not None, out + err)

    print("drawing errors:")
    x = os.path.join(d, "x.png")
    rc, out, err = tool(gpu_path, "-o", x, "--step", "5")
    check("a step that is not traced: exit 1, the file and the traced steps named",
          rc == 1 and gpu_path in err and "steps 11..12" in err, err)
    bad = write_json(os.path.join(d, "bad_draw.json"),
                     json.dumps(gpu_trace()).replace('"dur": 30.0', '"dur": -30.0', 1))
    rc, out, err = tool(bad, "-o", x)
    check("an invalid trace is not drawn: exit 1, named, the problem given", rc == 1 and bad in err
          and "negative" in err, err)
    rc, out, err = tool(mem_path, "-o", x)
    check("a memory trace given as a trace: exit 1, pointing at --memory", rc == 1 and "--memory" in err, err)
    rc, out, err = tool("--memory", gpu_path, "-o", x)
    check("a trace given to --memory: exit 1", rc == 1 and gpu_path in err and "not a memory trace" in err, err)
    bad_out = os.path.join(d, "no_dir", "x.png")
    rc, out, err = tool(gpu_path, "-o", bad_out)
    check("an output in a missing directory: exit 1, named", rc == 1 and bad_out in err, err)
    check("no picture left behind by the failures", not os.path.exists(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--validate", metavar="FILE", action="append", default=[],
                   help="also validate and draw this real trace or memory trace (repeatable)")
    args = p.parse_args()
    have_mpl = have_matplotlib()
    with tempfile.TemporaryDirectory(prefix="plot_trace_") as d:
        cpu, gpu, mem = cpu_trace(), gpu_trace(), memory_trace()
        cpu_path = write_json(os.path.join(d, "cpu", "trace.json"), cpu)
        gpu_path = write_json(os.path.join(d, "gpu", "trace.json"), gpu)
        mem_path = write_json(os.path.join(d, "gpu", "memory.json"), mem)
        cpu_mem_path = write_json(os.path.join(d, "cpu", "memory.json"), cpu_memory_trace())
        check_logic(cpu, gpu)
        check_validator(d, cpu_path, gpu_path, mem_path, cpu_mem_path, cpu, gpu, mem, args.validate)
        check_no_matplotlib(d, gpu_path, mem_path)
        check_usage(d, gpu_path, mem_path)
        if have_mpl:
            check_drawing(d, cpu_path, gpu_path, mem_path, cpu_mem_path, mem, args.validate)
    return finish(have_mpl)


if __name__ == "__main__":
    sys.exit(main())

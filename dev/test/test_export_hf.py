#!/usr/bin/env python3
"""test_export_hf.py: build/export_hf end to end, on the CPU.

For two small random models (l2h2c64t32 with GPT-2's vocabulary, l3h4c48t16 with 1000
tokens), every parameter random (biases and layernorms too, so that a swapped tensor
shows): export the checkpoint, then
  - read model.safetensors with the safetensors package (names, shapes, dtypes, metadata)
  - run transformers' GPT-2 arithmetic (Conv1D: x @ W + b) written out here on those
    tensors, and compare its logits with dev/gpt2_ref.py's model of our checkpoint and,
    through ./test_gpt2, with our CPU trainer's forward (fp32 tolerance 1e-4 relative)
  - load the directory with transformers' GPT2LMHeadModel (and its tokenizer) and compare
    logits, where transformers is installed (it is optional: said when absent)
  - import it back: the checkpoint's parameters byte-identical (fp32; bf16 from bf16)
  - import files written by the safetensors package and by transformers' save_pretrained
  - refusals through the command line: malformed safetensors, non-GPT-2 configs, missing
    or misshapen tensors, bad arguments: exit 1 and a message naming the problem.
Ends with "N passed, M failed"; exits 77 (skipped) if PyTorch or the safetensors package
is missing (scripts/install_deps.sh installs it).
Run from anywhere with the python that has PyTorch, after `make build/export_hf test_gpt2`:
  /usr/bin/python3 dev/test/test_export_hf.py [--keep]
"""

import importlib.util
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXPORT = os.path.join(ROOT, "build", "export_hf")
TEST_GPT2 = os.path.join(ROOT, "test_gpt2")
SKIP = 77
TOL = 1e-4

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: no PyTorch for %s (apt: python3-torch)" % sys.executable)
    sys.exit(SKIP)


def import_safetensors():
    # installed by scripts/install_deps.sh (make test) for the python that has PyTorch
    return importlib.util.find_spec("safetensors") is not None


if not import_safetensors():
    print("skipped: the safetensors package is missing and could not be installed (pip install safetensors)")
    sys.exit(SKIP)
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "dev"))
import gpt2_ref  # noqa: E402

try:
    import transformers  # noqa: F401
    HAVE_TRANSFORMERS = True
except Exception:  # noqa: BLE001 - any failure to import means: not usable here
    HAVE_TRANSFORMERS = False

passed = failed = 0
KEEP = "--keep" in sys.argv
WORK = tempfile.mkdtemp(prefix="test_export_hf.")


def case(name, fn, *args):
    global passed, failed
    try:
        note = fn(*args)
        passed += 1
        print("ok    %s%s" % (name, ("  (%s)" % note) if note else ""))
    except Exception as e:  # noqa: BLE001 - a case fails on any exception, with its message
        failed += 1
        print("FAIL  %s: %s: %s" % (name, type(e).__name__, e))


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run(args, expect_rc=0):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    if expect_rc is not None and r.returncode != expect_rc:
        out = (r.stdout[-2000:] + r.stderr[-2000:]).rstrip("\n")
        raise AssertionError("%s: exit %d, expected %d\n%s" % (" ".join(args), r.returncode, expect_rc,
                                                               "\n".join("      " + ln for ln in out.split("\n"))))
    return r


def expect_refusal(args, *needles):
    r = run(args, expect_rc=None)
    check(r.returncode == 1, "exit %d, expected 1 (a clean refusal): %s" % (r.returncode, r.stderr.strip()))
    check(r.stderr.startswith("error: "), "stderr does not start with 'error: ': %r" % r.stderr)
    for n in needles:
        check(n in r.stderr, "the message lacks %r: %s" % (n, r.stderr.strip()))


def rel_err(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


# ----------------------------------------------------------------------------
# models

MODELS = [
    dict(name="gpt2vocab", L=2, H=2, C=64, T=32, V=50257, seed=11),
    dict(name="vocab1000", L=3, H=4, C=48, T=16, V=1000, seed=12),
]


def random_params(cfg, seed):
    """Every tensor random, wte's padding rows zero (as our checkpoints have them)."""
    g = torch.Generator().manual_seed(seed)
    p = {}
    for name, shape in cfg.shapes().items():
        t = torch.randn(shape, generator=g) * (0.3 if name in ("ln1w", "ln2w", "lnfw") else 0.1)
        if name in ("ln1w", "ln2w", "lnfw"):
            t += 1.0
        p[name] = t
    p["wte"][cfg.V:] = 0.0
    return p


def hf_forward(sd, L, H, idx, prefix="transformer."):
    """transformers' GPT-2 arithmetic on its own tensor names: Conv1D is x @ W + b with W
    stored (in, out); gelu_new; lm_head tied to wte."""
    def p(k):
        return sd[prefix + k].float()
    wte, wpe = p("wte.weight"), p("wpe.weight")
    B, T = idx.shape
    C = wte.shape[1]
    hs = C // H
    x = wte[idx] + wpe[:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in range(L):
        def q(k):
            return p("h.%d.%s" % (layer, k))
        h = F.layer_norm(x, (C,), q("ln_1.weight"), q("ln_1.bias"), 1e-5)
        qkv = torch.addmm(q("attn.c_attn.bias"), h.reshape(-1, C), q("attn.c_attn.weight")).view(B, T, 3 * C)
        qq, kk, vv = (t.view(B, T, H, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (qq @ kk.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ vv).transpose(1, 2).reshape(-1, C)
        x = x + torch.addmm(q("attn.c_proj.bias"), y, q("attn.c_proj.weight")).view(B, T, C)
        h = F.layer_norm(x, (C,), q("ln_2.weight"), q("ln_2.bias"), 1e-5)
        h = torch.addmm(q("mlp.c_fc.bias"), h.reshape(-1, C), q("mlp.c_fc.weight"))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))
        x = x + torch.addmm(q("mlp.c_proj.bias"), h, q("mlp.c_proj.weight")).view(B, T, C)
    x = F.layer_norm(x, (C,), p("ln_f.weight"), p("ln_f.bias"), 1e-5)
    return x @ wte.t()


def expected_names(L):
    names = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"}
    for layer in range(L):
        for k in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"):
            names.add("transformer.h.%d.%s" % (layer, k))
    return names


def body(path):
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack("<8i", data[:32]), data[1024:]


class Model:
    def __init__(self, spec):
        self.spec = spec
        self.dir = os.path.join(WORK, spec["name"])
        os.makedirs(self.dir)
        self.cfg = gpt2_ref.Config(spec["L"], spec["H"], spec["C"], spec["T"], spec["V"])
        self.params = random_params(self.cfg, spec["seed"])
        self.ckpt = os.path.join(self.dir, "model.bin")
        self.ckpt16 = os.path.join(self.dir, "model_bf16.bin")
        gpt2_ref.write_checkpoint(self.ckpt, self.cfg, self.params)
        gpt2_ref.write_checkpoint(self.ckpt16, self.cfg, self.params, bf16=True)
        self.hf = os.path.join(self.dir, "hf")
        self.hf16 = os.path.join(self.dir, "hf_bf16")
        g = torch.Generator().manual_seed(spec["seed"] + 1)
        self.idx = torch.randint(0, self.cfg.V, (2, self.cfg.maxT), generator=g)
        with torch.no_grad():
            self.ref_logits = gpt2_ref.GPT2(self.cfg, self.params)(self.idx)[0]


def t_export(m):
    r = run([EXPORT, m.ckpt, m.hf])
    files = set(os.listdir(m.hf))
    gpt2_vocab = m.cfg.V == 50257
    want = {"model.safetensors", "config.json", "generation_config.json"}
    if gpt2_vocab:
        want |= {"vocab.json", "merges.txt", "tokenizer_config.json"}
    check(files == want, "files %s, expected %s" % (sorted(files), sorted(want)))
    with open(os.path.join(m.hf, "config.json")) as f:
        conf = json.load(f)
    eot = 50256 if gpt2_vocab else m.cfg.V - 1
    expect = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=m.cfg.V, n_positions=m.cfg.maxT,
                  n_embd=m.cfg.C, n_layer=m.cfg.L, n_head=m.cfg.H, n_inner=None, activation_function="gelu_new",
                  layer_norm_epsilon=1e-5, bos_token_id=eot, eos_token_id=eot, tie_word_embeddings=True,
                  torch_dtype="float32")
    for k, v in expect.items():
        check(conf.get(k, "absent") == v, "config.json %s = %r, expected %r" % (k, conf.get(k, "absent"), v))
    with open(os.path.join(m.hf, "generation_config.json")) as f:
        gen = json.load(f)
    check(gen.get("eos_token_id") == eot, "generation_config.json eos_token_id %r" % gen.get("eos_token_id"))
    if gpt2_vocab:
        for ours, theirs in (("vocab.json", "encoder.json"), ("merges.txt", "vocab.bpe")):
            with open(os.path.join(m.hf, ours), "rb") as a, open(os.path.join(ROOT, "data/gpt2", theirs), "rb") as b:
                check(a.read() == b.read(), "%s is not a copy of data/gpt2/%s" % (ours, theirs))
    else:
        check("no tokenizer files written" in r.stderr, "no warning about the missing tokenizer: %r" % r.stderr)
    leftovers = [n for n in os.listdir(m.dir) if ".tmp" in n]
    check(not leftovers, "temporary files left: %s" % leftovers)


def t_safetensors_contents(m):
    path = os.path.join(m.hf, "model.safetensors")
    sd = m.sd = load_file(path)
    check(set(sd) == expected_names(m.cfg.L), "names differ: extra %s, missing %s"
          % (sorted(set(sd) - expected_names(m.cfg.L))[:4], sorted(expected_names(m.cfg.L) - set(sd))[:4]))
    with safe_open(path, "pt") as f:
        check(f.metadata() == {"format": "pt"}, "metadata %r" % f.metadata())
    C, V = m.cfg.C, m.cfg.V
    shapes = {"transformer.wte.weight": (V, C), "transformer.h.0.attn.c_attn.weight": (C, 3 * C),
              "transformer.h.0.attn.c_proj.weight": (C, C), "transformer.h.0.mlp.c_fc.weight": (C, 4 * C),
              "transformer.h.0.mlp.c_proj.weight": (4 * C, C), "transformer.h.0.mlp.c_fc.bias": (4 * C,)}
    for k, s in shapes.items():
        check(tuple(sd[k].shape) == s, "%s has shape %s, expected %s" % (k, tuple(sd[k].shape), s))
    check(all(t.dtype == torch.float32 for t in sd.values()), "not every tensor is F32")
    check(torch.equal(sd["transformer.h.1.attn.c_attn.weight"], m.params["qkvw"][1].t()),
          "c_attn.weight is not qkvw transposed")


def t_hf_arithmetic(m):
    with torch.no_grad():
        logits = hf_forward(m.sd, m.cfg.L, m.cfg.H, m.idx)
    e = rel_err(logits, m.ref_logits)
    check(e <= TOL, "logits rel err %.3e > %.0e" % (e, TOL))
    return "rel err %.1e" % e


def t_cpu_forward(m):
    """Our CPU trainer's forward of the original checkpoint against transformers' arithmetic
    on the exported file: gpt2_ref's debug state of the checkpoint, its logits and loss
    replaced by those of hf_forward, checked by ./test_gpt2."""
    check(os.path.exists(TEST_GPT2), "%s is missing (make test_gpt2)" % TEST_GPT2)
    ref = os.path.join(m.dir, "ref")
    B, T = 2, m.cfg.maxT
    run([sys.executable, os.path.join(ROOT, "dev/gpt2_ref.py"), "--load", m.ckpt, "--batch", str(B), "--seq-len",
         str(T), "--steps", "0", "--threads", "2", "--out-dir", ref])
    path = os.path.join(ref, "debug_state.bin")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    off = 1024
    x = torch.tensor(struct.unpack("<%di" % (B * T), data[off:off + 4 * B * T])).view(B, T)
    y = torch.tensor(struct.unpack("<%di" % (B * T), data[off + 4 * B * T:off + 8 * B * T])).view(B, T)
    with torch.no_grad():
        logits = hf_forward(m.sd, m.cfg.L, m.cfg.H, x)
        loss = F.cross_entropy(logits.view(-1, m.cfg.V), y.view(-1))
    off += 8 * B * T
    n = B * T * m.cfg.V * 4
    buf = io.BytesIO()
    gpt2_ref.write_tensor(buf, logits)
    data[off:off + n] = buf.getvalue()
    data[off + n:off + n + 4] = struct.pack("<f", loss.item())
    with open(path, "wb") as f:
        f.write(data)
    r = run([TEST_GPT2, "--ref-dir", ref])
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("logits")]
    return line[0].split("  tol")[0] if line else None


def t_transformers(m):
    if not HAVE_TRANSFORMERS:
        return "transformers not installed here: GPT2LMHeadModel not checked"
    from transformers import GPT2LMHeadModel
    notes = []
    for d, params in ((m.hf, m.params), (m.hf16, {k: gpt2_ref.from_bf16(gpt2_ref.to_bf16(v)).view(v.shape)
                                                  for k, v in m.params.items()})):
        model = GPT2LMHeadModel.from_pretrained(d, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(m.idx).logits
            ref = gpt2_ref.GPT2(m.cfg, params)(m.idx)[0]
        e = rel_err(logits, ref)
        check(e <= TOL, "%s: GPT2LMHeadModel logits rel err %.3e > %.0e" % (d, e, TOL))
        notes.append("%.1e" % e)
    if m.cfg.V == 50257:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(m.hf)
        ids = tok("Hello world<|endoftext|>").input_ids
        check(ids == [15496, 995, 50256], "the exported tokenizer encodes 'Hello world<|endoftext|>' as %s" % ids)
        notes.append("tokenizer ok")
    # transformers' own writer: what it saves must import to the same parameters
    saved = os.path.join(m.dir, "hf_resaved")
    GPT2LMHeadModel.from_pretrained(m.hf).save_pretrained(saved, safe_serialization=True)
    out = os.path.join(m.dir, "back_resaved.bin")
    run([EXPORT, "--import", saved, out])
    check(body(out)[1] == body(m.ckpt)[1], "save_pretrained's file imports to different parameters")
    return "transformers %s, rel err %s" % (transformers.__version__, ", ".join(notes))


def t_round_trip_fp32(m):
    out = os.path.join(m.dir, "back.bin")
    run([EXPORT, "--import", m.hf, out])
    (h1, b1), (h2, b2) = body(out), body(m.ckpt)
    check(h1 == h2, "header %s, expected %s" % (h1, h2))
    check(b1 == b2, "parameters differ after the round trip")


def t_round_trip_bf16(m):
    run([EXPORT, m.ckpt16, m.hf16])
    with open(os.path.join(m.hf16, "config.json")) as f:
        check(json.load(f)["torch_dtype"] == "bfloat16", "torch_dtype is not bfloat16")
    sd = load_file(os.path.join(m.hf16, "model.safetensors"))
    check(all(t.dtype == torch.bfloat16 for t in sd.values()), "a bf16 source should export BF16 tensors")
    check(torch.equal(sd["transformer.h.0.mlp.c_fc.weight"].view(torch.int16),
                      gpt2_ref.to_bf16(m.params["fcw"][0].t().contiguous())), "BF16 bits of c_fc.weight differ")
    out = os.path.join(m.dir, "back_bf16.bin")
    run([EXPORT, "--import", m.hf16, out])
    (h1, b1), (h2, b2) = body(out), body(m.ckpt16)
    check(h1[1] == 5, "importing BF16 tensors should write version 5 by default, wrote %d" % h1[1])
    check(h1 == h2 and b1 == b2, "bf16 parameters differ after the round trip")
    # fp32 exported as bf16 rounds as PyTorch does (nearest even)
    d = os.path.join(m.dir, "hf_as_bf16")
    run([EXPORT, m.ckpt, d, "--dtype", "bf16", "--tokenizer-dir", "none"])
    out = os.path.join(m.dir, "back_as_bf16.bin")
    run([EXPORT, "--import", d, out])
    check(body(out)[1] == b2, "fp32 exported as bf16 differs from PyTorch's bf16 rounding")
    out32 = os.path.join(m.dir, "back_bf16_as_fp32.bin")
    run([EXPORT, "--import", m.hf16, out32, "--dtype", "fp32"])
    check(body(out32)[0][1] == 3, "--dtype fp32 did not write version 3")


def t_import_reference_writer(m):
    """Files from the safetensors package: bare names, F16, and shards with an index."""
    sd = {k: v.clone() for k, v in m.sd.items()}
    d = os.path.join(m.dir, "bare")
    os.makedirs(d)
    shutil.copy(os.path.join(m.hf, "config.json"), d)
    save_file({k[len("transformer."):]: v for k, v in sd.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    out = os.path.join(m.dir, "back_bare.bin")
    run([EXPORT, "--import", d, out])
    check(body(out)[1] == body(m.ckpt)[1], "bare names import to different parameters")
    d = os.path.join(m.dir, "f16")
    os.makedirs(d)
    shutil.copy(os.path.join(m.hf, "config.json"), d)
    save_file({k: v.half() for k, v in sd.items()}, os.path.join(d, "model.safetensors"))
    out = os.path.join(m.dir, "back_f16.bin")
    run([EXPORT, "--import", d, out])
    cfg, p = gpt2_ref.read_checkpoint(out)
    check(torch.equal(p["fcprojw"][1], m.params["fcprojw"][1].half().float()), "F16 values not converted exactly")
    d = os.path.join(m.dir, "sharded")
    os.makedirs(d)
    shutil.copy(os.path.join(m.hf, "config.json"), d)
    names = sorted(sd)
    half = len(names) // 2
    wmap = {}
    for i, part in enumerate((names[:half], names[half:])):
        fname = "model-%05d-of-00002.safetensors" % (i + 1)
        save_file({k: sd[k] for k in part}, os.path.join(d, fname), metadata={"format": "pt"})
        wmap.update({k: fname for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)
    out = os.path.join(m.dir, "back_sharded.bin")
    run([EXPORT, "--import", d, out])
    check(body(out)[1] == body(m.ckpt)[1], "sharded files import to different parameters")


# ----------------------------------------------------------------------------
# refusals through the command line

def st_bytes(header, data=b"", hlen=None):
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def t_malformed(m):
    """Each malformed file beside a valid config.json: exit 1, message names file and problem."""
    d = os.path.join(WORK, "malformed")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(m.hf, "config.json"), d)
    path = os.path.join(d, "model.safetensors")
    f8 = '"dtype":"F32","shape":[2]'
    with open(os.path.join(m.hf, "model.safetensors"), "rb") as f:
        good = f.read()
    cases = [
        ("header length beyond the file", st_bytes('{"a":{%s,"data_offsets":[0,8]}}' % f8, bytes(8), 4096),
         "exceeds the file"),
        ("absurd header length", st_bytes("{}", b"", 1 << 40), "absurd"),
        ("JSON that does not parse", st_bytes('{"a":{%s,"data_offsets":[0,8]}' % f8, bytes(8)), "not valid JSON"),
        ("offsets out of range", st_bytes('{"a":{%s,"data_offsets":[8,16]}}' % f8, bytes(8)), "reach past the end"),
        ("end before begin", st_bytes('{"a":{%s,"data_offsets":[8,0]}}' % f8, bytes(8)), "end before they begin"),
        ("size not shape x dtype", st_bytes('{"a":{%s,"data_offsets":[0,12]}}' % f8, bytes(12)), "need 8"),
        ("overlapping tensors", st_bytes('{"a":{%s,"data_offsets":[0,8]},"b":{%s,"data_offsets":[4,12]}}'
                                         % (f8, f8), bytes(12)), "overlap"),
        ("duplicate names", st_bytes('{"a":{%s,"data_offsets":[0,8]},"a":{%s,"data_offsets":[8,16]}}'
                                     % (f8, f8), bytes(16)), "appears twice"),
        ("unsupported dtype", st_bytes('{"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}', bytes(16)),
         "unsupported"),
        ("a truncated file", good[:len(good) - 100], "truncated"),
        ("a gap", st_bytes('{"a":{%s,"data_offsets":[0,8]},"b":{%s,"data_offsets":[12,20]}}' % (f8, f8),
                           bytes(20)), "belong to no tensor"),
    ]
    bad = []
    for what, data, needle in cases:
        with open(path, "wb") as f:
            f.write(data)
        try:
            expect_refusal([EXPORT, "--import", d, os.path.join(d, "out.bin")], path, needle)
        except AssertionError as e:
            bad.append("%s: %s" % (what, e))
        if os.path.exists(os.path.join(d, "out.bin")):
            bad.append("%s: a checkpoint was written" % what)
    check(not bad, "; ".join(bad))
    return "%d kinds" % len(cases)


def t_import_refusals(m):
    d = os.path.join(WORK, "badimport")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(m.hf, d)
    cpath = os.path.join(d, "config.json")
    with open(cpath) as f:
        conf = json.load(f)
    out = os.path.join(d, "out.bin")
    bad = []
    edits = [({"model_type": "gpt_neo"}, "model_type"), ({"n_inner": 3 * m.cfg.C}, "n_inner"),
             ({"activation_function": "relu"}, "activation_function"), ({"n_head": None}, "n_head"),
             ({"n_layer": m.cfg.L + 1}, "transformer.h.%d.ln_1.weight" % m.cfg.L),
             ({"tie_word_embeddings": False}, "tie_word_embeddings"), ({"model_type": "gpt2\u0000"}, "NUL"),
             ({"n_layer": 300, "n_embd": 2048},
              "transformer.wte.weight has shape [%d, %d], expected [%d, 2048]" % (m.cfg.V, m.cfg.C, m.cfg.V))]
    for edit, needle in edits:
        c = dict(conf)
        for k, v in edit.items():
            if v is None:
                del c[k]
            else:
                c[k] = v
        with open(cpath, "w") as f:
            json.dump(c, f)
        try:
            expect_refusal([EXPORT, "--import", d, out], needle)
        except AssertionError as e:
            bad.append("%s: %s" % (edit, e))
    with open(cpath, "w") as f:
        json.dump(conf, f)
    sd = dict(m.sd)
    missing = "transformer.h.1.mlp.c_proj.bias"
    del sd[missing]
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    try:
        expect_refusal([EXPORT, "--import", d, out], missing, "missing")
    except AssertionError as e:
        bad.append("missing tensor: %s" % e)
    sd = dict(m.sd)
    sd["transformer.h.0.attn.c_attn.weight"] = sd["transformer.h.0.attn.c_attn.weight"].t().contiguous()
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    try:
        expect_refusal([EXPORT, "--import", d, out], "transformer.h.0.attn.c_attn.weight", "shape")
    except AssertionError as e:
        bad.append("wrong shape: %s" % e)
    check(not os.path.exists(out), "a checkpoint was written by a refused import")
    check(not bad, "; ".join(bad))


def t_cli(m):
    d = os.path.join(WORK, "cli")
    os.makedirs(d, exist_ok=True)
    r = run([EXPORT, "--help"])
    check("--import" in r.stdout and "--dtype" in r.stdout, "--help lacks the options")
    expect_refusal([EXPORT], "expected CHECKPOINT OUT_DIR")
    expect_refusal([EXPORT, m.ckpt, os.path.join(d, "x"), "--dtype", "fp16"], "--dtype fp16")
    expect_refusal([EXPORT, m.ckpt, os.path.join(d, "x"), "--bogus", "1"], "--bogus")
    expect_refusal([EXPORT, os.path.join(d, "nonexistent.bin"), os.path.join(d, "x")], "nonexistent.bin")
    expect_refusal([EXPORT, os.path.join(m.hf, "config.json"), os.path.join(d, "x")], "not a model checkpoint")
    expect_refusal([EXPORT, m.ckpt, os.path.join(m.hf, "config.json")], "not a directory")
    expect_refusal([EXPORT, "--import", m.ckpt, os.path.join(d, "o.bin")], "not a directory")
    expect_refusal([EXPORT, "--import", d, os.path.join(d, "o.bin")], "config.json")
    # an output the checkpoint cannot be renamed to is refused before the conversion
    expect_refusal([EXPORT, "--import", m.hf, m.hf], "the directory being imported")
    check(not os.path.exists(m.hf + ".tmp"), "--import DIR DIR left %s.tmp" % m.hf)
    expect_refusal([EXPORT, m.ckpt, os.path.join(d, "x"), "--tokenizer-dir", d], "encoder.json")
    # a failure after the temporary directory exists leaves nothing behind
    tok = os.path.join(d, "tok")
    os.makedirs(os.path.join(tok, "vocab.bpe"), exist_ok=True)
    enc = {"t%d" % i: i for i in range(m.cfg.V)}
    with open(os.path.join(tok, "encoder.json"), "w") as f:
        json.dump(enc, f)
    expect_refusal([EXPORT, m.ckpt, os.path.join(d, "y"), "--tokenizer-dir", tok], "vocab.bpe", "directory")
    left = [n for n in os.listdir(d) if n.startswith("y")]
    check(not left, "a failed export left %s" % left)
    # an existing directory: our files replaced, others kept, nothing temporary left
    e = os.path.join(d, "existing")
    os.makedirs(e, exist_ok=True)
    with open(os.path.join(e, "README.md"), "w") as f:
        f.write("mine")
    with open(os.path.join(e, "config.json"), "w") as f:
        f.write("old")
    run([EXPORT, m.ckpt, e + "/", "--tokenizer-dir", "none"])
    with open(os.path.join(e, "README.md")) as f:
        check(f.read() == "mine", "an unrelated file was changed")
    with open(os.path.join(e, "config.json")) as f:
        check(json.load(f)["model_type"] == "gpt2", "config.json not replaced")
    check(sorted(os.listdir(e)) == ["README.md", "config.json", "generation_config.json", "model.safetensors"],
          "files: %s" % sorted(os.listdir(e)))
    check(not [n for n in os.listdir(d) if ".tmp" in n], "temporary files left: %s" % os.listdir(d))


def main():
    for tool in (EXPORT,):
        if not os.path.exists(tool):
            print("error: %s is missing (make build/export_hf)" % tool)
            return 1
    print("python %s, torch %s, transformers %s" % (sys.version.split()[0], torch.__version__,
                                                    transformers.__version__ if HAVE_TRANSFORMERS else "absent"))
    torch.set_num_threads(2)
    models = [Model(s) for s in MODELS]
    for m in models:
        tag = "%s (l%dh%dc%dt%d V=%d)" % (m.spec["name"], m.cfg.L, m.cfg.H, m.cfg.C, m.cfg.maxT, m.cfg.V)
        case("export: files, config.json, tokenizer: " + tag, t_export, m)
        case("model.safetensors: names, shapes, transposes: " + tag, t_safetensors_contents, m)
        if not hasattr(m, "sd"):
            continue
        case("transformers' arithmetic vs gpt2_ref, 1e-4: " + tag, t_hf_arithmetic, m)
        case("transformers' arithmetic vs our CPU forward: " + tag, t_cpu_forward, m)
        case("import: fp32 round trip byte-identical: " + tag, t_round_trip_fp32, m)
        case("export/import bf16: exact from bf16: " + tag, t_round_trip_bf16, m)
        case("import: safetensors package files (bare, F16, shards): " + tag, t_import_reference_writer, m)
        case("GPT2LMHeadModel.from_pretrained logits: " + tag, t_transformers, m)
    m = models[-1]
    if hasattr(m, "sd"):
        case("refusal: each malformed safetensors, exit 1 + message", t_malformed, m)
        case("refusal: non-GPT-2 configs, missing and misshapen tensors", t_import_refusals, m)
        case("command line: usage errors, existing directories, cleanup", t_cli, m)
    if not HAVE_TRANSFORMERS:
        print("note: transformers is not installed for %s; the GPT2LMHeadModel checks did not run "
              "(pip install 'transformers<4.46' works with Debian's PyTorch 1.13)" % sys.executable)
    if KEEP or failed:
        print("files kept in %s" % WORK)
    else:
        shutil.rmtree(WORK, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch reference of our GPT-2: the model every C/CUDA test compares against.

It builds GPT-2 from a seed (or loads our checkpoint / a Hugging Face GPT-2
directory), runs one batch forward and backward, then a few AdamW steps on that same
batch, and writes into --out-dir:

  model.bin         checkpoint, version 3 (fp32 parameters), docs/formats.md
  model_bf16.bin    the same parameters, version 5 (bf16, round-to-nearest-even)
  debug_state.bin   version 3: header [0]=20240327 [1]=3 [2]=B [3]=T [4]=V [5]=nsteps;
                    x (B,T) int32, y (B,T) int32, logits (B,T,V) fp32, loss fp32,
                    the gradients of all parameters in checkpoint order fp32 (wte's
                    padded to Vp rows with zeros)  -- this is exactly version 2's payload --
                    then losses[nsteps] fp32 (the loss before each AdamW step) and
                    hparams[8] fp32 = {lr, beta1, beta2, eps, weight_decay, grad_clip, 0, 0}.

The checkpoint files hold the parameters *before* the AdamW steps; the gradients in
the debug state are the raw (unclipped) gradients of the first forward/backward.

Runs on Debian's PyTorch 1.13 on the CPU and on a recent PyTorch on CUDA, e.g.
  /usr/bin/python3 dev/gpt2_ref.py --model d12 --batch 4 --seq-len 64 --out-dir out/ref
  /usr/bin/python3 dev/gpt2_ref.py --layers 2 --heads 4 --channels 64 --max-seq-len 64 \\
      --batch 2 --seq-len 16 --out-dir out/ref_small
  python3 dev/gpt2_ref.py --model d12 --device cuda --dtype float64 --out-dir out/ref64

Randomness: the parameters are drawn on the CPU in fp32 from torch.manual_seed(seed) in
checkpoint order (wte (V rows), wpe, qkvw, attprojw, fcw, fcprojw); random tokens come
from a separate CPU generator seeded with the same seed. So the model and batch are the
same on every device and in every --dtype.
"""

import argparse
import ctypes
import json
import math
import os
import struct
import sys
import time
import zipfile

# PyTorch's OpenMP threads and OpenBLAS's own threads share the cores: idle OpenMP
# threads that spin would slow the matmuls. Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HEADER_INTS = 256
HEADER_BYTES = 4 * HEADER_INTS
CKPT_MAGIC = 20240326
DEBUG_MAGIC = 20240327
SHARD_MAGIC = 20240520
LN_EPS = 1e-5

PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# 2-D weight matrices (per layer for the stacked ones): these get weight decay.
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
# tensors with a leading layer dimension L
STACKED = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
           "fcw", "fcb", "fcprojw", "fcprojb"}

MODELS = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280), "d48": (48, 25, 1600)}


class RefError(Exception):
    """A problem with the user's input (flags, files): printed without a traceback."""


# ----------------------------------------------------------------------------
# model

class Config:
    def __init__(self, L, H, C, maxT, V):
        self.L, self.H, self.C, self.maxT, self.V = int(L), int(H), int(C), int(maxT), int(V)
        self.Vp = (self.V + 127) // 128 * 128

    def validate(self, where="model"):
        for name, val in (("layers", self.L), ("heads", self.H), ("channels", self.C),
                          ("max-seq-len", self.maxT), ("vocab-size", self.V)):
            if val < 1:
                raise RefError("%s: %s must be positive, got %d" % (where, name, val))
        if self.C % self.H != 0:
            raise RefError("%s: channels %d is not divisible by heads %d" % (where, self.C, self.H))
        return self

    def shapes(self):
        """Parameter shapes in checkpoint order; weights are (out_features, in_features)."""
        L, C, Vp, maxT = self.L, self.C, self.Vp, self.maxT
        return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
                "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
                "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
                "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
                "lnfw": (C,), "lnfb": (C,)}

    def num_params(self):
        return sum(math.prod(s) for s in self.shapes().values())

    def __str__(self):
        return "L=%d H=%d C=%d maxT=%d V=%d Vp=%d" % (self.L, self.H, self.C, self.maxT, self.V, self.Vp)


def init_params(cfg, seed):
    """GPT-2 init in fp32 on the CPU, deterministic given the seed."""
    torch.manual_seed(seed)
    shapes = cfg.shapes()
    std_resid = 0.02 / math.sqrt(2 * cfg.L)
    p = {}
    for name in PARAM_NAMES:
        shape = shapes[name]
        if name == "wte":  # real rows random, padded rows exactly zero
            real = torch.empty(cfg.V, cfg.C).normal_(0.0, 0.02)
            p[name] = torch.cat([real, torch.zeros(cfg.Vp - cfg.V, cfg.C)])
        elif name in ("wpe", "qkvw", "fcw"):
            p[name] = torch.empty(shape).normal_(0.0, 0.02)
        elif name in ("attprojw", "fcprojw"):
            p[name] = torch.empty(shape).normal_(0.0, std_resid)
        elif name in ("ln1w", "ln2w", "lnfw"):
            p[name] = torch.ones(shape)
        else:  # biases and layernorm biases
            p[name] = torch.zeros(shape)
    return p


# ----------------------------------------------------------------------------
# FP8 linear layers, emulated (--fp8 1): what train_gpt2cu --fp8 1 computes, in the
# reference's own precision. Each operand is scaled so that its amax lands on the format's
# largest value (per tensor, current scaling), rounded to the format's grid (round to
# nearest even, saturating) and scaled back; the products are then exact. Forward: x and W
# in E4M3; backward: the output gradient in E5M2 against the quantized W and x. Bias
# gradients use the gradient as it is (the trainer sums them in bf16 from the unquantized
# gradient). Written from the format's definition (docs/fp8.md), with no float8 dtype, so
# it runs on any PyTorch.

FP8_E4M3 = (3, -6, 448.0)       # mantissa bits, smallest normal exponent, largest value
FP8_E5M2 = (2, -14, 57344.0)


def fp8_round(t, fmt):
    """t rounded to the FP8 format's values: nearest, ties to even, saturating at +-max."""
    mbits, emin, fmax = fmt
    t = t.clamp(-fmax, fmax)
    _, e = torch.frexp(t)               # |t| = m * 2^e with m in [0.5, 1): floor(log2|t|) = e - 1
    e = torch.clamp(e - 1, min=emin)    # below the smallest normal: the subnormals' fixed spacing
    quantum = torch.pow(2.0, (e - mbits).to(t.dtype))
    return torch.round(t / quantum) * quantum  # round() is half to even; powers of two are exact


def fp8_quantize(t, fmt):
    """t through FP8 with a per-tensor scale from its amax (an all-zero tensor stays zero)."""
    amax = t.detach().abs().max()
    if not torch.isfinite(amax) or amax == 0:
        return t
    scale = fmt[2] / amax
    return fp8_round(t * scale, fmt) / scale


class Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        xq, wq = fp8_quantize(x, FP8_E4M3), fp8_quantize(w, FP8_E4M3)
        ctx.save_for_backward(xq, wq)
        ctx.has_bias = b is not None
        return F.linear(xq, wq, b)

    @staticmethod
    def backward(ctx, g):
        xq, wq = ctx.saved_tensors
        gq = fp8_quantize(g, FP8_E5M2)
        dx = gq @ wq
        dw = gq.reshape(-1, gq.shape[-1]).t() @ xq.reshape(-1, xq.shape[-1])
        db = g.reshape(-1, g.shape[-1]).sum(0) if ctx.has_bias else None
        return dx, dw, db


class GPT2(nn.Module):
    """GPT-2. The per-layer tensors of the checkpoint (ln1w, qkvw, ...) are held as one
    Parameter per layer (ParameterLists), so each layer's gradient is its own tensor;
    checkpoint_pieces() gives them back in checkpoint order."""

    def __init__(self, cfg, params, fp8=False):
        super().__init__()
        self.cfg = cfg
        self.linear = (lambda x, w, b=None: Fp8Linear.apply(x, w, b)) if fp8 else F.linear
        shapes = cfg.shapes()
        for name in PARAM_NAMES:
            t = params[name]
            assert tuple(t.shape) == shapes[name], (name, tuple(t.shape), shapes[name])
            if name in STACKED:
                setattr(self, name, nn.ParameterList([nn.Parameter(t[l].clone()) for l in range(cfg.L)]))
            else:
                setattr(self, name, nn.Parameter(t.clone()))

    def checkpoint_pieces(self):
        """(name, [tensors]) in checkpoint order; a stacked tensor is its layers in order."""
        for name in PARAM_NAMES:
            obj = getattr(self, name)
            yield name, (list(obj) if name in STACKED else [obj])

    def forward(self, idx, targets=None):
        cfg = self.cfg
        B, T = idx.shape
        C, H = cfg.C, cfg.H
        hs = C // H
        x = F.embedding(idx, self.wte) + self.wpe[:T]
        causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
        scale = 1.0 / math.sqrt(hs)
        for l in range(cfg.L):
            # attention: qkv along the 3C dim is [q | k | v], each split into H heads of hs
            h = F.layer_norm(x, (C,), self.ln1w[l], self.ln1b[l], LN_EPS)
            q, k, v = self.linear(h, self.qkvw[l], self.qkvb[l]).split(C, dim=-1)
            q = q.view(B, T, H, hs).transpose(1, 2)  # (B, H, T, hs)
            k = k.view(B, T, H, hs).transpose(1, 2)
            v = v.view(B, T, H, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * scale
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.linear(y, self.attprojw[l], self.attprojb[l])
            # MLP
            h = F.layer_norm(x, (C,), self.ln2w[l], self.ln2b[l], LN_EPS)
            h = F.gelu(self.linear(h, self.fcw[l], self.fcb[l]), approximate="tanh")
            x = x + self.linear(h, self.fcprojw[l], self.fcprojb[l])
        x = F.layer_norm(x, (C,), self.lnfw, self.lnfb, LN_EPS)
        logits = self.linear(x, self.wte[:cfg.V])  # tied lm_head, real vocabulary only
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, cfg.V), targets.reshape(-1))
        return logits, loss


# ----------------------------------------------------------------------------
# optimizer

def global_grad_norm(params, scratch=None):
    """L2 norm over all gradients: per tensor sum(g*g) (PyTorch's sum is pairwise, accurate;
    torch.linalg.vector_norm in fp32 on the CPU of 1.13 is not), combined in float64.
    scratch: optional flat buffer at least as large as the largest gradient."""
    sq = 0.0
    for p in params:
        g = p.grad
        out = scratch[:g.numel()].view_as(g) if scratch is not None else None
        sq += float(torch.mul(g, g, out=out).sum())
    return math.sqrt(sq)


class AdamW:
    """Decoupled AdamW with bias correction, written out:
    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
    p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * p )   (wd only on DECAYED).
    Computed as p = p * (1 - lr wd) - (lr/(1-b1^t)) m / (sqrt(v/(1-b2^t)) + eps), with one
    scratch buffer reused for every tensor (no large allocations per step)."""

    def __init__(self, named_params, lr, beta1, beta2, eps, weight_decay):
        self.named = list(named_params)
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, beta1, beta2, eps, weight_decay
        self.m = [torch.zeros_like(p) for _, p in self.named]
        self.v = [torch.zeros_like(p) for _, p in self.named]
        biggest = max(p.numel() for _, p in self.named)
        p0 = self.named[0][1]
        self.scratch = torch.empty(biggest, dtype=p0.dtype, device=p0.device)
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        bc1 = 1.0 - self.b1 ** self.t
        bc2 = 1.0 - self.b2 ** self.t
        for (name, p), m, v in zip(self.named, self.m, self.v):
            g = p.grad
            m.mul_(self.b1).add_(g, alpha=1.0 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1.0 - self.b2)
            denom = self.scratch[:p.numel()].view_as(p)
            torch.div(v, bc2, out=denom).sqrt_().add_(self.eps)
            if name.split(".")[0] in DECAYED and self.wd != 0.0:
                p.mul_(1.0 - self.lr * self.wd)
            p.addcdiv_(m, denom, value=-self.lr / bc1)


def clip_grads(params, norm, grad_clip):
    """If norm > grad_clip > 0, scale every gradient by grad_clip / norm. Returns the scale."""
    if grad_clip > 0.0 and norm > grad_clip:
        scale = grad_clip / norm
        with torch.no_grad():
            for p in params:
                p.grad.mul_(scale)
        return scale
    return 1.0


# ----------------------------------------------------------------------------
# file I/O (little-endian; raw tensor bytes without numpy)

def keep_freed_memory():
    """CPU speed: glibc returns every block over 32 MB (wte's gradient, the logits) to the
    kernel on free, so each step page-faults them in again. Serve them from the heap."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: mmap only blocks over 1 GiB
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap
    except (OSError, AttributeError):
        pass  # not glibc: only slower


def check_little_endian():
    if sys.byteorder != "little":
        raise RefError("this script writes little-endian files and needs a little-endian host")


def write_tensor(f, t, dtype=torch.float32):
    """Write a tensor's elements as raw bytes of the given dtype."""
    t = t.detach().to(device="cpu", dtype=dtype).contiguous()
    n = t.numel() * t.element_size()
    if n:
        f.write((ctypes.c_char * n).from_address(t.data_ptr()))


def read_tensor(f, path, count, dtype, what):
    """Read count elements of dtype from f; error (naming the file) if it is short."""
    nbytes = count * torch.empty(0, dtype=dtype).element_size()
    buf = bytearray(nbytes)
    got = f.readinto(buf) if nbytes else 0
    if got != nbytes:
        raise RefError("%s: truncated while reading %s (%d of %d bytes)" % (path, what, got, nbytes))
    if nbytes == 0:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(buf, dtype=dtype).clone()


def read_header(f, path, what):
    data = f.read(HEADER_BYTES)
    if len(data) != HEADER_BYTES:
        raise RefError("%s: too short for a %s header (%d of %d bytes)" % (path, what, len(data), HEADER_BYTES))
    return struct.unpack("<%di" % HEADER_INTS, data)


def pack_header(values):
    h = list(values) + [0] * (HEADER_INTS - len(values))
    return struct.pack("<%di" % HEADER_INTS, *h)


def to_bf16(t):
    """fp32 -> bf16 with round-to-nearest-even (PyTorch's conversion), as int16 bits."""
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous().to(torch.bfloat16).view(torch.int16)


def from_bf16(bits):
    """int16 bf16 bits -> fp32 (exact)."""
    return (bits.to(torch.int32) * 65536).view(torch.float32)


def write_checkpoint(path, cfg, params, bf16=False):
    """Our checkpoint: header then all parameters in PARAM_NAMES order (fp32 or bf16)."""
    hdr = pack_header([CKPT_MAGIC, 5 if bf16 else 3, cfg.maxT, cfg.V, cfg.L, cfg.H, cfg.C, cfg.Vp])
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(hdr)
        for name in PARAM_NAMES:
            t = params[name]
            if bf16:
                write_tensor(f, to_bf16(t), torch.int16)
            else:
                write_tensor(f, t, torch.float32)
    os.replace(tmp, path)


def read_checkpoint(path):
    """Read our checkpoint (version 3 fp32 or 5 bf16). Returns (cfg, params fp32 dict)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        h = read_header(f, path, "checkpoint")
        if h[0] != CKPT_MAGIC:
            raise RefError("%s: bad magic %d, expected %d (not a model checkpoint)" % (path, h[0], CKPT_MAGIC))
        if h[1] not in (3, 5):
            raise RefError("%s: checkpoint version %d is not supported (3 = fp32, 5 = bf16)" % (path, h[1]))
        maxT, V, L, H, C, Vp = h[2:8]
        cfg = Config(L, H, C, maxT, V).validate(path)
        if Vp != cfg.Vp:
            raise RefError("%s: padded vocab size %d in the header, expected %d for vocab %d"
                           % (path, Vp, cfg.Vp, V))
        esize = 4 if h[1] == 3 else 2
        expect = HEADER_BYTES + esize * cfg.num_params()
        if size != expect:
            raise RefError("%s: file is %d bytes, the header (%s, version %d) implies %d"
                           % (path, size, cfg, h[1], expect))
        params = {}
        for name, shape in cfg.shapes().items():
            n = math.prod(shape)
            if h[1] == 3:
                t = read_tensor(f, path, n, torch.float32, name)
            else:
                t = from_bf16(read_tensor(f, path, n, torch.int16, name))
            params[name] = t.view(shape)
    if cfg.Vp > cfg.V and params["wte"][cfg.V:].abs().max().item() != 0.0:
        print("warning: %s: padded rows of wte are not zero; setting them to zero" % path)
        params["wte"][cfg.V:] = 0.0
    return cfg, params


def read_safetensors(path):
    """Minimal reader of the safetensors format: u64 header length, JSON header, data."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
    size = os.path.getsize(path)
    out = {}
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise RefError("%s: too short for a safetensors file" % path)
        (hlen,) = struct.unpack("<Q", raw)
        if hlen > size - 8:
            raise RefError("%s: safetensors header length %d exceeds the file" % (path, hlen))
        try:
            header = json.loads(f.read(hlen).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RefError("%s: bad safetensors header: %s" % (path, e))
        base = 8 + hlen
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info.get("dtype") not in dtypes:
                raise RefError("%s: tensor %s has unsupported dtype %s" % (path, name, info.get("dtype")))
            dt = dtypes[info["dtype"]]
            begin, end = info["data_offsets"]
            shape = tuple(info["shape"])
            n = math.prod(shape)
            if end - begin != n * torch.empty(0, dtype=dt).element_size() or base + end > size or begin < 0:
                raise RefError("%s: tensor %s has inconsistent offsets %s" % (path, name, info["data_offsets"]))
            f.seek(base + begin)
            out[name] = read_tensor(f, path, n, dt, name).view(shape)
    return out


def read_hf(path, heads_flag):
    """A Hugging Face GPT-2: a directory with config.json and pytorch_model.bin or
    model.safetensors, or one of those files. Conv1D weights are (in, out): transposed."""
    d = path if os.path.isdir(path) else os.path.dirname(path) or "."
    if os.path.isdir(path):
        cands = [os.path.join(path, n) for n in ("model.safetensors", "pytorch_model.bin")]
        found = [c for c in cands if os.path.exists(c)]
        if not found:
            raise RefError("%s: directory has neither model.safetensors nor pytorch_model.bin" % path)
        wfile = found[0]
    else:
        wfile = path
    if wfile.endswith(".safetensors"):
        sd = read_safetensors(wfile)
    else:
        try:
            sd = torch.load(wfile, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - report any unpickling problem clearly
            raise RefError("%s: cannot load as a PyTorch state dict: %s" % (wfile, e))
        if not isinstance(sd, dict):
            raise RefError("%s: expected a state dict, got %s" % (wfile, type(sd).__name__))
    sd = {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in sd.items()}

    def get(key):
        if key not in sd:
            raise RefError("%s: missing tensor %s" % (wfile, key))
        return sd[key].detach().to(torch.float32)

    wte, wpe = get("wte.weight"), get("wpe.weight")
    V, C = wte.shape
    maxT = wpe.shape[0]
    L = 0
    while ("h.%d.ln_1.weight" % L) in sd:
        L += 1
    H = heads_flag
    conf_path = os.path.join(d, "config.json")
    if os.path.exists(conf_path):
        with open(conf_path) as f:
            conf = json.load(f)
        if conf.get("n_embd", C) != C or conf.get("n_layer", L) != L or conf.get("vocab_size", V) != V:
            raise RefError("%s: config.json (n_layer/n_embd/vocab_size) disagrees with the weights (L=%d C=%d V=%d)"
                           % (conf_path, L, C, V))
        H = conf.get("n_head", H)
    if H is None:
        raise RefError("%s: no config.json with n_head; give --heads" % path)
    cfg = Config(L, H, C, maxT, V).validate(path)
    per_layer = {n: [] for n in PARAM_NAMES}
    hf = {"ln1w": ("ln_1.weight", False), "ln1b": ("ln_1.bias", False),
          "qkvw": ("attn.c_attn.weight", True), "qkvb": ("attn.c_attn.bias", False),
          "attprojw": ("attn.c_proj.weight", True), "attprojb": ("attn.c_proj.bias", False),
          "ln2w": ("ln_2.weight", False), "ln2b": ("ln_2.bias", False),
          "fcw": ("mlp.c_fc.weight", True), "fcb": ("mlp.c_fc.bias", False),
          "fcprojw": ("mlp.c_proj.weight", True), "fcprojb": ("mlp.c_proj.bias", False)}
    for l in range(L):
        for ours, (key, transpose) in hf.items():
            t = get("h.%d.%s" % (l, key))
            per_layer[ours].append(t.t().contiguous() if transpose else t)
    params = {"wte": torch.cat([wte, torch.zeros(cfg.Vp - V, C)]), "wpe": wpe,
              "lnfw": get("ln_f.weight"), "lnfb": get("ln_f.bias")}
    for ours in hf:
        params[ours] = torch.stack(per_layer[ours])
    for name, shape in cfg.shapes().items():
        if tuple(params[name].shape) != shape:
            raise RefError("%s: %s has shape %s, expected %s" % (wfile, name, tuple(params[name].shape), shape))
    return cfg, params


def load_model(path, heads_flag):
    if not os.path.exists(path):
        raise RefError("%s: no such file or directory" % path)
    if os.path.isdir(path) or path.endswith(".safetensors"):
        return read_hf(path, heads_flag)
    with open(path, "rb") as f:
        head = f.read(4)
    if len(head) == 4 and struct.unpack("<i", head)[0] == CKPT_MAGIC:
        return read_checkpoint(path)
    if zipfile.is_zipfile(path):
        return read_hf(path, heads_flag)
    return read_checkpoint(path)  # reports the bad magic


def read_shard_tokens(path, count):
    """The first count tokens of a token shard (version 1 uint16 or 2 uint32)."""
    if not os.path.isfile(path):
        raise RefError("%s: no such file" % path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        h = read_header(f, path, "token shard")
        if h[0] != SHARD_MAGIC:
            raise RefError("%s: bad magic %d, expected %d (not a token shard)" % (path, h[0], SHARD_MAGIC))
        if h[1] not in (1, 2):
            raise RefError("%s: shard version %d is not supported (1 = uint16, 2 = uint32)" % (path, h[1]))
        ntok, esize = h[2], (2 if h[1] == 1 else 4)
        if ntok < 0 or size != HEADER_BYTES + esize * ntok:
            raise RefError("%s: file is %d bytes, the header (%d tokens of %d bytes) implies %d"
                           % (path, size, ntok, esize, HEADER_BYTES + esize * max(ntok, 0)))
        if ntok < count:
            raise RefError("%s: has %d tokens, the batch needs B*T+1 = %d" % (path, ntok, count))
        if esize == 2:
            t = read_tensor(f, path, count, torch.int16, "tokens").to(torch.int64) & 0xFFFF
        else:
            t = read_tensor(f, path, count, torch.int32, "tokens").to(torch.int64) & 0xFFFFFFFF
    return t


# ----------------------------------------------------------------------------
# main

class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except for options without one."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="PyTorch reference of our GPT-2: writes model.bin, model_bf16.bin and "
                    "debug_state.bin (logits, loss, grads, AdamW-step losses) for the C/CUDA tests.",
        formatter_class=HelpFormatter)
    g = p.add_argument_group("model (random init from --seed unless --load)")
    g.add_argument("--model", choices=sorted(MODELS), help="GPT-2 shape: d12/d24/d36/d48 = 124M/350M/774M/1558M")
    g.add_argument("--layers", type=int, help="number of layers L")
    g.add_argument("--heads", type=int, help="number of attention heads H")
    g.add_argument("--channels", type=int, help="channels C (divisible by H)")
    g.add_argument("--max-seq-len", type=int, help="maxT, rows of wpe (default 1024)")
    g.add_argument("--vocab-size", type=int, help="V (default 50257); padded to a multiple of 128")
    g.add_argument("--load", metavar="PATH",
                   help="our checkpoint .bin (version 3 or 5) or a Hugging Face GPT-2 directory/file")
    g = p.add_argument_group("batch")
    g.add_argument("--batch", "-B", type=int, default=4, help="batch size B")
    g.add_argument("--seq-len", "-T", type=int, default=64, help="sequence length T (<= maxT)")
    g.add_argument("--data", metavar="SHARD", help="token shard; the first B*T+1 tokens are used "
                                                  "(default: random tokens from the seed)")
    g.add_argument("--seed", type=int, default=1337, help="seed of the init and the random tokens")
    g = p.add_argument_group("AdamW steps on the batch")
    g.add_argument("--steps", type=int, default=10, help="AdamW steps on the batch (0: forward/backward only)")
    g.add_argument("--lr", type=float, default=1e-4, help="learning rate")
    g.add_argument("--beta1", type=float, default=0.9, help="AdamW beta1")
    g.add_argument("--beta2", type=float, default=0.95, help="AdamW beta2")
    g.add_argument("--eps", type=float, default=1e-8, help="AdamW epsilon")
    g.add_argument("--weight-decay", type=float, default=0.1,
                   help="decoupled weight decay of the 2-D weights (wte wpe qkvw attprojw fcw fcprojw)")
    g.add_argument("--grad-clip", type=float, default=1.0, help="clip by global norm; 0 disables")
    g = p.add_argument_group("run")
    g.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to compute (cuda: TF32 off)")
    g.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="compute precision (files are always fp32)")
    g.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads for PyTorch")
    g.add_argument("--fp8", type=int, choices=[0, 1], default=0,
                   help="1: the linear layers' operands through FP8 as train_gpt2cu --fp8 1 (E4M3 forward, E5M2 "
                        "gradients, per-tensor current scaling), emulated")
    g.add_argument("--out-dir", required=True, help="output directory (created)")
    args = p.parse_args(argv)

    def bad(msg):
        p.error(msg)

    if args.batch < 1:
        bad("--batch must be >= 1, got %d" % args.batch)
    if args.seq_len < 1:
        bad("--seq-len must be >= 1, got %d" % args.seq_len)
    if args.steps < 0:
        bad("--steps must be >= 0, got %d" % args.steps)
    if args.threads is not None and args.threads < 1:
        bad("--threads must be >= 1")
    if not (0.0 <= args.beta1 < 1.0 and 0.0 <= args.beta2 < 1.0):
        bad("--beta1 and --beta2 must be in [0, 1)")
    if args.lr < 0 or args.eps <= 0 or args.weight_decay < 0 or args.grad_clip < 0:
        bad("--lr, --weight-decay, --grad-clip must be >= 0 and --eps > 0")
    if args.model and (args.layers or args.heads or args.channels):
        bad("give either --model or --layers/--heads/--channels, not both")
    if args.load and (args.model or args.layers or args.channels or args.max_seq_len or args.vocab_size):
        bad("--load takes the shape from the file; drop --model/--layers/--channels/--max-seq-len/--vocab-size")
    if not args.load:
        if args.model:
            args.layers, args.heads, args.channels = MODELS[args.model]
        if args.layers is None or args.heads is None or args.channels is None:
            bad("give --model, or all of --layers --heads --channels, or --load")
    return args


def main(argv=None):
    args = parse_args(argv)
    check_little_endian()
    t_start = time.time()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    if device.type == "cpu":
        keep_freed_memory()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RefError("--device cuda: CUDA is not available to this PyTorch")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True, warn_only=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    # model parameters, fp32 on the CPU
    t0 = time.time()
    if args.load:
        cfg, params = load_model(args.load, args.heads)
        if args.heads is not None and args.heads != cfg.H:
            raise RefError("--heads %d disagrees with %s (H=%d)" % (args.heads, args.load, cfg.H))
        source = args.load
    else:
        cfg = Config(args.layers, args.heads, args.channels, args.max_seq_len or 1024,
                     args.vocab_size or 50257).validate("flags")
        params = init_params(cfg, args.seed)
        source = "init(seed=%d)" % args.seed
    t_init = time.time() - t0
    B, T = args.batch, args.seq_len
    if T > cfg.maxT:
        raise RefError("--seq-len %d exceeds the model's max sequence length %d" % (T, cfg.maxT))

    # the batch
    n = B * T + 1
    if args.data:
        tokens = read_shard_tokens(args.data, n)
        if int(tokens.max()) >= cfg.V:
            raise RefError("%s: token %d is outside the vocabulary (V=%d)" % (args.data, int(tokens.max()), cfg.V))
        batch_src = args.data
    else:
        gen = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, cfg.V, (n,), generator=gen, dtype=torch.int64)
        batch_src = "random(seed=%d)" % args.seed
    x_cpu = tokens[:-1].view(B, T)
    y_cpu = tokens[1:].view(B, T)

    print("gpt2_ref: torch %s, device %s, dtype %s, threads %d%s" % (torch.__version__, device, args.dtype,
                                                                      torch.get_num_threads(),
                                                                      ", linear layers through FP8 (emulated)"
                                                                      if args.fp8 else ""))
    print("model %s, %d parameters, from %s; batch B=%d T=%d from %s"
          % (cfg, cfg.num_params(), source, B, T, batch_src))

    # checkpoints of the parameters before any step
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.time()
    write_checkpoint(os.path.join(args.out_dir, "model.bin"), cfg, params)
    write_checkpoint(os.path.join(args.out_dir, "model_bf16.bin"), cfg, params, bf16=True)
    t_write = time.time() - t0

    model = GPT2(cfg, {k: v.to(dtype) for k, v in params.items()}, fp8=bool(args.fp8)).to(device)
    del params
    x, y = x_cpu.to(device), y_cpu.to(device)
    named = list(model.named_parameters())
    plist = [p for _, p in named]
    opt = AdamW(named, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    hparams = [args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.grad_clip, 0.0, 0.0]

    debug_path = os.path.join(args.out_dir, "debug_state.bin")
    dbg = open(debug_path + ".tmp", "wb")
    losses = []
    t_fwdbwd0 = t_dbg = 0.0
    t_steps = time.time()
    for step in range(max(args.steps, 1)):
        t0 = time.time()
        for p in plist:
            p.grad = None
        logits, loss = model(x, y)
        loss.backward()
        sync()
        loss_val = loss.item()
        if step == 0:
            loss0 = loss_val
            t_fwdbwd0 = time.time() - t0
            t1 = time.time()
            dbg.write(pack_header([DEBUG_MAGIC, 3, B, T, cfg.V, args.steps]))
            write_tensor(dbg, x_cpu, torch.int32)
            write_tensor(dbg, y_cpu, torch.int32)
            write_tensor(dbg, logits)
            write_tensor(dbg, loss.detach().reshape(1))
            for _, pieces in model.checkpoint_pieces():
                for p in pieces:
                    write_tensor(dbg, p.grad)
            t_dbg = time.time() - t1
            t_write += t_dbg
        del logits, loss
        if step >= args.steps:  # --steps 0: forward/backward only
            print("forward+backward: loss %.6f (%.1f ms)" % (loss_val, 1000 * t_fwdbwd0))
            break
        losses.append(loss_val)
        norm = global_grad_norm(plist, opt.scratch)
        if not (math.isfinite(loss_val) and math.isfinite(norm)):
            print("step %2d/%d | loss %.6f | grad norm %s | non-finite: update skipped"
                  % (step + 1, args.steps, loss_val, norm))
            continue
        clip_grads(plist, norm, args.grad_clip)
        opt.step()
        sync()
        print("step %2d/%d | loss %.6f | grad norm %.6f | %.1f ms"
              % (step + 1, args.steps, loss_val, norm, 1000 * (time.time() - t0)))
    t_steps = time.time() - t_steps - t_dbg  # the steps without writing the debug state
    if cfg.Vp > cfg.V and model.wte.detach()[cfg.V:].abs().max().item() != 0.0:
        raise RefError("internal error: padded rows of wte became non-zero")

    t1 = time.time()
    dbg.write(struct.pack("<%df" % len(losses), *losses))
    dbg.write(struct.pack("<8f", *hparams))
    dbg.close()
    os.replace(debug_path + ".tmp", debug_path)
    t_write += time.time() - t1

    total = time.time() - t_start
    print("timings: init/load %.2f s | first forward+backward %.2f s | %d steps %.2f s | writing %.2f s"
          % (t_init, t_fwdbwd0, args.steps, t_steps, t_write))
    last = ("%.6f" % losses[-1]) if losses else "-"
    print("summary: %s | B=%d T=%d | %s %s | loss %.6f, after %d steps %s | %.2f s | wrote %s"
          % (cfg, B, T, device, args.dtype, loss0, args.steps, last, total, args.out_dir))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RefError as e:
        print("gpt2_ref.py: error: %s" % e, file=sys.stderr)
        sys.exit(2)

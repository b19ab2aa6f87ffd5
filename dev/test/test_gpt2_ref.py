#!/usr/bin/env python3
"""Self-check of dev/gpt2_ref.py, the PyTorch reference every C/CUDA test compares to.

No expected numbers are hard-coded: each check compares the reference with something
computed independently here (theory, finite differences, a naive loop implementation,
torch.optim.AdamW, files written and read back).

  /usr/bin/python3 dev/test/test_gpt2_ref.py              # CPU, about a minute
  python3 dev/test/test_gpt2_ref.py --device cuda         # also compares CUDA with CPU

Prints what it measured, ends with "N passed, M failed", exits non-zero on a failure.
"""

import argparse
import importlib.util
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "gpt2_ref.py")

spec = importlib.util.spec_from_file_location("gpt2_ref", SCRIPT)
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)  # sets OMP_WAIT_POLICY before torch is imported

import torch  # noqa: E402

# The tensors that get weight decay, written out by hand: every 2-D weight, no bias or layernorm
# parameter (not taken from the module, which is what is under test).
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]

TMP = None


# ----------------------------------------------------------------------------
# helpers

def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run_ref(*args, expect_ok=True):
    """Run gpt2_ref.py as a program; returns (returncode, stdout+stderr)."""
    cmd = [sys.executable, SCRIPT] + [str(a) for a in args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if expect_ok and p.returncode != 0:
        raise AssertionError("command failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stdout))
    return p.returncode, p.stdout


def read_debug_state(path):
    """Independent reader of debug_state.bin (version 3)."""
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack("<256i", data[:1024])
    B, T, V = h[2], h[3], h[4]
    off = 1024

    def take(n, dtype):
        nonlocal off
        esize = 4
        t = torch.frombuffer(bytearray(data[off:off + n * esize]), dtype=dtype)
        off += n * esize
        return t
    d = {"header": h, "size": len(data)}
    d["x"] = take(B * T, torch.int32).view(B, T)
    d["y"] = take(B * T, torch.int32).view(B, T)
    d["logits"] = take(B * T * V, torch.float32).view(B, T, V)
    d["loss"] = float(take(1, torch.float32)[0])
    d["grads_flat_offset"] = off
    return d, data


def debug_grads(data, cfg, offset):
    out = {}
    for name, shape in cfg.shapes().items():
        n = math.prod(shape)
        out[name] = torch.frombuffer(bytearray(data[offset:offset + 4 * n]), dtype=torch.float32).view(shape)
        offset += 4 * n
    return out, offset


def noisy_params(cfg, seed, dtype=torch.float64):
    """Init params plus O(0.1) noise everywhere (but zero padded wte rows), so that every
    path of the model (biases, layernorm gains, attention) carries real gradient."""
    p = ref.init_params(cfg, seed)
    g = torch.Generator().manual_seed(seed + 1)
    out = {}
    for name, t in p.items():
        t = t.to(dtype) + 0.1 * torch.randn(t.shape, generator=g, dtype=dtype)
        if name == "wte":
            t[cfg.V:] = 0.0
        out[name] = t
    return out


def tiny_batch(cfg, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, cfg.V, (B * T + 1,), generator=g)
    return tok[:-1].view(B, T), tok[1:].view(B, T)


def stacked(model):
    return {name: torch.cat([p.detach().reshape(-1) for p in pieces])
            for name, pieces in model.checkpoint_pieces()}


def bf16_rne_bits(f32):
    """Independent fp32 -> bf16 round-to-nearest-even on the bit pattern (int64 arithmetic)."""
    b = f32.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return r & 0xFFFF


# ----------------------------------------------------------------------------
# checks

def test_init_loss():
    """At init the final layernorm output h of each position has sum(h^2) = C (weights 1,
    biases 0), and wte entries are N(0, 0.02^2), so every logit z_v = h . wte_v is
    N(0, s2) with s2 = 0.0004 C, independent of the (random) target. Then
    loss = E[logsumexp(z)] - E[z_y] ~= ln V + s2/2 (log of the mean of V lognormals).
    For C=64: ln V + 0.013; for C=768 (d12): ln V + 0.154, so 'close to ln V (+-0.1)' holds
    only for narrow models; we check the sharper prediction."""
    for (L, H, C, B, T, tol) in ((2, 4, 64, 4, 64, 0.05), (1, 12, 768, 8, 64, 0.1)):
        cfg = ref.Config(L, H, C, 64, 50257)
        model = ref.GPT2(cfg, ref.init_params(cfg, 1234))
        x, y = tiny_batch(cfg, B, T, 99)
        with torch.no_grad():
            _, loss = model(x, y)
        pred = math.log(cfg.V) + 0.0002 * C
        print("  C=%d: loss %.4f, ln V %.4f, predicted ln V + 0.0002 C = %.4f, |diff| %.4f (tol %.2f)"
              % (C, loss.item(), math.log(cfg.V), pred, abs(loss.item() - pred), tol))
        check(abs(loss.item() - pred) < tol, "init loss far from prediction")


def naive_forward(cfg, P, idx, targets):
    """GPT-2 from the formulas with explicit loops over batch, heads and positions."""
    B, T = idx.shape
    C, H = cfg.C, cfg.H
    hs = C // H

    def ln(x, w, b):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * w + b

    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    x = P["wte"][idx] + P["wpe"][:T]
    for l in range(cfg.L):
        h = ln(x, P["ln1w"][l], P["ln1b"][l])
        qkv = h @ P["qkvw"][l].t() + P["qkvb"][l]
        y = torch.zeros(B, T, C, dtype=x.dtype)
        for b in range(B):
            for hd in range(H):
                q = qkv[b, :, hd * hs:(hd + 1) * hs]
                k = qkv[b, :, C + hd * hs:C + (hd + 1) * hs]
                v = qkv[b, :, 2 * C + hd * hs:2 * C + (hd + 1) * hs]
                for t in range(T):
                    s = (k[:t + 1] @ q[t]) / math.sqrt(hs)
                    a = torch.exp(s - s.max())
                    a = a / a.sum()
                    y[b, t, hd * hs:(hd + 1) * hs] = a @ v[:t + 1]
        x = x + y @ P["attprojw"][l].t() + P["attprojb"][l]
        h = ln(x, P["ln2w"][l], P["ln2b"][l])
        h = gelu(h @ P["fcw"][l].t() + P["fcb"][l])
        x = x + h @ P["fcprojw"][l].t() + P["fcprojb"][l]
    x = ln(x, P["lnfw"], P["lnfb"])
    logits = x @ P["wte"][:cfg.V].t()
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logits, (lse - picked).mean()


def test_forward_vs_naive():
    cfg = ref.Config(2, 3, 12, 8, 41)
    P = noisy_params(cfg, 7)
    x, y = tiny_batch(cfg, 2, 7, 8)
    model = ref.GPT2(cfg, P)
    with torch.no_grad():
        logits, loss = model(x, y)
    nl, nloss = naive_forward(cfg, P, x, y)
    dl = ((logits - nl).abs().max() / nl.abs().max()).item()
    dloss = abs(loss.item() - nloss.item()) / abs(nloss.item())
    print("  float64, L=2 H=3 C=12 V=41 B=2 T=7: logits rel err %.2e, loss rel err %.2e (model loss %.6f)"
          % (dl, dloss, loss.item()))
    check(dl < 1e-12 and dloss < 1e-12, "model differs from the naive loop implementation")


def test_grad_fd():
    cfg = ref.Config(2, 2, 8, 8, 37)  # Vp = 128: padded rows exist
    P = noisy_params(cfg, 11)
    x, y = tiny_batch(cfg, 2, 5, 12)
    model = ref.GPT2(cfg, P)
    _, loss = model(x, y)
    loss.backward()
    grads = {name: torch.cat([p.grad.reshape(-1) for p in pieces]) for name, pieces in model.checkpoint_pieces()}
    pad = grads["wte"].view(cfg.Vp, cfg.C)[cfg.V:]
    check(pad.abs().max().item() == 0.0, "padded wte rows have non-zero gradient")

    def loss_at(name, i, delta):
        P2 = {k: v.clone() for k, v in P.items()}
        P2[name].view(-1)[i] += delta
        with torch.no_grad():
            return ref.GPT2(cfg, P2)(x, y)[1].item()

    g = torch.Generator().manual_seed(5)
    h = 1e-6
    worst = 0.0
    n = 0
    for name in NAMES:
        numel = P[name].numel()
        limit = cfg.V * cfg.C if name == "wte" else numel
        for i in torch.randint(0, limit, (3,), generator=g).tolist():
            fd = (loss_at(name, i, h) - loss_at(name, i, -h)) / (2 * h)
            ad = grads[name][i].item()
            err = abs(fd - ad) / (1e-6 + abs(ad))
            worst = max(worst, err)
            n += 1
            check(abs(fd - ad) <= 1e-8 + 1e-6 * abs(ad), "%s[%d]: autograd %.10e vs finite difference %.10e"
                  % (name, i, ad, fd))
    print("  float64, %d entries (3 per tensor): worst |fd-ad|/(1e-6+|ad|) = %.2e; padded wte grad rows exactly 0"
          % (n, worst))


def test_adamw_vs_torch():
    """Our clip + AdamW against torch.optim.AdamW (two param groups) with clipping by hand."""
    cfg = ref.Config(2, 2, 8, 8, 37)
    P = noisy_params(cfg, 21)
    x, y = tiny_batch(cfg, 2, 6, 22)
    # eps 1e-3, not 1e-8: a misplaced eps then shows clearly, and entries with tiny
    # gradients (where m/sqrt(v) amplifies rounding) do not blur the comparison
    lr, b1, b2, eps, wd, clip = 3e-3, 0.9, 0.95, 1e-3, 0.1, 1.0
    ma, mb = ref.GPT2(cfg, P), ref.GPT2(cfg, P)
    named = list(ma.named_parameters())
    opt_a = ref.AdamW(named, lr, b1, b2, eps, wd)
    decay = [p for n, p in mb.named_parameters() if n.split(".")[0] in DECAY]
    other = [p for n, p in mb.named_parameters() if n.split(".")[0] not in DECAY]
    check(len(decay) == 2 + 4 * cfg.L and len(other) == 2 + 8 * cfg.L, "unexpected parameter grouping")
    opt_b = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}],
                              lr=lr, betas=(b1, b2), eps=eps)
    clipped = 0
    worst_loss = 0.0
    for step in range(6):
        for m in (ma, mb):
            for p in m.parameters():
                p.grad = None
        la = ma(x, y)[1]
        la.backward()
        na = ref.global_grad_norm([p for _, p in named])
        ref.clip_grads([p for _, p in named], na, clip)
        opt_a.step()
        lb = mb(x, y)[1]
        lb.backward()
        nb = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in mb.parameters()))
        if nb > clip:
            clipped += 1
            for p in mb.parameters():
                p.grad.mul_(clip / nb)
        opt_b.step()
        worst_loss = max(worst_loss, abs(la.item() - lb.item()) / abs(lb.item()))
        check(abs(na - nb) <= 1e-12 * nb, "grad norm %.15g vs %.15g" % (na, nb))
    sa, sb = stacked(ma), stacked(mb)
    worst_p = max(((sa[k] - sb[k]).abs().max() / sb[k].abs().max()).item() for k in NAMES)
    pad = sa["wte"].view(cfg.Vp, cfg.C)[cfg.V:]
    print("  float64, 6 steps, eps %g (clipped in %d): max loss rel diff %.2e, max param rel diff %.2e, padded wte rows max |.| %g"
          % (eps, clipped, worst_loss, worst_p, pad.abs().max().item()))
    check(clipped > 0, "test did not exercise clipping")
    check(worst_loss < 1e-12 and worst_p < 1e-12, "AdamW differs from torch.optim.AdamW")
    check(pad.abs().max().item() == 0.0, "padded wte rows changed")


def test_fp32_vs_fp64():
    cfg = ref.Config(2, 4, 64, 32, 500)
    P = ref.init_params(cfg, 3)
    x, y = tiny_batch(cfg, 2, 16, 4)
    out = {}
    for dt in (torch.float32, torch.float64):
        m = ref.GPT2(cfg, {k: v.to(dt) for k, v in P.items()})
        logits, loss = m(x, y)
        loss.backward()
        out[dt] = (logits.detach().double(), loss.item(), stacked(m)["qkvw"], torch.cat([p.grad.reshape(-1) for p in m.qkvw]))
    a, b = out[torch.float32], out[torch.float64]
    dl = ((a[0] - b[0]).abs().max() / b[0].abs().max()).item()
    dloss = abs(a[1] - b[1]) / abs(b[1])
    dg = ((a[3].double() - b[3]).abs().max() / b[3].abs().max()).item()
    print("  fp32 vs fp64: logits %.2e, loss %.2e, qkvw grad %.2e (relative to max)" % (dl, dloss, dg))
    check(dl < 1e-5 and dloss < 1e-6 and dg < 1e-4, "fp32 and fp64 disagree")


def test_bf16_rounding():
    vals = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -(1 + 2 ** -8), 0.0, -0.0],
                        dtype=torch.float32)
    want = torch.tensor([1.0, 1 + 2 ** -6, 1 + 2 ** -7, -1.0, 0.0, -0.0])
    got = ref.from_bf16(ref.to_bf16(vals))
    check(torch.equal(got, want) and bool(torch.signbit(got[5])), "ties: got %s, want %s" % (got.tolist(), want.tolist()))
    g = torch.Generator().manual_seed(0)
    r = torch.randn(1 << 20, generator=g) * torch.exp2(torch.randint(-30, 30, (1 << 20,), generator=g).float())
    mine = ref.to_bf16(r).to(torch.int64) & 0xFFFF
    ok = torch.equal(mine, bf16_rne_bits(r))
    back = ref.from_bf16(ref.to_bf16(r))
    rel = ((back - r).abs() / r.abs()).max().item()
    print("  ties round to even; 2^20 random values: bits equal to an int64 RNE formula: %s; max rel err %.3e (bound 2^-8 = %.3e)"
          % (ok, rel, 2 ** -8))
    check(ok and rel <= 2 ** -8, "bf16 rounding is not round-to-nearest-even")


def fp8_values(mbits, ebits, bias, finite_codes):
    """Every non-negative value of an FP8 format, from its bit fields (independently of
    gpt2_ref.fp8_round): finite_codes of the 2^(ebits + mbits) magnitudes are finite."""
    out = []
    for c in range(finite_codes):
        e, m = c >> mbits, c & ((1 << mbits) - 1)
        out.append(m * 2.0 ** (1 - bias - mbits) if e == 0 else (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias))
    return out


def test_fp8_rounding():
    # E4M3: codes 0x00-0x7E are its non-negative values (0x7F is NaN); E5M2: 0x00-0x7B (then inf, NaN)
    for name, fmt, vals in (("E4M3", ref.FP8_E4M3, fp8_values(3, 4, 7, 127)),
                            ("E5M2", ref.FP8_E5M2, fp8_values(2, 5, 15, 124))):
        v = torch.tensor(vals, dtype=torch.float64)
        check(v[-1].item() == fmt[2], "%s: largest value %g, format max %g" % (name, v[-1].item(), fmt[2]))
        both = torch.cat([v, -v])
        check(torch.equal(ref.fp8_round(both, fmt), both), "%s: a representable value moved" % name)
        # midpoints round to the neighbour with an even mantissa (even code); a hair off them, to the nearer
        lo, hi = v[:-1], v[1:]
        mid = (lo + hi) / 2
        even_hi = torch.arange(1, len(vals)) % 2 == 0
        want = torch.where(even_hi, hi, lo)
        check(torch.equal(ref.fp8_round(mid, fmt), want), "%s: ties not to even" % name)
        eps = (hi - lo) * 1e-6
        check(torch.equal(ref.fp8_round(mid - eps, fmt), lo) and torch.equal(ref.fp8_round(mid + eps, fmt), hi),
              "%s: not rounded to the nearer value" % name)
        check(torch.equal(ref.fp8_round(torch.tensor([1e9, -1e9, fmt[2] * 1.06]), fmt).double(),
                          torch.tensor([fmt[2], -fmt[2], fmt[2]])), "%s: no saturation at +-max" % name)
        print("  %s: %d values fixed, %d ties to even, saturation at %g" % (name, 2 * len(vals), len(mid), fmt[2]))
    # the emulated FP8 model against the exact one at a tiny shape: close, not equal
    cfg = ref.Config(2, 4, 64, 32, 300)
    P = ref.init_params(cfg, 3)
    idx, tgt = tiny_batch(cfg, 2, 16, 3)
    l32 = ref.GPT2(cfg, P)(idx, tgt)[1].item()
    l8 = ref.GPT2(cfg, P, fp8=True)(idx, tgt)[1].item()
    print("  tiny model: loss %.6f exact, %.6f through FP8" % (l32, l8))
    check(l8 != l32 and abs(l8 - l32) / l32 < 1e-2, "FP8 loss %g against %g" % (l8, l32))


SMALL = ["--layers", 2, "--heads", 4, "--channels", 64, "--max-seq-len", 64, "--vocab-size", 1000,
         "--batch", 2, "--seq-len", 16, "--steps", 3, "--seed", 5]


def test_cli_roundtrip():
    a, b, c = (os.path.join(TMP, n) for n in ("a", "b", "c"))
    t0 = time.time()
    run_ref(*SMALL, "--out-dir", a)
    t_a = time.time() - t0
    run_ref("--load", os.path.join(a, "model.bin"), "--batch", 2, "--seq-len", 16, "--steps", 3, "--seed", 5,
            "--out-dir", b)
    run_ref("--load", os.path.join(a, "model_bf16.bin"), "--batch", 2, "--seq-len", 16, "--steps", 3, "--seed", 5,
            "--out-dir", c)
    same = lambda p, q: open(p, "rb").read() == open(q, "rb").read()  # noqa: E731
    check(same(os.path.join(a, "model.bin"), os.path.join(b, "model.bin")), "model.bin changed on reload")
    check(same(os.path.join(a, "debug_state.bin"), os.path.join(b, "debug_state.bin")),
          "debug state differs after --load model.bin")
    check(same(os.path.join(a, "model_bf16.bin"), os.path.join(c, "model_bf16.bin")), "bf16 file not idempotent")
    cfg, pa = ref.read_checkpoint(os.path.join(a, "model.bin"))
    _, pc = ref.read_checkpoint(os.path.join(a, "model_bf16.bin"))
    worst = 0.0
    for k in NAMES:
        nz = pa[k] != 0
        if nz.any():
            worst = max(worst, ((pc[k] - pa[k]).abs()[nz] / pa[k].abs()[nz]).max().item())
        check(torch.equal(pc[k][~nz], pa[k][~nz]), "%s: zeros not preserved in bf16" % k)
    da, _ = read_debug_state(os.path.join(a, "debug_state.bin"))
    dc, _ = read_debug_state(os.path.join(c, "debug_state.bin"))
    dlog = ((da["logits"] - dc["logits"]).abs().max() / da["logits"].abs().max()).item()
    print("  small run %.1f s; --load model.bin: model.bin and debug_state.bin byte-identical (logits identical)" % t_a)
    print("  --load model_bf16.bin: max param rel err %.3e (bound 2^-8 = %.3e); logits rel diff %.2e; loss %.6f vs %.6f"
          % (worst, 2 ** -8, dlog, da["loss"], dc["loss"]))
    check(worst <= 2 ** -8, "bf16 parameters outside bf16 precision")
    check(dlog < 0.05, "bf16 logits far from fp32 logits")


def test_debug_state_layout():
    a = os.path.join(TMP, "a")
    if not os.path.exists(os.path.join(a, "debug_state.bin")):
        run_ref(*SMALL, "--out-dir", a)
    cfg, params = ref.read_checkpoint(os.path.join(a, "model.bin"))
    with open(os.path.join(a, "model.bin"), "rb") as f:
        mh = struct.unpack("<256i", f.read(1024))
    check(mh[:8] == (20240326, 3, 64, 1000, 2, 4, 64, 1024), "model.bin header %s" % (mh[:8],))
    d, data = read_debug_state(os.path.join(a, "debug_state.bin"))
    h = d["header"]
    B, T, V, nsteps = h[2], h[3], h[4], h[5]
    nparams = sum(math.prod(s) for s in cfg.shapes().values())
    expect = 1024 + 4 * (2 * B * T + B * T * V + 1 + nparams + nsteps + 8)
    print("  header magic %d version %d B=%d T=%d V=%d nsteps=%d, params %d: size %d, header implies %d"
          % (h[0], h[1], B, T, V, nsteps, nparams, d["size"], expect))
    check(h[:6] == (20240327, 3, 2, 16, 1000, 3), "debug state header %s" % (h[:6],))
    check(d["size"] == expect, "debug state size does not match its header")
    check(os.path.getsize(os.path.join(a, "model.bin")) == 1024 + 4 * nparams, "model.bin size")
    check(os.path.getsize(os.path.join(a, "model_bf16.bin")) == 1024 + 2 * nparams, "model_bf16.bin size")
    flat_x, flat_y = d["x"].reshape(-1), d["y"].reshape(-1)
    check(torch.equal(flat_x[1:], flat_y[:-1]), "y is not x shifted by one")
    grads, off = debug_grads(data, cfg, d["grads_flat_offset"])
    check(grads["wte"][cfg.V:].abs().max().item() == 0.0, "padded wte grads not zero")
    tail = struct.unpack("<%df" % (nsteps + 8), data[off:])
    losses, hp = tail[:nsteps], tail[nsteps:]
    f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]  # noqa: E731
    check(losses[0] == d["loss"], "losses[0] != loss")
    check(list(hp) == [f32(v) for v in (1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0, 0.0, 0.0)], "hparams %s" % (hp,))
    # recompute the first forward/backward in-process from model.bin: same logits, loss, grads
    model = ref.GPT2(cfg, params)
    logits, loss = model(d["x"].long(), d["y"].long())
    loss.backward()
    check(torch.equal(logits.detach(), d["logits"]) and loss.item() == d["loss"], "file logits/loss != recomputed")
    for name, pieces in model.checkpoint_pieces():
        g = torch.cat([p.grad.reshape(-1) for p in pieces])
        check(torch.equal(g, grads[name].reshape(-1)), "%s grads differ from recomputation" % name)
    print("  losses %s; hparams %s; logits/loss/grads equal an in-process recomputation" %
          (["%.5f" % v for v in losses], ["%g" % v for v in hp[:6]]))


def hf_state_dict(cfg, P, prefix="transformer."):
    """A GPT-2 state dict laid out as Hugging Face stores it (Conv1D weights are (in, out))."""
    sd = {prefix + "wte.weight": P["wte"][:cfg.V].clone(), prefix + "wpe.weight": P["wpe"].clone()}
    conv = {"qkvw": "attn.c_attn.weight", "attprojw": "attn.c_proj.weight", "fcw": "mlp.c_fc.weight",
            "fcprojw": "mlp.c_proj.weight"}
    plain = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvb": "attn.c_attn.bias", "attprojb": "attn.c_proj.bias",
             "ln2w": "ln_2.weight", "ln2b": "ln_2.bias", "fcb": "mlp.c_fc.bias", "fcprojb": "mlp.c_proj.bias"}
    for l in range(cfg.L):
        for ours, key in conv.items():
            sd["%sh.%d.%s" % (prefix, l, key)] = P[ours][l].t().contiguous()
        for ours, key in plain.items():
            sd["%sh.%d.%s" % (prefix, l, key)] = P[ours][l].clone()
        sd["%sh.%d.attn.bias" % (prefix, l)] = torch.tril(torch.ones(cfg.maxT, cfg.maxT)).view(1, 1, cfg.maxT, cfg.maxT)
        sd["%sh.%d.attn.masked_bias" % (prefix, l)] = torch.tensor(-1e4)
    sd[prefix + "ln_f.weight"] = P["lnfw"].clone()
    sd[prefix + "ln_f.bias"] = P["lnfb"].clone()
    if prefix:
        sd["lm_head.weight"] = P["wte"][:cfg.V].clone()
    return sd


def write_safetensors(path, sd):
    """Writer of the safetensors layout: u64 header size, JSON header, raw little-endian data."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, t in sd.items():
        t = t.contiguous().float()
        buf = bytearray(t.numel() * 4)
        if t.numel():
            torch.frombuffer(buf, dtype=torch.float32).copy_(t.reshape(-1))
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(buf)]}
        blobs.append(bytes(buf))
        off += len(buf)
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for b in blobs:
            f.write(b)


def test_hf_load():
    a = os.path.join(TMP, "a")
    if not os.path.exists(os.path.join(a, "model.bin")):
        run_ref(*SMALL, "--out-dir", a)
    cfg, P = ref.read_checkpoint(os.path.join(a, "model.bin"))
    conf = {"model_type": "gpt2", "n_layer": cfg.L, "n_head": cfg.H, "n_embd": cfg.C,
            "n_positions": cfg.maxT, "vocab_size": cfg.V}
    # 1) pytorch_model.bin + config.json, through the program: identical outputs
    hf1 = os.path.join(TMP, "hf_bin")
    os.makedirs(hf1)
    torch.save(hf_state_dict(cfg, P), os.path.join(hf1, "pytorch_model.bin"))
    with open(os.path.join(hf1, "config.json"), "w") as f:
        json.dump(conf, f)
    out = os.path.join(TMP, "hf_out")
    run_ref("--load", hf1, "--batch", 2, "--seq-len", 16, "--steps", 3, "--seed", 5, "--out-dir", out)
    for fn in ("model.bin", "debug_state.bin"):
        check(open(os.path.join(a, fn), "rb").read() == open(os.path.join(out, fn), "rb").read(),
              "%s from the HF directory differs from the original" % fn)
    # 2) model.safetensors + config.json; 3) no prefix, no config.json, heads from the flag
    hf2 = os.path.join(TMP, "hf_st")
    os.makedirs(hf2)
    write_safetensors(os.path.join(hf2, "model.safetensors"), hf_state_dict(cfg, P))
    with open(os.path.join(hf2, "config.json"), "w") as f:
        json.dump(conf, f)
    hf3 = os.path.join(TMP, "hf_noprefix")
    os.makedirs(hf3)
    torch.save(hf_state_dict(cfg, P, prefix=""), os.path.join(hf3, "pytorch_model.bin"))
    for path, heads in ((hf2, None), (hf3, cfg.H)):
        c2, P2 = ref.load_model(path, heads)
        check((c2.L, c2.H, c2.C, c2.maxT, c2.V, c2.Vp) == (cfg.L, cfg.H, cfg.C, cfg.maxT, cfg.V, cfg.Vp), "shape")
        for k in NAMES:
            check(torch.equal(P2[k], P[k]), "%s: %s differs" % (path, k))
    # 4) a missing tensor is reported by name
    sd = hf_state_dict(cfg, P)
    del sd["transformer.h.1.mlp.c_fc.bias"]
    hf4 = os.path.join(TMP, "hf_bad")
    os.makedirs(hf4)
    torch.save(sd, os.path.join(hf4, "pytorch_model.bin"))
    try:
        ref.load_model(hf4, cfg.H)
        raise AssertionError("missing tensor not reported")
    except ref.RefError as e:
        check("h.1.mlp.c_fc.bias" in str(e), "unclear message: %s" % e)
        msg = str(e)
    print("  pytorch_model.bin dir -> model.bin and debug_state.bin byte-identical to the original run")
    print("  model.safetensors, and unprefixed keys without config.json (--heads): identical parameters")
    print("  missing tensor: '%s'" % msg)


def write_shard(path, tokens, version=1, count=None, magic=20240520):
    hdr = [magic, version, len(tokens) if count is None else count] + [0] * 253
    fmt = "<%d%s" % (len(tokens), "H" if version == 1 else "I")
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr) + struct.pack(fmt, *tokens))


def test_data_shard():
    g = torch.Generator().manual_seed(3)
    toks = torch.randint(0, 1000, (200,), generator=g).tolist()
    toks[0] = 999
    s1, s2 = os.path.join(TMP, "s1.bin"), os.path.join(TMP, "s2.bin")
    write_shard(s1, toks, 1)
    write_shard(s2, toks, 2)
    for s in (s1, s2):
        t = ref.read_shard_tokens(s, 33)
        check(t.tolist() == toks[:33], "%s tokens differ" % s)
    out = os.path.join(TMP, "shard_out")
    run_ref(*SMALL, "--data", s1, "--out-dir", out)
    d, _ = read_debug_state(os.path.join(out, "debug_state.bin"))
    check(d["x"].reshape(-1).tolist() == toks[:32] and d["y"].reshape(-1).tolist() == toks[1:33], "x/y from shard")
    bad = [("truncated", dict(count=300)), ("bad magic", dict(magic=1234)), ("bad version", dict(version=7))]
    msgs = []
    for what, kw in bad:
        p = os.path.join(TMP, "bad.bin")
        write_shard(p, toks, **kw)
        try:
            ref.read_shard_tokens(p, 33)
            raise AssertionError("%s shard accepted" % what)
        except ref.RefError as e:
            msgs.append(str(e))
    try:
        ref.read_shard_tokens(s1, 1000)
        raise AssertionError("short shard accepted")
    except ref.RefError as e:
        msgs.append(str(e))
    print("  uint16 and uint32 shards read; x/y in the debug state equal the shard's first B*T+1 tokens")
    for m in msgs:
        print("  rejected: %s" % m)


def test_cli_errors():
    cases = [
        (["--layers", 2, "--heads", 5, "--channels", 64], "divisible"),
        (["--layers", 2, "--heads", 4, "--channels", 64, "--max-seq-len", 8, "--seq-len", 16], "exceeds"),
        (["--model", "d12", "--batch", 0], "--batch"),
        (["--model", "d99"], "invalid choice"),
        (["--load", os.path.join(TMP, "nope.bin")], "no such file"),
    ]
    a = os.path.join(TMP, "a", "model.bin")
    if os.path.exists(a):
        trunc = os.path.join(TMP, "trunc.bin")
        with open(a, "rb") as f, open(trunc, "wb") as g:
            g.write(f.read()[:5000])
        cases.append((["--load", trunc], "bytes"))
    for args, needle in cases:
        rc, out = run_ref(*args, "--out-dir", os.path.join(TMP, "err"), expect_ok=False)
        last = out.strip().splitlines()[-1] if out.strip() else ""
        print("  rc=%d: %s" % (rc, last))
        check(rc != 0 and needle in out and "Traceback" not in out, "expected a clear error containing %r" % needle)


def test_cuda(device):
    """CUDA vs CPU on the small shape: fp32 within SPEC tolerances, fp64 much tighter."""
    for dtype, tol_logits, tol_grad, tol_loss in (("float32", 1e-4, 1e-3, 1e-4), ("float64", 1e-9, 1e-8, 1e-9)):
        outs = {}
        for dev in ("cpu", device):
            o = os.path.join(TMP, "dev_%s_%s" % (dev, dtype))
            run_ref(*SMALL, "--device", dev, "--dtype", dtype, "--out-dir", o)
            outs[dev] = o
        da, data_a = read_debug_state(os.path.join(outs["cpu"], "debug_state.bin"))
        db, data_b = read_debug_state(os.path.join(outs[device], "debug_state.bin"))
        cfg, _ = ref.read_checkpoint(os.path.join(outs["cpu"], "model.bin"))
        check(open(os.path.join(outs["cpu"], "model.bin"), "rb").read() ==
              open(os.path.join(outs[device], "model.bin"), "rb").read(), "init differs between devices")
        dl = ((da["logits"] - db["logits"]).abs().max() / da["logits"].abs().max()).item()
        ga, off = debug_grads(data_a, cfg, da["grads_flat_offset"])
        gb, _ = debug_grads(data_b, cfg, db["grads_flat_offset"])
        dg = max(((ga[k] - gb[k]).abs().max() / ga[k].abs().max().clamp_min(1e-30)).item() for k in NAMES)
        n = da["header"][5]
        la = struct.unpack("<%df" % n, data_a[off:off + 4 * n])
        lb = struct.unpack("<%df" % n, data_b[off:off + 4 * n])
        dls = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
        print("  %s %s vs cpu: logits %.2e, worst grad tensor %.2e, step losses %.2e" % (device, dtype, dl, dg, dls))
        check(dl < tol_logits and dg < tol_grad and dls < tol_loss, "cuda and cpu disagree")


def main():
    global TMP
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: also compare CUDA with CPU")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    TMP = tempfile.mkdtemp(prefix="test_gpt2_ref_")
    tests = [test_init_loss, test_forward_vs_naive, test_grad_fd, test_adamw_vs_torch, test_fp32_vs_fp64,
             test_bf16_rounding, test_fp8_rounding, test_cli_roundtrip, test_debug_state_layout, test_hf_load, test_data_shard,
             test_cli_errors]
    if args.device == "cuda":
        tests.append(lambda: test_cuda("cuda"))
        tests[-1].__name__ = "test_cuda"
    passed = failed = 0
    t_all = time.time()
    for t in tests:
        print("%s:" % t.__name__, flush=True)
        t0 = time.time()
        try:
            t()
            passed += 1
            print("  PASS (%.1f s)" % (time.time() - t0), flush=True)
        except Exception:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print("  FAIL (%.1f s)\n%s" % (time.time() - t0, traceback.format_exc()), flush=True)
    if args.keep:
        print("kept %s" % TMP)
    else:
        shutil.rmtree(TMP, ignore_errors=True)
    print("total %.1f s" % (time.time() - t_all))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

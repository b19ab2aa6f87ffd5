#!/usr/bin/env python3
"""PyTorch baseline for the GPU benchmark (docs/performance.md).

The same GPT-2 as dev/gpt2_ref.py (pre-LayerNorm blocks, GELU tanh, learned position
embeddings, lm_head tied to wte, no dropout), written for speed instead of as a
reference: nn.Linear layers, F.scaled_dot_product_attention(is_causal=True), the vocabulary
padded to Vp = 50304 rows for the embedding and the lm_head GEMM (padded rows start at
zero; the loss is taken over the real V = 50257 logits only), torch.compile, bf16
autocast, TF32 for the fp32 matmuls, fused AdamW (lr 6e-4, betas 0.9/0.95, weight decay
0.1 on the 2-D weights), gradient clipping at 1.0.

Prints one line per step (loss, ms, tokens/s) and at the end one machine-readable line
    SUMMARY {"program": "pytorch", ...}
with the mean ms/step and tokens/s over the steps after the first 10 (the compile
warm-up), the MFU against 989 TFLOP/s (bf16 dense, H100/H200 datasheet) with
FLOPs/token = 6*N + 12*L*T*C (N = parameters with wte counted once and the real, unpadded
vocabulary, as in docs/performance.md and train_gpt2cu), and torch.cuda.max_memory_allocated /
max_memory_reserved.

    python3 dev/train_gpt2_torch.py --model d12 --batch 64 --seq-len 1024 --steps 30
    python3 dev/train_gpt2_torch.py --data random ...     # random tokens, no shards needed
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280), "d48": (48, 25, 1600)}
VOCAB = 50257
VOCAB_PADDED = 50304
MAX_T = 1024
SHARD_MAGIC = 20240520
HEADER_INTS = 256
PEAK_FLOPS = 989e12
WARMUP_STEPS = 10  # steps left out of the means (compile, autotuning, allocator growth)


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attproj(y.transpose(1, 2).reshape(B, T, C))
        x = x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


def head_loss(x, lnf_w, lnf_b, wte, targets):
    """Final LayerNorm, tied lm_head over the padded vocabulary, loss over the real one."""
    x = F.layer_norm(x, (x.shape[-1],), lnf_w, lnf_b, 1e-5)
    logits = F.linear(x, wte)  # (B, T, Vp): the padded GEMM is the fast one
    return F.cross_entropy(logits[..., :VOCAB].reshape(-1, VOCAB).float(), targets.reshape(-1))


class GPT2(nn.Module):
    def __init__(self, L, H, C):
        super().__init__()
        self.L, self.H, self.C = L, H, C
        self.wte = nn.Embedding(VOCAB_PADDED, C)
        self.wpe = nn.Embedding(MAX_T, C)
        self.blocks = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)
        self.head = head_loss
        # the GPT-2 init of gpt2_ref.py: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
        # biases zero, LayerNorm weights one, padded vocabulary rows zero
        std_resid = 0.02 / math.sqrt(2 * L)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = std_resid if name.endswith(("attproj.weight", "fcproj.weight")) else 0.02
                    p.normal_(0.0, std)
            self.wte.weight[VOCAB:].zero_()

    def num_real_params(self):
        """Parameters with wte counted once (it is also the lm_head) and the real vocabulary."""
        return sum(p.numel() for p in self.parameters()) - (VOCAB_PADDED - VOCAB) * self.C

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.blocks:
            x = block(x)
        return self.head(x, self.lnf.weight, self.lnf.bias, self.wte.weight, targets)


class TokenBatches:
    """Consecutive (B, T+1) windows of the shards, wrapping around; all tokens on the GPU."""

    def __init__(self, pattern, B, T, device):
        files = sorted(glob.glob(pattern))
        if not files:
            sys.exit("error: no shards match %r (make data, or --data random)" % pattern)
        parts = []
        for path in files:
            with open(path, "rb") as f:
                header = np.frombuffer(f.read(HEADER_INTS * 4), dtype=np.int32)
                if len(header) != HEADER_INTS or header[0] != SHARD_MAGIC or header[1] != 1:
                    sys.exit("error: %s: not a version-1 token shard" % path)
                ntok = int(header[2])
                toks = np.frombuffer(f.read(ntok * 2), dtype=np.uint16)
                if len(toks) != ntok:
                    sys.exit("error: %s: truncated (%d of %d tokens)" % (path, len(toks), ntok))
            parts.append(toks.astype(np.int64))
        self.tokens = torch.from_numpy(np.concatenate(parts)).to(device)
        self.B, self.T, self.pos = B, T, 0
        if len(self.tokens) < B * T + 1:
            sys.exit("error: %s holds %d tokens, fewer than one batch (%d)" % (pattern, len(self.tokens), B * T + 1))

    def next(self):
        n = self.B * self.T
        if self.pos + n + 1 > len(self.tokens):
            self.pos = 0
        buf = self.tokens[self.pos:self.pos + n + 1]
        self.pos += n
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)


class RandomBatches:
    def __init__(self, B, T, device, seed):
        self.g = torch.Generator(device=device)
        self.g.manual_seed(seed)
        self.B, self.T, self.device = B, T, device

    def next(self):
        buf = torch.randint(0, VOCAB, (self.B, self.T + 1), device=self.device, generator=self.g)
        return buf[:, :-1], buf[:, 1:]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="d12", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=64, help="batch size B")
    ap.add_argument("--seq-len", type=int, default=1024, help="sequence length T (at most 1024)")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps (more than 10: the first 10 are not timed)")
    ap.add_argument("--data", default="data/tinyshakespeare/tiny_shakespeare_train_*.bin",
                    help="token shards (glob), or 'random' for random tokens")
    ap.add_argument("--compile", default="full", choices=["full", "blocks", "none"],
                    help="torch.compile the whole model, each block and the head separately "
                         "(one compiled graph shared by all layers: a much shorter compile), or nothing")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    if args.batch < 1 or not 1 <= args.seq_len <= MAX_T:
        ap.error("need --batch >= 1 and 1 <= --seq-len <= %d" % MAX_T)
    if args.steps <= WARMUP_STEPS:
        ap.error("--steps must exceed %d (the untimed warm-up steps)" % WARMUP_STEPS)
    return args


class EnergyMeter:
    """The GPU board's energy counter through NVML (ctypes), as train_gpt2cu reads it
    (common/energy.h); joules() is None where the library or the counter is missing."""

    def __init__(self, device_index):
        import ctypes
        self.why, self.lib, self.dev = "", None, ctypes.c_void_p()
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            self.why = "libnvidia-ml.so.1 not found"
            return
        p = torch.cuda.get_device_properties(device_index)
        if not hasattr(p, "pci_bus_id"):
            self.why = "this torch does not give the GPU's PCI bus id"
            return
        bus = "%04x:%02x:%02x.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
        self.mj = ctypes.c_ulonglong()
        self.ref = ctypes.byref(self.mj)
        if lib.nvmlInit_v2() != 0:
            self.why = "nvmlInit failed"
        elif lib.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(self.dev)) != 0:
            self.why = "NVML does not know GPU %s" % bus
        elif lib.nvmlDeviceGetTotalEnergyConsumption(self.dev, self.ref) != 0:
            self.why = "no energy counter on this GPU"
        else:
            self.lib = lib

    def joules(self):
        if self.lib is None or self.lib.nvmlDeviceGetTotalEnergyConsumption(self.dev, self.ref) != 0:
            return None
        return 1e-3 * self.mj.value


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device")
    device = "cuda"
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")

    L, H, C = MODELS[args.model]
    B, T = args.batch, args.seq_len
    model = GPT2(L, H, C).to(device)
    n_real = model.num_real_params()
    flops_per_token = 6.0 * n_real + 12.0 * L * T * C

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    if args.compile == "full":
        fwd = torch.compile(model)
    else:
        if args.compile == "blocks":
            for block in model.blocks:
                block.compile()
            model.head = torch.compile(head_loss)
        fwd = model

    data = RandomBatches(B, T, device, args.seed) if args.data == "random" else TokenBatches(args.data, B, T, device)
    gpu = torch.cuda.get_device_properties(0)
    print("device: %s, %.0f MiB; torch %s" % (gpu.name, gpu.total_memory / 2**20, torch.__version__))
    print("model: %s L=%d H=%d C=%d, %.2fM parameters (real vocab, wte once); B=%d T=%d, %d steps, compile %s, data %s"
          % (args.model, L, H, C, n_real / 1e6, B, T, args.steps, args.compile, args.data))
    sys.stdout.flush()

    torch.cuda.reset_peak_memory_stats()
    times = []
    meter = EnergyMeter(torch.cuda.current_device())
    e_start = None  # the counter where the timed steps start (a read takes ~3 ms: never inside a step)
    t_start = time.perf_counter()
    for step in range(args.steps):
        torch.cuda.synchronize()
        if step == WARMUP_STEPS:
            e_start = meter.joules()
        t0 = time.perf_counter()
        x, y = data.next()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip) if args.grad_clip > 0 else None
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item()  # synchronizes
        norm_v = norm.item() if norm is not None else float("nan")
        dt = time.perf_counter() - t0
        times.append(dt)
        print("step %4d/%d | loss %.6f | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%"
              % (step + 1, args.steps, loss_v, norm_v, dt * 1e3, B * T / dt,
                 100.0 * flops_per_token * B * T / dt / PEAK_FLOPS), flush=True)
    total_s = time.perf_counter() - t_start
    e_end = meter.joules()

    timed = times[WARMUP_STEPS:]
    mean_s = sum(timed) / len(timed)
    tok_s = B * T / mean_s
    free, total = torch.cuda.mem_get_info()
    summary = {
        "program": "pytorch", "model": args.model, "B": B, "T": T, "steps": args.steps,
        "timed_steps": "%d..%d" % (WARMUP_STEPS + 1, args.steps), "compile": args.compile,
        "ms_per_step": round(mean_s * 1e3, 2), "tokens_per_s": round(tok_s),
        "mfu_pct": round(100.0 * flops_per_token * tok_s / PEAK_FLOPS, 2),
        "params_real": n_real, "flops_per_token": flops_per_token,
        "first_step_s": round(times[0], 2), "wall_s": round(total_s, 1),
        "max_allocated_MiB": round(torch.cuda.max_memory_allocated() / 2**20),
        "max_reserved_MiB": round(torch.cuda.max_memory_reserved() / 2**20),
        "device_used_end_MiB": round((total - free) / 2**20),
    }
    print("mean over steps %d..%d: %.1f ms/step, %.0f tok/s, MFU %.1f%%"
          % (WARMUP_STEPS + 1, args.steps, mean_s * 1e3, tok_s, summary["mfu_pct"]))
    if e_start is not None and e_end is not None:
        summary["joules_per_step"] = round((e_end - e_start) / len(timed), 2)
        summary["mean_watts"] = round((e_end - e_start) / sum(timed), 1)
        print("energy over steps %d..%d (NVML board counter): %.1f J/step, %.0f W mean"
              % (WARMUP_STEPS + 1, args.steps, summary["joules_per_step"], summary["mean_watts"]))
    else:
        print("energy: not measured (%s)" % (meter.why or "the counter stopped answering"))
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

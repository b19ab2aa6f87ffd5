#!/usr/bin/env python3
"""PyTorch baseline for the GPU benchmark, the speed study (docs/performance.md) and the memory study (docs/memory.md).

The same GPT-2 as dev/gpt2_ref.py (pre-LayerNorm blocks, GELU tanh, learned position
embeddings, lm_head tied to wte, no dropout), written for speed instead of as a
reference: nn.Linear layers, F.scaled_dot_product_attention(is_causal=True), the vocabulary
padded to Vp = 50304 rows for the embedding and the lm_head GEMM (padded rows start at
zero; the loss is taken over the real V = 50257 logits only), torch.compile, bf16
autocast, TF32 for the fp32 matmuls, fused AdamW (lr 6e-4, betas 0.9/0.95, weight decay
0.1 on the 2-D weights), gradient clipping at 1.0.

The memory study's techniques, each off by default (the defaults are the benchmark's run):
    --grad-accum N        N micro-batches of B x T per optimizer step: a large batch in a small activation memory
    --checkpoint blocks   keep only each block's input, run its forward again in the backward (train_gpt2cu -r 3)
    --optimizer foreach   AdamW's multi-tensor loop instead of its fused kernel, for comparison
    --fsdp plain|offload  FullyShardedDataParallel at world size 1 (where it does not shard: its overhead);
                          offload keeps parameters, gradients and the optimizer step in host memory
    --warmup-steps N      steps left out of the means (default 10: compilation, autotuning, allocator growth)

The speed study's rows (scripts/study_speed.sh), from eager fp32 to compiled bf16; the defaults are the benchmark's:
    --dtype fp32|fp16     fp32: no autocast and no TF32, the true fp32 baseline; fp16: autocast with a dynamic loss
                          scale (GradScaler), against bf16 (the default: autocast, TF32 for the fp32 matmuls)
    --attention math|flash  SDPA's unfused math backend (the baseline's plain attention) or its flash kernel
                          (fp16/bf16 only); auto, the default, leaves the choice to PyTorch
    --loader-workers N    a DataLoader with N worker processes reading ahead: the loader thread's row
    --pin-memory 1        batches in pinned host memory, copied without blocking: the asynchronous transfers' row
                          (by default all tokens stay on the GPU and a batch is a view of them: no copy at all)
    --compile reduce-overhead  the whole model compiled with CUDA graphs (cudagraph trees): the CUDA graphs' row

Prints one line per step (loss, ms, tokens/s) and at the end one machine-readable line
    SUMMARY {"program": "pytorch", ...}
with the mean ms/step and tokens/s over the steps after the warm-up, the MFU against 989
TFLOP/s (bf16 dense, H100/H200 datasheet) with FLOPs/token = 6*N + 12*L*T*C (N = parameters
with wte counted once and the real, unpadded vocabulary, as in docs/performance.md and
train_gpt2cu; the recomputation of --checkpoint is not counted), torch.cuda.max_memory_allocated /
max_memory_reserved, and the process's peak resident host memory (ru_maxrss).

    python3 dev/train_gpt2_torch.py --model d12 --batch 64 --seq-len 1024 --steps 30
    python3 dev/train_gpt2_torch.py --data random ...     # random tokens, no shards needed
    python3 dev/train_gpt2_torch.py --model d48 --batch 8 --grad-accum 64 --checkpoint blocks --compile blocks
    python3 dev/train_gpt2_torch.py --batch 32 --dtype fp32 --attention math --compile none   # eager fp32
"""
import argparse
import contextlib
import glob
import json
import math
import os
import resource
import socket
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
from torch.utils.checkpoint import checkpoint

MODELS = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280), "d48": (48, 25, 1600)}
VOCAB = 50257
VOCAB_PADDED = 50304
MAX_T = 1024
SHARD_MAGIC = 20240520
HEADER_INTS = 256
PEAK_FLOPS = 989e12
WARMUP_STEPS = 10  # default of --warmup-steps: steps left out of the means (compile, autotuning, allocator growth)


class Block(nn.Module):
    def __init__(self, C, H, recompute=False):
        super().__init__()
        self.H = H
        self.recompute = recompute
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        if self.recompute:
            # inside the block, so that a compiled block traces the checkpoint and an FSDP unit
            # holds its parameters gathered while the backward runs the forward again
            return checkpoint(self.body, x, use_reentrant=False)
        return self.body(x)

    def body(self, x):
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
    def __init__(self, L, H, C, recompute=False):
        super().__init__()
        self.L, self.H, self.C = L, H, C
        self.wte = nn.Embedding(VOCAB_PADDED, C)
        self.wpe = nn.Embedding(MAX_T, C)
        self.blocks = nn.ModuleList([Block(C, H, recompute) for _ in range(L)])
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


def load_tokens(pattern, B, T):
    """All tokens of the shards matching pattern, in name order, as one int64 tensor on the host."""
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
    tokens = torch.from_numpy(np.concatenate(parts))
    if len(tokens) < B * T + 1:
        sys.exit("error: %s holds %d tokens, fewer than one batch (%d)" % (pattern, len(tokens), B * T + 1))
    return tokens


class TokenBatches:
    """Consecutive (B, T+1) windows of the tokens, wrapping around, read in the training loop: all tokens on
    the GPU (a batch is a view, no copy), or with pin on the host, each batch copied through pinned memory."""

    def __init__(self, tokens, B, T, device, pin=False):
        self.tokens = tokens if pin else tokens.to(device)
        self.B, self.T, self.pos, self.device, self.pin = B, T, 0, device, pin

    def next(self):
        n = self.B * self.T
        if self.pos + n + 1 > len(self.tokens):
            self.pos = 0
        buf = self.tokens[self.pos:self.pos + n + 1]
        self.pos += n
        if self.pin:
            # a fresh pinned buffer per batch: the host allocator does not hand it out again before the copy
            # has run, where one reused buffer could be overwritten while the GPU still reads it
            buf = buf.pin_memory().to(self.device, non_blocking=True)
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)


class WindowDataset(torch.utils.data.Dataset):
    """Batch i of TokenBatches' sequence (the same windows, wrapping at the same place) as one (B*T+1) tensor,
    for a DataLoader over the indices 0..count-1 in order."""

    def __init__(self, tokens, B, T, count):
        self.tokens, self.n, self.count = tokens, B * T, count
        self.per_pass = (len(tokens) - 1) // self.n  # windows before TokenBatches wraps to the start

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        start = (i % self.per_pass) * self.n
        # a copy: a view would send the whole token array's storage through shared memory to the main process
        return self.tokens[start:start + self.n + 1].clone()


class LoaderBatches:
    """TokenBatches' batches, read ahead by a DataLoader's worker processes (and pinned by its pin-memory
    thread with pin), then copied to the GPU: synchronously, or without blocking from pinned memory."""

    def __init__(self, tokens, B, T, device, count, workers, pin):
        loader = torch.utils.data.DataLoader(WindowDataset(tokens, B, T, count), batch_size=None, shuffle=False,
                                             num_workers=workers, pin_memory=pin, prefetch_factor=4)
        self.it = iter(loader)  # starts the workers, which start reading ahead
        self.B, self.T, self.device, self.pin = B, T, device, pin

    def next(self):
        buf = next(self.it).to(self.device, non_blocking=self.pin)
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
    ap.add_argument("--steps", type=int, default=30,
                    help="optimizer steps (more than --warmup-steps, which are not timed)")
    ap.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS, help="first steps left out of the means")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches of B x T per optimizer step")
    ap.add_argument("--data", default="data/tinyshakespeare/tiny_shakespeare_train_*.bin",
                    help="token shards (glob), or 'random' for random tokens")
    ap.add_argument("--compile", default="full", choices=["full", "blocks", "reduce-overhead", "none"],
                    help="torch.compile the whole model, each block and the head separately "
                         "(one compiled graph shared by all layers: a much shorter compile), the whole model "
                         "with CUDA graphs (mode reduce-overhead), or nothing")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"],
                    help="fp32: no autocast, no TF32; bf16: autocast, TF32 for the fp32 matmuls; fp16: autocast, "
                         "TF32, the loss scaled by a GradScaler")
    ap.add_argument("--attention", default="auto", choices=["auto", "math", "flash"],
                    help="SDPA backend: PyTorch's choice, the unfused math one, or flash attention (fp16/bf16)")
    ap.add_argument("--loader-workers", type=int, default=0,
                    help="0: batches read in the training loop; N: by a DataLoader's N worker processes, ahead")
    ap.add_argument("--pin-memory", type=int, default=0, choices=[0, 1],
                    help="1: batches in pinned host memory, copied to the GPU without blocking (0: all tokens on "
                         "the GPU, or with --loader-workers each batch copied from pageable memory)")
    ap.add_argument("--checkpoint", default="none", choices=["none", "blocks"],
                    help="activation checkpointing: keep each block's input only and run its forward again "
                         "in the backward")
    ap.add_argument("--optimizer", default="fused", choices=["fused", "foreach"],
                    help="AdamW implementation (under --fsdp offload always foreach: the parameters are on the host)")
    ap.add_argument("--fsdp", default="none", choices=["none", "plain", "offload"],
                    help="FullyShardedDataParallel at world size 1, each block one unit; offload keeps parameters, "
                         "gradients and the optimizer step in host memory")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    if args.batch < 1 or not 1 <= args.seq_len <= MAX_T:
        ap.error("need --batch >= 1 and 1 <= --seq-len <= %d" % MAX_T)
    if args.warmup_steps < 0 or args.grad_accum < 1:
        ap.error("need --warmup-steps >= 0 and --grad-accum >= 1")
    if args.steps <= args.warmup_steps:
        ap.error("--steps must exceed --warmup-steps %d (the untimed warm-up steps)" % args.warmup_steps)
    if args.fsdp != "none" and args.compile != "none":
        # torch.compile under FSDP1 is not reliable enough to measure: keep that pairing out
        ap.error("--fsdp %s needs --compile none (not --compile %s)" % (args.fsdp, args.compile))
    if args.attention == "flash" and args.dtype == "fp32":
        ap.error("--attention flash needs --dtype bf16 or fp16 (SDPA's flash kernel has no fp32 version)")
    if args.loader_workers < 0:
        ap.error("need --loader-workers >= 0")
    if args.data == "random" and (args.loader_workers > 0 or args.pin_memory):
        # the random tokens come from a generator on the GPU: a host worker could not give the same batches
        ap.error("--data random needs --loader-workers 0 and --pin-memory 0 (its batches are made on the GPU)")
    if args.compile == "reduce-overhead" and args.grad_accum > 1:
        # cudagraph trees hand the first micro-batch's gradients to .grad in graph memory that the next replay
        # overwrites: accumulation then gives wrong gradients, or an error (pytorch/pytorch#169545)
        ap.error("--compile reduce-overhead needs --grad-accum 1 (not %d): CUDA graph trees do not accumulate "
                 "gradients over micro-batches" % args.grad_accum)
    return args


class EnergyMeter:
    """The GPU board's energy counter through NVML (ctypes), as train_gpt2cu reads it
    (gpu/host/energy.h); joules() is None where the library or the counter is missing."""

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


def forward_backward(fwd, data, n, no_sync=None, amp_dtype=torch.bfloat16, scaler=None, graphed=False):
    """Forward and backward of n micro-batches, each loss divided by n so that the gradients add up to
    those of the mean loss; returns that mean (detached). no_sync, where given, is entered for all but
    the last micro-batch. amp_dtype: autocast's, None for none; scaler: a GradScaler, whose scale multiplies
    the loss before its backward; graphed: fwd replays CUDA graphs (torch.compile mode reduce-overhead)."""
    total = None
    for i in range(n):
        x, y = data.next()
        with no_sync() if no_sync is not None and i < n - 1 else contextlib.nullcontext():
            if graphed:
                # a new step for the cudagraph trees: the previous replay's outputs may be overwritten from here
                torch.compiler.cudagraph_mark_step_begin()
            amp = contextlib.nullcontext() if amp_dtype is None else torch.autocast(device_type="cuda", dtype=amp_dtype)
            with amp:
                loss = fwd(x, y)
            if n > 1:
                loss = loss / n
            (scaler.scale(loss) if scaler is not None else loss).backward()
        # the loss of a replay lives in the graphs' memory, which the next replay overwrites: keep a copy
        loss = loss.detach().clone() if graphed else loss.detach()
        total = loss if total is None else total + loss
    return total


def attention_backend(choice):
    """SDPA's backend for the whole run, auto: PyTorch's choice per call. Entered once around the training
    loop rather than around each forward: torch.compile fixes the backend in the graph while it traces the
    first call (and its backward with it), and --checkpoint blocks runs the forward again inside the
    backward, where a context around the forward alone would no longer hold. One setting for the whole
    run reaches eager calls, compiled graphs and recomputation alike (Dynamo in PyTorch 2.x can also trace
    the context manager inside a compiled region; entered outside, it needs no such support)."""
    if choice == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}[choice])


def tag_compile_caches(args):
    """torch.compile's on-disk AOTAutograd cache (PyTorch 2.11) keys on whether autocast is on, not on its
    dtype, and not on SDPA's backend: a later run of the same shapes would load the graphs compiled for
    another --dtype or --attention (on the CPU, fp16 with math attention ran the bf16 graph with PyTorch's
    choice). A tag in the key keeps each setting's graphs apart; the benchmark's settings keep the plain key."""
    if args.compile == "none" or (args.dtype, args.attention) == ("bf16", "auto"):
        return
    tag = "train_gpt2_torch dtype=%s attention=%s" % (args.dtype, args.attention)
    cfg = getattr(torch.compiler, "config", None)
    if cfg is not None and hasattr(cfg, "cache_key_tag"):
        cfg.cache_key_tag = (cfg.cache_key_tag + " " + tag).strip()
    else:
        import torch._functorch.config as aot_config
        if hasattr(aot_config, "enable_autograd_cache"):
            aot_config.enable_autograd_cache = False  # no tag in this PyTorch: do without that cache


def init_single_rank_group():
    """A process group of this process alone, for FSDP; the rendezvous on a free local port unless the
    environment names one."""
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    dist.init_process_group(backend="nccl")
    world = dist.get_world_size()
    if world != 1:
        dist.destroy_process_group()
        sys.exit("error: --fsdp runs one process on one GPU (WORLD_SIZE=1), not %d" % world)


def wrap_fsdp(model, offload):
    """Each block its own FSDP unit; the root holds wte (also the lm_head: the tie stays inside one
    unit), wpe and ln_f. The original parameters stay visible (use_orig_params) for the optimizer's
    weight-decay groups and the tied lm_head."""
    from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
                device_id=torch.cuda.current_device(),
                cpu_offload=CPUOffload(offload_params=True) if offload else None)


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device")
    if args.fsdp != "none":
        init_single_rank_group()
    try:
        train(args)
    finally:
        if args.fsdp != "none":
            import torch.distributed as dist
            dist.destroy_process_group()


def train(args):
    device = "cuda"
    torch.manual_seed(args.seed)
    if args.dtype == "fp32":
        # a true fp32 baseline: TF32 would round the matmuls' inputs to a 10-bit mantissa
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]

    L, H, C = MODELS[args.model]
    B, T, N = args.batch, args.seq_len, args.grad_accum
    tokens_per_step = B * T * N
    W = args.warmup_steps
    offload = args.fsdp == "offload"
    model = GPT2(L, H, C, recompute=args.checkpoint == "blocks")
    if not offload:  # under offload FSDP moves one unit at a time to the GPU and back, never the whole model
        model = model.to(device)
    n_real = model.num_real_params()
    flops_per_token = 6.0 * n_real + 12.0 * L * T * C

    # the groups by identity, decided before FSDP, whose sharded views may be flat
    params = list(model.parameters())
    decay_ids = {id(p) for p in params if p.dim() >= 2}
    if args.fsdp != "none":
        model = wrap_fsdp(model, offload)
        params = list(model.parameters())
    decay = [p for p in params if id(p) in decay_ids]
    no_decay = [p for p in params if id(p) not in decay_ids]
    if len(decay) != len(decay_ids):
        sys.exit("error: FSDP did not keep the original parameters (%d of %d weights found)"
                 % (len(decay), len(decay_ids)))
    # under offload the step runs on the host's copies: AdamW's foreach loop, not the GPU's fused kernel
    optimizer = "foreach" if offload else args.optimizer
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if optimizer == "fused" else {"foreach": True}))
    optimizer_note = "" if optimizer == args.optimizer else " (not fused: --fsdp offload keeps parameters on the host)"

    tag_compile_caches(args)
    if args.compile == "full":
        fwd = torch.compile(model)
    elif args.compile == "reduce-overhead":
        fwd = torch.compile(model, mode="reduce-overhead")
    else:
        if args.compile == "blocks":
            for block in model.blocks:
                block.compile()
            model.head = torch.compile(head_loss)
        fwd = model
    # FSDP with CPU offload replaces the host gradient with each backward's instead of adding to it,
    # so the micro-batches before the last accumulate on the GPU (fp32, the whole model's, until the last)
    no_sync = model.no_sync if offload and N > 1 else None

    # fp16's range needs the loss scaled; FSDP's gradients (on the host under offload) need the sharded scaler
    scaler = None
    if args.dtype == "fp16":
        if args.fsdp != "none":
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
            scaler = ShardedGradScaler("cuda")
        else:
            scaler = torch.amp.GradScaler("cuda")

    pin = bool(args.pin_memory)
    if args.data == "random":
        data = RandomBatches(B, T, device, args.seed)
    elif args.loader_workers > 0:
        data = LoaderBatches(load_tokens(args.data, B, T), B, T, device, args.steps * N, args.loader_workers, pin)
    else:
        data = TokenBatches(load_tokens(args.data, B, T), B, T, device, pin)
    gpu = torch.cuda.get_device_properties(0)
    print("device: %s, %.0f MiB; torch %s" % (gpu.name, gpu.total_memory / 2**20, torch.__version__))
    print("model: %s L=%d H=%d C=%d, %.2fM parameters (real vocab, wte once); B=%d T=%d, %d steps, compile %s, "
          "data %s; grad accum %d (%d tokens/step), checkpoint %s, optimizer %s AdamW%s, fsdp %s, %d warm-up steps; "
          "dtype %s, attention %s, loader workers %d, pin memory %d"
          % (args.model, L, H, C, n_real / 1e6, B, T, args.steps, args.compile, args.data,
             N, tokens_per_step, args.checkpoint, optimizer, optimizer_note, args.fsdp, W,
             args.dtype, args.attention, args.loader_workers, args.pin_memory))
    sys.stdout.flush()

    torch.cuda.reset_peak_memory_stats()
    times = []
    meter = EnergyMeter(torch.cuda.current_device())
    e_start = None  # the counter where the timed steps start (a read takes ~3 ms: never inside a step)
    graphed = args.compile == "reduce-overhead"
    scale = scaler.get_scale() if scaler is not None else None
    skipped = 0
    t_start = time.perf_counter()
    with attention_backend(args.attention):
        for step in range(args.steps):
            torch.cuda.synchronize()
            if step == W:
                e_start = meter.joules()
            t0 = time.perf_counter()
            loss = forward_backward(fwd, data, N, no_sync, amp_dtype, scaler, graphed)
            if scaler is not None and args.grad_clip > 0:
                scaler.unscale_(opt)  # the clipping threshold is for the true gradients, not the scaled ones
            if args.grad_clip <= 0:
                norm = None
            elif args.fsdp != "none":
                norm = model.clip_grad_norm_(args.grad_clip)  # the norm over all units' gradients
            else:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            if scaler is not None:
                scaler.step(opt)  # skips the update where the gradients hold an inf or a NaN
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            loss_v = loss.item()  # synchronizes
            norm_v = norm.item() if norm is not None else float("nan")
            dt = time.perf_counter() - t0
            times.append(dt)
            note = ""
            if scaler is not None:
                # the scale falls only where the step was skipped (and rises after growth_interval good steps)
                prev, scale = scale, scaler.get_scale()
                if scale < prev:
                    skipped += 1
                    note = " | skipped (fp16 gradients overflowed), loss scale now %g" % scale
            print("step %4d/%d | loss %.6f | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%%s"
                  % (step + 1, args.steps, loss_v, norm_v, dt * 1e3, tokens_per_step / dt,
                     100.0 * flops_per_token * tokens_per_step / dt / PEAK_FLOPS, note), flush=True)
    total_s = time.perf_counter() - t_start
    e_end = meter.joules()

    timed = times[W:]
    mean_s = sum(timed) / len(timed)
    tok_s = tokens_per_step / mean_s
    free, total = torch.cuda.mem_get_info()
    host_peak_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KiB on Linux
    summary = {
        "program": "pytorch", "model": args.model, "B": B, "T": T, "grad_accum": N,
        "tokens_per_step": tokens_per_step, "steps": args.steps,
        "timed_steps": "%d..%d" % (W + 1, args.steps), "compile": args.compile,
        "checkpoint": args.checkpoint, "optimizer": optimizer, "fsdp": args.fsdp,
        "dtype": args.dtype, "attention": args.attention, "loader_workers": args.loader_workers,
        "pin_memory": args.pin_memory,
        "ms_per_step": round(mean_s * 1e3, 2), "tokens_per_s": round(tok_s),
        "mfu_pct": round(100.0 * flops_per_token * tok_s / PEAK_FLOPS, 2),
        "params_real": n_real, "flops_per_token": flops_per_token,
        "first_step_s": round(times[0], 2), "wall_s": round(total_s, 1),
        "max_allocated_MiB": round(torch.cuda.max_memory_allocated() / 2**20),
        "max_reserved_MiB": round(torch.cuda.max_memory_reserved() / 2**20),
        "device_used_end_MiB": round((total - free) / 2**20),
        "host_peak_MiB": host_peak_mib,
    }
    if scaler is not None:
        summary["skipped_steps"] = skipped
    print("mean over steps %d..%d: %.1f ms/step, %.0f tok/s, MFU %.1f%%"
          % (W + 1, args.steps, mean_s * 1e3, tok_s, summary["mfu_pct"]))
    if e_start is not None and e_end is not None:
        summary["joules_per_step"] = round((e_end - e_start) / len(timed), 2)
        summary["mean_watts"] = round((e_end - e_start) / sum(timed), 1)
        print("energy over steps %d..%d (NVML board counter): %.1f J/step, %.0f W mean"
              % (W + 1, args.steps, summary["joules_per_step"], summary["mean_watts"]))
    else:
        print("energy: not measured (%s)" % (meter.why or "the counter stopped answering"))
    print("host memory at peak (ru_maxrss): %d MiB" % host_peak_mib)
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

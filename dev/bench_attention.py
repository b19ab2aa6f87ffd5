"""dev/bench_attention.py: causal attention timing, bf16: PyTorch SDPA's cuDNN and flash (FA2)
backends against our flash kernels (build/test_attention --bench, kernels/attention.cuh),
forward, backward and both, each with its TFLOP/s, and the ratio to cuDNN (its time over
the row's: above 1 is faster than cuDNN). FLOPs counted as causal: forward 2*2*B*NH*T^2*hs/2,
backward 2.5x forward. SDPA takes q, k, v as (B, NH, T, hs); ours reads the trainer's
(B, T, 3C) qkv directly. A backend this PyTorch or GPU lacks is reported as such.
usage: python3 dev/bench_attention.py [path/to/test_attention]"""
import os, re, subprocess, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(64, 12, 1024, 64), (16, 12, 2048, 64), (4, 12, 4096, 64), (32, 6, 1024, 128), (4, 6, 4096, 128)]
BIN = sys.argv[1] if len(sys.argv) > 1 else "build/test_attention"
WARM, ITERS = 3, 20


def timed(fn):
    for _ in range(WARM):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(ITERS):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / ITERS


def sdpa(B, NH, T, hs, backend):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
               for _ in range(3))
    do = torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16, generator=g)
    try:
        with sdpa_kernel(backend):
            with torch.no_grad():
                f = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            b = timed(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
    except RuntimeError as e:  # (no kernel of this backend for this GPU, shape or build)
        print(f"SDPA {backend.name} at B={B} NH={NH} T={T} hs={hs}: not available ({str(e).splitlines()[0][:120]})")
        return float("nan"), float("nan")
    return f, b


def ours(B, NH, T, hs, variants):
    r = subprocess.run([BIN, "--bench", str(B), str(NH), str(T), str(hs), str(int(variants))],
                       capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    res = {}
    for line in r.stdout.splitlines():
        m = re.match(r"BENCH (\w+) .*fwd_ms ([\d.]+) .*bwd_ms ([\d.]+)", line)
        if m:
            res[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return res


def main():
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    rows = []
    nan = (float("nan"), float("nan"))
    for i, (B, NH, T, hs) in enumerate(SHAPES):
        ff = 2.0 * 2.0 * B * NH * T * T * hs / 2.0
        impls = [("SDPA cuDNN", sdpa(B, NH, T, hs, SDPBackend.CUDNN_ATTENTION)),
                 ("SDPA flash (FA2)", sdpa(B, NH, T, hs, SDPBackend.FLASH_ATTENTION))]
        res = ours(B, NH, T, hs, i == 0)
        impls.append(("ours", res.get("ours", nan)))
        for key, name in (("ours_atomic", "ours, det. 0"), ("old", "old cuBLAS path")):
            if key in res:
                impls.append((name, res[key]))
        cudnn = impls[0][1][0] + impls[0][1][1]
        for j, (name, (f, b)) in enumerate(impls):
            rows.append((f"B={B} NH={NH} T={T} hs={hs}" if j == 0 else "", name, f, ff / f * 1e-9, b,
                         2.5 * ff / b * 1e-9, f + b, 3.5 * ff / (f + b) * 1e-9, cudnn / (f + b)))
    print()
    print(f"{'shape':<28}{'impl':<18}{'fwd ms':>8}{'TFLOP/s':>8}{'bwd ms':>8}{'TFLOP/s':>8}"
          f"{'f+b ms':>8}{'TFLOP/s':>8}{'vs cuDNN':>9}")
    for shape, name, f, ft, b, bt, fb, fbt, ratio in rows:
        print(f"{shape:<28}{name:<18}{f:>8.3f}{ft:>8.1f}{b:>8.3f}{bt:>8.1f}{fb:>8.3f}{fbt:>8.1f}{ratio:>8.2f}x")


if __name__ == "__main__":
    main()

"""dev/bench_attention.py: causal attention timing, PyTorch SDPA (flash backend, bf16) against
our flash kernels (build/test_attention --bench, kernels/attention.cuh), forward and backward.
FLOPs counted as causal: forward 2*2*B*NH*T^2*hs/2, backward 2.5x forward.
SDPA takes q, k, v as (B, NH, T, hs); ours reads the trainer's (B, T, 3C) qkv directly.
usage: python3 dev/bench_attention.py [path/to/test_attention]"""
import os, re, subprocess, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(64, 12, 1024, 64), (16, 12, 2048, 64), (4, 12, 4096, 64), (32, 6, 1024, 128)]
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


def sdpa(B, NH, T, hs):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
               for _ in range(3))
    do = torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16, generator=g)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        with torch.no_grad():
            f = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = timed(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
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
    for i, (B, NH, T, hs) in enumerate(SHAPES):
        ff = 2.0 * 2.0 * B * NH * T * T * hs / 2.0
        fb = 2.5 * ff
        sf, sb = sdpa(B, NH, T, hs)
        res = ours(B, NH, T, hs, i == 0)
        of, ob = res.get("ours", (float("nan"), float("nan")))
        rows.append((f"B={B} NH={NH} T={T} hs={hs}", "SDPA flash", sf, ff / sf * 1e-9, sb, fb / sb * 1e-9, sf, sb))
        rows.append(("", "ours", of, ff / of * 1e-9, ob, fb / ob * 1e-9, sf, sb))
        if "ours_atomic" in res:
            af, ab = res["ours_atomic"]
            rows.append(("", "ours, det. 0", af, ff / af * 1e-9, ab, fb / ab * 1e-9, sf, sb))
        if "old" in res:
            pf, pb = res["old"]
            rows.append(("", "old cuBLAS path", pf, ff / pf * 1e-9, pb, fb / pb * 1e-9, sf, sb))
    print()
    print(f"{'shape':<28}{'impl':<17}"
          f"{'fwd ms':>9}{'TFLOP/s':>9}{'vs SDPA':>9}{'bwd ms':>9}{'TFLOP/s':>9}{'vs SDPA':>9}")
    for shape, name, f, ft, b, bt, sf, sb in rows:
        print(f"{shape:<28}{name:<17}{f:>9.3f}{ft:>9.1f}{sf / f:>8.2f}x{b:>9.3f}{bt:>9.1f}{sb / b:>8.2f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""dev/test/test_ncu_step.py: dev/ncu_step.py on made-up Nsight Compute CSVs: one step's
kernels summed by name (templates and parameters stripped), units converted, numbers with
thousands separators read, and clear errors for a file that is not ncu's CSV or holds too
few steps."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "ncu_step.py")

HEADER = '"ID","Process ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"'


def row(i, name, rd, wr, t):
    return f'"{i}","7","{name}","{rd}","{wr}","{t}"'


def run(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    try:
        p = subprocess.run([sys.executable, TOOL, f.name, *args], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    return p.returncode, p.stdout, p.stderr


def table(out):
    """kernel -> (calls, ms, GB) from the tool's markdown table"""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].isdigit():
            rows[cells[0]] = (int(cells[1]), float(cells[2]), float(cells[3]))
    return rows


failures = 0


def check(what, ok):
    global failures
    print(f"  {what}: {'ok' if ok else 'FAIL'}")
    failures += 0 if ok else 1


# step 1: adamw (before the first norm kernel) is left out; step 2: two matmul calls (one with
# a thousands separator), a templated kernel, the norm kernel that ends the step; step 3 after
lines = ["==PROF== Connected to process 7", HEADER, '"","","","byte","Mbyte","ns"',
         row(0, "void adamw_kernel<8>(float *, int)", 5, 0, 999999),
         row(1, "void grad_norm_finish_kernel(float *, float, float)", 0, 0, 1000),
         row(2, "nvjet_sm90_tst_256x128_NNT", "1,000,000,000", "500", "2,500,000"),
         row(3, "nvjet_sm90_tst_256x128_NNT", 1000000000, 1500, 1500000),
         row(4, "void flash90::fwd_kernel<2, 64, 2>(__nv_bfloat16 *, float *)", 2000000000, 0, 500000),
         row(5, "void grad_norm_finish_kernel(float *, float, float)", 0, 0, 1000),
         row(6, "nvjet_sm90_tst_256x128_NNT", 9, 9, 99999999)]
rc, out, err = run("\n".join(lines) + "\n")
t = table(out)
print("one step of a made-up CSV:")
check("exit status 0", rc == 0)
check("matmul: 2 calls, 4.000 ms, 4.00 GB (1e9 + 2e9 bytes read, 500 + 1500 Mbyte written)",
      t.get("nvjet_sm90_tst_256x128_NNT") == (2, 4.0, 4.0))
check("templated kernel named without its arguments, namespace kept", t.get("flash90::fwd_kernel") == (1, 0.5, 2.0))
check("the norm kernel that ends the step counted once", t.get("grad_norm_finish_kernel") == (1, 0.001, 0.0))
check("the step before it left out", "adamw_kernel" not in t)
check("largest first", out.splitlines()[2].startswith("| nvjet_sm90_tst_256x128_NNT |"))

rc, out, err = run("\n".join(lines) + "\n", "--step", "3")
check("--step 3 with two norm kernels: an error that says how many",
      rc != 0 and "2 grad_norm_finish_kernel kernels" in err)

# generation: steps end at the draw (--mark); the prefix of a name does not count as the mark
gen = [HEADER, '"","","","byte","byte","ns"',
       row(0, "void decode_sample_kernel(DecodeRows, const __nv_bfloat16 *)", 0, 0, 3000),
       row(1, "void decode_embed_kernel(__nv_bfloat16 *, DecodeRows)", 10, 0, 2000),
       row(2, "void decode_linear_kernel<8>(DecodeLinearArgs)", 3000000, 0, 5000),
       row(3, "void decode_linear_kernel<8>(DecodeLinearArgs)", 1000000, 0, 3000),
       row(4, "void attention_decode_kernel(__nv_bfloat16 *)", 64000, 0, 9000),
       row(5, "void decode_sample_kernel_variant(int)", 0, 0, 7000),
       row(6, "void decode_sample_kernel(DecodeRows, const __nv_bfloat16 *)", 0, 0, 4000),
       row(7, "void decode_embed_kernel(__nv_bfloat16 *, DecodeRows)", 10, 0, 99999)]
rc, out, err = run("\n".join(gen) + "\n", "--mark", "decode_sample_kernel")
t = table(out)
print("one step of generation (--mark decode_sample_kernel):")
check("exit status 0", rc == 0)
check("the linear layers: 2 calls, 0.008 ms", t.get("decode_linear_kernel") == (2, 0.008, 0.0))
check("a kernel whose name only starts with the mark's is not a mark",
      t.get("decode_sample_kernel_variant") == (1, 0.007, 0.0))
check("the draw that ends the step counted once, the one before left out",
      t.get("decode_sample_kernel") == (1, 0.004, 0.0))
check("the next step left out", t.get("decode_embed_kernel") == (1, 0.002, 0.0))
rc, out, err = run("\n".join(gen) + "\n", "--mark", "no_such_kernel")
check("a mark that never runs: an error naming it", rc != 0 and "0 no_such_kernel kernels" in err)

rc, out, err = run("\n".join(lines) + "\n", "--step", "1")
check("--step 1: an error", rc != 0 and "--step must be 2 or more" in err)

rc, out, err = run("no csv here\n")
check("a file without ncu's header: an error naming it", rc != 0 and "no ncu CSV header" in err)

print(f"{'all passed' if failures == 0 else f'{failures} FAILED'}")
sys.exit(1 if failures else 0)

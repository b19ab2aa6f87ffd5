// test_update_pieces.c: how the optimizer's update is cut when the state is updated a range
// at a time (--offload 2's staged chunks; common/distributed.h update_piece). On random
// layouts (runs, their lengths and strides as ZeRO makes them, the tensor's place in the
// state) and random chunk sizes, the pieces of all chunks must update every state element
// of the tensor exactly once, inside its own chunk, with the parameter, gradient and
// rounding-noise index that the whole-tensor update gives it; a tensor inside a chunk must
// be one piece over all its runs. Fresh seed each run, printed; `test_update_pieces SEED`
// repeats one.
#include "testutil.h"
#include "../../common/distributed.h"
#include "../../common/rng.h"

static uint64_t g_rng;
static size_t rnd(size_t lo, size_t hi) { return lo + (size_t)(rng_next_u64(&g_rng) % (hi - lo + 1)); }

static void test_random_layouts(void) {
    int whole_seen = 0, cut_seen = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int slabs = (int)rnd(1, 9);
        size_t len = rnd(1, 40), stride = len * rnd(1, 4), grad_stride = rnd(0, 1) ? len : stride;
        size_t o = rnd(0, 100), e = o + (size_t)slabs * len, total = e + rnd(0, 100), C = rnd(1, 150);
        int *seen = (int *)xcalloc(total, sizeof(int));
        int bad = 0;
        for (size_t c0 = 0; c0 < total && !bad; c0 += C) {
            size_t c1 = c0 + C < total ? c0 + C : total;
            int n = update_piece_count(o, slabs, len, c0, c1);
            if (n == 1) whole_seen++;
            if (n > 1) cut_seen++;
            for (int i = 0; i < n; i++) {
                UpdatePiece p;
                if (!update_piece(o, slabs, len, stride, grad_stride, c0, c1, i, &p)) continue;
                CHECK(n != 1 || p.slabs == slabs, "trial %d: a tensor inside a chunk in %d runs", trial, p.slabs);
                // what the kernel does with the piece: run s, element j
                for (int s = 0; s < p.slabs; s++)
                    for (size_t j = 0; j < p.len; j++) {
                        size_t x = c0 + p.q + (size_t)s * len + j;  // the state element it updates
                        size_t par = p.at + (size_t)s * stride + j, grad = p.grad_at + (size_t)s * grad_stride + j;
                        int ok = x >= c0 && x < c1 && x >= o && x < e;
                        if (ok) {
                            size_t run = (x - o) / len, k = (x - o) % len;
                            ok = par == run * stride + k && grad == run * grad_stride + k;
                            seen[x]++;
                        }
                        if (!ok && !bad++)
                            CHECK(0, "trial %d (slabs %d len %zu stride %zu o %zu C %zu): chunk [%zu, %zu) piece %d "
                                  "updates state %zu as parameter %zu, gradient %zu", trial, slabs, len, stride, o, C,
                                  c0, c1, i, x, par, grad);
                    }
            }
        }
        for (size_t x = 0; x < total && !bad; x++)
            if (seen[x] != (x >= o && x < e)) {
                bad++;
                CHECK(0, "trial %d: state element %zu updated %d times", trial, x, seen[x]);
            }
        free(seen);
    }
    CHECK(whole_seen > 100 && cut_seen > 100, "too few tensors inside (%d) or cut (%d)", whole_seen, cut_seen);
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    g_rng = rng_seed(seed);
    printf("seed %llu (rerun with: %s %llu)\n", (unsigned long long)seed, argv[0], (unsigned long long)seed);
    run_case("update pieces cover each element once, alike", test_random_layouts);
    return test_summary();
}

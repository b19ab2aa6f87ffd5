// test_sampling.c: drawing a token from the model's logits (common/sampling.h):
// --top-k and --top-p keep only the most likely tokens and renormalise, ties going to the
// lower id; without them a draw is the plain inverse-CDF draw it always was; frequencies
// over many draws follow the kept probabilities. How a sample fits its context: a prompt
// too long keeps its last tokens, leaving room to generate; -g is cut to what is left.
#include "testutil.h"
#include "../../common/train_common.h"

#define V 6
// six tokens with probabilities 0.5 (token 1), 0.25 (0), 0.125 (3), 0.0625 (5), 0.03125 (2 and 4)
static void make_logits(float *l) {
    const float p[V] = {0.25f, 0.5f, 0.03125f, 0.125f, 0.03125f, 0.0625f};  // token 1 most likely, then 0, 3, 5
    for (int v = 0; v < V; v++) l[v] = logf(p[v]);
}

// counts of each token over n draws
static void draw_counts(int top_k, float top_p, int n, int *counts) {
    float l[V], probs[V];
    make_logits(l);
    uint64_t rng = rng_seed(11);
    memset(counts, 0, V * sizeof(int));
    for (int i = 0; i < n; i++) counts[sample_from_logits(l, probs, V, 1.0f, top_k, top_p, &rng)]++;
}

static void test_top_k(void) {
    int c[V];
    draw_counts(1, 1.0f, 2000, c);
    CHECK(c[1] == 2000, "top-k 1 is the most likely token every time: %d", c[1]);
    draw_counts(2, 1.0f, 30000, c);
    CHECK(c[0] + c[1] == 30000, "top-k 2 draws tokens 1 and 0 only: %d of 30000", c[0] + c[1]);
    double share = c[1] / 30000.0;  // 0.5 / 0.75 after renormalising
    CHECK(fabs(share - 2.0 / 3.0) < 0.015, "top-k 2: token 1's share %.4f, expected 0.6667", share);
}

static void test_top_p(void) {
    int c[V];
    draw_counts(0, 0.5f, 2000, c);
    CHECK(c[1] == 2000, "top-p 0.5: token 1 alone reaches it: %d", c[1]);
    draw_counts(0, 0.8f, 30000, c);  // 0.5 + 0.25 + 0.125 reach 0.8: tokens 1, 0, 3
    CHECK(c[2] == 0 && c[4] == 0 && c[5] == 0 && c[1] + c[0] + c[3] == 30000, "top-p 0.8: tokens 1, 0, 3 only");
    CHECK(fabs(c[3] / 30000.0 - 0.125 / 0.875) < 0.012, "top-p 0.8: token 3's share %.4f, expected %.4f",
          c[3] / 30000.0, 0.125 / 0.875);
    draw_counts(2, 0.99f, 3000, c);
    CHECK(c[0] + c[1] == 3000, "top-k 2 with top-p 0.99: top-k cuts first");
}

// ties go to the lower id: with two equal best tokens and top-k 1, always the first
static void test_ties(void) {
    float l[4] = {0.0f, 1.0f, 1.0f, 0.5f}, probs[4];
    uint64_t rng = rng_seed(3);
    int ok = 1;
    for (int i = 0; i < 200; i++) ok &= sample_from_logits(l, probs, 4, 1.0f, 1, 1.0f, &rng) == 1;
    CHECK(ok, "a tie for the top goes to the lower id");
}

// without top-k / top-p the draw is the inverse CDF of the softmax, coin for coin
static void test_plain(void) {
    float l[V], probs[V], p[V];
    make_logits(l);
    uint64_t a = rng_seed(5), b = rng_seed(5);
    int same = 1;
    for (int i = 0; i < 1000; i++) {
        int got = sample_from_logits(l, probs, V, 1.0f, 0, 1.0f, &a);
        float maxv = -FLT_MAX, sum = 0.0f;
        for (int v = 0; v < V; v++) maxv = fmaxf(maxv, l[v]);
        for (int v = 0; v < V; v++) sum += (p[v] = expf(l[v] - maxv));
        for (int v = 0; v < V; v++) p[v] /= sum;
        same &= got == sample_index(p, V, rng_uniform(&b));
    }
    CHECK(same, "top-k 0 and top-p 1 leave the plain draw unchanged");
}

// the inverse CDF at its edges: a token of probability 0 is never drawn, whatever the coin
// (the coin at a boundary of the CDF goes to the token after it); a coin just under 1, or
// above a total that rounding left short, draws the last token with any probability
static void test_cdf_edges(void) {
    const float p[4] = {0.0f, 0.5f, 0.0f, 0.5f};
    CHECK(sample_index(p, 4, 0.0f) == 1, "coin 0 drew token %d, which has probability %g",
          sample_index(p, 4, 0.0f), p[sample_index(p, 4, 0.0f)]);
    CHECK(sample_index(p, 4, 0.5f) == 3, "coin 0.5 drew token %d", sample_index(p, 4, 0.5f));
    CHECK(sample_index(p, 4, nextafterf(1.0f, 0.0f)) == 3, "a coin just under 1 drew token %d",
          sample_index(p, 4, nextafterf(1.0f, 0.0f)));
    uint64_t rng = rng_seed(17);
    int zero_drawn = 0;
    for (int i = 0; i < 20000; i++) {
        int t = sample_index(p, 4, rng_uniform(&rng));
        zero_drawn += p[t] == 0.0f;
    }
    CHECK(zero_drawn == 0, "tokens of probability 0 drawn %d times in 20000", zero_drawn);
    // a total short of the coin (rounding) draws the last token with any probability, not
    // the last token, which a cut distribution may have dropped
    const float q[4] = {0.25f, 0.0f, 0.5f, 0.0f};
    CHECK(sample_index(q, 4, 0.9f) == 2, "a coin above the total drew token %d", sample_index(q, 4, 0.9f));
    const float z[3] = {0.0f, 0.0f, 0.0f};
    CHECK(sample_index(z, 3, 0.5f) == 2, "no token of any probability: drew %d, want the last", sample_index(z, 3, 0.5f));
}

// sample_fit's rule on a few cases worked by hand, then its promises over every small case
static void test_fit(void) {
    const int cases[][5] = {  // prompt tokens, -g, maxT -> kept, generated
        {0, 64, 64, 0, 63},   {100, 4, 16, 11, 4}, {10, 4, 16, 10, 4}, {11, 4, 16, 11, 4}, {12, 4, 16, 11, 4},
        {5, 1000, 16, 5, 10}, {100, 1000, 16, 7, 8}, {3, 4, 1, 0, 0},  {3, 4, 2, 0, 1},   {20, 0, 16, 15, 0},
        {0, 0, 16, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        int keep, gen;
        sample_fit(c[0], c[1], c[2], &keep, &gen);
        CHECK(keep == c[3] && gen == c[4], "prompt %d, -g %d, maxT %d: kept %d and generated %d, want %d and %d", c[0],
              c[1], c[2], keep, gen, c[3], c[4]);
    }
    int broken = 0;
    for (int maxT = 1; maxT <= 40; maxT++)
        for (int p = 0; p <= 60; p++)
            for (int g = 0; g <= 60; g++) {
                int keep, gen, room = maxT - 1, half = maxT / 2;
                sample_fit(p, g, maxT, &keep, &gen);
                broken += keep < 0 || gen < 0 || keep > p || gen > g || keep + gen > room;  // fits, cuts only
                broken += p + g <= room && (keep != p || gen != g);                       // whole when it fits
                broken += gen < (g < half ? g : half);                                    // room to generate
                broken += keep < p && keep + gen != room;                                 // a cut prompt fills
            }
    CHECK(broken == 0, "%d promises broken over prompts 0..60, -g 0..60, maxT 1..40", broken);
}

int main(void) {
    run_case("top-k keeps the k most likely tokens", test_top_k);
    run_case("top-p keeps the fewest tokens reaching p", test_top_p);
    run_case("ties go to the lower id", test_ties);
    run_case("no cut: the plain draw", test_plain);
    run_case("the draw at the CDF's edges", test_cdf_edges);
    run_case("a sample's prompt and -g fit the context", test_fit);
    return test_summary();
}

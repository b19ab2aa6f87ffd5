// test_memory_budget.c: --max-device-memory (gpu/host/memory_budget.h): parse_bytes takes the
// documented sizes in binary units, a unit required, and refuses anything else;
// memory_micro_steps counts whole micro-steps only; against a fake plan with an explicit cost
// formula (bf16 moments cost less), the settings that memory_suggestions names are those a
// brute force over every (B, r, ranks,
// ZeRO stage, moments, offload) finds, each fits and keeps the tokens per step, --optimizer-state
// bf16 only at the run's ranks and stage and only for a run with fp32 moments, --offload 2 only
// at the run's ranks, stage and moments and only for a run without it, -z 3 --offload 2 on one
// rank only for a one-rank run below stage 3, with its moments; memory_budget_check
// returns when the plan fits and otherwise exits through fatal() naming the budget, the need,
// the breakdown and what fits; memory_limit_check does the same under the name of another
// limit (a GPU's free memory); memory_budget_vs_card refuses a budget above the card's size;
// with a host plan the lines that put memory on the host name how much, and a setting whose
// host memory is over the host's limit is not named; with a speed model the lines on the
// run's own GPUs come fastest first, the same lines as without it.
// Random trials use a fresh seed, printed; `test_memory_budget SEED` repeats a run.
#include "testutil.h"
#include "../../gpu/host/memory_budget.h"
#include "../../common/rng.h"

#define GIB ((size_t)1 << 30)
#define MAX_B 64  // the largest micro-batch the random trials start from
#define MAX_LINES 10  // 4 recompute levels, 3 switches, 3 ZeRO stages

// ---------------------------------------------------------------------------------------------
// parse_bytes

static void test_parse_accepted(void) {
    const struct {
        const char *text;
        size_t bytes;
    } ok[] = {
        {"16G", (size_t)16 << 30},   {"16g", (size_t)16 << 30},      {"16GiB", (size_t)16 << 30},
        {"16GB", (size_t)16 << 30},  {"16gb", (size_t)16 << 30},    {"16gib", (size_t)16 << 30},
        {"512M", (size_t)512 << 20}, {"1.5G", (size_t)3 << 29},
        {"1T", (size_t)1 << 40},     {"2K", 2048},                   {"1K", 1024},
        {"512MiB", (size_t)512 << 20}, {"0.5K", 512},                {"0.0009765625K", 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t got = 0;
        int r = parse_bytes(ok[i].text, &got);
        CHECK(r == 1 && got == ok[i].bytes, "\"%s\": returned %d, %zu bytes (expected %zu)", ok[i].text, r, got,
              ok[i].bytes);
    }
}

static void test_parse_refused(void) {
    // a number without a unit: "16" would be 16 bytes, never a budget meant; "0.0001K" is less
    // than one byte; "1e30G" is past what a size_t holds; "16 G" has a space; a sign, a
    // leading space or hex are not sizes a user means
    const char *bad[] = {"", "G", "16X", "-1G", "0", "0G", "nan", "inf", "1e30G", "16 G", "16Gx", "0.1", "GiB", "16iB",
                         " 16G", "+16G", "0x10G", "16", "1", "123456", "16B", "0.0001K"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t got = 7;
        CHECK(parse_bytes(bad[i], &got) == 0, "\"%s\" accepted as %zu bytes", bad[i], got);
    }
}

// ---------------------------------------------------------------------------------------------
// memory_micro_steps

// every field named: moments 1 is AdamW's moments in bf16, 0 in fp32
static MemorySetting setting(int B, int r, int ranks, int stage, long total_batch, int T, int moments_bf16) {
    MemorySetting s = {.B = B, .recompute = r, .ranks = ranks, .zero_stage = stage, .total_batch = total_batch,
                       .T = T, .moments_bf16 = moments_bf16};
    return s;
}

static void test_micro_steps(void) {
    CHECK(memory_micro_steps(setting(4, 0, 2, 0, 4L * 1024 * 2 * 8, 1024, 0)) == 8, "4x1024 on 2 ranks, 8 micro-steps");
    CHECK(memory_micro_steps(setting(8, 1, 1, 0, 8L * 64, 64, 0)) == 1, "one micro-step");
    CHECK(memory_micro_steps(setting(2, 0, 1, 0, 6L * 2048, 1024, 0)) == 6, "6 micro-steps of 2x1024");
    // a step that is not a whole number of micro-steps, or less than one, has none
    CHECK(memory_micro_steps(setting(3, 0, 1, 0, 4L * 1024, 1024, 0)) == 0, "4096 tokens in micro-steps of 3072");
    CHECK(memory_micro_steps(setting(4, 0, 2, 0, 4L * 1024, 1024, 0)) == 0, "4096 tokens over 2 ranks of 4x1024");
    CHECK(memory_micro_steps(setting(1, 0, 1, 0, 1000, 1024, 0)) == 0, "1000 tokens, micro-steps of 1024");
    uint64_t rng = rng_seed(17);
    int ok = 1;
    for (int i = 0; i < 2000; i++) {
        int B = 1 + (int)(rng_next_u64(&rng) % 64), T = 1 + (int)(rng_next_u64(&rng) % 2048);
        int ranks = 1 + (int)(rng_next_u64(&rng) % 8);
        long per = (long)B * T * ranks, k = 1 + (long)(rng_next_u64(&rng) % 100);
        ok &= memory_micro_steps(setting(B, 0, ranks, 0, per * k, T, 0)) == k;
        if (per > 1) {  // k whole micro-steps and a part of one more
            long part = 1 + (long)(rng_next_u64(&rng) % (unsigned long)(per - 1));
            ok &= memory_micro_steps(setting(B, 0, ranks, 0, per * k + part, T, 0)) == 0;
        }
    }
    CHECK(ok, "random whole and broken multiples of B*T*ranks");
}

// ---------------------------------------------------------------------------------------------
// The fake plan: a fixed part (buffers), the parameters (split over the ranks at ZeRO-3), the
// optimizer state (split over the ranks from ZeRO-1 up), the gradients (split from ZeRO-2 up)
// and activations proportional to B that shrink with each recompute level. Ranks whose bit is
// set in `impossible` cannot run. ZeRO-3 on one rank with --offload 2 keeps the parameters in
// host memory and only the two layers' slots they are copied into on the device, param / 8
// here (a 16-layer model); on one rank without it the whole model stays on the device.
// `opt` is the optimizer state with fp32 moments: a third fp32 master weights, two thirds
// the moments m and v (4 bytes each per parameter); bf16 moments halve those two thirds and
// leave the master weights, so with moments_bf16 the state is opt/3 + opt/3 = 2/3 of it.
// With offload the whole state is in host memory: none of it on the device.

typedef struct {
    size_t fixed, param, opt, grad, act[MEMORY_MAX_RECOMPUTE + 1];
    unsigned impossible;  // bit k: 2^k ranks are impossible (SIZE_MAX)
} FakePlan;

static size_t opt_bytes(const FakePlan *p, int moments_bf16) {
    size_t master = p->opt / 3, moments = p->opt - master;  // fp32 master weights, fp32 m and v
    return moments_bf16 ? master + master : master + moments;  // bf16 m and v: half of 2/3, written as opt/3
}

static int g_plan_misuse = 0;  // the header asked about a setting it should never consider
static MemorySetting g_plan_now;  // the run being checked: T and the tokens per step must be kept

// the one-rank -z 3 --offload 2 switch of a one-rank run below stage 3 (its moments kept)
static int host_params_switch(MemorySetting s) {
    return g_plan_now.ranks == 1 && g_plan_now.zero_stage < 3 && s.ranks == 1 && s.zero_stage == 3 &&
           s.offload == MEMORY_OFFLOAD_SUGGESTED && s.moments_bf16 == g_plan_now.moments_bf16;
}

static size_t fake_plan(const void *ctx, MemorySetting s) {
    const FakePlan *p = (const FakePlan *)ctx;
    if (s.B < 1 || s.recompute < 0 || s.recompute > MEMORY_MAX_RECOMPUTE || s.ranks < 1 || s.ranks > 8 ||
        s.zero_stage < 0 || s.zero_stage > 3 || s.T != g_plan_now.T || s.total_batch != g_plan_now.total_batch)
        g_plan_misuse = 1;
    // never fewer ranks, never below the stage of a run where it means something (several
    // ranks, or -z 3 on one); -z 3 on one rank only as the run's own or its switch
    if (s.ranks < g_plan_now.ranks ||
        ((g_plan_now.ranks > 1 || g_plan_now.zero_stage == 3) && s.zero_stage < g_plan_now.zero_stage) ||
        (s.ranks == 1 && s.zero_stage == 3 && g_plan_now.zero_stage != 3 && !host_params_switch(s)))
        g_plan_misuse = 1;
    // the moments: 0 or 1; a change only from fp32 to bf16, and only at the run's ranks and
    // ZeRO stage (the ZeRO lines keep the run's moments)
    if ((s.moments_bf16 != 0 && s.moments_bf16 != 1) ||
        (s.moments_bf16 != g_plan_now.moments_bf16 &&
         (g_plan_now.moments_bf16 || s.ranks != g_plan_now.ranks || s.zero_stage != g_plan_now.zero_stage)))
        g_plan_misuse = 1;
    // offload likewise: a run's own 0, 1 or 2, a change only from 0 to the suggested mode, at the
    // run's ranks, stage and moments, or to it with the one-rank -z 3 switch
    if ((s.offload != 0 && s.offload != 1 && s.offload != MEMORY_OFFLOAD_SUGGESTED) ||
        (s.offload != g_plan_now.offload && !host_params_switch(s) &&
         (g_plan_now.offload || s.offload != MEMORY_OFFLOAD_SUGGESTED || s.ranks != g_plan_now.ranks ||
          s.zero_stage != g_plan_now.zero_stage || s.moments_bf16 != g_plan_now.moments_bf16)))
        g_plan_misuse = 1;
    for (int k = 0; k < 4; k++)
        if ((p->impossible >> k & 1) && s.ranks == 1 << k) return SIZE_MAX;
    if (s.recompute < 0 || s.recompute > MEMORY_MAX_RECOMPUTE) return SIZE_MAX;  // act[] has no such level
    size_t opt = s.offload ? 0 : opt_bytes(p, s.moments_bf16 != 0);
    if (s.ranks > 1 && s.zero_stage >= 1) opt /= (size_t)s.ranks;
    size_t grad = s.ranks > 1 && s.zero_stage >= 2 ? p->grad / (size_t)s.ranks : p->grad;
    size_t param = p->param;
    if (s.zero_stage == 3 && s.ranks > 1) param /= (size_t)s.ranks;
    if (s.zero_stage == 3 && s.ranks == 1 && s.offload == MEMORY_OFFLOAD_SUGGESTED) param /= 8;
    return p->fixed + param + opt + grad + (size_t)s.B * p->act[s.recompute];
}

// the fake plan p as a search's planner: the device alone
#define FAKE_PLANNER(p) ((MemoryPlanner){fake_plan, NULL, (p), 0, NULL})

// whether s fits, computed here without the header: a plan within the budget and a whole
// number of micro-steps
static int fits(const FakePlan *p, MemorySetting s, size_t budget) {
    size_t need = fake_plan(p, s);
    return s.total_batch % ((long)s.B * s.T * s.ranks) == 0 && need != SIZE_MAX && need <= budget;
}

// One parsed suggestion line, "  <flags> (<n> micro-steps per step[ on each rank]): X.XX GiB[ per GPU]"
typedef struct {
    MemorySetting s;
    char text[256];
} Line;

// Parses the flags of one line on top of now; returns 0 (with the reason in *why) when the
// line is not in the documented form (flags in the order --optimizer-state, --offload, -z, -r, -b;
// -z with its ranks and mpirun on several ranks, alone on one), names a flag at now's value, or
// states a wrong micro-step count or need.
static int parse_line(const char *line, MemorySetting now, const FakePlan *p, MemorySetting *s, const char **why) {
    *s = now;
    const char *q = line;
    int n = -1, a, b, c;
    if (strncmp(q, "  ", 2)) return *why = "no indent", 0;
    q += 2;
    int o = 0, off = 0, z = 0, r = 0, bb = 0;
    static const char bf16_flag[] = "--optimizer-state bf16";
    if (!strncmp(q, bf16_flag, strlen(bf16_flag))) {
        q += strlen(bf16_flag);
        if (*q != ':' && strncmp(q, " -", 2)) return *why = "bad --optimizer-state text", 0;
        s->moments_bf16 = 1;
        o = 1;
        if (!strncmp(q, " -", 2)) q++;
    }
    static const char offload_flag[] = "--offload 2";
    if (!strncmp(q, offload_flag, strlen(offload_flag))) {
        q += strlen(offload_flag);
        if (*q != ':' && strncmp(q, " -", 2)) return *why = "bad --offload text", 0;
        s->offload = MEMORY_OFFLOAD_SUGGESTED;
        off = 1;
        if (!strncmp(q, " -", 2)) q++;
    }
    if (!strncmp(q, "-z ", 3)) {
        if (sscanf(q, "-z %d over %d ranks (mpirun -np %d)%n", &a, &b, &c, &n) == 3 && n >= 0) {
            if (b != c || b < 2) return *why = "bad -z over ranks text", 0;
        } else {  // one rank: the stage alone, followed by the next flag or the need
            n = -1;
            if (sscanf(q, "-z %d%n", &a, &n) != 1 || n < 0 || (q[n] != ':' && strncmp(q + n, " -", 2)))
                return *why = "bad -z text", 0;
            if (now.ranks != 1) return *why = "-z without its ranks on several ranks", 0;
            b = 1;
        }
        s->zero_stage = a;
        s->ranks = b;
        q += n;
        z = 1;
        if (!strncmp(q, " -", 2)) q++;
    }
    n = -1;
    if (!strncmp(q, "-r ", 3)) {
        if (sscanf(q, "-r %d%n", &a, &n) != 1 || n < 0) return *why = "bad -r text", 0;
        s->recompute = a;
        q += n;
        r = 1;
        if (!strncmp(q, " -", 2)) q++;
    }
    n = -1;
    if (!strncmp(q, "-b ", 3)) {
        if (sscanf(q, "-b %d%n", &a, &n) != 1 || n < 0) return *why = "bad -b text", 0;
        s->B = a;
        q += n;
        bb = 1;
    }
    // a flag is named only when it changes
    if (o && s->moments_bf16 == now.moments_bf16) return *why = "--optimizer-state bf16 at now's moments", 0;
    if (off && s->offload == now.offload) return *why = "--offload 2 in a run with offload", 0;
    if (z && s->ranks == now.ranks && s->zero_stage == now.zero_stage) return *why = "-z at now's setting", 0;
    if (r && s->recompute == now.recompute) return *why = "-r at now's level", 0;
    if (bb && s->B == now.B) return *why = "-b at now's B", 0;
    if (!o && !off && !z && !r && !bb) return *why = "no flags", 0;
    if (s->B < 1 || s->ranks < 1 || s->recompute < 0 || s->recompute > MEMORY_MAX_RECOMPUTE) return *why = "range", 0;
    // the micro-steps per step, stated when B or the ranks change
    if (s->B != now.B || s->ranks != now.ranks) {
        long m;
        n = -1;
        if (sscanf(q, " (%ld micro-steps per step%n", &m, &n) != 1 || n < 0) return *why = "no micro-steps", 0;
        q += n;
        const char *tail = s->ranks > 1 ? " on each rank)" : ")";
        if (strncmp(q, tail, strlen(tail))) return *why = "bad micro-steps tail", 0;
        q += strlen(tail);
        if (m != s->total_batch / ((long)s->B * s->T * s->ranks)) return *why = "wrong micro-steps count", 0;
    }
    // the need, as gib_text writes it, "per GPU" on several ranks
    char want[64], g[32];
    snprintf(want, sizeof want, ": %s%s", gib_text(g, sizeof g, fake_plan(p, *s)), s->ranks > 1 ? " per GPU" : "");
    if (strcmp(q, want)) return *why = "wrong need text", 0;
    return 1;
}

// Splits msg into lines and parses each; returns the count, -1 when a line is malformed.
static int parse_msg(const char *msg, MemorySetting now, const FakePlan *p, Line *out, char *err, size_t cap) {
    int count = 0;
    if (!msg[0]) return 0;
    if (msg[0] != '\n') return snprintf(err, cap, "does not start with a newline"), -1;
    const char *q = msg + 1;
    while (*q) {
        const char *e = strchr(q, '\n');
        size_t len = e ? (size_t)(e - q) : strlen(q);
        if (count == MAX_LINES || len >= sizeof out[0].text) return snprintf(err, cap, "too many or long lines"), -1;
        memcpy(out[count].text, q, len);
        out[count].text[len] = 0;
        const char *why;
        if (!parse_line(out[count].text, now, p, &out[count].s, &why))
            return snprintf(err, cap, "%s: '%s'", why, out[count].text), -1;
        count++;
        q += len + (e ? 1 : 0);
    }
    return count;
}

static int same(MemorySetting a, MemorySetting b) {
    return a.B == b.B && a.recompute == b.recompute && a.ranks == b.ranks && a.zero_stage == b.zero_stage &&
           a.moments_bf16 == b.moments_bf16 && a.offload == b.offload;
}

static MemorySetting with_offload(MemorySetting s, int offload) {
    s.offload = offload;
    return s;
}

// The largest B of the lines out[0..n) at recompute level r or below (0: none)
static int covered(const MemorySetting *out, int n, int r) {
    int c = 0;
    for (int i = 0; i < n; i++)
        if (out[i].recompute <= r && out[i].B > c) c = out[i].B;
    return c;
}

// The expected suggestions by brute force over every setting: first, at each recompute level
// from now's up, the largest B <= now.B that fits with now's ranks, stage, moments and offload,
// listed only when it beats every lower level (more recomputation is only worth a larger
// micro-batch), up to the level where now's own B fits; then, for a run with fp32 moments, bf16
// moments with now's ranks, stage and offload at the lowest recompute level from now's up where
// a B above every line before at that level or below fits, with the largest B there; then, for
// a run without offload, offload with now's ranks, stage and moments, chosen the same way
// (against the bf16 line too); then, for a one-rank run below stage 3, -z 3 with offload 2 on
// one rank and now's moments, chosen the same way (against all the lines before); then ZeRO-1,
// 2 and 3 (not below now's stage where it has one: several ranks, or -z 3 on one) with now's
// moments and offload, each at the fewest ranks where some (B, r) fits (now's own ranks when it
// has several and the stage is above its own, then doubling up to 8), with the least
// recomputation that fits there and the largest B at it.
// Returns the count of local lines in *n_local, of bf16 lines (0 or 1) in *n_lean, of offload
// lines (0 or 1) in *n_off and of one-rank -z 3 lines (0 or 1) in *n_host; the ZeRO lines follow.
static int expected(const FakePlan *p, MemorySetting now, size_t budget, MemorySetting *out, int *n_local,
                    int *n_lean, int *n_off, int *n_host) {
    // [moments][offload][log2 ranks][stage][r]: the largest B that fits, 0: none; offload index 1
    // is now's offload if it has one, else the suggested mode; index 2 the suggested mode
    static int best[2][3][4][4][MEMORY_MAX_RECOMPUTE + 1];
    const int offload_of[3] = {0, now.offload ? now.offload : MEMORY_OFFLOAD_SUGGESTED, MEMORY_OFFLOAD_SUGGESTED};
    for (int mo = 0; mo < 2; mo++)
        for (int of = 0; of < 3; of++)
            for (int k = 0; k < 4; k++)
                for (int st = 0; st < 4; st++)
                    for (int r = 0; r <= MEMORY_MAX_RECOMPUTE; r++) {
                        best[mo][of][k][st][r] = 0;
                        for (int B = 1; B <= now.B; B++)
                            if (fits(p, with_offload(setting(B, r, 1 << k, st, now.total_batch, now.T, mo),
                                                     offload_of[of]),
                                     budget))
                                best[mo][of][k][st][r] = B;
                    }
    int n = 0, k_now = now.ranks == 1 ? 0 : now.ranks == 2 ? 1 : now.ranks == 4 ? 2 : 3;
    int mo_now = now.moments_bf16, of_now = now.offload != 0, st_now = now.zero_stage;
    for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE; r++) {
        int b = best[mo_now][of_now][k_now][st_now][r];
        if (b > covered(out, n, r))
            out[n++] = with_offload(setting(b, r, now.ranks, st_now, now.total_batch, now.T, mo_now), now.offload);
        if (b == now.B) break;
    }
    *n_local = n;
    *n_lean = *n_off = *n_host = 0;
    if (!now.moments_bf16) {
        int r = now.recompute;
        while (r <= MEMORY_MAX_RECOMPUTE && best[1][of_now][k_now][st_now][r] <= covered(out, n, r)) r++;
        if (r <= MEMORY_MAX_RECOMPUTE) {
            out[n++] = with_offload(setting(best[1][of_now][k_now][st_now][r], r, now.ranks, st_now, now.total_batch,
                                            now.T, 1),
                                    now.offload);
            *n_lean = 1;
        }
    }
    if (!now.offload) {
        int r = now.recompute;
        while (r <= MEMORY_MAX_RECOMPUTE && best[mo_now][1][k_now][st_now][r] <= covered(out, n, r)) r++;
        if (r <= MEMORY_MAX_RECOMPUTE) {
            out[n++] = with_offload(
                setting(best[mo_now][1][k_now][st_now][r], r, now.ranks, st_now, now.total_batch, now.T, mo_now),
                MEMORY_OFFLOAD_SUGGESTED);
            *n_off = 1;
        }
    }
    if (now.ranks == 1 && st_now < 3) {  // the largest B at any level from now's (the lowest such level)
        int rb = now.recompute;
        for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE; r++)
            if (best[mo_now][2][0][3][r] > best[mo_now][2][0][3][rb]) rb = r;
        int b = best[mo_now][2][0][3][rb];
        if (b > 0 && b > covered(out, n, rb)) {
            out[n++] = with_offload(setting(b, rb, 1, 3, now.total_batch, now.T, mo_now), MEMORY_OFFLOAD_SUGGESTED);
            *n_host = 1;
        }
    }
    for (int st = now.ranks > 1 || st_now == 3 ? (st_now > 1 ? st_now : 1) : 1; st <= 3; st++) {
        int found = 0;
        for (int k = k_now > 0 ? k_now : 1; k <= 3 && !found; k++)
            for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE && !found; r++)
                if (!(k == k_now && st <= st_now) && best[mo_now][of_now][k][st][r]) {
                    out[n++] = with_offload(
                        setting(best[mo_now][of_now][k][st][r], r, 1 << k, st, now.total_batch, now.T, mo_now),
                        now.offload);
                    found = 1;
                }
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// memory_budget_check in a child: the settings it runs with

static FakePlan g_check_plan;
static MemorySetting g_check_now;
static size_t g_check_budget;
static const char *g_check_breakdown = "weights 2.00 GiB, optimizer 12.00 GiB, activations";

// stdout goes to the captured stderr, so that the "memory plan:" line can be read back
static void check_child(const char *verbose) {
    dup2(2, 1);
    g_plan_now = g_check_now;
    memory_budget_check(g_check_budget, g_check_now, &FAKE_PLANNER(&g_check_plan), g_check_breakdown,
                        verbose[0] == '1');
    fflush(stdout);
}

// the same plan held against a GPU's free memory instead of a budget
static void free_memory_child(const char *verbose) {
    dup2(2, 1);
    g_plan_now = g_check_now;
    memory_limit_check("GPU 0 (test card) has 24.00 GiB free", g_check_budget, g_check_now,
                       &FAKE_PLANNER(&g_check_plan), g_check_breakdown, verbose[0] == '1');
    fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// hand-written cases

// 2 GiB of parameters (nothing else fixed), 12 GiB optimizer (8 GiB with bf16 moments: 4 master
// weights, 2 + 2 moments), 4 GiB gradients, activations 1/2, 1/4, 1/8, 1/8 GiB per sequence of the
// batch at recompute levels 0-3 (3 saves nothing more here, so the exact texts below have no -r 3
// line);
// with --offload 2 the 12 GiB of optimizer state leave the device (6 GiB before activations):
// its line comes wherever that gives a larger B than every line before it; -z 3 --offload 2 on
// one GPU leaves 0.25 GiB of the parameters (4.25 GiB before activations) and is listed at its
// largest B, at the lowest level that gives it;
// a single GPU at B 64, T 1024, 512 Ki tokens per step, fp32 moments. Before activations: 18 GiB
// (14 with bf16 moments) on one GPU; over 2 ranks ZeRO-1 12 GiB, ZeRO-2 10 GiB, ZeRO-3 9 GiB.
static const FakePlan hand_plan = {0, 2 * GIB, 12 * GIB, 4 * GIB, {GIB / 2, GIB / 4, GIB / 8, GIB / 8}, 0};
static MemorySetting hand_now(void) { return setting(64, 0, 1, 0, 64L * 1024 * 8, 1024, 0); }

// runs memory_suggestions and checks its count and exact text, and that the plan was asked
// only about settings of the search
static void expect_suggestions(const char *what, const FakePlan *p, MemorySetting now, size_t budget,
                               const char *want, int want_n) {
    char msg[2048];
    g_plan_now = now;
    g_plan_misuse = 0;
    int n = memory_suggestions(budget, now, &FAKE_PLANNER(p), msg, sizeof msg);
    CHECK(n == want_n, "%s: %d suggestions, expected %d:%s", what, n, want_n, msg);
    CHECK(strcmp(msg, want) == 0, "%s: got\n%s\n    expected\n%s", what, msg, want);
    CHECK(!g_plan_misuse, "%s: the plan was asked about a setting outside the search", what);
}

static void test_hand_local_and_zero(void) {
    // 24 GiB: 18 GiB before activations leaves 6 for B at 1/2, 1/4, 1/8 GiB each: 12, 24, 48,
    // the largest divisors of 512 below them are 8, 16, 32; bf16 moments (14 GiB leaves 10)
    // give B 16 at -r 0, above -r 0's 8: listed there; --offload 2 (6 GiB before activations)
    // B 32 at -r 0, above the 16 of the lines at -r 0; -z 3 --offload 2 (4.25 GiB): its largest B,
    // the run's own 64 (no -b), first at -r 1 (B 79); ZeRO-1 over 2
    // ranks leaves 12 GiB, B 24 -> 16 (B must divide 256); ZeRO-2 leaves 14 GiB, B 28 -> 16;
    // ZeRO-3 leaves 15, B 30 -> 16
    expect_suggestions("24 GiB", &hand_plan, hand_now(), 24 * GIB,
                       "\n  -b 8 (64 micro-steps per step): 22.00 GiB"
                       "\n  -r 1 -b 16 (32 micro-steps per step): 22.00 GiB"
                       "\n  -r 2 -b 32 (16 micro-steps per step): 22.00 GiB"
                       "\n  --optimizer-state bf16 -b 16 (32 micro-steps per step): 22.00 GiB"
                       "\n  --offload 2 -b 32 (16 micro-steps per step): 22.00 GiB"
                       "\n  --offload 2 -z 3 -r 1: 20.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 20.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 18.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 17.00 GiB "
                       "per GPU",
                       9);
    // 16 GiB: nothing fits on one GPU with fp32 moments (18 GiB before activations); with bf16
    // moments 14 GiB leaves 2, B 4 at -r 0; ZeRO-1 over 2 ranks (fp32 moments, as the run) leaves
    // 4 GiB, B 8 at exactly 16 GiB (the budget itself fits); ZeRO-2 leaves 6, B 12 -> 8; -z 3
    // --offload 2 on one GPU leaves 11.75: its largest B, the run's 64, first at -r 2 (94);
    // ZeRO-3 leaves 7, B 14 -> 8
    expect_suggestions("16 GiB", &hand_plan, hand_now(), 16 * GIB,
                       "\n  --optimizer-state bf16 -b 4 (128 micro-steps per step): 16.00 GiB"
                       "\n  --offload 2 -b 16 (32 micro-steps per step): 14.00 GiB"
                       "\n  --offload 2 -z 3 -r 2: 12.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 16.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 14.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 13.00 GiB "
                       "per GPU",
                       6);
}

static void test_hand_optimizer_state(void) {
    // 18.5 GiB: fp32 moments leave 0.5 GiB, B 1, 2, 4 at -r 0, 1, 2; bf16 moments leave 4.5 at
    // -r 0, B 9 -> 8, larger than 4: listed after the local lines, at 18 GiB; -z 3 --offload 2
    // leaves 14.25: its largest B, 64, first at -r 2; ZeRO-3 leaves 9.5, B 19 -> 16
    expect_suggestions("18.5 GiB, bf16 beats -r 2", &hand_plan, hand_now(), 18 * GIB + GIB / 2,
                       "\n  -b 1 (512 micro-steps per step): 18.50 GiB"
                       "\n  -r 1 -b 2 (256 micro-steps per step): 18.50 GiB"
                       "\n  -r 2 -b 4 (128 micro-steps per step): 18.50 GiB"
                       "\n  --optimizer-state bf16 -b 8 (64 micro-steps per step): 18.00 GiB"
                       "\n  --offload 2 -b 16 (32 micro-steps per step): 14.00 GiB"
                       "\n  --offload 2 -z 3 -r 2: 12.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 16.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 18.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 17.00 GiB "
                       "per GPU",
                       9);
    // 19 GiB: fp32 moments leave 1 GiB, B 2, 4, 8; bf16 moments leave 5: at -r 0 B 10 -> 8, the
    // B of -r 2 with less recomputation: listed at -r 0 (not at -r 1's larger 16); --offload 2
    // leaves 13 at -r 0, B 26 -> 16, above the bf16 line's 8; -z 3 --offload 2 leaves 14.75: its
    // largest B, 64, first at -r 2 (B 118); ZeRO-3 leaves 10, B 20 -> 16
    expect_suggestions("19 GiB, bf16 at -r 0 as -r 2", &hand_plan, hand_now(), 19 * GIB,
                       "\n  -b 2 (256 micro-steps per step): 19.00 GiB"
                       "\n  -r 1 -b 4 (128 micro-steps per step): 19.00 GiB"
                       "\n  -r 2 -b 8 (64 micro-steps per step): 19.00 GiB"
                       "\n  --optimizer-state bf16 -b 8 (64 micro-steps per step): 18.00 GiB"
                       "\n  --offload 2 -b 16 (32 micro-steps per step): 14.00 GiB"
                       "\n  --offload 2 -z 3 -r 2: 12.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 16.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 18.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 17.00 GiB "
                       "per GPU",
                       9);
    // 14.25 GiB: nothing with fp32 moments; with bf16 no B fits at -r 0 (14.5 for B 1), B 1 at
    // -r 1: the lowest level where one fits, with the -r change; -z 3 --offload 2 leaves 10: its
    // largest B, 64, first at -r 2; ZeRO-3 leaves 5.25, B 10 -> 8
    expect_suggestions("14.25 GiB, bf16 at -r 1", &hand_plan, hand_now(), 14 * GIB + GIB / 4,
                       "\n  --optimizer-state bf16 -r 1 -b 1 (512 micro-steps per step): 14.25 GiB"
                       "\n  --offload 2 -b 16 (32 micro-steps per step): 14.00 GiB"
                       "\n  --offload 2 -z 3 -r 2: 12.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 4 (64 micro-steps per step on each rank): 14.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 14.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 13.00 GiB "
                       "per GPU",
                       6);
    // a run at B 8 (32 Ki tokens per step) needs 22 GiB; with bf16 moments its own B and level
    // fit in 18: the flag alone, with no micro-step count (B and the ranks are kept); --offload 2
    // and -z 3 --offload 2 fit no larger B than the run's own
    MemorySetting now = setting(8, 0, 1, 0, 8L * 1024 * 4, 1024, 0);
    expect_suggestions("18 GiB, the flag alone", &hand_plan, now, 18 * GIB,
                       "\n  --optimizer-state bf16: 18.00 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) (2 micro-steps per step on each rank): 16.00 GiB per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) (2 micro-steps per step on each rank): 14.00 GiB per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) (2 micro-steps per step on each rank): 13.00 GiB per GPU",
                       4);
    // a run with bf16 moments already (46 GiB): the local lines and ZeRO with its bf16 moments
    // (14 GiB before activations leaves 2, B 4, 8, 16; --offload 2 leaves 10 at -r 0, B 16; -z 3
    // --offload 2 leaves 11.75, its largest B 64 first at -r 2; ZeRO-1 over 2 ranks
    // 2 + 4 + 4 leaves 6, B 12 -> 8; ZeRO-2 2 + 4 + 2 leaves 8, B 16; ZeRO-3 1 + 4 + 2 leaves 9,
    // B 18 -> 16), never --optimizer-state
    now = hand_now();
    now.moments_bf16 = 1;
    expect_suggestions("16 GiB, the run in bf16", &hand_plan, now, 16 * GIB,
                       "\n  -b 4 (128 micro-steps per step): 16.00 GiB"
                       "\n  -r 1 -b 8 (64 micro-steps per step): 16.00 GiB"
                       "\n  -r 2 -b 16 (32 micro-steps per step): 16.00 GiB"
                       "\n  --offload 2 -b 16 (32 micro-steps per step): 14.00 GiB"
                       "\n  --offload 2 -z 3 -r 2: 12.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 14.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 16.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 15.00 GiB "
                       "per GPU",
                       8);
    // ... and at 13 GiB, below its 14 before activations: offload and ZeRO, with its bf16 moments
    // (-z 3 --offload 2 leaves 8.75: its largest B, 64 (the run's), first at -r 2; ZeRO-3 leaves
    // 6, B 12 -> 8)
    expect_suggestions("13 GiB, the run in bf16", &hand_plan, now, 13 * GIB,
                       "\n  --offload 2 -b 8 (64 micro-steps per step): 10.00 GiB"
                       "\n  --offload 2 -z 3 -r 2: 12.25 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 4 (64 micro-steps per step on each rank): 12.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 12.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 11.00 GiB "
                       "per GPU",
                       5);
    // 2 ranks at ZeRO-1 (12 GiB before activations; 10 with bf16 moments, sharded too), 12.25
    // GiB: fp32 B 0, 1, 2 at -r 0, 1, 2; bf16 leaves 2.25 at -r 0, B 4 (B divides 256): listed,
    // at the run's ranks and stage; ZeRO-1 over 4 ranks (9 GiB) B 6 -> 4, ZeRO-2 over 2 (10) B 4,
    // ZeRO-3 over 2 (9) B 6 -> 4; no one-rank -z 3 for a run on several ranks
    now = setting(64, 0, 2, 1, 64L * 1024 * 2 * 4, 1024, 0);
    expect_suggestions("2 ranks ZeRO-1, 12.25 GiB", &hand_plan, now, 12 * GIB + GIB / 4,
                       "\n  -r 1 -b 1 (256 micro-steps per step on each rank): 12.25 GiB per GPU"
                       "\n  -r 2 -b 2 (128 micro-steps per step on each rank): 12.25 GiB per GPU"
                       "\n  --optimizer-state bf16 -b 4 (64 micro-steps per step on each rank): 12.00 GiB per GPU"
                       "\n  --offload 2 -b 8 (32 micro-steps per step on each rank): 10.00 GiB per GPU"
                       "\n  -z 1 over 4 ranks (mpirun -np 4) -b 4 (32 micro-steps per step on each rank): 11.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 4 (64 micro-steps per step on each rank): 12.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 4 (64 micro-steps per step on each rank): 11.00 GiB "
                       "per GPU",
                       7);
}

static void test_hand_recompute_not_worth_it(void) {
    // level 1 saves nothing over level 0, so it gives no larger B and is not listed
    FakePlan p = hand_plan;
    p.act[1] = p.act[0];
    p.opt = 0;  // keeps ZeRO out of the way: it fits as well as the local settings do
    p.grad = 0;
    // (-z 3 --offload 2 leaves 7.75: B 15 -> 8 at -r 0 and 1, 32 at -r 2, none larger; ZeRO-3 over
    // 2 ranks leaves 7, B 14 -> 8)
    expect_suggestions("r1 = r0", &p, hand_now(), 2 * GIB + 6 * GIB,
                       "\n  -b 8 (64 micro-steps per step): 6.00 GiB"
                       "\n  -r 2 -b 32 (16 micro-steps per step): 6.00 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 6.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 6.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 5.00 GiB "
                       "per GPU",
                       5);
    // a run at -r 1 whose B fits at -r 2: a smaller B at -r 1, then the recompute change alone,
    // then bf16 moments alone (14 GiB before activations, 8 for B 32 at -r 1); over 2 ranks the
    // same B fits (12 GiB before activations); --offload 2 and -z 3 --offload 2 fit no larger B
    MemorySetting now = hand_now();
    now.B = 32;
    now.recompute = 1;
    now.total_batch = 32L * 1024 * 4;
    expect_suggestions("-r 2 alone", &hand_plan, now, 18 * GIB + 4 * GIB,
                       "\n  -b 16 (8 micro-steps per step): 22.00 GiB\n  -r 2: 22.00 GiB"
                       "\n  --optimizer-state bf16: 22.00 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) (2 micro-steps per step on each rank): 20.00 GiB per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) (2 micro-steps per step on each rank): 18.00 GiB per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) (2 micro-steps per step on each rank): 17.00 GiB per GPU",
                       6);
}

static void test_hand_impossible_and_nothing(void) {
    // 8 GiB: ZeRO-1 fits first over 8 ranks (2 + 1.5 + 4, B 1 at 1/2), ZeRO-2 over 4 already
    // (2 + 3 + 1, B 4), ZeRO-3 too (0.5 + 3 + 1, B 7 -> 4): each stage at its own fewest ranks;
    // -z 3 --offload 2 on one GPU leaves 3.75, its largest B at -r 2: 30 -> 16 (-r 3 the same)
    expect_suggestions("8 GiB", &hand_plan, hand_now(), 8 * GIB,
                       "\n  --offload 2 -b 4 (128 micro-steps per step): 8.00 GiB"
                       "\n  --offload 2 -z 3 -r 2 -b 16 (32 micro-steps per step): 6.25 GiB"
                       "\n  -z 1 over 8 ranks (mpirun -np 8) -b 1 (64 micro-steps per step on each rank): 8.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 4 ranks (mpirun -np 4) -b 4 (32 micro-steps per step on each rank): 8.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 4 ranks (mpirun -np 4) -b 4 (32 micro-steps per step on each rank): 6.50 GiB "
                       "per GPU",
                       5);
    // 5.5 GiB: -z 3 --offload 2 on one GPU (4.25 GiB before activations, B 8 at -r 2), ZeRO-2 only over 8
    // ranks (4 GiB, B 3 -> 2), ZeRO-3 over 4 (4.5 GiB, B 2) ...
    expect_suggestions("5.5 GiB", &hand_plan, hand_now(), 5 * GIB + GIB / 2,
                       "\n  --offload 2 -z 3 -r 2 -b 8 (64 micro-steps per step): 5.25 GiB"
                       "\n  -z 2 over 8 ranks (mpirun -np 8) -b 2 (32 micro-steps per step on each rank): 5.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 4 ranks (mpirun -np 4) -b 2 (64 micro-steps per step on each rank): 5.50 GiB "
                       "per GPU",
                       3);
    // ... when the plan marks 8 ranks impossible, ZeRO-2 is not suggested ...
    FakePlan p = hand_plan;
    p.impossible = 1u << 3;
    expect_suggestions("8 ranks impossible", &p, hand_now(), 5 * GIB + GIB / 2,
                       "\n  --offload 2 -z 3 -r 2 -b 8 (64 micro-steps per step): 5.25 GiB"
                       "\n  -z 3 over 4 ranks (mpirun -np 4) -b 2 (64 micro-steps per step on each rank): 5.50 GiB "
                       "per GPU",
                       2);
    // ... and with 2, 4 and 8 ranks impossible only the one GPU with its parameters in host memory is
    p.impossible = 1u << 1 | 1u << 2 | 1u << 3;
    expect_suggestions("only -z 3 --offload 2", &p, hand_now(), 5 * GIB + GIB / 2,
                       "\n  --offload 2 -z 3 -r 2 -b 8 (64 micro-steps per step): 5.25 GiB", 1);
    // below 2.25 GiB (ZeRO-3 over 8 ranks before activations) nothing fits anywhere
    expect_suggestions("1 GiB", &hand_plan, hand_now(), GIB, "", 0);
}

static void test_hand_zero3(void) {
    // a run that offloads already (38 GiB), 5.5 GiB: nothing at its own stage (6 GiB before
    // activations, the optimizer state being off the device already); -z 3 alone on one GPU
    // (4.25, B 8 at -r 2); ZeRO-1 over any ranks keeps 6; ZeRO-2 over 2 ranks 4, B 3 -> 2; ZeRO-3 over 2
    // ranks 3, B 5 -> 4
    MemorySetting now = hand_now();
    now.offload = MEMORY_OFFLOAD_SUGGESTED;
    expect_suggestions("offload already, 5.5 GiB", &hand_plan, now, 5 * GIB + GIB / 2,
                       "\n  -z 3 -r 2 -b 8 (64 micro-steps per step): 5.25 GiB"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 2 (128 micro-steps per step on each rank): 5.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 4 (64 micro-steps per step on each rank): 5.00 GiB "
                       "per GPU",
                       3);
    // --offload 1 (the optimizer state mapped, not staged) to -z 3 --offload 2: both flags
    now.offload = 1;
    expect_suggestions("offload 1, 5.5 GiB", &hand_plan, now, 5 * GIB + GIB / 2,
                       "\n  --offload 2 -z 3 -r 2 -b 8 (64 micro-steps per step): 5.25 GiB"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 2 (128 micro-steps per step on each rank): 5.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 4 (64 micro-steps per step on each rank): 5.00 GiB "
                       "per GPU",
                       3);
    // a run at -z 3 --offload 2 on one GPU (36.25 GiB), 8 GiB: its own levels (3.75 GiB for
    // activations, B 7 -> 4, 15 -> 8, 30 -> 16), never a lower stage; over 2 ranks -z 3 keeps
    // the parameters on the device, 1 + 2 GiB, B 10 -> 8
    now.zero_stage = 3;
    now.offload = MEMORY_OFFLOAD_SUGGESTED;
    expect_suggestions("one GPU at -z 3, 8 GiB", &hand_plan, now, 8 * GIB,
                       "\n  -b 4 (128 micro-steps per step): 6.25 GiB"
                       "\n  -r 1 -b 8 (64 micro-steps per step): 6.25 GiB"
                       "\n  -r 2 -b 16 (32 micro-steps per step): 6.25 GiB"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 7.00 GiB "
                       "per GPU",
                       4);
}

// a run with a setting -z 3 refuses (--fp8 1, --cuda-graph 1) is never offered -z 3, on one GPU
// or over ranks: the 5.5 GiB budget above, where -z 3 lines came first, now names only ZeRO-2
// The host memory of hand_plan's settings: 1 GiB of buffers, the optimizer state (12 GiB) pinned
// with offload, and the parameters (2 GiB) too with one rank's -z 3 --offload 2
static size_t fake_host(const void *ctx, MemorySetting s) {
    const FakePlan *p = (const FakePlan *)ctx;
    size_t h = GIB;
    if (s.offload) h += opt_bytes(p, s.moments_bf16 != 0);
    if (s.offload == MEMORY_OFFLOAD_SUGGESTED && s.zero_stage == 3 && s.ranks == 1) h += p->param;
    return h;
}

static void test_hand_host(void) {
    // 24 GiB as in test_hand_local_and_zero: the lines that put the state on the host name their
    // host memory (13 GiB; 15 with the parameters) and stay while the host holds them
    const char *head = "\n  -b 8 (64 micro-steps per step): 22.00 GiB"
                       "\n  -r 1 -b 16 (32 micro-steps per step): 22.00 GiB"
                       "\n  -r 2 -b 32 (16 micro-steps per step): 22.00 GiB"
                       "\n  --optimizer-state bf16 -b 16 (32 micro-steps per step): 22.00 GiB";
    const char *off = "\n  --offload 2 -b 32 (16 micro-steps per step): 22.00 GiB, and 13.00 GiB of host memory";
    const char *z3 = "\n  --offload 2 -z 3 -r 1: 20.25 GiB, and 15.00 GiB of host memory";
    const char *zero = "\n  -z 1 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 20.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 18.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 17.00 GiB "
                       "per GPU";
    const struct {
        size_t limit;
        int with_off, with_z3;
    } cases[] = {{0, 1, 1}, {64 * GIB, 1, 1}, {15 * GIB, 1, 1}, {14 * GIB, 1, 0}, {12 * GIB, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        MemoryPlanner p = {fake_plan, fake_host, &hand_plan, cases[i].limit, NULL};
        char msg[2048], want[2048];
        snprintf(want, sizeof want, "%s%s%s%s", head, cases[i].with_off ? off : "", cases[i].with_z3 ? z3 : "", zero);
        g_plan_now = hand_now();
        g_plan_misuse = 0;
        int n = memory_suggestions(24 * GIB, hand_now(), &p, msg, sizeof msg);
        CHECK(n == 7 + cases[i].with_off + cases[i].with_z3 && strcmp(msg, want) == 0,
              "host limit %zu GiB: %d lines\n%s\n    expected\n%s", cases[i].limit / GIB, n, msg, want);
        CHECK(!g_plan_misuse, "host limit %zu GiB: the plan was asked about a setting outside the search",
              cases[i].limit / GIB);
    }
}

// A speed model for the order: larger micro-batches faster, each recompute level 10% slower,
// offload 5 tokens/s slower (made up: the order is what is checked)
static double fake_speed(const void *ctx, MemorySetting s) {
    (void)ctx;
    return s.B * (1.0 - 0.1 * s.recompute) - (s.offload ? 5.0 : 0.0);
}

static void test_hand_speed_order(void) {
    // 24 GiB as in test_hand_local_and_zero, but each switch at its fastest level by
    // fake_speed: bf16 moments at -r 2 B 64 (51.2; -r 0 B 16 would be 16), --offload 2 at -r 1
    // B 64 (52.6), then -z 3 --offload 2 where nothing covers it, B 32 at -r 0 (27); then the
    // lines on one GPU fastest first, those over more ranks after them in the search's order
    MemoryPlanner p = {fake_plan, NULL, &hand_plan, 0, fake_speed};
    char msg[2048];
    g_plan_now = hand_now();
    int n = memory_suggestions(24 * GIB, hand_now(), &p, msg, sizeof msg);
    const char *want = "\n  --offload 2 -r 1: 22.00 GiB"
                       "\n  --optimizer-state bf16 -r 2: 22.00 GiB"
                       "\n  --offload 2 -z 3 -b 32 (16 micro-steps per step): 20.25 GiB"
                       "\n  -r 2 -b 32 (16 micro-steps per step): 22.00 GiB"
                       "\n  -r 1 -b 16 (32 micro-steps per step): 22.00 GiB"
                       "\n  -b 8 (64 micro-steps per step): 22.00 GiB"
                       "\n  -z 1 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 20.00 GiB "
                       "per GPU"
                       "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 18.00 GiB "
                       "per GPU"
                       "\n  -z 3 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 17.00 GiB "
                       "per GPU";
    CHECK(n == 9 && strcmp(msg, want) == 0, "24 GiB fastest first: %d lines\n%s\n    expected\n%s", n, msg, want);
    // every budget: each line fits; the lines on one GPU come first, in order of speed, and the
    // first is at least as fast as any line on one GPU that the search names without the model
    for (size_t budget = 4 * GIB; budget <= 40 * GIB; budget += GIB / 4) {
        char plain[2048], err[256];
        Line a[MAX_LINES], b[MAX_LINES];
        g_plan_now = hand_now();
        g_plan_misuse = 0;
        int na = memory_suggestions(budget, hand_now(), &FAKE_PLANNER(&hand_plan), plain, sizeof plain);
        int nb = memory_suggestions(budget, hand_now(), &p, msg, sizeof msg);
        CHECK(!g_plan_misuse, "budget %zu: the plan was asked about a setting outside the search", budget);
        int ka = parse_msg(plain, hand_now(), &hand_plan, a, err, sizeof err);
        int kb = parse_msg(msg, hand_now(), &hand_plan, b, err, sizeof err);
        CHECK(ka == na && kb == nb, "budget %zu: %d/%d and %d/%d lines parsed (%s)", budget, ka, na, kb, nb, err);
        double best_plain = 0.0, last = 1e300;
        int others = 0;
        for (int i = 0; i < ka; i++)
            if (a[i].s.ranks == 1) best_plain = fmax(best_plain, fake_speed(NULL, a[i].s));
        for (int i = 0; i < kb; i++) {
            CHECK(fits(&hand_plan, b[i].s, budget), "budget %zu: '%s' does not fit", budget, b[i].text);
            if (b[i].s.ranks > 1) {
                others = 1;
                continue;
            }
            const double v = fake_speed(NULL, b[i].s);
            CHECK(!others && v <= last, "budget %zu: '%s' out of order", budget, b[i].text);
            CHECK(i > 0 || v >= best_plain, "budget %zu: the first line '%s' (%.1f) is slower than %.1f", budget,
                  b[i].text, v, best_plain);
            last = v;
        }
    }
}

static void test_hand_no_zero3(void) {
    MemorySetting now = hand_now();
    now.no_zero3 = 1;
    char msg[2048];
    g_plan_now = now;
    g_plan_misuse = 0;
    for (size_t budget = 4 * GIB; budget <= 40 * GIB; budget += GIB / 4) {
        memory_suggestions(budget, now, &FAKE_PLANNER(&hand_plan), msg, sizeof msg);
        CHECK(!strstr(msg, "-z 3"), "budget %zu: a -z 3 line for a run that refuses it:%s", budget, msg);
    }
    memory_suggestions(5 * GIB + GIB / 2, now, &FAKE_PLANNER(&hand_plan), msg, sizeof msg);
    CHECK(strstr(msg, "-z 2 over 8 ranks") != NULL, "5.5 GiB: no ZeRO-2 line:%s", msg);
}

static void test_hand_several_ranks(void) {
    // a run on 2 ranks with ZeRO-1 is offered ZeRO-2, ZeRO-3 or more ranks, never ZeRO-1 or ZeRO-0
    // again, nor one rank
    MemorySetting now = setting(64, 0, 2, 1, 64L * 1024 * 2 * 4, 1024, 0);
    char msg[2048];
    Line lines[MAX_LINES];
    char err[256];
    int zero3 = 0;
    g_plan_now = now;
    g_plan_misuse = 0;
    for (size_t budget = 8 * GIB; budget <= 20 * GIB; budget += GIB / 4) {
        int n = memory_suggestions(budget, now, &FAKE_PLANNER(&hand_plan), msg, sizeof msg);
        int got = parse_msg(msg, now, &hand_plan, lines, err, sizeof err);
        CHECK(got == n, "budget %zu: %d lines parsed (%s), %d returned", budget, got, got < 0 ? err : "", n);
        for (int i = 0; i < got; i++) {
            MemorySetting s = lines[i].s;
            CHECK(fits(&hand_plan, s, budget), "budget %zu: '%s' does not fit", budget, lines[i].text);
            if (s.ranks == now.ranks && s.zero_stage == now.zero_stage) continue;  // a local or bf16 line
            CHECK(s.zero_stage >= 2 || (s.zero_stage == 1 && s.ranks > now.ranks),
                  "budget %zu: '%s' is not ZeRO-2, ZeRO-3 or more ranks", budget, lines[i].text);
            zero3 += s.zero_stage == 3;
            CHECK(s.moments_bf16 == now.moments_bf16, "budget %zu: '%s' changes the moments", budget, lines[i].text);
        }
    }
    CHECK(zero3 > 0, "no budget from 8 to 20 GiB got a ZeRO-3 line");
    CHECK(!g_plan_misuse, "the plan was asked about a setting outside the search");
}

static void test_budget_check(void) {
    g_check_plan = hand_plan;
    g_check_now = hand_now();
    char *err;
    // fits: returns, and says so when verbose (hand_now needs 18 + 32 GiB)
    g_check_budget = 50 * GIB;
    int rc = run_child(check_child, "1", &err);
    CHECK(rc == 0, "a plan that fits returns: exit status %d, %s", rc, err);
    CHECK(strstr(err, "memory plan: 50.00 GiB of --max-device-memory 50.00 GiB (weights 2.00 GiB, optimizer") != NULL,
          "the plan line: '%s'", err);
    free(err);
    // the run's own moments reach the plan: with bf16 moments it needs 14 + 32 GiB
    g_check_now.moments_bf16 = 1;
    g_check_budget = 46 * GIB;
    rc = run_child(check_child, "1", &err);
    CHECK(rc == 0 && strstr(err, "memory plan: 46.00 GiB of --max-device-memory 46.00 GiB") != NULL,
          "a run with bf16 moments at 46 GiB: exit status %d, '%s'", rc, err);
    free(err);
    g_check_now.moments_bf16 = 0;
    g_check_budget = 64 * GIB;
    rc = run_child(check_child, "0", &err);
    CHECK(rc == 0 && err[0] == 0, "quiet when not verbose: exit status %d, '%s'", rc, err);
    free(err);
    // does not fit: the budget, the need, the breakdown, then what fits
    g_check_budget = 24 * GIB;
    expect_failure("24 GiB", check_child, "1", "--max-device-memory 24.00 GiB", "needs 50.00 GiB on the device",
                   g_check_breakdown);
    expect_failure("24 GiB, what fits", check_child, "1", "settings that fit:",
                   "\n  -r 2 -b 32 (16 micro-steps per step): 22.00 GiB",
                   "\n  -z 2 over 2 ranks (mpirun -np 2) -b 16 (16 micro-steps per step on each rank): 18.00 GiB");
    // 16 GiB: bf16 moments first, then ZeRO with the run's fp32 moments
    g_check_budget = 16 * GIB;
    expect_failure("16 GiB, what fits", check_child, "1", "settings that fit:",
                   "\n  --optimizer-state bf16 -b 4 (128 micro-steps per step): 16.00 GiB"
                   "\n  --offload 2 -b 16 (32 micro-steps per step): 14.00 GiB"
                   "\n  --offload 2 -z 3 -r 2: 12.25 GiB\n  -z 1 over 2 ranks",
                   "\n  -z 2 over 2 ranks (mpirun -np 2) -b 8 (32 micro-steps per step on each rank): 14.00 GiB");
    // one byte short of the exact need
    g_check_budget = 50 * GIB - 1;
    expect_failure("one byte short", check_child, "1", "needs 50.00 GiB", "settings that fit:", NULL);
    // nothing fits
    g_check_budget = GIB;
    expect_failure("1 GiB", check_child, "0", "--max-device-memory 1.00 GiB", "nothing fits with a smaller -b",
                   "combine them, or use a smaller model or more device memory");
}

// the GPU's free memory as the limit: the same search and message, under the GPU's name; and a
// budget over the card's size refused by name, one at or under it (or none) let through
static void test_device_limits(void) {
    g_check_plan = hand_plan;
    g_check_now = hand_now();
    g_check_budget = 24 * GIB;
    expect_failure("24 GiB free", free_memory_child, "0",
                   "GPU 0 (test card) has 24.00 GiB free: this run needs 50.00 GiB", "settings that fit:", "\n  -r 2 -b 32 (16 micro-steps per step): 22.00 GiB");
    g_check_budget = 50 * GIB;
    char *err;
    int rc = run_child(free_memory_child, "1", &err);
    CHECK(rc == 0 && strstr(err, "memory plan: 50.00 GiB of GPU 0 (test card) has 24.00 GiB free") != NULL,
          "a plan that fits the free memory returns: exit status %d, '%s'", rc, err);
    free(err);
    char buf[512];
    const size_t card = (size_t)(139.8 * GIB);
    CHECK(memory_budget_vs_card(0, card, "GPU 0 (test card)", buf, sizeof buf) == NULL, "no budget refused");
    CHECK(memory_budget_vs_card(16 * GIB, card, "GPU 0 (test card)", buf, sizeof buf) == NULL, "16 GiB refused");
    CHECK(memory_budget_vs_card(card, card, "GPU 0 (test card)", buf, sizeof buf) == NULL,
          "a budget of exactly the card's size refused");
    const char *why = memory_budget_vs_card(card + 1, card, "GPU 0 (test card)", buf, sizeof buf);
    CHECK(why && strstr(why, "--max-device-memory 139.80 GiB is more than GPU 0 (test card) has (139.80 GiB)"),
          "one byte over the card: '%s'", why ? why : "(let through)");
    why = memory_budget_vs_card(200 * GIB, card, "GPU 0 (test card)", buf, sizeof buf);
    CHECK(why && strstr(why, "--max-device-memory 200.00 GiB is more than") && strstr(why, "leave the flag out"),
          "200 GiB on a 139.8 GiB card: '%s'", why ? why : "(let through)");
}

// ---------------------------------------------------------------------------------------------
// random trials against the brute force

static uint64_t g_rng;
static uint64_t seed_arg = 0;

static size_t rand_range(size_t lo, size_t hi) { return lo + (size_t)(rng_next_u64(&g_rng) % (hi - lo + 1)); }

// what the trials covered, by the brute force: the bf16 line listed; bf16 moments fit
// somewhere at the run's ranks and stage but gave no larger B; runs already in bf16; the
// offload line; runs with offload; the one-rank -z 3 line; a ZeRO-3 line over several ranks;
// one-rank runs at -z 3
static int g_lean_listed, g_lean_not_larger, g_run_bf16, g_off_listed, g_run_offload, g_host_listed, g_zero3_listed,
    g_run_host;

static void random_trial(int trial, int *checked) {
    FakePlan p;
    p.fixed = rand_range(GIB / 2, 4 * GIB);
    p.param = rand_range(0, 4 * GIB);
    p.opt = rand_range(0, 24 * GIB);
    p.grad = rand_range(0, 8 * GIB);
    p.act[0] = rand_range(GIB / 256, GIB);
    // a level that saves nothing now and then, to see it skipped
    for (int r = 1; r <= MEMORY_MAX_RECOMPUTE; r++)
        p.act[r] = rand_range(0, 4) == 0 ? p.act[r - 1] : p.act[r - 1] / 10 * rand_range(3, 10);
    const int Ts[] = {64, 256, 1024};
    const int Bs[] = {12, 16, 24, 32, 48, 64};
    int T = Ts[rand_range(0, 2)];
    int B = rand_range(0, 1) ? Bs[rand_range(0, 5)] : (int)rand_range(1, MAX_B);
    int ranks = rand_range(0, 9) < 6 ? 1 : rand_range(0, 1) ? 2 : 4;
    // one rank has nothing to shard but its parameters, -z 3 (its stage 1 or 2 becomes 0: gpu/settings.cuh)
    int stage = ranks > 1 ? (int)rand_range(0, 3) : rand_range(0, 4) == 0 ? 3 : 0;
    // a quarter of the runs have bf16 moments already: no --optimizer-state line for them
    int moments = rand_range(0, 3) == 0;
    MemorySetting now = setting(B, (int)rand_range(0, MEMORY_MAX_RECOMPUTE), ranks, stage, 0, T, moments);
    now.offload = rand_range(0, 3) == 0 ? (int)rand_range(1, 2) : 0;  // likewise a quarter offload already
    now.total_batch = (long)B * T * ranks * (long)rand_range(1, 16);
    p.impossible = 0;
    for (int k = 1; k <= 3; k++)
        if (1 << k != ranks && rand_range(0, 4) == 0) p.impossible |= 1u << k;
    g_plan_now = now;
    size_t need_now = fake_plan(&p, now);
    // the budget: now and then exactly the need of another setting (the edge of fitting),
    // otherwise anywhere below now's need
    size_t budget = rand_range(p.fixed / 2, need_now - 1);
    if (rand_range(0, 2) == 0) {
        MemorySetting o = setting((int)rand_range(1, B), (int)rand_range(0, 2), 1 << rand_range(0, 3),
                                  (int)rand_range(0, 3), now.total_batch, T, (int)rand_range(0, 1));
        o.offload = (int)rand_range(0, 2);
        size_t n = fake_plan(&p, o);
        if (n < need_now) budget = n;
    }
    char msg[2048], err[300];
    Line lines[MAX_LINES];
    MemorySetting want[MAX_LINES];
    int n_local, n_lean, n_off, n_host;
    g_plan_misuse = 0;
    int n = memory_suggestions(budget, now, &FAKE_PLANNER(&p), msg, sizeof msg);
    int fake_misuse = g_plan_misuse;  // the brute force below asks about every setting
    int got = parse_msg(msg, now, &p, lines, err, sizeof err);
    int n_want = expected(&p, now, budget, want, &n_local, &n_lean, &n_off, &n_host);
    g_run_bf16 += now.moments_bf16;
    g_lean_listed += n_lean;
    g_off_listed += n_off;
    g_run_offload += now.offload != 0;
    g_host_listed += n_host;
    g_run_host += ranks == 1 && stage == 3;
    for (int i = n_local + n_lean + n_off + n_host; i < n_want; i++) g_zero3_listed += want[i].zero_stage == 3;
    if (!now.moments_bf16 && !n_lean && (n_local == 0 || want[n_local - 1].B < now.B)) {
        int any = 0;  // some B fits with bf16 moments at the run's ranks and stage
        for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE; r++)
            any |= fits(&p, with_offload(setting(1, r, ranks, stage, now.total_batch, T, 1), now.offload),
                        budget);  // B 1 always divides
        g_lean_not_larger += any;
    }
    (*checked)++;
    char desc[480];
    snprintf(desc, sizeof desc,
             "trial %d (seed %llu): now B %d r %d ranks %d z %d tokens %ld T %d bf16 %d offload %d, budget %zu, "
             "plan {%zu %zu %zu %zu %zu %zu %zu %zu imp %u}",
             trial, (unsigned long long)seed_arg, now.B, now.recompute, now.ranks, now.zero_stage, now.total_batch,
             now.T, now.moments_bf16, now.offload, budget, p.fixed, p.param, p.opt, p.grad, p.act[0], p.act[1],
             p.act[2], p.act[3], p.impossible);
    CHECK(!fake_misuse,
          "%s: the plan was asked about a setting that changes T, the tokens per step, ranges, the moments "
          "other than fp32 -> bf16 at the run's ranks and stage, offload other than 0 -> 2 at the run's ranks, "
          "stage and moments, fewer ranks, a lower stage, or -z 3 on one rank other than with --offload 2 from a "
          "one-rank run below it",
          desc);
    CHECK(got == n, "%s: returned %d, parsed %d lines (%s):%s", desc, n, got, got < 0 ? err : "", msg);
    if (got < 0) return;
    for (int i = 0; i < got; i++)
        CHECK(fits(&p, lines[i].s, budget), "%s: '%s' does not fit", desc, lines[i].text);
    // the lines at now's ranks, stage and moments come first and are the brute force's, then
    // the bf16 line (at now's ranks and stage), the offload line (at now's stage), the one-rank
    // -z 3 line, then the ZeRO lines
    int local = 0;
    while (local < got && lines[local].s.ranks == now.ranks && lines[local].s.zero_stage == now.zero_stage &&
           lines[local].s.moments_bf16 == now.moments_bf16 && lines[local].s.offload == now.offload)
        local++;
    int ok = local == n_local;
    for (int i = 0; ok && i < local; i++) ok = same(lines[i].s, want[i]);
    CHECK(ok, "%s: local lines differ from the brute force (%d expected, first B %d r %d):%s", desc, n_local,
          n_local ? want[0].B : 0, n_local ? want[0].recompute : 0, msg);
    int lean = 0;
    while (local + lean < got && lines[local + lean].s.moments_bf16 != now.moments_bf16) lean++;
    ok = lean == n_lean;
    for (int i = local; ok && i < local + lean; i++) ok = same(lines[i].s, want[i]);
    CHECK(ok, "%s: --optimizer-state bf16 lines differ from the brute force (%d expected, B %d r %d):%s", desc,
          n_lean, n_lean ? want[n_local].B : 0, n_lean ? want[n_local].recompute : 0, msg);
    int off = 0;
    while (local + lean + off < got && lines[local + lean + off].s.offload != now.offload &&
           lines[local + lean + off].s.zero_stage == now.zero_stage)
        off++;
    ok = off == n_off;
    for (int i = local + lean; ok && i < local + lean + off; i++) ok = same(lines[i].s, want[i]);
    CHECK(ok, "%s: --offload 2 lines differ from the brute force (%d expected):%s", desc, n_off, msg);
    int host = 0, before = local + lean + off;
    while (before + host < got && lines[before + host].s.ranks == 1 && lines[before + host].s.zero_stage == 3 &&
           now.zero_stage != 3)
        host++;
    ok = host == n_host;
    for (int i = before; ok && i < before + host; i++) ok = same(lines[i].s, want[i]);
    CHECK(ok, "%s: one-rank -z 3 lines differ from the brute force (%d expected):%s", desc, n_host, msg);
    ok = got == n_want;
    for (int i = before + host; ok && i < got; i++) ok = same(lines[i].s, want[i]);
    CHECK(ok, "%s: ZeRO lines differ from the brute force (%d expected):%s", desc,
          n_want - n_local - n_lean - n_off - n_host, msg);
    // now and then the same through memory_budget_check: the fatal message ends in these lines
    if (trial % 64 == 0) {
        g_check_plan = p;
        g_check_now = now;
        g_check_budget = budget;
        char b[32];
        expect_failure(desc, check_child, "0", gib_text(b, sizeof b, budget),
                       n ? "settings that fit:" : "nothing fits", n ? msg : NULL);
    }
}

static void test_random(void) {
    int checked = 0;
    g_lean_listed = g_lean_not_larger = g_run_bf16 = g_off_listed = g_run_offload = 0;
    g_host_listed = g_zero3_listed = g_run_host = 0;
    for (int trial = 0; trial < 3000; trial++) random_trial(trial, &checked);
    CHECK(checked == 3000, "%d trials checked", checked);
    // the trials are meaningful only when each case came up
    CHECK(g_lean_listed >= 100 && g_lean_not_larger >= 100 && g_run_bf16 >= 500 && g_off_listed >= 100 &&
              g_run_offload >= 500,
          "coverage: %d trials with the bf16 line, %d where bf16 gave no larger B, %d runs in bf16, %d with the "
          "offload line, %d runs with offload", g_lean_listed, g_lean_not_larger, g_run_bf16, g_off_listed,
          g_run_offload);
    CHECK(g_host_listed >= 100 && g_zero3_listed >= 100 && g_run_host >= 100,
          "coverage: %d trials with the one-rank -z 3 line, %d with a ZeRO-3 line over several ranks, %d one-rank "
          "runs at -z 3", g_host_listed, g_zero3_listed, g_run_host);
}

int main(int argc, char **argv) {
    seed_arg = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    g_rng = rng_seed(seed_arg);
    printf("seed %llu (rerun with: %s %llu)\n", (unsigned long long)seed_arg, argv[0], (unsigned long long)seed_arg);
    run_case("parse_bytes: accepted sizes", test_parse_accepted);
    run_case("parse_bytes: refused text", test_parse_refused);
    run_case("memory_micro_steps: whole numbers only", test_micro_steps);
    run_case("suggestions: local levels and ZeRO (hand)", test_hand_local_and_zero);
    run_case("suggestions: recompute only for a larger B", test_hand_recompute_not_worth_it);
    run_case("suggestions: impossible ranks, nothing fits", test_hand_impossible_and_nothing);
    run_case("suggestions: 2 ranks at ZeRO-1", test_hand_several_ranks);
    run_case("suggestions: --optimizer-state bf16 (hand)", test_hand_optimizer_state);
    run_case("suggestions: -z 3 on one GPU and over ranks", test_hand_zero3);
    run_case("suggestions: no -z 3 where the run refuses it", test_hand_no_zero3);
    run_case("suggestions: host memory and its limit", test_hand_host);
    run_case("suggestions: fastest first by a speed model", test_hand_speed_order);
    run_case("budget check: fits, or fatal() with what fits", test_budget_check);
    run_case("device limits: free memory, budget > card", test_device_limits);
    run_case("suggestions vs brute force (random)", test_random);
    return test_summary();
}

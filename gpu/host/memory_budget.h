// memory_budget.h: --max-device-memory. The GPU trainer plans every device allocation
// before it makes one; with a budget, the plan is held against it before the GPU is
// touched, so a configuration meant for a smaller card can be checked on any machine.
// A run that does not fit stops with the settings that would fit: a smaller micro-batch
// with the same tokens per step, more recomputation, bf16 moments, the optimizer state in
// host memory, ZeRO over more ranks, or on one GPU the parameters in host memory too (-z 3
// --offload 2). Once the GPU is open, the same plan is held against its free memory, and a
// budget against the card's size. Where the search is given the host's plan too, a setting
// fits only where the host holds it, and a line that puts memory on the host says how much.
#ifndef COMMON_MEMORY_BUDGET_H
#define COMMON_MEMORY_BUDGET_H
#include "../../common/util.h"
#include <ctype.h>
#include <strings.h>
#include <math.h>

// The settings the search may change (zero_stage applies when ranks > 1, and 3 on one rank
// too: with offload 2 the parameters are in host memory; moments_bf16: AdamW's moments in
// bf16; offload: the optimizer state in host memory), and what it keeps: the tokens per step
// and T.
typedef struct {
    int B, recompute, ranks, zero_stage;
    long total_batch;
    int T;
    int moments_bf16;
    int total_batch_implied;  // 1: the run left -d at -1 (B*T*ranks): a suggestion names -d to keep it
    int offload;
    int no_zero3;  // the run has a setting -z 3 refuses (FP8, CUDA graphs): ZeRO-3 is not suggested
} MemorySetting;

// micro-steps per step of s (0: its tokens per step are not a multiple of B*T*ranks)
static inline long memory_micro_steps(MemorySetting s) {
    long per = (long)s.B * s.T * s.ranks;
    return s.total_batch % per ? 0 : s.total_batch / per;
}

#define MEMORY_MAX_RECOMPUTE 3

// A trainer's plan: bytes on one rank's device for setting s (SIZE_MAX: s is impossible,
// e.g. ZeRO over ranks that do not divide the model's slices).
typedef size_t (*MemoryPlanFn)(const void *ctx, MemorySetting s);

// A model of a setting's speed, tokens per second (only its order among settings matters)
typedef double (*MemorySpeedFn)(const void *ctx, MemorySetting s);

// What a search asks of a setting: its device plan, and where host is given the host memory
// it takes (the memory --offload pins, and the buffers a checkpoint holds), held against
// host_limit: a setting fits only where both do, and a line that puts memory on the host
// names how much. host NULL or host_limit 0: the device alone. speed: where given, the lines
// on the run's own GPUs are listed fastest first (else in the search's order).
typedef struct {
    MemoryPlanFn device, host;
    const void *ctx;
    size_t host_limit;
    MemorySpeedFn speed;
} MemoryPlanner;

// "16G", "16GiB", "512M", "1.5G", "1T", "2K"; units are binary (G = 2^30) and required: a
// bare "16" would be 16 bytes, which no budget of device memory means. Returns 0 for text
// that is not a size.
static inline int parse_bytes(const char *s, size_t *out) {
    char *end;
    if ((!isdigit((unsigned char)s[0]) && s[0] != '.') || strpbrk(s, "xX")) return 0;  // no sign, space or hex
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0) || !isfinite(v)) return 0;
    double unit;
    switch (toupper((unsigned char)*end)) {
    case 'K': unit = 1024.0; break;
    case 'M': unit = 1024.0 * 1024; break;
    case 'G': unit = 1024.0 * 1024 * 1024; break;
    case 'T': unit = 1024.0 * 1024 * 1024 * 1024; break;
    default: return 0;
    }
    end++;
    if (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0) end += strlen(end);
    if (*end || v * unit >= 18e18 || v * unit < 1) return 0;
    *out = (size_t)(v * unit);
    return 1;
}

static inline const char *gib_text(char *buf, size_t cap, size_t bytes) {
    snprintf(buf, cap, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    return buf;
}

static inline int memory_fits(const MemoryPlanner *p, MemorySetting s, size_t budget, size_t *need) {
    *need = p->device(p->ctx, s);
    if (*need == SIZE_MAX || *need > budget) return 0;
    return !p->host || !p->host_limit || p->host(p->ctx, s) <= p->host_limit;
}

// base with micro-batch b, recompute level r, and the parallel setting (ranks, ZeRO stage)
static inline MemorySetting memory_setting(MemorySetting base, int b, int r, int ranks, int stage) {
    base.B = b;
    base.recompute = r;
    base.ranks = ranks;
    base.zero_stage = stage;
    return base;
}

// The largest micro-batch b <= base.B that keeps the tokens per step (a whole number of
// micro-steps) and fits with recompute level r and this parallel setting (base's moments);
// 0: none.
static inline int memory_largest_B(size_t budget, MemorySetting base, int r, int ranks, int stage,
                                   const MemoryPlanner *p, size_t *need) {
    for (int b = base.B; b >= 1; b--) {
        MemorySetting s = memory_setting(base, b, r, ranks, stage);
        if (memory_micro_steps(s) && memory_fits(p, s, budget, need)) return b;
    }
    return 0;
}

// The settings a search found, in its order, with what each needs on the device
#define MEMORY_MAX_FOUND 16
typedef struct {
    MemorySetting s;
    size_t need;
} MemoryPick;
typedef struct {
    int n;
    MemoryPick pick[MEMORY_MAX_FOUND];
} MemoryFound;

static inline void memory_suggest(MemoryFound *f, MemorySetting s, size_t need) {
    if (f->n == MEMORY_MAX_FOUND) return;
    f->pick[f->n].s = s;
    f->pick[f->n++].need = need;
}

// Appends to msg the line for s: the change of flags from now, e.g. "-r 2 -b 16 (32
// micro-steps per step)", and what s needs. A change of stage on one rank is "-z 3" alone:
// there is no mpirun to start.
static inline void memory_suggest_line(char *msg, size_t cap, MemorySetting now, MemorySetting s, size_t need,
                                       const MemoryPlanner *p) {
    char buf[200], g[32], h[32], host[64] = "";
    size_t n = 0;
    buf[0] = 0;
    if (s.moments_bf16 != now.moments_bf16) n += snprintf(buf + n, sizeof buf - n, "--optimizer-state bf16 ");
    if (s.offload != now.offload) n += snprintf(buf + n, sizeof buf - n, "--offload %d ", s.offload);
    if (s.ranks == 1 && s.zero_stage != now.zero_stage)
        n += snprintf(buf + n, sizeof buf - n, "-z %d ", s.zero_stage);
    else if (s.ranks != now.ranks || s.zero_stage != now.zero_stage)
        n += snprintf(buf + n, sizeof buf - n, "-z %d over %d ranks (mpirun -np %d) ", s.zero_stage, s.ranks,
                      s.ranks);
    if (s.recompute != now.recompute) n += snprintf(buf + n, sizeof buf - n, "-r %d ", s.recompute);
    if (s.B != now.B) n += snprintf(buf + n, sizeof buf - n, "-b %d ", s.B);
    if (now.total_batch_implied && (s.B != now.B || s.ranks != now.ranks))
        n += snprintf(buf + n, sizeof buf - n, "-d %ld ", now.total_batch);
    if (n && buf[n - 1] == ' ') buf[--n] = 0;
    if (s.B != now.B || s.ranks != now.ranks)
        snprintf(buf + n, sizeof buf - n, " (%ld micro-steps per step%s)", memory_micro_steps(s),
                 s.ranks > 1 ? " on each rank" : "");
    if (p->host && s.offload)
        snprintf(host, sizeof host, ", and %s of host memory%s", gib_text(h, sizeof h, p->host(p->ctx, s)),
                 s.ranks > 1 ? " per rank" : "");
    size_t len = strlen(msg);
    snprintf(msg + len, cap - len, "\n  %s: %s%s%s", buf, gib_text(g, sizeof g, need), s.ranks > 1 ? " per GPU" : "",
             host);
}

// The lines listed so far at the run's ranks and stage, as (micro-batch, recompute level):
// a line below them is worth listing only where it fits a larger micro-batch than every one
// of them at the same or a lower recompute level (more recomputation costs more time than a
// larger micro-batch wins back: docs/memory.md)
typedef struct {
    int n, b[2 * MEMORY_MAX_RECOMPUTE + 4], r[2 * MEMORY_MAX_RECOMPUTE + 4];
} MemoryLines;

static inline int memory_lines_cover(const MemoryLines *l, int r) {
    int c = 0;
    for (int i = 0; i < l->n; i++)
        if (l->r[i] <= r && l->b[i] > c) c = l->b[i];
    return c;
}

static inline void memory_lines_add(MemoryLines *l, int b, int r) {
    if (l->n < (int)(sizeof l->b / sizeof l->b[0])) {
        l->b[l->n] = b;
        l->r[l->n++] = r;
    }
}

// One switch from the run's own setting (alt: now with bf16 moments, with offload, or on one
// rank with -z 3 --offload 2; alt's ranks and stage are kept): appends alt's line at a
// recompute level where it fits a larger micro-batch than the lines before cover there. Which
// level: with a speed model the fastest of them; without, the lowest, or for `largest` (on one
// rank, -z 3 --offload 2) the one with the largest micro-batch: with the parameters in host
// memory every micro-step copies the whole model in twice whatever its size, so the
// micro-batch, not the recomputation, decides the speed (GPT-2 1.5B in 8 GiB: -r 3 -b 8 39,212
// tokens/s, -r 1 -b 2 18,408; docs/memory.md). Returns 1 if it appended a line.
static inline int memory_suggest_switch(size_t budget, MemorySetting now, MemorySetting alt, int largest,
                                        const MemoryPlanner *p, MemoryFound *found, MemoryLines *seen) {
    size_t need, best_need = 0;
    int best_b = 0, best_r = 0, best_covered = 0;
    double best_v = -1.0;
    for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE; r++) {
        int b = memory_largest_B(budget, alt, r, alt.ranks, alt.zero_stage, p, &need);
        const int covered = b <= memory_lines_cover(seen, r);
        if (p->speed) {
            const double v = covered ? 0.0 : p->speed(p->ctx, memory_setting(alt, b, r, alt.ranks, alt.zero_stage));
            if (!covered && v > best_v) best_b = b, best_r = r, best_need = need, best_v = v;
        } else if (largest) {  // (the largest micro-batch anywhere, listed only where not covered)
            if (b > best_b) best_b = b, best_r = r, best_need = need, best_covered = covered;
        } else if (!covered) {
            best_b = b, best_r = r, best_need = need;
            break;
        }
    }
    if (!best_b || best_covered) return 0;
    memory_suggest(found, memory_setting(alt, best_b, best_r, alt.ranks, alt.zero_stage), best_need);
    memory_lines_add(seen, best_b, best_r);
    return 1;
}

// With a speed model: the lines on the run's own GPUs (its ranks; on one, -z 3 --offload 2
// too) fastest first, the lines that take more GPUs after them in the search's order (the
// model knows no communication between GPUs). A stable sort: equal speeds keep their order.
static inline void memory_order_by_speed(MemoryFound *f, MemorySetting now, const MemoryPlanner *p) {
    if (!p->speed) return;
    double v[MEMORY_MAX_FOUND];  // the speed of a line on the run's own GPUs; -1: a line over more
    for (int i = 0; i < f->n; i++) {
        const MemorySetting s = f->pick[i].s;
        v[i] = s.ranks == now.ranks && (s.zero_stage == now.zero_stage || s.ranks == 1) ? p->speed(p->ctx, s) : -1.0;
    }
    for (int i = 1; i < f->n; i++)  // insertion: each line moves up past the slower ones
        for (int j = i; j > 0 && v[j] >= 0.0 && v[j] > v[j - 1]; j--) {
            const MemoryPick t = f->pick[j];
            const double tv = v[j];
            f->pick[j] = f->pick[j - 1], v[j] = v[j - 1];
            f->pick[j - 1] = t, v[j - 1] = tv;
        }
}

// Writes into msg (cap bytes) the settings near `now` whose plan fits the budget, one a
// line, and returns how many: at each recompute level from now's up, the largest
// micro-batch that fits (the same tokens per step in more micro-steps), where it is larger
// than at the levels below;
// then, with fp32 moments, --optimizer-state bf16 at a recompute level where it fits a larger
// micro-batch than the lines above at that level or below (so the same micro-batch with less
// recomputation is listed too: GPT-2 350M in 8G gets --offload 2 -b 8 at -r 1, the fastest
// run measured there, beside -r 3 -b 8); likewise --offload 2 (with the run's moments); then,
// on one rank, -z 3 --offload 2: the parameters in host memory, each layer copied in ahead of
// use, for a model whose weights and gradients alone leave too little room on one GPU, with
// no second GPU needed (memory_suggest_switch says at which level each switch is listed);
// then for ZeRO-1, 2 and 3 (not below the run's stage: several ranks, or -z 3 on one) the
// fewest ranks (the run's own, or doubling up to 8 GPUs with this budget each; the tokens
// per step must be a multiple of B*T*ranks) at which some micro-batch fits. With a speed
// model the lines are then ordered by memory_order_by_speed.
// The offload mode suggested: 2, staged through the copy engines, was the faster of the two at
// every model size measured (docs/memory.md); the plan counts its two staging buffers.
#define MEMORY_OFFLOAD_SUGGESTED 2

static inline int memory_suggestions(size_t budget, MemorySetting now, const MemoryPlanner *p, char *msg,
                                     size_t cap) {
    size_t need;
    MemoryFound f = {0};
    MemoryLines seen = {0};
    msg[0] = 0;
    for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE; r++) {
        int b = memory_largest_B(budget, now, r, now.ranks, now.zero_stage, p, &need);
        if (b <= memory_lines_cover(&seen, r)) continue;
        memory_suggest(&f, memory_setting(now, b, r, now.ranks, now.zero_stage), need);
        memory_lines_add(&seen, b, r);
        if (b == now.B) break;
    }
    if (!now.moments_bf16) {
        MemorySetting lean = now;
        lean.moments_bf16 = 1;
        memory_suggest_switch(budget, now, lean, 0, p, &f, &seen);
    }
    if (!now.offload) {
        MemorySetting off = now;
        off.offload = MEMORY_OFFLOAD_SUGGESTED;
        memory_suggest_switch(budget, now, off, 0, p, &f, &seen);
    }
    if (now.ranks == 1 && now.zero_stage < 3 && !now.no_zero3) {
        MemorySetting host = now;
        host.zero_stage = 3;
        host.offload = MEMORY_OFFLOAD_SUGGESTED;
        memory_suggest_switch(budget, now, host, 1, p, &f, &seen);
    }
    // (on one rank a stage of 1 or 2 shards nothing: gpu/settings.cuh makes it 0)
    int first = now.zero_stage > 1 && (now.ranks > 1 || now.zero_stage == 3) ? now.zero_stage : 1;
    for (int stage = first; stage <= (now.no_zero3 ? 2 : 3); stage++) {
        int done = 0;
        for (int ranks = now.ranks > 1 ? now.ranks : 2; ranks <= 8 && !done; ranks *= 2) {
            if (ranks == now.ranks && stage <= now.zero_stage) continue;  // the run as it is: above
            for (int r = now.recompute; r <= MEMORY_MAX_RECOMPUTE && !done; r++) {
                int b = memory_largest_B(budget, now, r, ranks, stage, p, &need);
                if (!b) continue;
                memory_suggest(&f, memory_setting(now, b, r, ranks, stage), need);
                done = 1;
            }
        }
    }
    memory_order_by_speed(&f, now, p);
    for (int i = 0; i < f.n; i++) memory_suggest_line(msg, cap, now, f.pick[i].s, f.pick[i].need, p);
    return f.n;
}

// Stops the run when the plan for `now` is over `limit`, naming what would fit; `what` names
// the limit at the start of the message ("--max-device-memory 16.00 GiB", or the GPU's free
// memory). Otherwise prints the plan beside the limit (verbose).
static inline void memory_limit_check(const char *what, size_t limit, MemorySetting now, const MemoryPlanner *p,
                                      const char *breakdown, int verbose) {
    size_t need = p->device(p->ctx, now);
    char a[32];
    if (need != SIZE_MAX && need <= limit) {
        if (verbose) printf("memory plan: %s of %s (%s)\n", gib_text(a, sizeof a, need), what, breakdown);
        return;
    }
    char msg[2048];
    int n = memory_suggestions(limit, now, p, msg, sizeof msg);
    fatal("%s: this run needs %s on the device (%s); %s%s", what, gib_text(a, sizeof a, need), breakdown,
          n ? "settings that fit:" : "nothing fits with a smaller -b, a higher -r, --optimizer-state bf16, "
                                     "--offload 2 or ZeRO over up to 8 ranks on its own: combine them, or use a "
                                     "smaller model or more device memory",
          msg);
}

// --max-device-memory, before the GPU is touched
static inline void memory_budget_check(size_t budget, MemorySetting now, const MemoryPlanner *p,
                                       const char *breakdown, int verbose) {
    char what[64], b[32];
    snprintf(what, sizeof what, "--max-device-memory %s", gib_text(b, sizeof b, budget));
    memory_limit_check(what, budget, now, p, breakdown, verbose);
}

// Once the GPU is open: a budget above the card's size cannot be the size of the card the run
// is meant for (a typo, or a card other than this one). Returns the reason it is refused (in
// buf), or NULL. (The free memory is then held against the plan by memory_limit_check.)
static inline const char *memory_budget_vs_card(size_t budget, size_t card_total, const char *card, char *buf,
                                                size_t cap) {
    if (!budget || budget <= card_total) return NULL;
    char a[32], b[32];
    snprintf(buf, cap, "--max-device-memory %s is more than %s has (%s): give at most that, less about 0.5 GiB for "
             "the CUDA context, or leave the flag out", gib_text(a, sizeof a, budget), card, gib_text(b, sizeof b,
             card_total));
    return buf;
}

#endif  // COMMON_MEMORY_BUDGET_H

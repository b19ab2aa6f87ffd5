// tokenize: command-line front end of common/tokenizer.h (GPT-2 BPE, equal to tiktoken's
// "gpt2"): encode, decode, a batch mode for the tests, and an encoding benchmark.
// Build: gcc -O3 -march=native -fopenmp -Icommon dev/tokenize.c -o build/tokenize
#include "common/tokenizer.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static void usage(FILE *f) {
    fprintf(f,
        "usage: tokenize [options] [FILE]\n"
        "Encodes FILE (default: standard input) with GPT-2's BPE tokenizer and writes the\n"
        "token ids to standard output as decimal text, one per line.\n"
        "  --dir DIR      tokenizer files vocab.bpe and encoder.json (default data/gpt2)\n"
        "  --binary       write tokens (with --decode: read them) as little-endian uint32\n"
        "  --decode       read token ids (decimal, separated by white space, or --binary)\n"
        "                 and write the bytes they stand for; <|endoftext|> (50256) is\n"
        "                 written as its text\n"
        "  --records      batch mode (used by the tests): the input is a sequence of records\n"
        "                 <uint32 n><n bytes>; for each record the output is <uint32 count>\n"
        "                 then count uint32 tokens (all little-endian)\n"
        "  --bench FILE   encode FILE with 1 thread and with --threads threads (chunks cut at\n"
        "                 safe points, see tokenizer_safe_split), check that both give the\n"
        "                 same tokens and print the speed in MB/s (1 MB = 1e6 bytes)\n"
        "  --threads N    threads for --bench (default: all, from OpenMP)\n"
        "  --repeat N     --bench runs each measurement N times and keeps the best (default 3)\n"
        "  -h, --help     this text\n");
}

static uint8_t *read_all(FILE *f, const char *name, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = (uint8_t *)xmalloc(cap);
    for (;;) {
        if (n == cap) buf = (uint8_t *)xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) fatal("read error in %s: %s", name, strerror(errno));
            break;
        }
    }
    *len = n;
    return buf;
}

static uint8_t *read_input(const char *path, size_t *len) {
    if (!path || strcmp(path, "-") == 0) return read_all(stdin, "standard input", len);
    return xread_file(path, len);
}

static void write_tokens(const TokenVec *v, int binary) {
    if (binary) {
        xfwrite(v->data, sizeof(uint32_t), v->len, stdout, "standard output");
        return;
    }
    char line[16];
    for (size_t i = 0; i < v->len; i++) {
        int k = snprintf(line, sizeof(line), "%u\n", v->data[i]);
        xfwrite(line, 1, (size_t)k, stdout, "standard output");
    }
}

static void cmd_decode(const Tokenizer *t, const uint8_t *in, size_t n, int binary, const char *name) {
    TokenVec ids = {NULL, 0, 0};
    if (binary) {
        if (n % 4) fatal("%s: %zu bytes is not a whole number of uint32 tokens", name, n);
        tokenvec_reserve(&ids, n / 4);
        memcpy(ids.data, in, n);
        ids.len = n / 4;
    } else {
        size_t i = 0, line = 1;
        while (i < n) {
            uint8_t c = in[i];
            if (c == '\n') { line++; i++; continue; }
            if (c == ' ' || c == '\t' || c == '\r') { i++; continue; }
            if (c < '0' || c > '9') fatal("%s: line %zu: expected a token id, found '%c'", name, line, c);
            uint64_t v = 0;
            while (i < n && in[i] >= '0' && in[i] <= '9') {
                v = v * 10 + (uint64_t)(in[i++] - '0');
                if (v > 0xFFFFFFFFu) fatal("%s: line %zu: number too large", name, line);
            }
            tokenvec_push(&ids, (uint32_t)v);
        }
    }
    for (size_t i = 0; i < ids.len; i++)
        if (ids.data[i] >= (uint32_t)t->vocab_size)
            fatal("%s: token %zu is %u, not a GPT-2 token id (0..%d)", name, i, ids.data[i], t->vocab_size - 1);
    TokBytes out = {NULL, 0, 0};
    tokenizer_decode(t, ids.data, ids.len, &out);
    xfwrite(out.data, 1, out.len, stdout, "standard output");
    tokbytes_free(&out);
    tokenvec_free(&ids);
}

static void cmd_records(const Tokenizer *t, const uint8_t *in, size_t n, const char *name) {
    size_t pos = 0, rec = 0;
    TokenVec v = {NULL, 0, 0};
    while (pos < n) {
        uint32_t len;
        if (n - pos < 4) fatal("%s: record %zu: truncated length", name, rec);
        memcpy(&len, in + pos, 4);
        pos += 4;
        if (n - pos < len) fatal("%s: record %zu: wants %u bytes, only %zu left", name, rec, len, n - pos);
        v.len = 0;
        tokenizer_encode(t, in + pos, len, &v);
        pos += len;
        uint32_t count = (uint32_t)v.len;
        xfwrite(&count, 4, 1, stdout, "standard output");
        xfwrite(v.data, 4, v.len, stdout, "standard output");
        rec++;
    }
    tokenvec_free(&v);
}

// Cuts text into chunks of about `target` bytes at safe split points; returns the count
// and sets (*cuts)[0..count] (cuts[0] = 0, cuts[count] = len).
static size_t make_chunks(const uint8_t *text, size_t len, size_t target, size_t **cuts) {
    size_t cap = 16, k = 0;
    size_t *c = (size_t *)xmalloc(cap * sizeof(size_t));
    c[k++] = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t next = pos + target >= len ? len : tokenizer_next_safe_split(text, len, pos + target);
        if (k == cap) c = (size_t *)xrealloc(c, (cap *= 2) * sizeof(size_t));
        c[k++] = next;
        pos = next;
    }
    *cuts = c;
    return k - 1;
}

// Encodes text in chunks on nthreads threads, appending the concatenated tokens to out.
static size_t encode_parallel(const Tokenizer *t, const uint8_t *text, size_t len, int nthreads, TokenVec *out) {
    size_t target = len / ((size_t)nthreads * 8) + 1;
    if (target < (1 << 16)) target = 1 << 16;
    size_t *cuts;
    size_t nchunks = make_chunks(text, len, target, &cuts);
    TokenVec *parts = (TokenVec *)xcalloc(nchunks ? nchunks : 1, sizeof(TokenVec));
    long nc = (long)nchunks;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
#endif
    for (long i = 0; i < nc; i++) {
        tokenvec_reserve(&parts[i], (cuts[i + 1] - cuts[i]) / 2 + 16);  // GPT-2 averages ~4 bytes/token
        tokenizer_encode(t, text + cuts[i], cuts[i + 1] - cuts[i], &parts[i]);
    }
    (void)nthreads;
    size_t total = 0;
    for (size_t i = 0; i < nchunks; i++) total += parts[i].len;
    tokenvec_reserve(out, total);
    for (size_t i = 0; i < nchunks; i++) {
        if (parts[i].len) memcpy(out->data + out->len, parts[i].data, parts[i].len * sizeof(uint32_t));
        out->len += parts[i].len;
        tokenvec_free(&parts[i]);
    }
    free(parts);
    free(cuts);
    return nchunks;
}

static int cmd_bench(const Tokenizer *t, const char *path, int nthreads, int repeat) {
    size_t len;
    uint8_t *text = xread_file(path, &len);
    TokenVec one = {NULL, 0, 0}, many = {NULL, 0, 0};
    double best1 = 1e30, bestn = 1e30;
    size_t nchunks = 0;
    for (int r = 0; r < repeat; r++) {
        one.len = 0;
        double t0 = wall_seconds();
        tokenizer_encode(t, text, len, &one);
        double dt = wall_seconds() - t0;
        if (dt < best1) best1 = dt;
    }
    for (int r = 0; r < repeat; r++) {
        many.len = 0;
        double t0 = wall_seconds();
        nchunks = encode_parallel(t, text, len, nthreads, &many);
        double dt = wall_seconds() - t0;
        if (dt < bestn) bestn = dt;
    }
    int same = one.len == many.len && (one.len == 0 || memcmp(one.data, many.data, one.len * 4) == 0);
    printf("file %s: %zu bytes, %zu tokens\n", path, len, one.len);
    printf("encode, 1 thread:   %8.2f MB/s\n", len / best1 / 1e6);
    printf("encode, %d threads: %8.2f MB/s (%zu chunks; tokens %s the 1-thread result)\n", nthreads,
           len / bestn / 1e6, nchunks, same ? "equal" : "DIFFER FROM");
    printf("RESULT bytes=%zu tokens=%zu threads=%d chunks=%zu mbps_1=%.3f mbps_n=%.3f equal=%d\n", len,
           one.len, nthreads, nchunks, len / best1 / 1e6, len / bestn / 1e6, same);
    tokenvec_free(&one);
    tokenvec_free(&many);
    free(text);
    return same ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *dir = "data/gpt2", *file = NULL, *bench = NULL;
    int binary = 0, decode = 0, records = 0, repeat = 3, nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--binary")) binary = 1;
        else if (!strcmp(a, "--decode")) decode = 1;
        else if (!strcmp(a, "--records")) records = 1;
        else if (!strcmp(a, "--dir") || !strcmp(a, "--bench") || !strcmp(a, "--threads") || !strcmp(a, "--repeat")) {
            if (i + 1 >= argc) fatal("%s needs a value (see --help)", a);
            const char *val = argv[++i];
            if (!strcmp(a, "--dir")) dir = val;
            else if (!strcmp(a, "--bench")) bench = val;
            else {
                if (!parse_long(val, &v) || v < 1 || v > 4096) fatal("%s %s: expected a number from 1 to 4096", a, val);
                if (!strcmp(a, "--threads")) nthreads = (int)v;
                else repeat = (int)v;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "error: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!file) file = a;
        else fatal("only one input file may be given (got %s and %s)", file, a);
    }
    if (decode + records + (bench != NULL) > 1) fatal("--decode, --records and --bench exclude each other");
    Tokenizer t;
    tokenizer_init(&t, dir);
    int rc = 0;
    if (bench) {
        rc = cmd_bench(&t, bench, nthreads, repeat);
    } else {
        size_t n;
        uint8_t *in = read_input(file, &n);
        const char *name = file ? file : "standard input";
        if (decode) cmd_decode(&t, in, n, binary, name);
        else if (records) cmd_records(&t, in, n, name);
        else {
            TokenVec v = {NULL, 0, 0};
            tokenizer_encode(&t, in, n, &v);
            write_tokens(&v, binary);
            tokenvec_free(&v);
        }
        free(in);
    }
    if (fflush(stdout) != 0) fatal("error writing standard output: %s", strerror(errno));
    tokenizer_free(&t);
    return rc;
}

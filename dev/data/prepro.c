// prepro.c: tokenizes a text or JSONL file with the GPT-2 tokenizer into token shards
// (docs/formats.md: header of 256 int32 {20240520, 1, ntok}, then uint16 tokens).
//
//   prepro --input input.txt --out-dir data/tinyshakespeare --name tiny_shakespeare
//
// Every document is preceded by the end-of-text token 50256. The first --val-tokens
// tokens (or --val-fraction of all tokens) go to NAME_val_000000.bin, the rest to
// NAME_train_000000.bin, NAME_train_000001.bin, ... of --shard-tokens tokens each (at least
// 1,048,576, unless --allow-small-shards 1: smaller shards are a mistake outside tests).
//
// Refused, with nothing left in --out-dir (no shard renamed into place, no temporary, no
// directory it created): an input without text (no tokens but end-of-text ones), and a
// split in which the val shard (when there is one) or the train part holds fewer than 2
// tokens, the fewest the loader can make a batch of. --val-fraction's split is checked
// before anything is written; --val-tokens' once the input is read, the val shard waiting
// as a temporary until 2 train tokens follow it.
//
// Formats:
//   text   the whole file is one document (--text-docs whole), or it is cut into
//          documents after every blank line (--text-docs blank-lines, the llm.c Tiny
//          Shakespeare convention: each section keeps its trailing "\n\n" and an empty
//          final section still gets its end-of-text token). A line of spaces, tabs and
//          '\r' is blank too, so a CRLF file splits as its LF twin does.
//   jsonl  one JSON object per line with a string field "text"; blank lines are skipped.
//
// Threads: the input is read in batches of about 32 MB. Documents longer than
// --chunk-bytes are cut into pieces only where the cut cannot change the tokens: just
// before a '\n' whose preceding byte is a printable, non-space ASCII character. With
// tiktoken's pre-tokenization pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// no match can contain both a non-space character and a following '\n' (every
// alternative that matches a non-space character stops at whitespace, and the optional
// prefix is a plain ' '), so a match ends at the cut, and matches before the cut look at
// most one character ahead (the '\n' or the end of the piece; both stop them alike).
// The pattern has no look-behind, so matching from the cut is the same in the piece
// alone. BPE runs within pre-tokens, so the tokens are the same. Pieces are tokenized in
// parallel (OpenMP) and concatenated in input order; batch and piece boundaries depend
// only on the input and --chunk-bytes, never on --threads, so the output is the same for
// any thread count. (dev/test/test_prepro.sh checks chunked against unchunked output.)
#include "../../common/args.h"
#include "../../common/tokenizer.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define BATCH_BYTES ((size_t)32 << 20) // input bytes tokenized per parallel round
#define GROUP_BYTES ((size_t)256 << 10) // work item size for one thread
#define WRITE_TOKENS ((size_t)1 << 20) // tokens buffered before a write
#define SHARD_MAGIC_V 20240520
// Beyond a few thousand threads the OpenMP runtime dies with SIGSEGV and no message (70000
// does); 4096 is also build/tokenize's limit, and more than any machine's cores.
#define MAX_THREADS 4096
// Smaller train shards than one batch of a plausible run (B=16, T=1024 is 16,384 tokens a
// step per GPU; a shard then holds 64 steps) only make many files, each one fsynced.
#define MIN_SHARD_TOKENS (1 << 20)
// The fewest tokens a shard can train or evaluate on: the loader takes B*T*ranks+1 tokens
// of one shard for a batch, 2 at B = T = 1 (one input and its target).
#define MIN_SPLIT_TOKENS 2

// ---------------------------------------------------------------------------------------
// growable byte buffer

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Bytes;

static void bytes_reserve(Bytes *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    b->data = (uint8_t *)xrealloc(b->data, cap);
    b->cap = cap;
}

static void bytes_push(Bytes *b, uint8_t c) {
    bytes_reserve(b, 1);
    b->data[b->len++] = c;
}

static void bytes_append(Bytes *b, const uint8_t *src, size_t n) {
    bytes_reserve(b, n);
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
}

// ---------------------------------------------------------------------------------------
// token sink: routes the token stream into the val shard and the train shards

// A shard written in full, waiting to be renamed into place.
typedef struct {
    AtomicFile af;  // af.f closed
    int64_t ntok;
} DoneShard;

typedef struct {
    const char *out_dir, *name;
    int64_t val_target;   // tokens for the val shard (0 = none)
    int64_t shard_tokens; // tokens per train shard
    int64_t total;        // tokens routed so far
    // Whether the input is known to give a usable split (see the top). Until it is,
    // complete shards wait in done[] as temporaries, so that a refused input leaves
    // nothing behind. Three are the most that can wait, whatever the input (see
    // feed_tokens): the val shard and two train shards of one token each.
    int ready;
    DoneShard done[3];
    int ndone;
    // the shard being written
    int open, is_val, train_index;
    AtomicFile af;
    char path[4096];
    int64_t in_shard;
    uint16_t *wbuf;
    size_t wlen;
    // summary
    int64_t val_written;
    int train_shards;
    int64_t train_written;
    int64_t last_train_tokens;
} Sink;

static void sink_shard_path(const Sink *s, int is_val, int index, char *out, size_t cap) {
    int n = snprintf(out, cap, "%s/%s_%s_%06d.bin", s->out_dir, s->name, is_val ? "val" : "train", index);
    if (n < 0 || (size_t)n >= cap) fatal("output path too long for --out-dir %s", s->out_dir);
}

static void sink_write_header(Sink *s, int64_t ntok) {
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = SHARD_MAGIC_V;
    header[1] = 1;
    header[2] = (int32_t)ntok;
    xfwrite(header, sizeof(header), 1, s->af.f, s->af.tmp_path);
}

static void sink_flush(Sink *s) {
    if (s->wlen) xfwrite(s->wbuf, sizeof(uint16_t), s->wlen, s->af.f, s->af.tmp_path);
    s->wlen = 0;
}

static void sink_open(Sink *s, int is_val) {
    s->is_val = is_val;
    sink_shard_path(s, is_val, is_val ? 0 : s->train_index, s->path, sizeof(s->path));
    s->af = atomic_open(s->path);
    sink_write_header(s, 0); // rewritten with the count on close
    s->in_shard = 0;
    s->open = 1;
}

// Renames the complete shards into place, oldest first (util.h's atomic_commit, whose
// atomic_close half sink_close did).
static void sink_publish(Sink *s) {
    while (s->ndone > 0) {
        DoneShard *d = &s->done[0];
        printf("  wrote %s: %lld tokens\n", d->af.path, (long long)d->ntok);
        atomic_publish(&d->af);
        memmove(&s->done[0], &s->done[1], (size_t)(--s->ndone) * sizeof(DoneShard));
    }
}

static void sink_close(Sink *s) {
    if (!s->open) return;
    sink_flush(s);
    if (fseeko(s->af.f, 0, SEEK_SET) != 0) fatal("cannot seek in %s: %s", s->af.tmp_path, strerror(errno));
    sink_write_header(s, s->in_shard);
    atomic_close(&s->af);
    if (s->ndone == (int)(sizeof s->done / sizeof s->done[0])) fatal("internal: too many shards waiting to be renamed");
    DoneShard *d = &s->done[s->ndone++];
    d->af = s->af;
    d->ntok = s->in_shard;
    s->open = 0;
    if (s->is_val) {
        s->val_written = s->in_shard;
    } else {
        s->train_shards++;
        s->train_written += s->in_shard;
        s->last_train_tokens = s->in_shard;
        s->train_index++;
    }
    if (s->ready) sink_publish(s);
}

static void sink_emit(Sink *s, const uint32_t *toks, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (!s->open) sink_open(s, s->total < s->val_target);
        int64_t cap = s->is_val ? s->val_target : s->shard_tokens;
        int64_t room = cap - s->in_shard;
        size_t take = (size_t)((int64_t)(n - i) < room ? (int64_t)(n - i) : room);
        for (size_t k = 0; k < take; k++) {
            uint32_t id = toks[i + k];
            if (id > 65535)
                fatal("token id %u does not fit a uint16 (version 1) shard", id);
            s->wbuf[s->wlen++] = (uint16_t)id;
            if (s->wlen == WRITE_TOKENS) sink_flush(s);
        }
        i += take;
        s->in_shard += (int64_t)take;
        s->total += (int64_t)take;
        if (s->in_shard == cap) sink_close(s);
    }
}

// ---------------------------------------------------------------------------------------
// batches of documents, tokenized in parallel

typedef struct {
    size_t off, len;
    int eot; // a document starts here: emit GPT2_EOT before the piece
} Seg;

typedef struct {
    Bytes text;
    Seg *segs;
    size_t nseg, segcap;
} Batch;

static void batch_add(Batch *b, size_t off, size_t len, int eot) {
    if (b->nseg == b->segcap) {
        b->segcap = b->segcap ? 2 * b->segcap : 1024;
        b->segs = (Seg *)xrealloc(b->segs, b->segcap * sizeof(Seg));
    }
    Seg sg = {off, len, eot};
    b->segs[b->nseg++] = sg;
}

// A cut before position p of text[lo, hi) cannot change the tokens (see the top).
static int safe_cut(const uint8_t *t, size_t lo, size_t p) {
    return p > lo && t[p] == '\n' && t[p - 1] >= 0x21 && t[p - 1] <= 0x7e;
}

typedef struct {
    const char *input;
    Tokenizer tok;
    size_t chunk_bytes; // 0 = never cut a document
    int64_t docs;
    int64_t text_tokens; // tokens of the documents' text, the end-of-text tokens not counted
    int64_t bytes_in;   // input bytes consumed (for progress)
    double t0, last_progress;
    int progress_tty;
    // End-of-text tokens not yet passed on: until the first text token the input may
    // still turn out to hold no text and be refused, so they are only counted, and any
    // number of documents without text leaves no shard waiting.
    int64_t pending_eot;
    // fraction mode: all tokens kept until the total is known
    int keep_all;
    uint32_t *all;
    size_t all_len, all_cap;
    Sink sink;
} Prepro;

static void feed_tokens(Prepro *pp, const uint32_t *toks, size_t n) {
    if (pp->keep_all) {
        if (pp->all_len + n > pp->all_cap) {
            size_t cap = pp->all_cap ? pp->all_cap : ((size_t)1 << 20);
            while (cap < pp->all_len + n) cap *= 2;
            pp->all = (uint32_t *)xrealloc(pp->all, cap * sizeof(uint32_t));
            pp->all_cap = cap;
        }
        memcpy(pp->all + pp->all_len, toks, n * sizeof(uint32_t));
        pp->all_len += n;
        return;
    }
    // Every call comes after a text token was counted (the end-of-text tokens before the
    // first one wait in pending_eot), so the split is usable as soon as MIN_SPLIT_TOKENS
    // tokens follow the val shard. The tokens are divided there: checked only after all n,
    // a document without a safe cut, which comes as one piece of any length, could close
    // any number of shards before the split was known to be good, each left waiting.
    Sink *s = &pp->sink;
    if (!s->ready) {
        int64_t need = s->val_target + MIN_SPLIT_TOKENS - s->total;
        size_t k = need <= 0 ? 0 : need < (int64_t)n ? (size_t)need : n;
        sink_emit(s, toks, k);
        toks += k;
        n -= k;
        if (s->total - s->val_target >= MIN_SPLIT_TOKENS) {
            s->ready = 1;
            sink_publish(s);
        }
    }
    sink_emit(s, toks, n);
}

// Passes on a piece's text tokens, already counted in text_tokens, after the end-of-text
// tokens held back before the first of them (Prepro.pending_eot).
static void emit(Prepro *pp, const uint32_t *toks, size_t n) {
    if (n == 0) return;
    if (pp->pending_eot > 0) {
        uint32_t eots[256];
        for (size_t i = 0; i < 256; i++) eots[i] = GPT2_EOT;
        while (pp->pending_eot > 0) {
            size_t k = pp->pending_eot < 256 ? (size_t)pp->pending_eot : 256;
            feed_tokens(pp, eots, k);
            pp->pending_eot -= (int64_t)k;
        }
    }
    feed_tokens(pp, toks, n);
}

static void emit_eot(Prepro *pp) {
    if (pp->text_tokens == 0) {
        pp->pending_eot++;
        return;
    }
    const uint32_t eot = GPT2_EOT;
    feed_tokens(pp, &eot, 1);
}

static int64_t tokens_so_far(const Prepro *pp) {
    return pp->pending_eot + (pp->keep_all ? (int64_t)pp->all_len : pp->sink.total);
}

static void progress(Prepro *pp, int final) {
    double now = wall_seconds();
    double interval = pp->progress_tty ? 1.0 : 10.0;
    if (!final && now - pp->last_progress < interval) return;
    if (now - pp->t0 < 2.0) return; // quiet for short inputs
    pp->last_progress = now;
    double mb = (double)pp->bytes_in / 1e6;
    fprintf(stderr, "%sprepro: %.1f MB read, %lld documents, %lld tokens, %.1f MB/s%s",
            pp->progress_tty ? "\r" : "", mb, (long long)pp->docs, (long long)tokens_so_far(pp),
            mb / (now - pp->t0), pp->progress_tty && !final ? "   " : "\n");
    fflush(stderr);
}

// Tokenizes the batch's segments in parallel and emits the tokens in order.
static void process_batch(Prepro *pp, Batch *b) {
    const uint8_t *t = b->text.data;
    // 1. cut long segments into pieces at safe positions
    Seg *pieces = NULL;
    size_t np = 0, pcap = 0;
    for (size_t i = 0; i < b->nseg; i++) {
        Seg s = b->segs[i];
        size_t start = s.off, end = s.off + s.len;
        int eot = s.eot;
        if (pp->chunk_bytes) {
            while (end - start > pp->chunk_bytes) {
                size_t p = start + pp->chunk_bytes;
                while (p < end && !safe_cut(t, start, p)) p++;
                if (p >= end) break;
                if (np == pcap) { pcap = pcap ? 2 * pcap : 1024; pieces = (Seg *)xrealloc(pieces, pcap * sizeof(Seg)); }
                Seg pc = {start, p - start, eot};
                pieces[np++] = pc;
                start = p;
                eot = 0;
            }
        }
        if (np == pcap) { pcap = pcap ? 2 * pcap : 1024; pieces = (Seg *)xrealloc(pieces, pcap * sizeof(Seg)); }
        Seg pc = {start, end - start, eot};
        pieces[np++] = pc;
    }
    // 2. group consecutive pieces into work items of about GROUP_BYTES
    size_t *item_start = (size_t *)xmalloc((np + 1) * sizeof(size_t));
    size_t nitems = 0, acc = 0;
    for (size_t i = 0; i < np; i++) {
        if (acc == 0) item_start[nitems++] = i;
        acc += pieces[i].len + 1;
        if (acc >= GROUP_BYTES) acc = 0;
    }
    item_start[nitems] = np;
    // 3. tokenize; piece_end[i] = length of its item's token vector after piece i
    TokenVec *out = (TokenVec *)xcalloc(nitems ? nitems : 1, sizeof(TokenVec));
    size_t *piece_end = (size_t *)xmalloc((np ? np : 1) * sizeof(size_t));
    const Tokenizer *tok = &pp->tok;
    long long nit = (long long)nitems;
#pragma omp parallel for schedule(dynamic, 1)
    for (long long it = 0; it < nit; it++) {
        for (size_t i = item_start[it]; i < item_start[it + 1]; i++) {
            tokenizer_encode(tok, t + pieces[i].off, pieces[i].len, &out[it]);
            piece_end[i] = out[it].len;
        }
    }
    // 4. emit in order, with an end-of-text token before every document
    for (size_t it = 0; it < nitems; it++) {
        size_t prev = 0;
        for (size_t i = item_start[it]; i < item_start[it + 1]; i++) {
            if (pieces[i].eot) { emit_eot(pp); pp->docs++; }
            pp->text_tokens += (int64_t)(piece_end[i] - prev);
            emit(pp, out[it].data + prev, piece_end[i] - prev);
            prev = piece_end[i];
        }
        tokenvec_free(&out[it]);
    }
    free(out);
    free(piece_end);
    free(item_start);
    free(pieces);
    b->text.len = 0;
    b->nseg = 0;
    progress(pp, 0);
}

// ---------------------------------------------------------------------------------------
// text input

// "-" reads standard input (a pipe works too: the input is read once, front to back).
static FILE *open_input(const Prepro *pp) {
    return strcmp(pp->input, "-") == 0 ? stdin : xfopen(pp->input, "rb");
}

static void read_text(Prepro *pp, int blank_line_docs) {
    FILE *f = open_input(pp);
    Batch b;
    memset(&b, 0, sizeof(b));
    Bytes *buf = &b.text; // unprocessed input, starting at a clean cut
    int at_doc_start = 1;  // buf[0] starts a document
    size_t *bounds = NULL, nb = 0, bcap = 0;
    for (;;) {
        bytes_reserve(buf, BATCH_BYTES);
        size_t got = fread(buf->data + buf->len, 1, BATCH_BYTES, f);
        if (got < BATCH_BYTES && ferror(f)) fatal("read error in %s: %s", pp->input, strerror(errno));
        buf->len += got;
        pp->bytes_in += (int64_t)got;
        int eof = got < BATCH_BYTES;
        const uint8_t *t = buf->data;
        // document boundaries: after every blank line, scanning left to right without
        // overlap. A line of spaces, tabs or '\r' is blank too, so that Windows' "\r\n\r\n"
        // (or "\r\n\n") separates documents as "\n\n" does.
        nb = 0;
        if (blank_line_docs) {
            for (size_t i = 0; i < buf->len;) {
                if (t[i] != '\n') { i++; continue; }
                size_t j = i + 1;
                while (j < buf->len && (t[j] == ' ' || t[j] == '\t' || t[j] == '\r')) j++;
                if (j < buf->len && t[j] == '\n') {
                    if (nb == bcap) {
                        bcap = bcap ? 2 * bcap : 1024;
                        bounds = (size_t *)xrealloc(bounds, bcap * sizeof(size_t));
                    }
                    bounds[nb++] = j + 1;
                    j++;
                }
                i = j;
            }
        }
        size_t cut;
        if (eof) cut = buf->len;
        else if (nb > 0) cut = bounds[nb - 1];
        else {
            cut = buf->len - 1; // safe_cut looks at t[cut]
            while (cut > 0 && !safe_cut(t, 0, cut)) cut--;
            if (cut == 0) continue; // no clean cut yet: read more
        }
        // segments of [0, cut)
        size_t start = 0;
        int eot = at_doc_start;
        for (size_t k = 0; k < nb && bounds[k] <= cut; k++) {
            batch_add(&b, start, bounds[k] - start, eot);
            start = bounds[k];
            eot = 1;
        }
        if (cut > start) batch_add(&b, start, cut - start, eot);
        at_doc_start = (start == cut) ? eot : 0; // the next byte starts a document
        // process, keeping the unprocessed tail
        size_t rest = buf->len - cut;
        uint8_t *tail = NULL;
        if (rest) { tail = (uint8_t *)xmalloc(rest); memcpy(tail, t + cut, rest); }
        buf->len = cut;
        process_batch(pp, &b);
        if (rest) { bytes_append(buf, tail, rest); free(tail); }
        if (eof) break;
    }
    fclose(f);
    // a document that starts at the very end is empty (empty file, or a file ending in
    // "\n\n" with --text-docs blank-lines): it still gets its end-of-text token
    if (at_doc_start) {
        batch_add(&b, 0, 0, 1);
        process_batch(pp, &b);
    }
    free(bounds);
    free(b.text.data);
    free(b.segs);
}

// ---------------------------------------------------------------------------------------
// JSONL input: a small strict JSON parser (RFC 8259) that keeps only the "text" string

typedef struct {
    const uint8_t *s;
    size_t n, i;
    const char *err;
} Json;

static void json_ws(Json *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static int json_fail(Json *j, const char *msg) {
    if (!j->err) j->err = msg;
    return 0;
}

static void utf8_put(Bytes *out, uint32_t cp) {
    if (cp < 0x80) bytes_push(out, (uint8_t)cp);
    else if (cp < 0x800) {
        bytes_push(out, (uint8_t)(0xC0 | (cp >> 6)));
        bytes_push(out, (uint8_t)(0x80 | (cp & 0x3F)));
    }
    else if (cp < 0x10000) {
        bytes_push(out, (uint8_t)(0xE0 | (cp >> 12)));
        bytes_push(out, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
        bytes_push(out, (uint8_t)(0x80 | (cp & 0x3F)));
    } else {
        bytes_push(out, (uint8_t)(0xF0 | (cp >> 18)));
        bytes_push(out, (uint8_t)(0x80 | ((cp >> 12) & 0x3F)));
        bytes_push(out, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
        bytes_push(out, (uint8_t)(0x80 | (cp & 0x3F)));
    }
}

static int json_hex4(Json *j, uint32_t *out) {
    if (j->i + 4 > j->n) return json_fail(j, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = j->s[j->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return json_fail(j, "bad hex digit in \\u escape");
    }
    *out = v;
    return 1;
}

// Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not valid UTF-8.
static size_t utf8_valid_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; // allowed range of the second byte
    if (c < 0x80) return 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < len; k++) if ((s[k] & 0xC0) != 0x80) return 0;
    return len;
}

// Parses the string at j->i (which is '"'); appends its decoded UTF-8 to out (if given).
static int json_string(Json *j, Bytes *out) {
    if (j->i >= j->n || j->s[j->i] != '"') return json_fail(j, "expected a string");
    j->i++;
    for (;;) {
        if (j->i >= j->n) return json_fail(j, "unterminated string");
        uint8_t c = j->s[j->i];
        if (c == '"') { j->i++; return 1; }
        if (c < 0x20) return json_fail(j, "control character in a string (must be escaped)");
        if (c == '\\') {
            if (j->i + 1 >= j->n) return json_fail(j, "unterminated escape");
            uint8_t e = j->s[j->i + 1];
            j->i += 2;
            uint8_t lit = 0;
            switch (e) {
            case '"': lit = '"'; break;
            case '\\': lit = '\\'; break;
            case '/': lit = '/'; break;
            case 'b': lit = '\b'; break;
            case 'f': lit = '\f'; break;
            case 'n': lit = '\n'; break;
            case 'r': lit = '\r'; break;
            case 't': lit = '\t'; break;
            case 'u': {
                uint32_t cp;
                if (!json_hex4(j, &cp)) return 0;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return json_fail(j, "unpaired low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (j->i + 2 > j->n || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u')
                        return json_fail(j, "high surrogate \\u escape not followed by a low surrogate");
                    j->i += 2;
                    uint32_t lo;
                    if (!json_hex4(j, &lo)) return 0;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return json_fail(j, "high surrogate \\u escape not followed by a low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (out) utf8_put(out, cp);
                continue;
            }
            default: return json_fail(j, "unknown escape in a string");
            }
            if (out) bytes_push(out, lit);
            continue;
        }
        size_t len = utf8_valid_len(j->s + j->i, j->n - j->i);
        if (!len) return json_fail(j, "invalid UTF-8 in a string");
        if (out) bytes_append(out, j->s + j->i, len);
        j->i += len;
    }
}

static int json_digits(Json *j) {
    size_t s = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > s;
}

static int json_number(Json *j) {
    if (j->i < j->n && j->s[j->i] == '-') j->i++;
    if (j->i < j->n && j->s[j->i] == '0') j->i++;
    else if (!json_digits(j)) return json_fail(j, "invalid number");
    if (j->i < j->n && j->s[j->i] == '.') { j->i++; if (!json_digits(j)) return json_fail(j, "invalid number"); }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (!json_digits(j)) return json_fail(j, "invalid number");
    }
    return 1;
}

static int json_literal(Json *j, const char *lit) {
    size_t n = strlen(lit);
    if (j->i + n > j->n || memcmp(j->s + j->i, lit, n) != 0) return json_fail(j, "invalid value");
    j->i += n;
    return 1;
}

static int json_value(Json *j, int depth);

static int json_container(Json *j, int depth, int is_obj) {
    uint8_t close = is_obj ? '}' : ']';
    j->i++; // '{' or '['
    json_ws(j);
    if (j->i < j->n && j->s[j->i] == close) { j->i++; return 1; }
    for (;;) {
        json_ws(j);
        if (is_obj) {
            if (j->i >= j->n || j->s[j->i] != '"') return json_fail(j, "expected a string key");
            if (!json_string(j, NULL)) return 0;
            json_ws(j);
            if (j->i >= j->n || j->s[j->i] != ':') return json_fail(j, "expected ':'");
            j->i++;
            json_ws(j);
        }
        if (!json_value(j, depth + 1)) return 0;
        json_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
        if (j->i < j->n && j->s[j->i] == close) { j->i++; return 1; }
        return json_fail(j, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int json_value(Json *j, int depth) {
    if (depth > 512) return json_fail(j, "nested too deeply");
    if (j->i >= j->n) return json_fail(j, "expected a value");
    switch (j->s[j->i]) {
    case '"': return json_string(j, NULL);
    case '{': return json_container(j, depth, 1);
    case '[': return json_container(j, depth, 0);
    case 't': return json_literal(j, "true");
    case 'f': return json_literal(j, "false");
    case 'n': return json_literal(j, "null");
    default:
        if (j->s[j->i] == '-' || (j->s[j->i] >= '0' && j->s[j->i] <= '9')) return json_number(j);
        return json_fail(j, "invalid value");
    }
}

// Parses one JSONL line: an object whose "text" member is a string. On success the
// decoded text is in *text and 1 is returned; 0 with j->err set otherwise.
static int json_line_text(Json *j, Bytes *text, Bytes *key) {
    int found = 0;
    json_ws(j);
    if (j->i >= j->n || j->s[j->i] != '{') return json_fail(j, "not a JSON object");
    j->i++;
    json_ws(j);
    if (j->i < j->n && j->s[j->i] == '}') j->i++;
    else {
        for (;;) {
            json_ws(j);
            key->len = 0;
            if (j->i >= j->n || j->s[j->i] != '"') return json_fail(j, "expected a string key");
            if (!json_string(j, key)) return 0;
            json_ws(j);
            if (j->i >= j->n || j->s[j->i] != ':') return json_fail(j, "expected ':'");
            j->i++;
            json_ws(j);
            if (key->len == 4 && memcmp(key->data, "text", 4) == 0) {
                if (j->i >= j->n || j->s[j->i] != '"') return json_fail(j, "\"text\" is not a string");
                text->len = 0; // a repeated key: the last one wins, as in Python's json
                if (!json_string(j, text)) return 0;
                found = 1;
            } else if (!json_value(j, 1)) {
                return 0;
            }
            json_ws(j);
            if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
            if (j->i < j->n && j->s[j->i] == '}') { j->i++; break; }
            return json_fail(j, "expected ',' or '}'");
        }
    }
    json_ws(j);
    if (j->i != j->n) return json_fail(j, "extra characters after the object");
    if (!found) return json_fail(j, "no \"text\" field");
    return 1;
}

static void read_jsonl(Prepro *pp) {
    FILE *f = open_input(pp);
    Batch b;
    memset(&b, 0, sizeof(b));
    Bytes text = {NULL, 0, 0}, key = {NULL, 0, 0};
    char *line = NULL;
    size_t linecap = 0;
    long long lineno = 0;
    for (;;) {
        errno = 0;
        ssize_t n = getline(&line, &linecap, f);
        if (n < 0) {
            if (ferror(f)) fatal("read error in %s: %s", pp->input, strerror(errno));
            break;
        }
        lineno++;
        pp->bytes_in += n;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') len--;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == len) continue; // blank line
        Json j = {(const uint8_t *)line, len, 0, NULL};
        if (!json_line_text(&j, &text, &key))
            fatal("%s:%lld: invalid JSONL line: %s (at byte %zu of the line)", pp->input, lineno,
                  j.err ? j.err : "parse error", j.i + 1);
        batch_add(&b, b.text.len, text.len, 1);
        bytes_append(&b.text, text.data, text.len);
        if (b.text.len >= BATCH_BYTES) process_batch(pp, &b);
    }
    if (b.nseg) process_batch(pp, &b);
    fclose(f);
    free(line);
    free(text.data);
    free(key.data);
    free(b.text.data);
    free(b.segs);
}

// ---------------------------------------------------------------------------------------

// What a refused or failed run takes back: its temporary shards, and the directories it
// created for them (each removed only if empty). g_run is NULL once the run succeeded.
static Prepro *g_run;
static char *g_made_dirs[64];
static int g_nmade;

static void remove_partial_outputs(void) {
    if (!g_run) return;
    Sink *s = &g_run->sink;
    if (s->open) {
        fclose(s->af.f);
        remove(s->af.tmp_path);
    }
    for (int i = 0; i < s->ndone; i++) remove(s->done[i].af.tmp_path);
    while (g_nmade > 0) rmdir(g_made_dirs[--g_nmade]);
}

static void make_dir(const char *p) {
    if (mkdir(p, 0755) == 0) {
        if (g_nmade < (int)(sizeof g_made_dirs / sizeof g_made_dirs[0])) g_made_dirs[g_nmade++] = xstrdup(p);
    } else if (errno != EEXIST) {
        fatal("cannot create directory %s: %s", p, strerror(errno));
    }
}

static void mkdir_p(const char *dir) {
    char *p = xstrdup(dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        make_dir(p);
        *s = '/';
    }
    make_dir(p);
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("--out-dir %s is not a directory", p);
    free(p);
}

// Stops unless the split of total tokens gives both parts what the loader needs, before
// anything is renamed into place (MIN_SPLIT_TOKENS).
static void check_split(const char *input, int64_t total, int64_t val, float val_fraction) {
    if (val_fraction > 0.0f && val < MIN_SPLIT_TOKENS)
        fatal("--val-fraction %g of the %lld tokens of %s gives a val shard of %lld tokens; it needs at least "
              "%d (one input and its target): raise --val-fraction, or give 0 for no val shard", (double)val_fraction,
              (long long)total, input, (long long)val, MIN_SPLIT_TOKENS);
    int64_t train = total > val ? total - val : 0;
    if (train < MIN_SPLIT_TOKENS)
        fatal("%s has only %lld tokens: after the %lld of the val shard %lld are left for training, and training "
              "needs at least %d (one input and its target): lower --val-tokens or --val-fraction; no shard written",
              input, (long long)total, (long long)val, (long long)train, MIN_SPLIT_TOKENS);
}

int main(int argc, char **argv) {
    const char *input = NULL, *format = "text", *out_dir = NULL, *name = NULL;
    const char *tok_dir = "data/gpt2", *text_docs = "whole";
    int val_tokens = -1, shard_tokens = 100000000, threads = 0, chunk_bytes = 1 << 18, small_shards = 0;
    float val_fraction = -1.0f;
    ArgSpec specs[] = {
        {NULL, "--input", ARG_STRING, &input, "input file, or - for standard input (required)"},
        {NULL, "--format", ARG_STRING, &format, "text or jsonl (one JSON object with a \"text\" string per line)"},
        {NULL, "--text-docs", ARG_STRING, &text_docs,
         "text format: whole (the file is one document) or blank-lines (a new document after every blank "
         "line, as llm.c's Tiny Shakespeare; a line of spaces, tabs or \\r is blank too)"},
        {NULL, "--out-dir", ARG_STRING, &out_dir, "output directory, created if missing (required)"},
        {NULL, "--name", ARG_STRING, &name,
         "shard name prefix: NAME_val_000000.bin, NAME_train_000000.bin, ... (required)"},
        {NULL, "--val-tokens", ARG_INT, &val_tokens,
         "the first N tokens go to the val shard; 0 = no val shard; -1 = 32768 unless --val-fraction is given"},
        {NULL, "--val-fraction", ARG_FLOAT, &val_fraction,
         "instead of --val-tokens: this fraction of all tokens goes to val (keeps all tokens in memory, "
         "4 bytes each); -1 = unused"},
        {NULL, "--shard-tokens", ARG_INT, &shard_tokens, "tokens per train shard (at least 1048576)"},
        {NULL, "--allow-small-shards", ARG_SWITCH, &small_shards, "1 = allow --shard-tokens below 1048576 (tests)"},
        {NULL, "--threads", ARG_INT, &threads, "tokenizer threads, up to 4096; 0 = all cores"},
        {NULL, "--chunk-bytes", ARG_INT, &chunk_bytes,
         "cut documents longer than this into pieces tokenized in parallel; 0 = never cut (the output is "
         "the same either way)"},
        {NULL, "--tokenizer-dir", ARG_STRING, &tok_dir, "directory with vocab.bpe and encoder.json"},
    };
    int nspecs = (int)(sizeof(specs) / sizeof(specs[0]));
    const char *usage =
        "usage: prepro --input FILE [--format text|jsonl] --out-dir DIR --name NAME\n"
        "              [--val-tokens N | --val-fraction F] [--shard-tokens N] [--threads N]\n"
        "              [--tokenizer-dir data/gpt2]\n\n"
        "Tokenizes FILE with the GPT-2 tokenizer into uint16 token shards (version 1):\n"
        "every document is preceded by the end-of-text token 50256; the first tokens go to\n"
        "DIR/NAME_val_000000.bin, the rest to DIR/NAME_train_%06d.bin. Shards are written\n"
        "atomically; stale train shards numbered beyond the new ones are removed.";
    args_parse(argc, argv, specs, nspecs, usage);

    if (!input) fatal("--input is required (see --help)");
    if (!out_dir) fatal("--out-dir is required (see --help)");
    if (!name || !*name || strchr(name, '/')) fatal("--name is required and must not contain '/' (see --help)");
    int is_jsonl;
    if (!strcmp(format, "text")) is_jsonl = 0;
    else if (!strcmp(format, "jsonl")) is_jsonl = 1;
    else fatal("--format must be text or jsonl, not '%s'", format);
    int blank_line_docs;
    if (!strcmp(text_docs, "whole")) blank_line_docs = 0;
    else if (!strcmp(text_docs, "blank-lines")) blank_line_docs = 1;
    else fatal("--text-docs must be whole or blank-lines, not '%s'", text_docs);
    // -1 is "unused"; every other value must be in range, written so that NaN fails it
    int use_fraction = val_fraction != -1.0f;
    if (use_fraction && !(val_fraction >= 0.0f && val_fraction < 1.0f))
        fatal("--val-fraction must be in [0, 1), not %g", (double)val_fraction);
    if (val_tokens >= 0 && use_fraction) fatal("give --val-tokens or --val-fraction, not both");
    if (val_tokens < -1) fatal("--val-tokens must be >= 0, not %d", val_tokens);
    if (val_tokens > 0 && val_tokens < MIN_SPLIT_TOKENS)
        fatal("--val-tokens %d: a val shard needs at least %d tokens (one input and its target); 0 = no val shard",
              val_tokens, MIN_SPLIT_TOKENS);
    if (shard_tokens <= 0) fatal("--shard-tokens must be positive, not %d", shard_tokens);
    if (shard_tokens < MIN_SHARD_TOKENS && !small_shards)
        fatal("--shard-tokens %d is below %d and makes many small files, each synced to disk on its own "
              "(add --allow-small-shards 1 if that is meant)", shard_tokens, MIN_SHARD_TOKENS);
    if (threads < 0 || threads > MAX_THREADS)
        fatal("--threads must be from 0 (all cores) to %d, not %d", MAX_THREADS, threads);
    if (chunk_bytes < 0) fatal("--chunk-bytes must be >= 0, not %d", chunk_bytes);
    if (!use_fraction && val_tokens < 0) val_tokens = 32768;
    struct stat st;
    if (strcmp(input, "-") != 0) {
        if (stat(input, &st) != 0) fatal("cannot open --input %s: %s", input, strerror(errno));
        if (S_ISDIR(st.st_mode)) fatal("--input %s is a directory, not a file", input);
        if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) fatal("--input %s is not a regular file or a pipe", input);
        if (S_ISREG(st.st_mode) && st.st_size == 0)
            fatal("--input %s is empty: no documents to tokenize, no shard written", input);
    }
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
    int nthreads = omp_get_max_threads();
#else
    if (threads > 1) fprintf(stderr, "prepro: built without OpenMP, using 1 thread\n");
    int nthreads = 1;
#endif

    Prepro *pp = (Prepro *)xcalloc(1, sizeof(Prepro));
    pp->input = input;
    pp->chunk_bytes = (size_t)chunk_bytes;
    pp->t0 = pp->last_progress = wall_seconds();
    pp->progress_tty = isatty(2);
    pp->keep_all = use_fraction;
    tokenizer_init(&pp->tok, tok_dir);
    g_run = pp;
    static int cleanup_registered = 0;
    if (!cleanup_registered++) atexit(remove_partial_outputs);
    mkdir_p(out_dir);
    Sink *s = &pp->sink;
    s->out_dir = out_dir;
    s->name = name;
    s->val_target = use_fraction ? 0 : val_tokens;
    s->shard_tokens = shard_tokens;
    s->wbuf = (uint16_t *)xmalloc(WRITE_TOKENS * sizeof(uint16_t));

    printf("prepro: %s (%s) -> %s/%s_{val,train}_*.bin, %d threads\n", input, format, out_dir, name, nthreads);
    if (is_jsonl) read_jsonl(pp);
    else read_text(pp, blank_line_docs);
    progress(pp, 1);

    // only end-of-text tokens: an empty input, or documents without text
    const char *shown = strcmp(input, "-") ? input : "standard input";
    if (pp->text_tokens == 0)
        fatal("%s holds no text to tokenize (%lld bytes, %lld document%s, none with a token): no shard written",
              shown, (long long)pp->bytes_in, (long long)pp->docs, pp->docs == 1 ? "" : "s");
    if (use_fraction) {
        double v = (double)val_fraction * (double)pp->all_len + 0.5;
        s->val_target = (int64_t)v;
        check_split(shown, (int64_t)pp->all_len, s->val_target, val_fraction);
        s->ready = 1;
        pp->keep_all = 0;
        for (size_t i = 0; i < pp->all_len; i += WRITE_TOKENS) {
            size_t n = pp->all_len - i < WRITE_TOKENS ? pp->all_len - i : WRITE_TOKENS;
            sink_emit(s, pp->all + i, n);
        }
        free(pp->all);
    } else {
        check_split(shown, s->total, s->val_target, val_fraction);
    }
    s->ready = 1;
    sink_close(s);
    sink_publish(s); // shards closed before the split was known to be good
    g_run = NULL;
    while (g_nmade > 0) free(g_made_dirs[--g_nmade]);
    // remove shards of an earlier, larger run that the glob NAME_train_*.bin would pick up
    char path[4096];
    for (int k = s->train_index;; k++) {
        sink_shard_path(s, 0, k, path, sizeof(path));
        if (!file_exists(path)) break;
        if (remove(path) != 0) fatal("cannot remove the stale shard %s: %s", path, strerror(errno));
        printf("  removed stale %s\n", path);
    }
    if (s->val_target == 0) {
        sink_shard_path(s, 1, 0, path, sizeof(path));
        if (file_exists(path)) {
            if (remove(path) != 0) fatal("cannot remove the stale shard %s: %s", path, strerror(errno));
            printf("  removed stale %s\n", path);
        }
    }
    double secs = wall_seconds() - pp->t0;
    printf("prepro: %lld bytes, %lld documents, %lld tokens (val %lld, train %lld in %d shard%s) "
           "in %.2f s (%.1f MB/s)\n", (long long)pp->bytes_in, (long long)pp->docs,
           (long long)s->total, (long long)s->val_written, (long long)s->train_written,
           s->train_shards, s->train_shards == 1 ? "" : "s", secs,
           (double)pp->bytes_in / 1e6 / (secs > 0 ? secs : 1e-9));
    tokenizer_free(&pp->tok);
    free(s->wbuf);
    free(pp);
    return 0;
}

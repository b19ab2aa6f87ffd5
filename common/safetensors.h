// safetensors.h: the safetensors format (Hugging Face's weight files) and the mapping
// between our GPT-2 parameters and transformers' GPT-2 names, in both directions.
//   json_*         a small bounded JSON parser (the header of a safetensors file, config.json)
//   st_*           reader and writer of one safetensors file
//   gpt2_hf_*      our parameters <-> a Hugging Face GPT-2 directory (config.json +
//                  model.safetensors, or a sharded model.safetensors.index.json)
// Readers trust nothing in a file: every problem stops through fatal() naming the file
// and what is wrong. Format and mapping: docs/huggingface.md.
#ifndef COMMON_SAFETENSORS_H
#define COMMON_SAFETENSORS_H
#include "util.h"
#include "checkpoint.h"
#include <fcntl.h>
#include <limits.h>
#include <math.h>

// ---------------------------------------------------------------------------
// JSON: every value of a document lives in one arena, freed at once, so that a parse
// that fails half-way leaks nothing and needs no unwinding of partial trees.

#define JSON_MAX_DEPTH 64
#define JSON_MAX_VALUES (1 << 22)  // bounds memory: a 100 MB "[0,0,..." would otherwise need gigabytes

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    size_t len;                // string bytes, or items of an array or object
    char *str;                 // string: decoded UTF-8, NUL-terminated (may hold NULs: see len)
    double num;                // number
    int is_uint;               // number written as a plain non-negative integer that fits u
    uint64_t u;                // exact value of such a number (offsets exceed a double's 2^53)
    char **keys;               // object: keys (decoded), len of them
    size_t *key_lens;
    struct JsonValue *items;   // array items or object values
} JsonValue;

typedef struct {
    void **blocks;
    size_t nblocks, cap;
    size_t nvalues;
    const char *p, *end, *start;
    char err[160];
    JsonValue root;
} JsonDoc;

static inline void *json__keep(JsonDoc *d, void *p) {
    if (d->nblocks == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->blocks = (void **)xrealloc(d->blocks, d->cap * sizeof(void *));
    }
    d->blocks[d->nblocks++] = p;
    return p;
}

static inline void json_free(JsonDoc *d) {
    for (size_t i = 0; i < d->nblocks; i++) free(d->blocks[i]);
    free(d->blocks);
    memset(d, 0, sizeof *d);
}

static inline int json__fail(JsonDoc *d, const char *what) {
    if (!d->err[0]) snprintf(d->err, sizeof d->err, "%s at byte %zu", what, (size_t)(d->p - d->start));
    return 0;
}

static inline void json__ws(JsonDoc *d) {
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r')) d->p++;
}

static inline int json__hex4(JsonDoc *d, unsigned *out) {
    if (d->end - d->p < 4) return json__fail(d, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *d->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return json__fail(d, "bad hex digit in \\u escape");
    }
    *out = v;
    return 1;
}

// Length of the valid UTF-8 sequence at p (1..4), or 0: a header must be UTF-8, and
// overlong forms and surrogates would let two spellings name one tensor.
static inline int json__utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!n || end - p < n) return 0;
    unsigned cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

static inline size_t json__put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

// After the opening quote. The decoded string is never longer than its source.
static inline int json__string(JsonDoc *d, char **out, size_t *out_len) {
    const char *q = d->p;
    while (q < d->end && *q != '"') q += (*q == '\\' && q + 1 < d->end) ? 2 : 1;
    if (q >= d->end) return json__fail(d, "unterminated string");
    char *s = (char *)json__keep(d, xmalloc((size_t)(q - d->p) + 1));
    size_t n = 0;
    while (*d->p != '"') {
        unsigned char c = (unsigned char)*d->p;
        if (c < 0x20) return json__fail(d, "control character in a string");
        if (c != '\\') {
            int k = json__utf8_len((const unsigned char *)d->p, (const unsigned char *)d->end);
            if (!k) return json__fail(d, "invalid UTF-8 in a string");
            memcpy(s + n, d->p, (size_t)k);
            n += (size_t)k;
            d->p += k;
            continue;
        }
        d->p++;
        char e = *d->p++;
        unsigned cp;
        switch (e) {
        case '"': s[n++] = '"'; break;
        case '\\': s[n++] = '\\'; break;
        case '/': s[n++] = '/'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'n': s[n++] = '\n'; break;
        case 'r': s[n++] = '\r'; break;
        case 't': s[n++] = '\t'; break;
        case 'u':
            if (!json__hex4(d, &cp)) return 0;
            if (cp >= 0xdc00 && cp <= 0xdfff) return json__fail(d, "lone low surrogate in \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (d->end - d->p < 2 || d->p[0] != '\\' || d->p[1] != 'u')
                    return json__fail(d, "high surrogate without its low half");
                d->p += 2;
                if (!json__hex4(d, &lo)) return 0;
                if (lo < 0xdc00 || lo > 0xdfff) return json__fail(d, "high surrogate without its low half");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            n += json__put_utf8(s + n, cp);
            break;
        default: d->p--; return json__fail(d, "bad escape in a string");
        }
    }
    d->p++;
    s[n] = 0;
    *out = s;
    *out_len = n;
    return 1;
}

static inline int json__number(JsonDoc *d, JsonValue *v) {
    const char *s = d->p, *q = d->p;
    int plain = 1;
    if (q < d->end && *q == '-') { q++; plain = 0; }
    if (q >= d->end || *q < '0' || *q > '9') return json__fail(d, "bad number");
    if (*q == '0') q++;
    else while (q < d->end && *q >= '0' && *q <= '9') q++;
    if (q < d->end && *q == '.') {
        plain = 0;
        if (++q >= d->end || *q < '0' || *q > '9') return json__fail(d, "bad number: no digit after '.'");
        while (q < d->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < d->end && (*q == 'e' || *q == 'E')) {
        plain = 0;
        q++;
        if (q < d->end && (*q == '+' || *q == '-')) q++;
        if (q >= d->end || *q < '0' || *q > '9') return json__fail(d, "bad number: no digit in the exponent");
        while (q < d->end && *q >= '0' && *q <= '9') q++;
    }
    size_t n = (size_t)(q - s);
    char small[64];
    char *buf = n < sizeof small ? small : (char *)xmalloc(n + 1);
    memcpy(buf, s, n);
    buf[n] = 0;
    v->type = JSON_NUMBER;
    v->num = strtod(buf, NULL);
    if (buf != small) free(buf);
    v->is_uint = 0;
    if (plain) {
        uint64_t u = 0;
        int ok = 1;
        for (const char *c = s; c < q && ok; c++) {
            unsigned dgt = (unsigned)(*c - '0');
            if (u > (UINT64_MAX - dgt) / 10) ok = 0;
            else u = u * 10 + dgt;
        }
        v->is_uint = ok;
        v->u = ok ? u : 0;
    }
    d->p = q;
    return 1;
}

static inline int json__lit(JsonDoc *d, const char *word, JsonType t, JsonValue *v) {
    size_t n = strlen(word);
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0) return json__fail(d, "unexpected character");
    d->p += n;
    v->type = t;
    return 1;
}

static inline int json__value(JsonDoc *d, JsonValue *v, int depth);

// Arrays and objects: items gather in a growing buffer owned here until complete.
static inline int json__container(JsonDoc *d, JsonValue *v, int depth, int is_object) {
    char close = is_object ? '}' : ']';
    size_t n = 0, cap = 0;
    JsonValue *items = NULL;
    char **keys = NULL;
    size_t *key_lens = NULL;
    int ok = 1;
    d->p++;
    json__ws(d);
    if (d->p < d->end && *d->p == close) {
        d->p++;
    } else {
        for (;;) {
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                items = (JsonValue *)xrealloc(items, cap * sizeof *items);
                if (is_object) {
                    keys = (char **)xrealloc(keys, cap * sizeof *keys);
                    key_lens = (size_t *)xrealloc(key_lens, cap * sizeof *key_lens);
                }
            }
            json__ws(d);
            if (is_object) {
                if (d->p >= d->end || *d->p != '"') { ok = json__fail(d, "expected a string key"); break; }
                d->p++;
                if (!(ok = json__string(d, &keys[n], &key_lens[n]))) break;
                json__ws(d);
                if (d->p >= d->end || *d->p != ':') { ok = json__fail(d, "expected ':' after a key"); break; }
                d->p++;
            }
            if (!(ok = json__value(d, &items[n], depth + 1))) break;
            n++;
            json__ws(d);
            if (d->p < d->end && *d->p == ',') { d->p++; continue; }
            if (d->p < d->end && *d->p == close) { d->p++; break; }
            ok = json__fail(d, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
            break;
        }
    }
    if (!ok) {
        free(items);
        free(keys);
        free(key_lens);
        return 0;
    }
    v->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    v->len = n;
    v->items = items ? (JsonValue *)json__keep(d, items) : NULL;
    v->keys = keys ? (char **)json__keep(d, keys) : NULL;
    v->key_lens = key_lens ? (size_t *)json__keep(d, key_lens) : NULL;
    return 1;
}

static inline int json__value(JsonDoc *d, JsonValue *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > JSON_MAX_DEPTH) return json__fail(d, "nested too deeply");
    if (++d->nvalues > JSON_MAX_VALUES) return json__fail(d, "too many values");
    json__ws(d);
    if (d->p >= d->end) return json__fail(d, "unexpected end of the text");
    switch (*d->p) {
    case '{': return json__container(d, v, depth, 1);
    case '[': return json__container(d, v, depth, 0);
    case '"':
        d->p++;
        v->type = JSON_STRING;
        return json__string(d, &v->str, &v->len);
    case 't': return json__lit(d, "true", JSON_TRUE, v);
    case 'f': return json__lit(d, "false", JSON_FALSE, v);
    case 'n': return json__lit(d, "null", JSON_NULL, v);
    default:
        if (*d->p != '-' && (*d->p < '0' || *d->p > '9')) return json__fail(d, "unexpected character");
        return json__number(d, v);
    }
}

// Parses text[0..n) (one value, whitespace around it). Returns 1, or 0 with d->err set;
// either way json_free(d) releases everything.
static inline int json_parse(JsonDoc *d, const char *text, size_t n) {
    memset(d, 0, sizeof *d);
    d->p = d->start = text;
    d->end = text + n;
    if (!json__value(d, &d->root, 1)) return 0;
    json__ws(d);
    if (d->p != d->end) return json__fail(d, "text after the JSON value");
    return 1;
}

// The value of key in an object, or NULL. The last one wins, as in Python's json.
static inline const JsonValue *json_get(const JsonValue *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->len; i-- > 0;)
        if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return &obj->items[i];
    return NULL;
}

// Text built in memory (a safetensors header, config.json), then written in one go.
typedef struct {
    char *p;
    size_t n, cap;
} TextBuf;

__attribute__((format(printf, 2, 3)))
static inline void tb_printf(TextBuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) fatal("internal: bad format building text");
        if (b->p && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
        b->cap = 2 * (b->cap + (size_t)k) + 64;
        b->p = (char *)xrealloc(b->p, b->cap);
    }
}

// s as a JSON string: quotes and escapes; UTF-8 passes through.
static inline void tb_json_string(TextBuf *b, const char *s) {
    tb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') tb_printf(b, "\\%c", *p);
        else if (*p < 0x20) tb_printf(b, "\\u%04x", *p);
        else tb_printf(b, "%c", *p);
    }
    tb_printf(b, "\"");
}

// ---------------------------------------------------------------------------
// safetensors: u64 little-endian N, N bytes of JSON header, then the data. Each header
// entry is {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to
// the data start; "__metadata__" maps strings to strings.

#define ST_MAX_HEADER ((uint64_t)100 << 20)
#define ST_MAX_DIMS 8

typedef enum { ST_F32, ST_BF16, ST_F16 } StDtype;

static inline const char *st_dtype_name(StDtype t) { return t == ST_F32 ? "F32" : t == ST_BF16 ? "BF16" : "F16"; }
static inline size_t st_dtype_size(StDtype t) { return t == ST_F32 ? 4 : 2; }

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;  // relative to the data start
} StTensor;

typedef struct {
    char *path;
    FILE *f;
    uint64_t file_size, data_start;
    StTensor *tensors;  // sorted by name
    size_t n;
    JsonDoc doc;        // holds the names and the metadata
    const JsonValue *metadata;  // the "__metadata__" object, or NULL
} StFile;

static inline float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) u = sign;
    else {  // subnormal: normalise
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline int st__by_name(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

static inline int st__by_offset(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static inline int st__uint_array(const JsonValue *v, size_t max, uint64_t *out, size_t *n) {
    if (!v || v->type != JSON_ARRAY || v->len > max) return 0;
    for (size_t i = 0; i < v->len; i++) {
        if (v->items[i].type != JSON_NUMBER || !v->items[i].is_uint) return 0;
        out[i] = v->items[i].u;
    }
    *n = v->len;
    return 1;
}

// Opens and checks a safetensors file: the header, each entry, and that the tensors tile
// the data exactly (no overlap, no gap, nothing after: what the reference library checks).
static inline void st_open(StFile *st, const char *path) {
    memset(st, 0, sizeof *st);
    st->path = xstrdup(path);
    const char *kind = not_regular_file(path);
    if (kind) fatal("%s is %s: a safetensors file is a regular file", path, kind);
    st->f = xfopen(path, "rb");
    int64_t fsize = xfile_size(st->f, path);
    st->file_size = (uint64_t)fsize;
    if (st->file_size < 8)
        fatal("%s is not a safetensors file: %llu bytes, shorter than the 8-byte header length", path,
              (unsigned long long)st->file_size);
    uint8_t lenb[8];
    xfread(lenb, 1, 8, st->f, path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenb[i];
    if (hlen > ST_MAX_HEADER)
        fatal("%s: safetensors header length %llu is absurd (the limit is %llu bytes): not a safetensors file?",
              path, (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > st->file_size - 8)
        fatal("%s: safetensors header length %llu exceeds the file (%llu bytes): truncated or not a safetensors file",
              path, (unsigned long long)hlen, (unsigned long long)st->file_size);
    if (hlen < 2) fatal("%s: safetensors header of %llu bytes cannot hold a JSON object", path,
                        (unsigned long long)hlen);
    char *text = (char *)xmalloc((size_t)hlen + 1);
    xfread(text, 1, (size_t)hlen, st->f, path);
    text[hlen] = 0;
    st->data_start = 8 + hlen;
    uint64_t data_len = st->file_size - st->data_start;
    // the format demands '{' first: a file starting otherwise is something else
    if (text[0] != '{') fatal("%s: the safetensors header does not begin with '{': not a safetensors file", path);
    if (!json_parse(&st->doc, text, (size_t)hlen))
        fatal("%s: the safetensors header is not valid JSON: %s", path, st->doc.err);
    free(text);
    const JsonValue *root = &st->doc.root;
    if (root->type != JSON_OBJECT) fatal("%s: the safetensors header is not a JSON object", path);
    st->tensors = (StTensor *)xcalloc(root->len ? root->len : 1, sizeof(StTensor));
    int have_meta = 0;
    for (size_t i = 0; i < root->len; i++) {
        const char *name = root->keys[i];
        const JsonValue *e = &root->items[i];
        if (strlen(name) != root->key_lens[i]) fatal("%s: a tensor name holds a NUL character", path);
        if (!strcmp(name, "__metadata__")) {
            if (have_meta++) fatal("%s: __metadata__ appears twice in the header", path);
            if (e->type != JSON_OBJECT) fatal("%s: __metadata__ is not an object of strings", path);
            for (size_t k = 0; k < e->len; k++)
                if (e->items[k].type != JSON_STRING)
                    fatal("%s: __metadata__ entry \"%s\" is not a string", path, e->keys[k]);
            st->metadata = e;
            continue;
        }
        if (e->type != JSON_OBJECT) fatal("%s: header entry for tensor %s is not an object", path, name);
        StTensor *t = &st->tensors[st->n++];
        t->name = root->keys[i];
        const JsonValue *dt = json_get(e, "dtype"), *sh = json_get(e, "shape"), *off = json_get(e, "data_offsets");
        if (!dt || dt->type != JSON_STRING) fatal("%s: tensor %s has no dtype string", path, name);
        if (!strcmp(dt->str, "F32")) t->dtype = ST_F32;
        else if (!strcmp(dt->str, "BF16")) t->dtype = ST_BF16;
        else if (!strcmp(dt->str, "F16")) t->dtype = ST_F16;
        else fatal("%s: tensor %s has dtype \"%s\", unsupported: only F32, BF16 and F16 are read", path, name,
                   dt->str);
        size_t nd = 0, no = 0;
        if (!st__uint_array(sh, ST_MAX_DIMS, t->shape, &nd))
            fatal("%s: tensor %s: shape is not an array of at most %d non-negative integers", path, name,
                  ST_MAX_DIMS);
        t->ndim = (int)nd;
        uint64_t offs[2];
        if (!st__uint_array(off, 2, offs, &no) || no != 2)
            fatal("%s: tensor %s: data_offsets is not an array of two non-negative integers", path, name);
        t->begin = offs[0];
        t->end = offs[1];
        // the element count, refusing overflow: a shape whose product wraps could match any size
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            if (!t->shape[d]) numel = 0;
        for (int d = 0; d < t->ndim && numel; d++) {
            if (numel > UINT64_MAX / 8 / t->shape[d]) fatal("%s: tensor %s: the shape's element count overflows",
                                                             path, name);
            numel *= t->shape[d];
        }
        t->numel = numel;
        if (t->end < t->begin)
            fatal("%s: tensor %s: data_offsets [%llu, %llu] end before they begin", path, name,
                  (unsigned long long)t->begin, (unsigned long long)t->end);
        uint64_t want = numel * st_dtype_size(t->dtype);
        if (t->end - t->begin != want)
            fatal("%s: tensor %s: data_offsets [%llu, %llu] span %llu bytes, but shape and dtype %s need %llu", path,
                  name, (unsigned long long)t->begin, (unsigned long long)t->end,
                  (unsigned long long)(t->end - t->begin), dt->str, (unsigned long long)want);
        if (t->end > data_len)
            fatal("%s: tensor %s: data_offsets [%llu, %llu] reach past the end of the data (%llu bytes): "
                  "the file is truncated or the offsets are out of range", path, name,
                  (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_len);
    }
    qsort(st->tensors, st->n, sizeof(StTensor), st__by_name);
    for (size_t i = 1; i < st->n; i++)
        if (!strcmp(st->tensors[i - 1].name, st->tensors[i].name))
            fatal("%s: tensor %s appears twice in the header (duplicate name)", path, st->tensors[i].name);
    StTensor **order = (StTensor **)xmalloc((st->n ? st->n : 1) * sizeof(StTensor *));
    for (size_t i = 0; i < st->n; i++) order[i] = &st->tensors[i];
    qsort(order, st->n, sizeof(StTensor *), st__by_offset);
    uint64_t at = 0;
    const StTensor *prev = NULL;
    for (size_t i = 0; i < st->n; i++) {
        const StTensor *t = order[i];
        if (t->begin < at)
            fatal("%s: tensors %s and %s overlap (bytes %llu..%llu and %llu..%llu of the data)", path, prev->name,
                  t->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                  (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->begin > at)
            fatal("%s: bytes %llu..%llu of the data belong to no tensor (a gap before %s)", path,
                  (unsigned long long)at, (unsigned long long)t->begin, t->name);
        at = t->end;
        prev = t;
    }
    free(order);
    if (at != data_len)
        fatal("%s: %llu bytes follow the last tensor's data: the header does not describe the whole file", path,
              (unsigned long long)(data_len - at));
}

// The tensor called name, or NULL.
static inline const StTensor *st_find(const StFile *st, const char *name) {
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (!c) return &st->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

// A metadata value, or NULL.
static inline const char *st_metadata(const StFile *st, const char *key) {
    const JsonValue *v = json_get(st->metadata, key);
    return v ? v->str : NULL;
}

// Reads a tensor's elements, converted to fp32, into out (numel floats).
static inline void st_read_f32(StFile *st, const StTensor *t, float *out) {
    if (fseeko(st->f, (off_t)(st->data_start + t->begin), SEEK_SET) != 0)
        fatal("cannot seek in %s: %s", st->path, strerror(errno));
    if (t->dtype == ST_F32) {
        xfread(out, 4, (size_t)t->numel, st->f, st->path);
        return;
    }
    const size_t chunk = 1 << 20;
    uint16_t *tmp = (uint16_t *)xmalloc(chunk * sizeof(uint16_t));
    for (uint64_t i = 0; i < t->numel; i += chunk) {
        size_t m = (size_t)(t->numel - i < chunk ? t->numel - i : chunk);
        xfread(tmp, 2, m, st->f, st->path);
        for (size_t j = 0; j < m; j++) out[i + j] = t->dtype == ST_BF16 ? bf16_to_float(tmp[j]) : f16_to_float(tmp[j]);
    }
    free(tmp);
}

static inline void st_close(StFile *st) {
    if (st->f) fclose(st->f);
    free(st->tensors);
    free(st->path);
    json_free(&st->doc);
    memset(st, 0, sizeof *st);
}

// Reads a file as its consumers do: checked, then every tensor converted and touched, so
// that a wrong size or offset shows under the sanitizers. The entry point of the fuzzer
// (dev/test/fuzz_readers.c): it returns, or stops through fatal().
static inline void fuzz_read_safetensors(const char *path) {
    StFile st;
    st_open(&st, path);
    volatile float sum = 0.0f;
    for (size_t i = 0; i < st.n; i++) {
        const StTensor *t = &st.tensors[i];
        float *x = (float *)xmalloc((size_t)t->numel * sizeof(float));
        st_read_f32(&st, t, x);
        for (uint64_t k = 0; k < t->numel; k++) sum += x[k];
        free(x);
        if (st_find(&st, t->name) != t) { fprintf(stderr, "st_find lost tensor %s\n", t->name); abort(); }
    }
    if (st.metadata)
        for (size_t k = 0; k < st.metadata->len; k++) (void)st_metadata(&st, st.metadata->keys[k]);
    st_close(&st);
}

// Writer: the header is known before any data (the offsets follow from the shapes), so
// data streams straight into the file, tensor after tensor in the order given.
typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
} StSpec;

typedef struct {
    AtomicFile a;
    uint64_t expect, written;
} StWriter;

static inline uint64_t st_spec_bytes(const StSpec *s) {
    uint64_t n = st_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    return n;
}

// meta: nmeta pairs of key, value.
static inline void st_write_begin(StWriter *w, const char *path, const StSpec *specs, size_t n,
                                  const char *const *meta, size_t nmeta) {
    TextBuf h = {NULL, 0, 0};
    tb_printf(&h, "{");
    if (nmeta) {
        tb_printf(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            tb_printf(&h, i ? "," : "");
            tb_json_string(&h, meta[2 * i]);
            tb_printf(&h, ":");
            tb_json_string(&h, meta[2 * i + 1]);
        }
        tb_printf(&h, "}");
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        tb_printf(&h, i || nmeta ? "," : "");
        tb_json_string(&h, specs[i].name);
        tb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(specs[i].dtype));
        for (int d = 0; d < specs[i].ndim; d++)
            tb_printf(&h, "%s%llu", d ? "," : "", (unsigned long long)specs[i].shape[d]);
        uint64_t b = st_spec_bytes(&specs[i]);
        tb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + b));
        off += b;
    }
    tb_printf(&h, "}");
    // padded with spaces to a multiple of 8, so that the data is aligned for memory mapping
    while (h.n % 8) tb_printf(&h, " ");
    w->a = atomic_open(path);
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    xfwrite(lenb, 1, 8, w->a.f, w->a.tmp_path);
    xfwrite(h.p, 1, h.n, w->a.f, w->a.tmp_path);
    free(h.p);
    w->expect = off;
    w->written = 0;
}

static inline void st_write_data(StWriter *w, const void *p, size_t bytes) {
    if (w->written + bytes > w->expect) fatal("internal: more tensor data than the header of %s declares", w->a.path);
    xfwrite(p, 1, bytes, w->a.f, w->a.tmp_path);
    w->written += bytes;
}

static inline void st_write_end(StWriter *w) {
    if (w->written != w->expect)
        fatal("internal: %llu bytes of tensor data written to %s, the header declares %llu",
              (unsigned long long)w->written, w->a.tmp_path, (unsigned long long)w->expect);
    atomic_commit(&w->a);
}

// ---------------------------------------------------------------------------
// GPT-2 in transformers' names. Its Conv1D layers store weights (in, out), the transpose
// of our (out, in); lm_head shares wte, and wte holds the real vocabulary only (V rows).

typedef struct {
    const char *suffix;  // after "h.<i>." (per layer) or the whole name
    int param;           // our tensor (P_*)
    int rows, cols;      // our shape in units of C: (rows*C, cols*C); cols 0: a vector of rows*C
    int transpose;       // stored (cols*C, rows*C)
} Gpt2HfTensor;

static const Gpt2HfTensor GPT2_HF_LAYER[12] = {
    {"ln_1.weight", P_LN1W, 1, 0, 0},       {"ln_1.bias", P_LN1B, 1, 0, 0},
    {"attn.c_attn.weight", P_QKVW, 3, 1, 1}, {"attn.c_attn.bias", P_QKVB, 3, 0, 0},
    {"attn.c_proj.weight", P_ATTPROJW, 1, 1, 1}, {"attn.c_proj.bias", P_ATTPROJB, 1, 0, 0},
    {"ln_2.weight", P_LN2W, 1, 0, 0},       {"ln_2.bias", P_LN2B, 1, 0, 0},
    {"mlp.c_fc.weight", P_FCW, 4, 1, 1},    {"mlp.c_fc.bias", P_FCB, 4, 0, 0},
    {"mlp.c_proj.weight", P_FCPROJW, 1, 4, 1}, {"mlp.c_proj.bias", P_FCPROJB, 1, 0, 0},
};

// Where each of our tensors starts in the flat parameter array.
static inline void gpt2_param_offsets(const GPT2Config *c, size_t off[NUM_PARAM_TENSORS]) {
    size_t sizes[NUM_PARAM_TENSORS], at = 0;
    gpt2_param_sizes(c, sizes);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) { off[k] = at; at += sizes[k]; }
}

// One tensor in transformers' naming: its name, its shape as stored, and where its data
// sits in our parameter array.
typedef struct {
    char name[96];
    int ndim;
    uint64_t shape[2];
    size_t src;          // offset of the slice in our parameters
    size_t rows, cols;   // our slice is (rows, cols); stored transposed when transpose
    int transpose;
} Gpt2HfEntry;

// The tensors of a GPT-2 in file order, names after prefix ("transformer." or ""). Returns
// the count (4 + 12 L); *out is malloc'd.
static inline size_t gpt2_hf_entries(const GPT2Config *c, const char *prefix, Gpt2HfEntry **out) {
    size_t off[NUM_PARAM_TENSORS];
    gpt2_param_offsets(c, off);
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers, n = 0;
    Gpt2HfEntry *e = (Gpt2HfEntry *)xcalloc(4 + 12 * L, sizeof(Gpt2HfEntry));
    snprintf(e[n].name, sizeof e[n].name, "%swte.weight", prefix);
    e[n].ndim = 2, e[n].shape[0] = (uint64_t)c->vocab_size, e[n].shape[1] = C;
    e[n].src = off[P_WTE], e[n].rows = (size_t)c->vocab_size, e[n].cols = C, n++;
    snprintf(e[n].name, sizeof e[n].name, "%swpe.weight", prefix);
    e[n].ndim = 2, e[n].shape[0] = (uint64_t)c->max_seq_len, e[n].shape[1] = C;
    e[n].src = off[P_WPE], e[n].rows = (size_t)c->max_seq_len, e[n].cols = C, n++;
    for (size_t l = 0; l < L; l++) {
        for (int k = 0; k < 12; k++) {
            const Gpt2HfTensor *m = &GPT2_HF_LAYER[k];
            Gpt2HfEntry *x = &e[n++];
            snprintf(x->name, sizeof x->name, "%sh.%zu.%s", prefix, l, m->suffix);
            x->rows = (size_t)m->rows * C;
            x->cols = m->cols ? (size_t)m->cols * C : 1;
            x->src = off[m->param] + l * x->rows * x->cols;
            x->transpose = m->transpose;
            x->ndim = m->cols ? 2 : 1;
            x->shape[0] = m->transpose ? x->cols : x->rows;
            x->shape[1] = m->transpose ? x->rows : x->cols;
        }
    }
    snprintf(e[n].name, sizeof e[n].name, "%sln_f.weight", prefix);
    e[n].ndim = 1, e[n].shape[0] = C, e[n].src = off[P_LNFW], e[n].rows = C, e[n].cols = 1, n++;
    snprintf(e[n].name, sizeof e[n].name, "%sln_f.bias", prefix);
    e[n].ndim = 1, e[n].shape[0] = C, e[n].src = off[P_LNFB], e[n].rows = C, e[n].cols = 1, n++;
    *out = e;
    return n;
}

// Writes params as transformers' GPT-2 model.safetensors (F32, or BF16 rounded to nearest
// even). The metadata's "format": "pt" is what transformers requires to load the file.
static inline void gpt2_hf_write_safetensors(const char *path, const GPT2Config *cfg, const float *params,
                                             int as_bf16) {
    Gpt2HfEntry *e;
    size_t n = gpt2_hf_entries(cfg, "transformer.", &e);
    StSpec *specs = (StSpec *)xcalloc(n, sizeof(StSpec));
    size_t most = 0;
    for (size_t i = 0; i < n; i++) {
        specs[i].name = e[i].name;
        specs[i].dtype = as_bf16 ? ST_BF16 : ST_F32;
        specs[i].ndim = e[i].ndim;
        specs[i].shape[0] = e[i].shape[0];
        specs[i].shape[1] = e[i].shape[1];
        if (e[i].rows * e[i].cols > most) most = e[i].rows * e[i].cols;
    }
    static const char *const meta[] = {"format", "pt"};
    StWriter w;
    st_write_begin(&w, path, specs, n, meta, 1);
    float *buf = (float *)xmalloc(most * sizeof(float));
    uint16_t *half = as_bf16 ? (uint16_t *)xmalloc(most * sizeof(uint16_t)) : NULL;
    for (size_t i = 0; i < n; i++) {
        const float *src = params + e[i].src;
        size_t R = e[i].rows, K = e[i].cols, cnt = R * K;
        if (e[i].transpose) {
            for (size_t r = 0; r < R; r++)
                for (size_t k = 0; k < K; k++) buf[k * R + r] = src[r * K + k];
            src = buf;
        }
        if (as_bf16) {
            for (size_t j = 0; j < cnt; j++) half[j] = float_to_bf16(src[j]);
            st_write_data(&w, half, cnt * 2);
        } else {
            st_write_data(&w, src, cnt * 4);
        }
    }
    st_write_end(&w);
    free(buf);
    free(half);
    free(specs);
    free(e);
}

// A directory's weights: model.safetensors, or the shards that model.safetensors.index.json
// lists (transformers' layout for large models).
typedef struct {
    StFile *files;
    size_t n;
    char *label;  // for messages: the file, or the index
} StSet;

static inline int st_is_dir(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

// Reads a whole (small) JSON file; stops naming it if it does not parse.
static inline void json_read_file(JsonDoc *d, const char *path, size_t max_bytes) {
    const char *kind = not_regular_file(path);
    if (kind) fatal("%s is %s: a JSON file is a regular file", path, kind);
    FILE *f = xfopen(path, "rb");
    int64_t n = xfile_size(f, path);
    fclose(f);
    if ((uint64_t)n > max_bytes)
        fatal("%s: %lld bytes, more than the %zu expected of it", path, (long long)n, max_bytes);
    size_t len;
    uint8_t *text = xread_file(path, &len);
    if (!json_parse(d, (const char *)text, len)) fatal("%s is not valid JSON: %s", path, d->err);
    free(text);
}

// The weight files of a Hugging Face directory: dir/model.safetensors, or each file that
// model.safetensors.index.json's weight_map names, once. Returns how many, their paths in
// *paths (malloc'd, as is each path) and in *label the file that lists them (for messages).
static inline size_t st_set_paths(const char *dir, char ***paths, char **label) {
    size_t cap = strlen(dir) + 64;
    char *path = (char *)xmalloc(cap);
    snprintf(path, cap, "%s/model.safetensors", dir);
    if (file_exists(path)) {
        *paths = (char **)xmalloc(sizeof(char *));
        (*paths)[0] = xstrdup(path);
        *label = path;
        return 1;
    }
    snprintf(path, cap, "%s/model.safetensors.index.json", dir);
    if (!file_exists(path)) {
        snprintf(path, cap, "%s/pytorch_model.bin", dir);
        if (file_exists(path))
            fatal("%s holds pytorch_model.bin but no model.safetensors: only safetensors weights are read "
                  "(dev/gpt2_ref.py --load %s reads the PyTorch file)", dir, dir);
        fatal("%s has neither model.safetensors nor model.safetensors.index.json", dir);
    }
    JsonDoc idx;
    json_read_file(&idx, path, 64u << 20);
    const JsonValue *map = json_get(&idx.root, "weight_map");
    if (!map || map->type != JSON_OBJECT || !map->len)
        fatal("%s: no \"weight_map\" object of tensor names to files", path);
    *paths = (char **)xcalloc(map->len, sizeof(char *));
    size_t n = 0;
    for (size_t i = 0; i < map->len; i++) {
        const JsonValue *v = &map->items[i];
        if (v->type != JSON_STRING || !v->len || strchr(v->str, '/') || !strcmp(v->str, "..") ||
            strlen(v->str) != v->len)
            fatal("%s: weight_map entry %s is not a file name in the same directory", path, map->keys[i]);
        int seen = 0;
        for (size_t k = 0; k < n && !seen; k++) seen = !strcmp(strrchr((*paths)[k], '/') + 1, v->str);
        if (seen) continue;
        size_t fcap = strlen(dir) + v->len + 2;
        char *fp = (char *)xmalloc(fcap);
        snprintf(fp, fcap, "%s/%s", dir, v->str);
        (*paths)[n++] = fp;
    }
    json_free(&idx);
    *label = path;
    return n;
}

static inline void st_set_open(StSet *s, const char *dir) {
    memset(s, 0, sizeof *s);
    char **paths;
    size_t n = st_set_paths(dir, &paths, &s->label);
    s->files = (StFile *)xcalloc(n, sizeof(StFile));
    for (; s->n < n; s->n++) {
        st_open(&s->files[s->n], paths[s->n]);
        free(paths[s->n]);
    }
    free(paths);
    // a name in two shards would make the result depend on the order of the search
    for (size_t a = 0; a < s->n; a++)
        for (size_t i = 0; i < s->files[a].n; i++)
            for (size_t b = a + 1; b < s->n; b++)
                if (st_find(&s->files[b], s->files[a].tensors[i].name))
                    fatal("%s: tensor %s is in both %s and %s", s->label, s->files[a].tensors[i].name,
                          s->files[a].path, s->files[b].path);
}

static inline const StTensor *st_set_find(StSet *s, const char *name, StFile **in) {
    for (size_t i = 0; i < s->n; i++) {
        const StTensor *t = st_find(&s->files[i], name);
        if (t) { *in = &s->files[i]; return t; }
    }
    return NULL;
}

static inline void st_set_close(StSet *s) {
    for (size_t i = 0; i < s->n; i++) st_close(&s->files[i]);
    free(s->files);
    free(s->label);
    memset(s, 0, sizeof *s);
}

// config.json's integer key; stops if it is missing or not a positive integer.
static inline int gpt2_hf__int(const JsonValue *conf, const char *key, const char *path) {
    const JsonValue *v = json_get(conf, key);
    if (!v) fatal("%s: key \"%s\" is missing: a GPT-2 config needs it", path, key);
    if (v->type != JSON_NUMBER || !v->is_uint || v->u < 1 || v->u > INT_MAX)
        fatal("%s: \"%s\" must be a positive integer", path, key);
    return (int)v->u;
}

// Whether v is the JSON string s, all of it: a C comparison would stop at a NUL that
// "\u0000" put inside, and take "gpt2\u0000x" for "gpt2".
static inline int gpt2_hf__is(const JsonValue *v, const char *s) {
    return v && v->type == JSON_STRING && v->len == strlen(s) && !memcmp(v->str, s, v->len);
}

// A string of config.json for a message: its text, or why it has none to show.
static inline const char *gpt2_hf__shown(const JsonValue *v) {
    if (v->type != JSON_STRING) return "(not a string)";
    return strlen(v->str) == v->len ? v->str : "(a string holding a NUL character)";
}

// The most parameters an import takes: 2^34 (64 GiB of fp32), ten times GPT-2 1.5B and
// more. The weights must match the config anyway; this refuses a config that asks for an
// absurd model before anything of its size is attempted.
#define GPT2_HF_MAX_PARAMS ((uint64_t)1 << 34)

// Reads dir/config.json into cfg (Vp = V rounded up to a multiple of 128), refusing what
// our model cannot represent. Absent optional keys take transformers' GPT-2 defaults.
// Every size is bounded here, before anything sized by the config is allocated.
static inline void gpt2_hf_read_config(const char *dir, GPT2Config *cfg) {
    size_t cap = strlen(dir) + 16;
    char *path = (char *)xmalloc(cap);
    snprintf(path, cap, "%s/config.json", dir);
    if (!file_exists(path)) fatal("%s has no config.json: not a Hugging Face model directory", dir);
    JsonDoc d;
    json_read_file(&d, path, 1u << 20);
    const JsonValue *c = &d.root;
    if (c->type != JSON_OBJECT) fatal("%s is not a JSON object", path);
    const JsonValue *v = json_get(c, "model_type");
    if (!v) fatal("%s: key \"model_type\" is missing: only GPT-2 models (\"gpt2\") are read", path);
    if (!gpt2_hf__is(v, "gpt2"))
        fatal("%s: model_type is %s, not \"gpt2\": only GPT-2 models are read", path, gpt2_hf__shown(v));
    const char *pos_key = json_get(c, "n_positions") ? "n_positions" : "n_ctx";
    cfg->vocab_size = gpt2_hf__int(c, "vocab_size", path);
    cfg->max_seq_len = gpt2_hf__int(c, pos_key, path);
    cfg->channels = gpt2_hf__int(c, "n_embd", path);
    cfg->num_layers = gpt2_hf__int(c, "n_layer", path);
    cfg->num_heads = gpt2_hf__int(c, "n_head", path);
    // gpt2_config_problem's bounds, named as config.json names them
    const struct { const char *key; int value, max; } bounds[] = {
        {"vocab_size", cfg->vocab_size, 1 << 24}, {pos_key, cfg->max_seq_len, 1 << 20},
        {"n_embd", cfg->channels, 65536}, {"n_layer", cfg->num_layers, 1024}};
    for (int i = 0; i < 4; i++)
        if (bounds[i].value > bounds[i].max)
            fatal("%s: %s %d is out of range: at most %d", path, bounds[i].key, bounds[i].value, bounds[i].max);
    if (cfg->channels % cfg->num_heads)
        fatal("%s: n_embd %d is not divisible by n_head %d", path, cfg->channels, cfg->num_heads);
    cfg->padded_vocab_size = round_up_128(cfg->vocab_size);
    const char *problem = gpt2_config_problem(cfg);
    if (problem) fatal("%s: %s", path, problem);
    // within those bounds the count stays below 2^47: it cannot wrap
    uint64_t total = (uint64_t)gpt2_num_params(cfg);
    if (total > GPT2_HF_MAX_PARAMS)
        fatal("%s: n_layer %d and n_embd %d (with vocab_size %d, %s %d) make a GPT-2 of %llu parameters, "
              "more than the %llu an import takes", path, cfg->num_layers, cfg->channels, cfg->vocab_size, pos_key,
              cfg->max_seq_len, (unsigned long long)total, (unsigned long long)GPT2_HF_MAX_PARAMS);
    v = json_get(c, "n_inner");
    if (v && v->type != JSON_NULL && !(v->type == JSON_NUMBER && v->is_uint && v->u == 4 * (uint64_t)cfg->channels))
        fatal("%s: n_inner must be null or 4 * n_embd = %d: our MLP is 4C wide", path, 4 * cfg->channels);
    v = json_get(c, "activation_function");
    if (v && !gpt2_hf__is(v, "gelu_new") && !gpt2_hf__is(v, "gelu_pytorch_tanh"))
        fatal("%s: activation_function %s is not supported: our MLP uses the tanh GELU (gelu_new)", path,
              gpt2_hf__shown(v));
    v = json_get(c, "layer_norm_epsilon");
    if (v && (v->type != JSON_NUMBER || fabs(v->num - 1e-5) > 1e-12))
        fatal("%s: layer_norm_epsilon must be 1e-5, the value our layernorm uses", path);
    static const char *const must_be_true[] = {"scale_attn_weights", "tie_word_embeddings"};
    static const char *const must_be_false[] = {"scale_attn_by_inverse_layer_idx", "add_cross_attention"};
    for (int i = 0; i < 2; i++) {
        v = json_get(c, must_be_true[i]);
        if (v && v->type != JSON_TRUE) fatal("%s: %s must be true for our model", path, must_be_true[i]);
        v = json_get(c, must_be_false[i]);
        if (v && v->type != JSON_FALSE) fatal("%s: %s must be false for our model", path, must_be_false[i]);
    }
    json_free(&d);
    free(path);
}

// The layer of a per-layer name "h.<i>.<rest>" (the "transformer." prefix removed), with
// *rest after the index's dot; -1 for a name of another form. The index must be spelled
// as transformers spells it (decimal, no sign, no leading zero): one layer, one name.
static inline long gpt2_hf__layer(const char *bare, const char **rest) {
    if (strncmp(bare, "h.", 2) != 0) return -1;
    const char *p = bare + 2;
    long i = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (digits == 9) return -1;  // past any layer count, and short of overflow
        i = i * 10 + (*p - '0');
    }
    if (!digits || *p != '.' || (digits > 1 && bare[2] == '0')) return -1;
    *rest = p + 1;
    return i;
}

// What a name (the prefix removed) is to a GPT-2 of L layers: 1 one of its parameters,
// 2 a causal-mask buffer of one of its layers (transformers recomputes those), 0 neither.
// *layer is the layer the name gives, or -1.
static inline int gpt2_hf__kind(const char *bare, int L, long *layer) {
    static const char *const top[] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
    static const char *const buffers[] = {"attn.bias", "attn.masked_bias"};
    const char *rest = NULL;
    *layer = gpt2_hf__layer(bare, &rest);
    if (*layer < 0) {
        for (int k = 0; k < 4; k++)
            if (!strcmp(bare, top[k])) return 1;
        return 0;
    }
    if (*layer >= L) return 0;
    for (int k = 0; k < 12; k++)
        if (!strcmp(rest, GPT2_HF_LAYER[k].suffix)) return 1;
    for (int k = 0; k < 2; k++)
        if (!strcmp(rest, buffers[k])) return 2;
    return 0;
}

// Stops naming the file, the tensor, its shape and the expected one unless they agree.
static inline void gpt2_hf__check_shape(const StFile *f, const StTensor *t, int ndim, const uint64_t *want) {
    int ok = t->ndim == ndim;
    for (int k = 0; ok && k < ndim; k++) ok = t->shape[k] == want[k];
    if (ok) return;
    char got[ST_MAX_DIMS * 24] = "", expected[2 * 24] = "";
    for (int k = 0; k < t->ndim; k++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", k ? ", " : "", (unsigned long long)t->shape[k]);
    for (int k = 0; k < ndim; k++)
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s%llu", k ? ", " : "",
                 (unsigned long long)want[k]);
    fatal("%s: tensor %s has shape [%s], expected [%s] from config.json", f->path, t->name, got, expected);
}

// Reads a Hugging Face GPT-2 directory (config.json, model.safetensors or its shards;
// names with or without the "transformer." prefix) into our layout: wte padded with zero
// rows to Vp, Conv1D weights transposed back. *all_bf16 (if not NULL) says whether every
// tensor was stored BF16, i.e. whether a bf16 checkpoint holds it exactly.
// Every tensor's name and shape is checked against the config before the parameters are
// allocated: a config.json that does not describe its weights (n_layer 300 over a small
// model's file) is refused for what it is, not by an allocation of its imagined size.
static inline float *gpt2_hf_read_dir(const char *dir, GPT2Config *cfg, int *all_bf16) {
    gpt2_hf_read_config(dir, cfg);
    StSet set;
    st_set_open(&set, dir);
    Gpt2HfEntry *e;
    size_t n = gpt2_hf_entries(cfg, "", &e);  // 4 + 12 L entries, L bounded by the config check
    const StTensor **src = (const StTensor **)xcalloc(n, sizeof *src);
    StFile **src_file = (StFile **)xcalloc(n, sizeof *src_file);
    char full[128];
    for (size_t i = 0; i < n; i++) {
        snprintf(full, sizeof full, "transformer.%s", e[i].name);
        StFile *f = NULL, *fb = NULL;
        const StTensor *t = st_set_find(&set, full, &f), *bare = st_set_find(&set, e[i].name, &fb);
        if (t && bare) fatal("%s: both %s and %s are present: which one is meant?", set.label, full, e[i].name);
        if (!t) { t = bare; f = fb; }
        if (!t)
            fatal("%s: tensor %s is missing (nor is it there without the \"transformer.\" prefix)", set.label, full);
        gpt2_hf__check_shape(f, t, e[i].ndim, e[i].shape);
        src[i] = t;
        src_file[i] = f;
    }
    // everything else must be a buffer transformers recomputes, or lm_head equal to wte
    const StTensor *lm = NULL;
    StFile *lm_file = NULL;
    size_t V = (size_t)cfg->vocab_size, C = (size_t)cfg->channels;
    for (size_t fi = 0; fi < set.n; fi++) {
        StFile *f = &set.files[fi];
        for (size_t i = 0; i < f->n; i++) {
            const char *name = f->tensors[i].name, *bare = name;
            if (!strncmp(bare, "transformer.", 12)) bare += 12;
            long layer;
            if (gpt2_hf__kind(bare, cfg->num_layers, &layer)) continue;
            if (!strcmp(name, "lm_head.weight")) {
                const uint64_t want[2] = {V, C};
                gpt2_hf__check_shape(f, &f->tensors[i], 2, want);
                lm = &f->tensors[i];
                lm_file = f;
                continue;
            }
            if (layer >= cfg->num_layers)
                fatal("%s: tensor %s is not part of a GPT-2 with config.json's shape: layer %ld, and n_layer is %d",
                      f->path, name, layer, cfg->num_layers);
            fatal("%s: tensor %s is not part of a GPT-2 with config.json's shape (n_layer %d)", f->path, name,
                  cfg->num_layers);
        }
    }
    float *params = (float *)xcalloc(gpt2_num_params(cfg), sizeof(float));
    size_t most = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].transpose && e[i].rows * e[i].cols > most) most = e[i].rows * e[i].cols;
    float *buf = (float *)xmalloc(most * sizeof(float));
    int bf16 = 1;
    for (size_t i = 0; i < n; i++) {
        if (src[i]->dtype != ST_BF16) bf16 = 0;
        float *dst = params + e[i].src;
        if (!e[i].transpose) {
            st_read_f32(src_file[i], src[i], dst);
        } else {
            st_read_f32(src_file[i], src[i], buf);
            size_t R = e[i].rows, K = e[i].cols;
            for (size_t r = 0; r < R; r++)
                for (size_t k = 0; k < K; k++) dst[r * K + k] = buf[k * R + r];
        }
    }
    if (lm) {
        float *x = (float *)xmalloc(V * C * sizeof(float));
        st_read_f32(lm_file, lm, x);
        if (memcmp(x, params, V * C * sizeof(float)) != 0)
            fatal("%s: lm_head.weight differs from wte: our model ties them, so it cannot hold this one",
                  lm_file->path);
        free(x);
    }
    free(buf);
    free(src);
    free(src_file);
    free(e);
    check_params_finite(set.label, cfg, params);
    st_set_close(&set);
    if (all_bf16) *all_bf16 = bf16;
    return params;
}

// What `-e DIR` of the trainers calls: a Hugging Face GPT-2 directory as fp32 parameters.
static inline float *gpt2_params_from_hf_dir(const char *dir, GPT2Config *cfg) {
    return gpt2_hf_read_dir(dir, cfg, NULL);
}

#endif // COMMON_SAFETENSORS_H

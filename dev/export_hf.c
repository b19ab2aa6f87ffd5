// export_hf.c: a GPT-2 checkpoint of ours or llm.c's (fp32 version 3, bf16 version 5) to
// a directory that Hugging Face transformers loads as GPT2LMHeadModel, and back:
//   build/export_hf CHECKPOINT OUT_DIR [--dtype fp32|bf16] [--tokenizer-dir DIR|none]
//   build/export_hf --import HF_DIR OUT.bin [--dtype fp32|bf16]
// The tensor mapping and the safetensors format live in common/safetensors.h; what the
// directory holds and how to load it: docs/huggingface.md.
#include "common/util.h"
#include "common/args.h"
#include "common/checkpoint.h"
#include "common/safetensors.h"
#include <dirent.h>

static const char USAGE[] =
    "usage: build/export_hf CHECKPOINT OUT_DIR [options]        checkpoint -> Hugging Face directory\n"
    "       build/export_hf --import HF_DIR OUT.bin [options]   Hugging Face GPT-2 directory -> checkpoint\n"
    "\n"
    "The export writes OUT_DIR/model.safetensors, config.json, generation_config.json and, when the\n"
    "vocabulary is the tokenizer's, vocab.json, merges.txt and tokenizer_config.json. OUT_DIR appears\n"
    "complete or not at all (a new directory is renamed into place; in an existing one each file is\n"
    "replaced atomically). The import reads config.json and model.safetensors (or the shards of\n"
    "model.safetensors.index.json) of any GPT-2 size and writes our checkpoint.";

// The temporary directory of an export, removed if the program stops before it is renamed.
static char g_tmp_dir[4096 + 32];

static void remove_tmp_dir(void) {
    if (!g_tmp_dir[0]) return;
    DIR *d = opendir(g_tmp_dir);
    if (d) {
        struct dirent *e;
        char path[8192];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", g_tmp_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(g_tmp_dir);
    g_tmp_dir[0] = 0;
}

// A rename is durable only once the directory holding it is synced.
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) fatal("cannot open directory %s to sync it: %s", dir, strerror(errno));
    if (fsync(fd) != 0) fatal("cannot sync directory %s: %s", dir, strerror(errno));
    close(fd);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = (char *)xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void write_bytes(const char *dir, const char *name, const void *p, size_t n) {
    char *path = join(dir, name);
    AtomicFile a = atomic_open(path);
    xfwrite(p, 1, n, a.f, a.tmp_path);
    atomic_commit(&a);
    free(path);
}

static void copy_file(const char *src, const char *dir, const char *name) {
    size_t n;
    uint8_t *buf = xread_file(src, &n);
    write_bytes(dir, name, buf, n);
    free(buf);
}

// The tokenizer of dir if its vocabulary is the model's: returns the id of <|endoftext|>,
// or -1 when the files do not fit (explicit: that is an error; the default: a warning).
static int check_tokenizer(const char *dir, int V, int explicit_dir) {
    char *enc = join(dir, "encoder.json"), *bpe = join(dir, "vocab.bpe");
    if (!file_exists(enc) || !file_exists(bpe)) {
        if (explicit_dir) fatal("--tokenizer-dir %s: encoder.json or vocab.bpe is missing", dir);
        fprintf(stderr, "warning: no tokenizer in %s (encoder.json, vocab.bpe): no tokenizer files written\n", dir);
        free(enc), free(bpe);
        return -1;
    }
    const char *kind = not_regular_file(bpe);
    if (kind) fatal("--tokenizer-dir %s: %s is %s, not a regular file", dir, bpe, kind);
    JsonDoc d;
    json_read_file(&d, enc, 64u << 20);
    if (d.root.type != JSON_OBJECT) fatal("%s is not a JSON object of tokens to ids", enc);
    size_t ntok = d.root.len;
    int eot = -1;
    for (size_t i = 0; i < ntok; i++) {
        const JsonValue *v = &d.root.items[i];
        if (v->type != JSON_NUMBER || !v->is_uint || v->u >= ntok)
            fatal("%s: the id of token %zu is not an integer below the vocabulary size %zu", enc, i, ntok);
        if (!strcmp(d.root.keys[i], "<|endoftext|>")) eot = (int)v->u;
    }
    json_free(&d);
    if ((long)ntok != V) {
        if (explicit_dir)
            fatal("--tokenizer-dir %s: its encoder.json has %zu tokens, the model's vocabulary %d "
                  "(--tokenizer-dir none writes no tokenizer)", dir, ntok, V);
        fprintf(stderr, "warning: the model's vocabulary (%d) is not the tokenizer's in %s (%zu tokens): "
                "no tokenizer files written\n", V, dir, ntok);
        eot = -1;
    } else if (eot < 0) {
        eot = V - 1;
    }
    free(enc), free(bpe);
    return eot;
}

static void write_config(const char *dir, const GPT2Config *c, int eot, int as_bf16) {
    TextBuf b = {NULL, 0, 0};
    // dropout 0: our trainer has none, so the exported model is trained (and evaluated) as it was
    tb_printf(&b,
              "{\n"
              "  \"activation_function\": \"gelu_new\",\n"
              "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
              "  \"attn_pdrop\": 0.0,\n"
              "  \"bos_token_id\": %d,\n"
              "  \"embd_pdrop\": 0.0,\n"
              "  \"eos_token_id\": %d,\n"
              "  \"initializer_range\": 0.02,\n"
              "  \"layer_norm_epsilon\": 1e-05,\n"
              "  \"model_type\": \"gpt2\",\n"
              "  \"n_embd\": %d,\n"
              "  \"n_head\": %d,\n"
              "  \"n_inner\": null,\n"
              "  \"n_layer\": %d,\n"
              "  \"n_positions\": %d,\n"
              "  \"reorder_and_upcast_attn\": false,\n"
              "  \"resid_pdrop\": 0.0,\n"
              "  \"scale_attn_by_inverse_layer_idx\": false,\n"
              "  \"scale_attn_weights\": true,\n"
              "  \"tie_word_embeddings\": true,\n"
              "  \"torch_dtype\": \"%s\",\n"
              "  \"use_cache\": true,\n"
              "  \"vocab_size\": %d\n"
              "}\n",
              eot, eot, c->channels, c->num_heads, c->num_layers, c->max_seq_len, as_bf16 ? "bfloat16" : "float32",
              c->vocab_size);
    write_bytes(dir, "config.json", b.p, b.n);
    b.n = 0;
    tb_printf(&b, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n", eot, eot);
    write_bytes(dir, "generation_config.json", b.p, b.n);
    free(b.p);
}

static void write_tokenizer(const char *dir, const char *tok_dir, const GPT2Config *c) {
    char *enc = join(tok_dir, "encoder.json"), *bpe = join(tok_dir, "vocab.bpe");
    copy_file(enc, dir, "vocab.json");
    copy_file(bpe, dir, "merges.txt");
    TextBuf b = {NULL, 0, 0};
    tb_printf(&b,
              "{\n"
              "  \"add_prefix_space\": false,\n"
              "  \"bos_token\": \"<|endoftext|>\",\n"
              "  \"eos_token\": \"<|endoftext|>\",\n"
              "  \"model_max_length\": %d,\n"
              "  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
              "  \"unk_token\": \"<|endoftext|>\"\n"
              "}\n",
              c->max_seq_len);
    write_bytes(dir, "tokenizer_config.json", b.p, b.n);
    free(b.p);
    free(enc), free(bpe);
}

// Whether path is the file that st describes (device and inode): another spelling of its
// path, or a link to it.
static int is_same_file(const char *path, const struct stat *st) {
    struct stat p;
    return stat(path, &p) == 0 && p.st_dev == st->st_dev && p.st_ino == st->st_ino;
}

static const char *const EXPORT_FILES[] = {"model.safetensors", "config.json", "generation_config.json",
                                           "vocab.json", "merges.txt", "tokenizer_config.json"};

static void export_checkpoint(const char *ckpt, const char *out_arg, const char *dtype, const char *tok_arg) {
    char out[4096];
    size_t ol = strlen(out_arg);
    while (ol > 1 && out_arg[ol - 1] == '/') ol--;  // "dir/" and "dir" are one directory
    if (ol + 16 >= sizeof out) fatal("OUT_DIR %s: path too long", out_arg);
    memcpy(out, out_arg, ol);
    out[ol] = 0;
    struct stat st;
    int exists = stat(out, &st) == 0;
    if (exists && !S_ISDIR(st.st_mode)) fatal("%s exists and is not a directory", out);
    // into an existing directory, each file is renamed over the one there: none may be an input
    const char *tok_dir = tok_arg ? tok_arg : "data/gpt2";
    char *inputs[3] = {xstrdup(ckpt), join(tok_dir, "encoder.json"), join(tok_dir, "vocab.bpe")};
    for (int i = 0; exists && i < 3; i++) {
        struct stat in;
        if ((i > 0 && !strcmp(tok_dir, "none")) || stat(inputs[i], &in) != 0) continue;
        for (size_t k = 0; k < sizeof EXPORT_FILES / sizeof EXPORT_FILES[0]; k++) {
            char *to = join(out, EXPORT_FILES[k]);
            if (is_same_file(to, &in))
                fatal("%s, which the export writes, is %s, which it reads: the export would replace its own input; "
                      "choose another OUT_DIR", to, inputs[i]);
            free(to);
        }
    }
    for (int i = 0; i < 3; i++) free(inputs[i]);

    GPT2Config cfg;
    float *params = gpt2_checkpoint_read(ckpt, &cfg);
    int h[2];
    FILE *f = xfopen(ckpt, "rb");
    xfread(h, sizeof(int), 2, f, ckpt);
    fclose(f);
    int as_bf16 = dtype ? !strcmp(dtype, "bf16") : h[1] == CKPT_VERSION_BF16;
    size_t C = (size_t)cfg.channels;
    for (size_t i = (size_t)cfg.vocab_size * C; i < (size_t)cfg.padded_vocab_size * C; i++)
        if (params[i] != 0.0f) {
            fprintf(stderr, "warning: %s: the padding rows of wte (%d..%d) are not zero; they are not exported\n",
                    ckpt, cfg.vocab_size, cfg.padded_vocab_size - 1);
            break;
        }

    int explicit_tok = tok_arg != NULL;
    int eot = -1;
    if (strcmp(tok_dir, "none") != 0) eot = check_tokenizer(tok_dir, cfg.vocab_size, explicit_tok);
    int with_tok = eot >= 0;
    // without a tokenizer to ask, GPT-2's end-of-text id where the vocabulary has it
    if (eot < 0) eot = cfg.vocab_size > 50256 ? 50256 : cfg.vocab_size - 1;

    snprintf(g_tmp_dir, sizeof g_tmp_dir, "%s.tmp-XXXXXX", out);
    if (!mkdtemp(g_tmp_dir)) {
        int err = errno;
        g_tmp_dir[0] = 0;
        fatal("cannot create a temporary directory beside %s: %s", out, strerror(err));
    }
    atexit(remove_tmp_dir);
    char *st_path = join(g_tmp_dir, "model.safetensors");
    gpt2_hf_write_safetensors(st_path, &cfg, params, as_bf16);
    free(st_path);
    write_config(g_tmp_dir, &cfg, eot, as_bf16);
    if (with_tok) write_tokenizer(g_tmp_dir, tok_dir, &cfg);
    if (chmod(g_tmp_dir, 0755) != 0) fatal("cannot chmod %s: %s", g_tmp_dir, strerror(errno));
    sync_dir(g_tmp_dir);

    if (!exists) {
        if (rename(g_tmp_dir, out) != 0) fatal("cannot rename %s to %s: %s", g_tmp_dir, out, strerror(errno));
        g_tmp_dir[0] = 0;
    } else {
        // the weights last: a reader in between sees the old weights with a new config, not the reverse
        for (int i = (int)(sizeof EXPORT_FILES / sizeof EXPORT_FILES[0]) - 1; i >= 0; i--) {
            char *from = join(g_tmp_dir, EXPORT_FILES[i]), *to = join(out, EXPORT_FILES[i]);
            if (file_exists(from) && rename(from, to) != 0)
                fatal("cannot rename %s to %s: %s", from, to, strerror(errno));
            free(from), free(to);
        }
        remove_tmp_dir();
    }
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash == parent) slash[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    sync_dir(parent);
    sync_dir(out);
    printf("wrote %s: GPT-2 L=%d H=%d C=%d maxT=%d V=%d, %zu parameters as %s%s\n", out, cfg.num_layers,
           cfg.num_heads, cfg.channels, cfg.max_seq_len, cfg.vocab_size, gpt2_num_real_params(&cfg),
           as_bf16 ? "BF16" : "F32", with_tok ? ", with the tokenizer" : ", without a tokenizer");
    free(params);
}

// The temporary file of an import (OUT.bin.tmp, util.h's atomic_open), removed if the
// program stops before it is renamed into place.
static char *g_tmp_file;

static void remove_tmp_file(void) {
    if (g_tmp_file) unlink(g_tmp_file);
    free(g_tmp_file);
    g_tmp_file = NULL;
}

// What would make the checkpoint's write fail after the whole conversion, refused before
// it: OUT must be a path that a file can be renamed to, in a directory that exists.
static void check_import_out(const char *dir, const char *out) {
    struct stat st;
    size_t ol = strlen(out);
    if (!ol || out[ol - 1] == '/') fatal("%s: the checkpoint to write needs a file name, not a directory", out);
    if (stat(out, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            if (is_same_file(dir, &st))
                fatal("--import %s %s: the checkpoint to write is the directory being imported; name a file "
                      "(e.g. model.bin)", dir, out);
            fatal("%s is a directory: the checkpoint to write needs a file name (e.g. %s/model.bin)", out, out);
        }
        if (!S_ISREG(st.st_mode)) fatal("%s exists and is not a regular file: it cannot be replaced by a checkpoint", out);
    } else if (errno != ENOENT) {
        fatal("cannot check %s: %s", out, strerror(errno));
    }
    char *parent = xstrdup(out);
    char *slash = strrchr(parent, '/');
    if (slash == parent) slash[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, ol + 1, ".");
    if (!st_is_dir(parent)) fatal("%s: directory %s does not exist", out, parent);
    if (access(parent, W_OK | X_OK) != 0) fatal("%s: cannot write into %s: %s", out, parent, strerror(errno));
    free(parent);
    char *tmp = (char *)xmalloc(ol + 8);
    snprintf(tmp, ol + 8, "%s.tmp", out);
    if (st_is_dir(tmp)) fatal("%s is a directory: the temporary file of %s cannot be written", tmp, out);
    // the checkpoint and its temporary replace what is at their paths, after the whole model
    // is read: an input there would be lost (the directory left without its config or weights)
    const char *outs[2] = {out, tmp};
    for (int o = 0; o < 2; o++) {
        struct stat os;
        if (stat(outs[o], &os) != 0) continue;
        char **paths, *label;
        size_t n = st_set_paths(dir, &paths, &label);
        char *config = join(dir, "config.json");
        for (size_t i = 0; i <= n + 1; i++) {
            const char *in = i < n ? paths[i] : i == n ? label : config;
            if (is_same_file(in, &os))
                fatal("--import %s %s: %s, %s, is the file %s that the import reads, which it would replace; "
                      "name another file for the checkpoint", dir, out, o ? "the checkpoint's temporary file"
                      : "the checkpoint to write", outs[o], in);
        }
        for (size_t i = 0; i < n; i++) free(paths[i]);
        free(paths), free(label), free(config);
    }
    free(tmp);
}

static void import_dir(const char *dir, const char *out, const char *dtype) {
    if (!st_is_dir(dir)) fatal("--import %s: not a directory (a Hugging Face model directory is expected)", dir);
    check_import_out(dir, out);
    GPT2Config cfg;
    int all_bf16;
    float *params = gpt2_hf_read_dir(dir, &cfg, &all_bf16);
    int as_bf16 = dtype ? !strcmp(dtype, "bf16") : all_bf16;
    if (as_bf16 && !all_bf16)
        fprintf(stderr, "note: weights that are not all BF16 are rounded to bf16 (--dtype fp32 keeps them exactly)\n");
    size_t tl = strlen(out) + 8;
    g_tmp_file = (char *)xmalloc(tl);
    snprintf(g_tmp_file, tl, "%s.tmp", out);
    atexit(remove_tmp_file);
    gpt2_checkpoint_write(out, &cfg, params, as_bf16);
    free(g_tmp_file);
    g_tmp_file = NULL;
    printf("wrote %s: GPT-2 L=%d H=%d C=%d maxT=%d V=%d (padded to %d), %s\n", out, cfg.num_layers, cfg.num_heads,
           cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size, as_bf16 ? "bf16" : "fp32");
    free(params);
}

int main(int argc, char **argv) {
    const char *dtype = NULL, *tok_dir = NULL, *import = NULL;
    ArgSpec specs[] = {
        {NULL, "--dtype", ARG_STRING, &dtype,
         "fp32|bf16: precision written (default: the source's, so nothing is rounded)"},
        {NULL, "--tokenizer-dir", ARG_STRING, &tok_dir,
         "encoder.json and vocab.bpe to export (default data/gpt2; none: no tokenizer)"},
        {NULL, "--import", ARG_STRING, &import, "HF_DIR: convert this Hugging Face GPT-2 into OUT.bin"},
    };
    int nspecs = (int)(sizeof specs / sizeof specs[0]);
    // args.h parses options only: positionals are set aside here, every option taking a value
    char **opts = (char **)xmalloc(((size_t)argc + 1) * sizeof(char *));
    const char *pos[3];
    int nopts = 1, npos = 0;
    opts[0] = argv[0];
    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (s[0] == '-' && s[1]) {
            opts[nopts++] = argv[a];
            int bare = strcmp(s, "-h") && strcmp(s, "--help") && !(s[1] == '-' && strchr(s, '='));
            if (bare && a + 1 < argc) opts[nopts++] = argv[++a];
        } else {
            if (npos == 3) fatal("too many arguments (see --help)");
            pos[npos++] = s;
        }
    }
    opts[nopts] = NULL;
    args_parse(nopts, opts, specs, nspecs, USAGE);
    free(opts);
    if (dtype && strcmp(dtype, "fp32") && strcmp(dtype, "bf16"))
        fatal("--dtype %s: expected fp32 or bf16", dtype);
    if (import) {
        if (npos != 1) fatal("--import HF_DIR takes one more argument, the checkpoint to write (see --help)");
        if (tok_dir) fatal("--tokenizer-dir applies to an export, not to --import");
        import_dir(import, pos[0], dtype);
    } else {
        if (npos != 2) fatal("expected CHECKPOINT OUT_DIR, or --import HF_DIR OUT.bin (see --help)");
        export_checkpoint(pos[0], pos[1], dtype, tok_dir);
    }
    return 0;
}

// args.h: the one command-line parser. Each program declares a table of options
// (short flag as used by llm.c-style run scripts, long name, type, destination, help)
// and calls args_parse(). Accepts "-b 4", "--batch-size 4", "--batch-size=4", and
// "--help"/"-h". Unknown flags, missing values and malformed numbers stop the program
// with a message that names the flag.
#ifndef COMMON_ARGS_H
#define COMMON_ARGS_H
#include "util.h"

// ARG_SWITCH: an int that must be 0 or 1 (checked here, with one message for every switch);
// given alone (the next argument another option, or none), it means 1: --generate -e m.bin.
// ARG_REFUSED: a flag of llm.c's that this program does not support; giving it stops the
// program with its help text, which says what to use instead.
typedef enum { ARG_INT, ARG_SWITCH, ARG_FLOAT, ARG_STRING, ARG_REFUSED } ArgType;

typedef struct {
    const char *short_flag;  // e.g. "-b" or "-sl"; NULL if long-only
    const char *long_flag;   // e.g. "--batch-size"
    ArgType type;
    void *dest;              // int* (ARG_INT, ARG_SWITCH), float*, or const char** (points into argv)
    const char *help;
} ArgSpec;

// A program's option table: options are added one by one and the capacity is checked at
// each addition, so that a new option beyond it stops the program with an internal error
// instead of writing past the array.
typedef struct {
    ArgSpec *specs;
    int n, cap;
} ArgTable;

// ArgTable over a local array of `capacity` specs, e.g. ARG_TABLE(options, 64);
#define ARG_TABLE(name, capacity)          \
    ArgSpec name##_specs[capacity];        \
    ArgTable name = {name##_specs, 0, (capacity)}

static inline void args_add(ArgTable *t, const char *short_flag, const char *long_flag, ArgType type, void *dest,
                            const char *help) {
    if (t->n >= t->cap) fatal("internal: option table full (%d options) adding %s", t->cap, long_flag);
    ArgSpec *s = &t->specs[t->n++];
    s->short_flag = short_flag;
    s->long_flag = long_flag;
    s->type = type;
    s->dest = dest;
    s->help = help;
}

static inline void args_print_help(const char *usage, const ArgSpec *specs, int n) {
    printf("%s\n\nOptions:\n", usage);
    for (int i = 0; i < n; i++) {
        const ArgSpec *s = &specs[i];
        char names[64];
        snprintf(names, sizeof names, "%s%s%s", s->short_flag ? s->short_flag : "",
                 s->short_flag ? ", " : "", s->long_flag);
        char def[160] = "";
        if (s->type == ARG_INT || s->type == ARG_SWITCH) snprintf(def, sizeof def, " (default %d)", *(int *)s->dest);
        else if (s->type == ARG_FLOAT) snprintf(def, sizeof def, " (default %g)", *(float *)s->dest);
        else if (s->type == ARG_REFUSED) snprintf(def, sizeof def, " (not supported)");
        else if (*(const char **)s->dest) snprintf(def, sizeof def, " (default %s)", *(const char **)s->dest);
        printf("  %-26s %s%s\n", names, s->help, def);
    }
    int h_taken = 0;
    for (int i = 0; i < n; i++) h_taken |= specs[i].short_flag && !strcmp(specs[i].short_flag, "-h");
    if (h_taken) printf("  %-26s %s\n", "--help", "print this help and exit (also -h when no number follows it)");
    else printf("  %-26s %s\n", "-h, --help", "print this help and exit");
}

// "-h" is help, unless a program gives it a meaning of its own (llm.c's -h 1 switches an
// evaluation on) and a number follows it.
static inline int args_h_is_help(int argc, char **argv, int a, const ArgSpec *specs, int n) {
    long v;
    for (int i = 0; i < n; i++)
        if (specs[i].short_flag && !strcmp(specs[i].short_flag, "-h"))
            return !(a + 1 < argc && parse_long(argv[a + 1], &v));
    return 1;
}

// v as the shortest decimal that reads back as the same float, so that a message about a
// refused value shows it as given: --top-p 1.0000001 is a float just above 1, which %g
// prints as "1". buf: 32 bytes.
static inline const char *float_text(char *buf, float v) {
    for (int digits = 6; digits < 9; digits++) {
        snprintf(buf, 32, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) return buf;
    }
    snprintf(buf, 32, "%.9g", (double)v);
    return buf;
}

static inline void args_parse(int argc, char **argv, const ArgSpec *specs, int n, const char *usage) {
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || (!strcmp(arg, "-h") && args_h_is_help(argc, argv, a, specs, n))) {
            args_print_help(usage, specs, n);
            exit(0);
        }
        // split "--name=value"
        char name[128];
        const char *value = NULL;
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (name_len >= sizeof name) fatal("unknown option '%s' (see --help)", arg);
        memcpy(name, arg, name_len);
        name[name_len] = 0;
        const ArgSpec *s = NULL;
        for (int i = 0; i < n && !s; i++) {
            if ((specs[i].short_flag && !strcmp(name, specs[i].short_flag)) ||
                !strcmp(name, specs[i].long_flag)) s = &specs[i];
        }
        if (!s) fatal("unknown option '%s' (see --help)", arg);
        long num;
        if (eq) value = eq + 1;
        else if (s->type == ARG_SWITCH && (a + 1 >= argc || (argv[a + 1][0] == '-' && !parse_long(argv[a + 1], &num))))
            value = "1";  // a switch alone, followed by the next option or by nothing: on
        else if (a + 1 < argc) value = argv[++a];
        else fatal("option %s needs a value (see --help)", name);
        if (s->type == ARG_INT) {
            long v;
            if (!parse_long(value, &v) || v < -2147483647L || v > 2147483647L)
                fatal("option %s expects an integer, got '%s'", name, value);
            *(int *)s->dest = (int)v;
        } else if (s->type == ARG_SWITCH) {
            long v;
            if (!parse_long(value, &v) || (v != 0 && v != 1)) fatal("%s must be 0 or 1, got '%s'", name, value);
            *(int *)s->dest = (int)v;
        } else if (s->type == ARG_FLOAT) {
            double v;
            if (!parse_double(value, &v) || v > 3.4e38 || v < -3.4e38)
                fatal("option %s expects a finite number, got '%s'", name, value);
            *(float *)s->dest = (float)v;
        } else if (s->type == ARG_REFUSED) {
            fatal("option %s is llm.c's and is not supported here: %s", name, s->help);
        } else {
            *(const char **)s->dest = value;
        }
    }
}

static inline void args_parse_table(int argc, char **argv, const ArgTable *t, const char *usage) {
    args_parse(argc, argv, t->specs, t->n, usage);
}

#endif // COMMON_ARGS_H

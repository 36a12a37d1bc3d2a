/*
 * The driver shared by the mpi_<op> programs: flags, size sweep, timing, check and table (see
 * mpi_bench.h for what each column means and how results are checked).
 */
#include "mpi_bench.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COPY_MODULUS 1048573u
#define SUM_SPAN 16u
#define MAX_SIZES 100000

float bench_copy_input(int src, size_t idx)
{
    return (float)((7919ull * (unsigned)src + idx + 1) % COPY_MODULUS);
}

float bench_sum_input(int src, size_t idx)
{
    return (float)(1 + ((unsigned)src + idx) % SUM_SPAN);
}

float bench_sum_expected(int ranks, size_t idx)
{
    /* Integer arithmetic, so the expectation does not depend on any float summation order. */
    unsigned long long s = 0;
    for (int r = 0; r < ranks; r++)
        s += 1 + ((unsigned)r + idx) % SUM_SPAN;
    return (float)s;
}

void bench_fill_copy(float *buf, size_t n, int src, size_t first)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = bench_copy_input(src, first + i);
}

void bench_fill_sum(float *buf, size_t n, int src, size_t first)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = bench_sum_input(src, first + i);
}

static int miss(struct bench_miss *m, size_t at, float got, float want)
{
    m->at = at;
    m->got = got;
    m->want = want;
    return 1;
}

int bench_check_copy(const float *buf, size_t n, int src, size_t first, size_t at,
                     struct bench_miss *m)
{
    for (size_t i = 0; i < n; i++) {
        float want = bench_copy_input(src, first + i);
        if (buf[i] != want)
            return miss(m, at + i, buf[i], want);
    }
    return 0;
}

int bench_check_sum(const float *buf, size_t n, int ranks, size_t first, size_t at,
                    struct bench_miss *m)
{
    /* The pattern repeats every SUM_SPAN elements: compute one period of expectations. */
    float want[SUM_SPAN];
    for (unsigned k = 0; k < SUM_SPAN; k++)
        want[k] = bench_sum_expected(ranks, k);
    for (size_t i = 0; i < n; i++) {
        float w = want[(first + i) % SUM_SPAN];
        if (buf[i] != w)
            return miss(m, at + i, buf[i], w);
    }
    return 0;
}

double bench_factor_one(int ranks)
{
    (void)ranks;
    return 1.0;
}

double bench_factor_blocks(int ranks)
{
    return (double)(ranks - 1) / ranks;
}

/* ---------------------------------------------------------------------------------------- */
/* Command line. */

struct config {
    unsigned long long min_bytes, max_bytes, factor, increment;
    int root, iters, warmup, check;
};

static void usage(FILE *f, const char *prog, const struct bench_op *op)
{
    fprintf(f,
            "usage: %s [options]\n"
            "\n"
            "Measures MPI's counterpart of %s_test with the same sizes, timing and table.\n"
            "\n"
            "  -b SIZE    smallest size in bytes per rank, K/M/G suffixes (default 8K)\n"
            "  -e SIZE    largest size (default 64M)\n"
            "  -f N       multiply the size by N each step (default 2)\n"
            "  -i SIZE    add SIZE each step instead of multiplying\n"
            "  -n N       timed iterations per size (default 20)\n"
            "  -w N       warm-up iterations per size (default 5)\n"
            "  -r RANK    root of broadcast, reduce, scatter (default 0)\n"
            "  -c 0|1     check results (default 1)\n"
            "  -d fp32    element type (fp32 only)\n"
            "  -o sum     reduction (sum only)\n"
            "  -h         print this text\n"
            "%s",
            prog, op->name,
            op->no_payload ? "\nThis operation moves no data: it prints one row of size 0 and "
                             "ignores -b, -e, -f, -i.\n"
                           : "");
}

static int parse_size(const char *s, unsigned long long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return -1;
    }
    if (*end || (shift && v > (ULLONG_MAX >> shift)))
        return -1;
    *out = v << shift;
    return 0;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

/* Parses argv into c; returns 0, 1 for -h, or -1 after printing an error into err. */
static int parse(int argc, char **argv, struct config *c, char *err, size_t errlen)
{
    int min_set = 0, max_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (a[0] != '-' || !a[1] || a[1] == '-' || !strchr("befinwrcdo", a[1])) {
            snprintf(err, errlen, "unknown option '%s'", a);
            return -1;
        }
        const char *v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            snprintf(err, errlen, "option '%s' needs a value", a);
            return -1;
        }
        int bad = 0, f = 0;
        switch (a[1]) {
        case 'b': bad = parse_size(v, &c->min_bytes); min_set = 1; break;
        case 'e': bad = parse_size(v, &c->max_bytes); max_set = 1; break;
        case 'f': bad = parse_int(v, &f) || f < 2; c->factor = (unsigned)f; c->increment = 0; break;
        case 'i': bad = parse_size(v, &c->increment) || c->increment == 0; break;
        case 'n': bad = parse_int(v, &c->iters) || c->iters < 1; break;
        case 'w': bad = parse_int(v, &c->warmup); break;
        case 'r': bad = parse_int(v, &c->root); break;
        case 'c': bad = parse_int(v, &c->check) || c->check > 1; break;
        case 'd': bad = strcmp(v, "fp32") != 0; break;
        case 'o': bad = strcmp(v, "sum") != 0; break;
        }
        if (bad) {
            snprintf(err, errlen, "invalid value '%s' for -%c", v, a[1]);
            return -1;
        }
    }
    /* A single bound given alone moves the other default out of its way, as in the testers. */
    if (min_set && !max_set && c->max_bytes < c->min_bytes)
        c->max_bytes = c->min_bytes;
    if (max_set && !min_set && c->min_bytes > c->max_bytes)
        c->min_bytes = c->max_bytes;
    if (c->max_bytes < c->min_bytes) {
        snprintf(err, errlen, "maximum size %llu is smaller than minimum size %llu",
                 c->max_bytes, c->min_bytes);
        return -1;
    }
    if (c->max_bytes / sizeof(float) > INT_MAX) {
        snprintf(err, errlen, "sizes above %llu bytes need counts that MPI's int cannot hold",
                 (unsigned long long)INT_MAX * sizeof(float));
        return -1;
    }
    if (!c->increment && c->min_bytes == 0) {
        snprintf(err, errlen, "-b 0 needs -i (a factor never grows from zero)");
        return -1;
    }
    return 0;
}

/* The sizes from min_bytes up to the last one not above max_bytes; returns how many. */
static size_t sweep(const struct config *c, unsigned long long *out)
{
    size_t n = 0;
    unsigned long long s = c->min_bytes;
    while (s <= c->max_bytes && n < MAX_SIZES) {
        out[n++] = s;
        unsigned long long next = c->increment ? s + c->increment : s * c->factor;
        if (next <= s || (!c->increment && next / c->factor != s))
            break;
        s = next;
    }
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Running. */

static void *alloc_floats(size_t n)
{
    void *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "cannot allocate %zu floats\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

void bench_must(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fprintf(stderr, "%s failed: %s\n", what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Prints the library's name and version: MPI_Get_library_version up to a comma or newline. */
static void print_library(FILE *f)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(v, &n);
    fprintf(f, "%.*s", (int)strcspn(v, ",\n"), v);
}

enum outcome { CHECK_SUCCESS, CHECK_FAILED, CHECK_NULL };

/* Runs one size on every rank; rank 0 prints the row. Returns the combined check outcome. */
static enum outcome run_size(const struct bench_op *op, const struct config *c, int rank,
                             int ranks, unsigned long long bytes, int fault)
{
    int blocks = op->blocked ? ranks : 1;
    struct bench_run r = {.rank = rank, .ranks = ranks, .root = c->root};
    if (bytes && !op->no_payload) {
        r.count = bytes / sizeof(float) / blocks;
        if (r.count == 0)
            r.count = 1;
    }
    int fault_rank = !strcmp(op->name, "reduce") ? c->root : 0;
    r.fault = fault && rank == fault_rank;
    op->buffers(&r);
    float *send = alloc_floats(r.send_elems), *recv = alloc_floats(r.recv_elems);
    for (size_t i = 0; i < r.recv_elems; i++)
        recv[i] = -1.0f;
    op->fill(&r, send, recv);

    for (int i = 0; i < c->warmup; i++)
        bench_must(op->call(&r, send, recv), op->name);
    bench_must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = MPI_Wtime();
    for (int i = 0; i < c->iters; i++)
        bench_must(op->call(&r, send, recv), op->name);
    double mine = (MPI_Wtime() - t0) / c->iters, slowest = 0;
    bench_must(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
               "MPI_Allreduce");

    enum outcome result = CHECK_NULL;
    if (c->check) {
        for (size_t i = 0; i < r.recv_elems; i++)
            recv[i] = -1.0f;
        op->fill(&r, send, recv);
        bench_must(op->call(&r, send, recv), op->name);
        if (r.fault && r.recv_elems)
            recv[0] = -2.0f;
        struct bench_miss m = {0};
        int state[2] = {0, 0}; /* wrong here, not checkable here */
        switch (op->verify(&r, recv, &m)) {
        case 0: break;
        case 1: state[0] = 1; break;
        default: state[1] = 1; break;
        }
        if (state[0] && m.note)
            fprintf(stderr, "rank %d: %s check failed: %s\n", rank, op->name, m.note);
        else if (state[0])
            fprintf(stderr, "rank %d: %s data_size %zu check failed at element %zu: got %g, "
                            "expected %g\n",
                    rank, op->name, r.count * blocks * sizeof(float), m.at, m.got, m.want);
        int all[2];
        bench_must(MPI_Allreduce(state, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
                   "MPI_Allreduce");
        result = all[0] ? CHECK_FAILED : all[1] ? CHECK_NULL : CHECK_SUCCESS;
    }
    free(send);
    free(recv);

    if (rank == 0) {
        static const char *names[] = {"success", "failed", "NULL"};
        unsigned long long data_size = (unsigned long long)r.count * blocks * sizeof(float);
        double alg = slowest > 0 ? data_size / slowest / 1e9 : 0.0;
        printf("%16llu %14.2f %20.6f %20.6f %13s\n", data_size, slowest * 1e6, alg,
               alg * op->bus_factor(ranks), names[result]);
        fflush(stdout);
    }
    return result;
}

int bench_main(int argc, char **argv, const struct bench_op *op)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const char *slash = strrchr(argv[0], '/');
    const char *prog = slash ? slash + 1 : argv[0];

    struct config c = {.min_bytes = 8 << 10, .max_bytes = 64 << 20, .factor = 2,
                       .iters = 20, .warmup = 5, .check = 1};
    char err[256] = "";
    int p = parse(argc, argv, &c, err, sizeof err);
    if (p == 0 && op->rooted && c.root >= ranks) {
        snprintf(err, sizeof err, "root %d is out of range for %d ranks", c.root, ranks);
        p = -1;
    }
    if (p != 0) {
        if (rank == 0) {
            if (p < 0)
                fprintf(stderr, "%s: error: %s\n\n", prog, err);
            usage(p < 0 ? stderr : stdout, prog, op);
        }
        MPI_Finalize();
        return p < 0 ? 2 : 0;
    }

    static unsigned long long sizes[MAX_SIZES];
    size_t n = 1;
    if (op->no_payload)
        sizes[0] = 0;
    else
        n = sweep(&c, sizes);
    const char *inject = getenv("HCCL_TEST_FAULT_INJECT");
    int fault = inject && !strcmp(inject, "corrupt");

    if (rank == 0) {
        fprintf(stderr, "%s: ", prog);
        print_library(stderr);
        fprintf(stderr, ", %d process%s, %s", ranks, ranks == 1 ? "" : "es",
                op->no_payload ? "no payload (one row of size 0)" : "dtype fp32");
        if (op->reduces)
            fprintf(stderr, ", op sum");
        if (op->rooted)
            fprintf(stderr, ", root %d", c.root);
        fprintf(stderr, ", iters %d, warmup %d%s\n", c.iters, c.warmup,
                c.check ? "" : ", check off");
        printf("%16s %14s %20s %20s %13s\n", "data_size(Bytes)", "aveg_time(us)",
               "alg_bandwidth(GB/s)", "bus_bandwidth(GB/s)", "check_result");
        fflush(stdout);
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed |= run_size(op, &c, rank, ranks, sizes[i], fault) == CHECK_FAILED;
    MPI_Finalize();
    return failed ? 1 : 0;
}

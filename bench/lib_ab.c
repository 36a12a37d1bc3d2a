/*
 * A/B comparison of builds of libhccl.so (and Open MPI) inside one launch.
 *
 * Small-message times on a machine like this one move by up to 2x between launches, with the
 * placement of the ranks (whether the two processes share a cache), so two builds timed in
 * separate launches cannot be told apart by a few percent. This program loads every build given
 * on its command line into the same processes (dlopen, each with its own globals), opens one
 * communicator per build, and times the same operation on each in alternating rounds: every
 * round runs each contender for ITERS calls, between barriers, in an order that reverses from
 * round to round. All contenders therefore see the same placement, and the table compares
 * them round by round.
 *
 * usage: mpirun -n RANKS lib_ab [-o OP] [-b BYTES] [-n ITERS] [-R ROUNDS] [-w WARMUP] [-r ROOT]
 *            CONTENDER...
 *   OP: all_reduce (default), broadcast, reduce, all_gather, reduce_scatter, scatter, alltoall,
 *       barrier. fp32, sum where the operation reduces.
 *   BYTES: bytes per rank block (default 16; a multiple of 4).
 *   ITERS: calls per round (default 10000); ROUNDS: rounds (default 20); WARMUP: untimed calls
 *       per contender before the first round (default 1000); ROOT: root of the rooted
 *       operations (default 0).
 *   CONTENDER: a path to a libhccl.so (each path is loaded once: give copies, not the same
 *       file twice) or "mpi" for the MPI library this program runs on. At most 8.
 *
 * Buffers are host memory (malloc) and calls pass a NULL stream, so each call completes before
 * it returns. Before any timing every contender runs the operation once on patterned inputs and
 * every rank checks its output against values it computes itself (data movement: element i of
 * rank r is (7919 r + i + 1) mod 1048573; sums: 1 + (r + i) mod 16; integers that fp32 holds
 * exactly). Rank 0 prints one row per contender:
 *   contender min_us median_us mean_us median_vs_first check_result
 * where the times are the slowest rank's mean time per call of a round, over the rounds, and
 * median_vs_first is the contender's median over the first contender's (lower is faster).
 *
 * HCCL_TEST_FAULT_INJECT=corrupt spoils one checked element of the first contender on rank 0,
 * so tests can see a failure reported. Exit status: 0 when every check passed, 1 when one
 * failed or a call returned an error, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hccl/hccl.h>

#define MAX_CONTENDERS 8

enum op { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, SCATTER, ALLTOALL, BARRIER };
static const char *const OP_NAMES[] = {"all_reduce", "broadcast",      "reduce",
                                       "all_gather", "reduce_scatter", "scatter",
                                       "alltoall",   "barrier"};

/* The entry points of one build, resolved by name. */
struct api {
    HcclResult (*get_root_info)(HcclRootInfo *);
    HcclResult (*init)(uint32_t, const HcclRootInfo *, uint32_t, HcclComm *);
    HcclResult (*destroy)(HcclComm);
    HcclResult (*all_reduce)(void *, void *, uint64_t, HcclDataType, HcclReduceOp, HcclComm,
                             aclrtStream);
    HcclResult (*broadcast)(void *, uint64_t, HcclDataType, uint32_t, HcclComm, aclrtStream);
    HcclResult (*reduce)(void *, void *, uint64_t, HcclDataType, HcclReduceOp, uint32_t,
                         HcclComm, aclrtStream);
    HcclResult (*all_gather)(void *, void *, uint64_t, HcclDataType, HcclComm, aclrtStream);
    HcclResult (*reduce_scatter)(void *, void *, uint64_t, HcclDataType, HcclReduceOp, HcclComm,
                                 aclrtStream);
    HcclResult (*scatter)(void *, void *, uint64_t, HcclDataType, uint32_t, HcclComm,
                          aclrtStream);
    HcclResult (*alltoall)(const void *, uint64_t, HcclDataType, const void *, uint64_t,
                           HcclDataType, HcclComm, aclrtStream);
    HcclResult (*barrier)(HcclComm, aclrtStream);
};

struct contender {
    const char *name;
    int is_mpi;
    struct api api;
    HcclComm comm;
    int ok;        /* the check's outcome, on every rank */
    double *times; /* per round */
};

struct setup {
    enum op op;
    int rank, ranks, root;
    size_t count; /* elements per block */
    float *send, *recv;
};

static void die(int rank, const char *what) {
    fprintf(stderr, "lib_ab: rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void *sym(void *h, const char *name, const char *lib, int rank) {
    void *p = dlsym(h, name);
    if (!p) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s has no %s", lib, name);
        die(rank, msg);
    }
    return p;
}

static void load(struct contender *c, int rank) {
    void *h = dlopen(c->name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot load %s: %s", c->name, dlerror());
        die(rank, msg);
    }
    struct api *a = &c->api;
    *(void **)&a->get_root_info = sym(h, "HcclGetRootInfo", c->name, rank);
    *(void **)&a->init = sym(h, "HcclCommInitRootInfo", c->name, rank);
    *(void **)&a->destroy = sym(h, "HcclCommDestroy", c->name, rank);
    *(void **)&a->all_reduce = sym(h, "HcclAllReduce", c->name, rank);
    *(void **)&a->broadcast = sym(h, "HcclBroadcast", c->name, rank);
    *(void **)&a->reduce = sym(h, "HcclReduce", c->name, rank);
    *(void **)&a->all_gather = sym(h, "HcclAllGather", c->name, rank);
    *(void **)&a->reduce_scatter = sym(h, "HcclReduceScatter", c->name, rank);
    *(void **)&a->scatter = sym(h, "HcclScatter", c->name, rank);
    *(void **)&a->alltoall = sym(h, "HcclAlltoAll", c->name, rank);
    *(void **)&a->barrier = sym(h, "HcclBarrier", c->name, rank);
}

/* Elements of the send and receive buffers. */
static size_t send_elems(const struct setup *s) {
    switch (s->op) {
    case REDUCE_SCATTER: case SCATTER: case ALLTOALL: return s->count * s->ranks;
    case BARRIER: return 0;
    default: return s->count;
    }
}

static size_t recv_elems(const struct setup *s) {
    switch (s->op) {
    case ALL_GATHER: case ALLTOALL: return s->count * s->ranks;
    case BARRIER: return 0;
    default: return s->count;
    }
}

static float moved(int r, size_t i) { return (float)((7919ull * r + i + 1) % 1048573ull); }
static float summed(int r, size_t i) { return (float)(1 + (r + i) % 16); }
static int reduces(enum op op) { return op == ALL_REDUCE || op == REDUCE || op == REDUCE_SCATTER; }

static void fill(const struct setup *s) {
    for (size_t i = 0; i < send_elems(s); i++)
        s->send[i] = reduces(s->op) ? summed(s->rank, i) : moved(s->rank, i);
    /* A broadcast works in place: its buffer is the send buffer. */
    for (size_t i = 0; i < recv_elems(s); i++) s->recv[i] = -1.0f;
}

/* One call of the operation; 0 on success. */
static int call(const struct contender *c, const struct setup *s) {
    size_t n = s->count;
    void *sb = s->send, *rb = s->recv;
    if (c->is_mpi) {
        switch (s->op) {
        case ALL_REDUCE: return MPI_Allreduce(sb, rb, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        case BROADCAST: return MPI_Bcast(sb, n, MPI_FLOAT, s->root, MPI_COMM_WORLD);
        case REDUCE: return MPI_Reduce(sb, rb, n, MPI_FLOAT, MPI_SUM, s->root, MPI_COMM_WORLD);
        case ALL_GATHER: return MPI_Allgather(sb, n, MPI_FLOAT, rb, n, MPI_FLOAT, MPI_COMM_WORLD);
        case REDUCE_SCATTER:
            return MPI_Reduce_scatter_block(sb, rb, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        case SCATTER:
            return MPI_Scatter(sb, n, MPI_FLOAT, rb, n, MPI_FLOAT, s->root, MPI_COMM_WORLD);
        case ALLTOALL: return MPI_Alltoall(sb, n, MPI_FLOAT, rb, n, MPI_FLOAT, MPI_COMM_WORLD);
        case BARRIER: return MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    const struct api *a = &c->api;
    HcclDataType f = HCCL_DATA_TYPE_FP32;
    switch (s->op) {
    case ALL_REDUCE: return a->all_reduce(sb, rb, n, f, HCCL_REDUCE_SUM, c->comm, NULL);
    case BROADCAST: return a->broadcast(sb, n, f, s->root, c->comm, NULL);
    case REDUCE: return a->reduce(sb, rb, n, f, HCCL_REDUCE_SUM, s->root, c->comm, NULL);
    case ALL_GATHER: return a->all_gather(sb, rb, n, f, c->comm, NULL);
    case REDUCE_SCATTER: return a->reduce_scatter(sb, rb, n, f, HCCL_REDUCE_SUM, c->comm, NULL);
    case SCATTER: return a->scatter(sb, rb, n, f, s->root, c->comm, NULL);
    case ALLTOALL: return a->alltoall(sb, n, f, rb, n, f, c->comm, NULL);
    case BARRIER: return a->barrier(c->comm, NULL);
    }
    return 1;
}

/* The expected output element i (of the receive buffer; of the buffer for a broadcast). */
static float expected(const struct setup *s, size_t i) {
    size_t n = s->count;
    float sum = 0;
    switch (s->op) {
    case ALL_REDUCE: case REDUCE:
        for (int r = 0; r < s->ranks; r++) sum += summed(r, i);
        return sum;
    case REDUCE_SCATTER:
        for (int r = 0; r < s->ranks; r++) sum += summed(r, s->rank * n + i);
        return sum;
    case BROADCAST: return moved(s->root, i);
    case ALL_GATHER: return moved((int)(i / n), i % n);
    case SCATTER: return moved(s->root, s->rank * n + i);
    case ALLTOALL: return moved((int)(i / n), s->rank * n + i % n);
    case BARRIER: break;
    }
    return 0;
}

/* Runs the operation once on patterned inputs and checks this rank's output; returns whether
 * every rank matched. */
static int check(const struct contender *c, const struct setup *s, int spoil) {
    fill(s);
    int ok = call(c, s) == 0;
    const float *out = s->op == BROADCAST ? s->send : s->recv;
    size_t len = s->op == BROADCAST ? s->count : recv_elems(s);
    if (s->op == REDUCE && s->rank != s->root) len = 0;
    if (spoil && len > 0) ((float *)out)[len - 1] += 1.0f;
    for (size_t i = 0; ok && i < len; i++) {
        if (out[i] != expected(s, i)) {
            fprintf(stderr, "lib_ab: rank %d: %s: %s element %zu is %g, expected %g\n", s->rank,
                    c->name, OP_NAMES[s->op], i, out[i], expected(s, i));
            ok = 0;
        }
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr,
            "usage: mpirun -n RANKS lib_ab [-o OP] [-b BYTES] [-n ITERS] [-R ROUNDS] "
            "[-w WARMUP] [-r ROOT] CONTENDER...\n"
            "  OP: all_reduce broadcast reduce all_gather reduce_scatter scatter alltoall "
            "barrier\n  CONTENDER: path of a libhccl.so, or mpi\n");
}

static int parse_long(const char *v, long lo, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x < lo) return 1;
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct setup s = {.op = ALL_REDUCE};
    MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &s.ranks);
    long bytes = 16, iters = 10000, rounds = 20, warmup = 1000, root = 0;
    struct contender cs[MAX_CONTENDERS];
    int nc = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] != '\0' && a[2] == '\0') {
            if (i + 1 >= argc) { bad = 1; break; }
            const char *v = argv[++i];
            switch (a[1]) {
            case 'o':
                bad = 1;
                for (int k = 0; k <= BARRIER; k++)
                    if (!strcmp(v, OP_NAMES[k])) { s.op = (enum op)k; bad = 0; }
                break;
            case 'b': bad = parse_long(v, 4, &bytes) || bytes % 4 != 0; break;
            case 'n': bad = parse_long(v, 1, &iters); break;
            case 'R': bad = parse_long(v, 1, &rounds); break;
            case 'w': bad = parse_long(v, 0, &warmup); break;
            case 'r': bad = parse_long(v, 0, &root) || root >= s.ranks; break;
            default: bad = 1;
            }
        } else if (nc < MAX_CONTENDERS) {
            cs[nc] = (struct contender){.name = a, .is_mpi = !strcmp(a, "mpi")};
            nc++;
        } else {
            bad = 1;
        }
    }
    if (bad || nc == 0) {
        if (s.rank == 0) usage();
        MPI_Finalize();
        return 2;
    }
    s.root = (int)root;
    s.count = (size_t)bytes / 4;
    s.send = malloc((send_elems(&s) + 1) * sizeof(float));
    s.recv = malloc((recv_elems(&s) + 1) * sizeof(float));
    if (!s.send || !s.recv) die(s.rank, "out of memory");
    const char *fault = getenv("HCCL_TEST_FAULT_INJECT");
    int spoil = fault && !strcmp(fault, "corrupt") && s.rank == 0;

    int all_ok = 1;
    for (int k = 0; k < nc; k++) {
        struct contender *c = &cs[k];
        c->times = calloc((size_t)rounds, sizeof(double));
        if (!c->times) die(s.rank, "out of memory");
        if (!c->is_mpi) {
            load(c, s.rank);
            HcclRootInfo info;
            memset(&info, 0, sizeof info);
            if (s.rank == 0 && c->api.get_root_info(&info) != HCCL_SUCCESS)
                die(s.rank, "HcclGetRootInfo failed");
            MPI_Bcast(&info, sizeof info, MPI_BYTE, 0, MPI_COMM_WORLD);
            if (c->api.init((uint32_t)s.ranks, &info, (uint32_t)s.rank, &c->comm) != HCCL_SUCCESS)
                die(s.rank, "HcclCommInitRootInfo failed");
        }
        c->ok = check(c, &s, spoil && k == 0);
        all_ok &= c->ok;
        for (long i = 0; i < warmup; i++)
            if (call(c, &s)) die(s.rank, "a warm-up call failed");
    }
    for (long r = 0; r < rounds; r++) {
        for (int j = 0; j < nc; j++) {
            struct contender *c = &cs[r % 2 ? nc - 1 - j : j];
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < iters; i++)
                if (call(c, &s)) die(s.rank, "a timed call failed");
            double mine = (MPI_Wtime() - t0) / (double)iters * 1e6, slowest = 0;
            MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            c->times[r] = slowest;
        }
    }
    if (s.rank == 0) {
        printf("# %s, %ld B per block, %d ranks, %ld rounds of %ld calls\n", OP_NAMES[s.op],
               bytes, s.ranks, rounds, iters);
        printf("%-40s %10s %10s %10s %16s %13s\n", "contender", "min_us", "median_us", "mean_us",
               "median_vs_first", "check_result");
        double first = 0;
        for (int k = 0; k < nc; k++) {
            double *t = cs[k].times, sum = 0;
            for (long r = 0; r < rounds; r++) sum += t[r];
            qsort(t, (size_t)rounds, sizeof(double), cmp_double);
            double med = rounds % 2 ? t[rounds / 2] : (t[rounds / 2 - 1] + t[rounds / 2]) / 2;
            if (k == 0) first = med;
            printf("%-40s %10.3f %10.3f %10.3f %16.3f %13s\n", cs[k].name, t[0], med,
                   sum / (double)rounds, med / first, cs[k].ok ? "success" : "failed");
        }
    }
    for (int k = 0; k < nc; k++)
        if (!cs[k].is_mpi && cs[k].api.destroy(cs[k].comm) != HCCL_SUCCESS)
            die(s.rank, "HcclCommDestroy failed");
    MPI_Finalize();
    return all_ok ? 0 : 1;
}

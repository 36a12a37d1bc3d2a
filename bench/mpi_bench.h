/*
 * MPI counterparts of the hccl-tools testers: one program per operation (mpi_<op>.c) over the
 * shared driver in mpi_bench.c.
 *
 * The driver takes the testers' flags (-b -e -f -i -n -w -r -c, and -d fp32 / -o sum, the only
 * type and reduction measured here), sweeps the same sizes, times the same way (warm-up, a
 * barrier, the timed loop, the slowest rank's mean) and prints the testers' table on rank 0:
 * data_size(Bytes) aveg_time(us) alg_bandwidth(GB/s) bus_bandwidth(GB/s) check_result.
 * data_size and the bus factors follow the testers: bytes of each rank's largest buffer, and
 * NCCL's conventions (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
 * the others 1).
 *
 * After the timed loop every size runs once more on freshly filled buffers, whose output
 * regions start as -1 (no input or result is negative), and each rank compares its output with
 * values it computes itself from the input patterns below; the check column says success only
 * when every rank matched.
 *
 * Input element i of rank r: data movement (7919 r + i + 1) mod 1048573; sum 1 + (r + i) mod 16.
 * Both are integers that fp32 holds exactly, and so are all their sums up to 65535 ranks.
 *
 * HCCL_TEST_FAULT_INJECT=corrupt spoils one output element (of rank 0, or of the root for
 * reduce) before the check, so tests can see a failure reported. Exit status: 0 when every
 * check passed, 1 when one failed, 2 on a usage error.
 */
#ifndef MPI_BENCH_H
#define MPI_BENCH_H

#include <stddef.h>

/* One size of one run, as every rank sees it. */
struct bench_run {
    int rank, ranks, root;
    /* Elements per block: the count argument of the MPI call. */
    size_t count;
    /* Element counts of this rank's send and receive buffers. */
    size_t send_elems, recv_elems;
    /* Set when HCCL_TEST_FAULT_INJECT=corrupt asks for a spoiled result. */
    int fault;
};

/* A mismatch found by a check: element index, value found, value expected; or, for checks
 * of something other than elements, a sentence saying what went wrong. */
struct bench_miss {
    size_t at;
    double got, want;
    const char *note;
};

/* What the driver needs to know about one operation. */
struct bench_op {
    /* The tester's name without "_test" (all_reduce, broadcast, ...). */
    const char *name;
    /* Whether the buffers hold one block per rank, so data_size counts ranks x count. */
    int blocked;
    /* Whether -r chooses a root. */
    int rooted;
    /* Whether -o applies. */
    int reduces;
    /* Whether the operation moves no data (one row of size 0, sizes ignored). */
    int no_payload;
    /* Bus bandwidth over algorithm bandwidth for this many ranks. */
    double (*bus_factor)(int ranks);
    /* Sets send_elems and recv_elems from count, rank, ranks and root. */
    void (*buffers)(struct bench_run *r);
    /* Fills this rank's input (the receive buffer already holds -1 everywhere). */
    void (*fill)(const struct bench_run *r, float *send, float *recv);
    /* Issues the operation once; returns the MPI error code. */
    int (*call)(const struct bench_run *r, float *send, float *recv);
    /* Checks this rank's output after one call: 0 when right, 1 when wrong (with *m set), 2
     * when it cannot be checked here (the check column then says NULL). */
    int (*verify)(const struct bench_run *r, const float *recv, struct bench_miss *m);
};

/* Element idx of rank src's input for data movement. */
float bench_copy_input(int src, size_t idx);
/* Element idx of rank src's input for a sum. */
float bench_sum_input(int src, size_t idx);
/* The sum over ranks 0..ranks-1 of element idx, computed without MPI. */
float bench_sum_expected(int ranks, size_t idx);
/* Fills n elements with rank src's data-movement input from element first on. */
void bench_fill_copy(float *buf, size_t n, int src, size_t first);
/* Fills n elements with rank src's sum input from element first on. */
void bench_fill_sum(float *buf, size_t n, int src, size_t first);
/* Compares n elements with rank src's data-movement input from element first on; at is the
 * index reported for buf[0]. Returns 0 when equal, else 1 with *m set. */
int bench_check_copy(const float *buf, size_t n, int src, size_t first, size_t at,
                     struct bench_miss *m);
/* Compares n elements with the sum over all ranks from element first on, as above. */
int bench_check_sum(const float *buf, size_t n, int ranks, size_t first, size_t at,
                    struct bench_miss *m);

/* Ends the whole job with a message unless rc is MPI_SUCCESS. */
void bench_must(int rc, const char *what);

double bench_factor_one(int ranks);
double bench_factor_blocks(int ranks);

/* Runs the program: parses argv, sweeps, prints, and returns the exit status. */
int bench_main(int argc, char **argv, const struct bench_op *op);

#endif

/*
 * MPI counterpart of barrier_test: MPI_Barrier, one row of size 0 (see mpi_bench.h).
 *
 * The check: in round k rank k enters last, after spinning for a millisecond; every rank takes
 * the monotonic clock just before entering and just after leaving, and the round passes when
 * the latest entry precedes the earliest exit. The clock is comparable between processes only
 * on one kernel, so the check runs only when every rank reads the same boot id (NULL
 * otherwise).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mpi_bench.h"

/* Rounds of the check: each of the first ranks enters last once. */
#define MAX_ROUNDS 8
#define LATE_NS 1000000LL

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* FNV-1a of this kernel's boot id, 0 when it cannot be read. */
static long long boot_id_hash(void)
{
    char id[128] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return 0;
    size_t n = fread(id, 1, sizeof id - 1, f);
    fclose(f);
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)id[i]) * 1099511628211ULL;
    return (long long)(h >> 1);
}

static void buffers(struct bench_run *r)
{
    r->send_elems = r->recv_elems = 0;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)r, (void)send, (void)recv;
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    (void)r, (void)send, (void)recv;
    return MPI_Barrier(MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    (void)recv;
    long long h = boot_id_hash(), hv[2] = {h, -h}, hm[2];
    bench_must(MPI_Allreduce(hv, hm, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD),
               "MPI_Allreduce");
    if (h == 0 || hm[0] != -hm[1])
        return 2;
    int rounds = r->ranks < MAX_ROUNDS ? r->ranks : MAX_ROUNDS;
    for (int k = 0; k < rounds; k++) {
        bench_must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        if (r->rank == k) {
            long long t = now_ns();
            while (now_ns() - t < LATE_NS)
                ;
        }
        long long enter = now_ns();
        bench_must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        long long leave = now_ns();
        if (r->fault && k == 0)
            leave = enter - 1; /* as if this rank had left before it entered */
        /* Latest entry and earliest exit, in one reduction: max(enter), max(-leave). */
        long long v[2] = {enter, -leave}, all[2];
        bench_must(MPI_Allreduce(v, all, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD),
                   "MPI_Allreduce");
        if (all[0] > -all[1]) {
            static char note[160];
            snprintf(note, sizeof note,
                     "round %d (rank %d entering last): a rank left %lld ns before the last "
                     "one entered",
                     k, k, all[0] + all[1]);
            m->note = note;
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "barrier", .no_payload = 1, .bus_factor = bench_factor_one,
        .buffers = buffers, .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

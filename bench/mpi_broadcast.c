/* MPI counterpart of broadcast_test: MPI_Bcast from the root, in place (see mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = 0;
    r->recv_elems = r->count;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)send;
    if (r->rank == r->root)
        bench_fill_copy(recv, r->count, r->root, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    (void)send;
    return MPI_Bcast(recv, (int)r->count, MPI_FLOAT, r->root, MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    return bench_check_copy(recv, r->count, r->root, 0, 0, m);
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "broadcast", .rooted = 1, .bus_factor = bench_factor_one, .buffers = buffers,
        .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

/* MPI counterpart of reduce_test: MPI_Reduce to the root, fp32 sum (see mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = r->count;
    r->recv_elems = r->rank == r->root ? r->count : 0;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_sum(send, r->count, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    return MPI_Reduce(send, recv, (int)r->count, MPI_FLOAT, MPI_SUM, r->root, MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    /* Only the root has an output. */
    return bench_check_sum(recv, r->recv_elems, r->ranks, 0, 0, m);
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "reduce", .rooted = 1, .reduces = 1, .bus_factor = bench_factor_one,
        .buffers = buffers, .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

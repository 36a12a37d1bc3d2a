/* MPI counterpart of reduce_scatter_test: MPI_Reduce_scatter_block, fp32 sum (see
 * mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = r->count * r->ranks;
    r->recv_elems = r->count;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_sum(send, r->send_elems, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    return MPI_Reduce_scatter_block(send, recv, (int)r->count, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    /* This rank's block of the sum: elements rank * count onwards. */
    return bench_check_sum(recv, r->count, r->ranks, (size_t)r->rank * r->count, 0, m);
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "reduce_scatter", .blocked = 1, .reduces = 1,
        .bus_factor = bench_factor_blocks, .buffers = buffers, .fill = fill, .call = call,
        .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

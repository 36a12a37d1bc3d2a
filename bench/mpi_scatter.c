/* MPI counterpart of scatter_test: MPI_Scatter of one block per rank from the root (see
 * mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = r->rank == r->root ? r->count * r->ranks : 0;
    r->recv_elems = r->count;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_copy(send, r->send_elems, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    return MPI_Scatter(send, (int)r->count, MPI_FLOAT, recv, (int)r->count, MPI_FLOAT, r->root,
                       MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    /* Block `rank` of the root's input. */
    return bench_check_copy(recv, r->count, r->root, (size_t)r->rank * r->count, 0, m);
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "scatter", .blocked = 1, .rooted = 1, .bus_factor = bench_factor_one,
        .buffers = buffers, .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

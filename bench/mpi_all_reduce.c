/* MPI counterpart of all_reduce_test: MPI_Allreduce, fp32 sum (see mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static double factor(int ranks)
{
    return 2.0 * (ranks - 1) / ranks;
}

static void buffers(struct bench_run *r)
{
    r->send_elems = r->recv_elems = r->count;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_sum(send, r->count, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    return MPI_Allreduce(send, recv, (int)r->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    return bench_check_sum(recv, r->count, r->ranks, 0, 0, m);
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "all_reduce", .reduces = 1, .bus_factor = factor, .buffers = buffers,
        .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

/* MPI counterpart of alltoall_test: MPI_Alltoall of one block per rank pair (see
 * mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = r->recv_elems = r->count * r->ranks;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_copy(send, r->send_elems, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    return MPI_Alltoall(send, (int)r->count, MPI_FLOAT, recv, (int)r->count, MPI_FLOAT,
                        MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    /* Block q holds block `rank` of rank q's input. */
    for (int q = 0; q < r->ranks; q++) {
        size_t at = (size_t)q * r->count;
        if (bench_check_copy(recv + at, r->count, q, (size_t)r->rank * r->count, at, m))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "alltoall", .blocked = 1, .bus_factor = bench_factor_blocks,
        .buffers = buffers, .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

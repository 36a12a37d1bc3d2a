/* MPI counterpart of all_gather_test: MPI_Allgather of one block per rank (see mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = r->count;
    r->recv_elems = r->count * r->ranks;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_copy(send, r->count, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    return MPI_Allgather(send, (int)r->count, MPI_FLOAT, recv, (int)r->count, MPI_FLOAT,
                         MPI_COMM_WORLD);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    /* Block q holds the input of rank q. */
    for (int q = 0; q < r->ranks; q++) {
        size_t at = (size_t)q * r->count;
        if (bench_check_copy(recv + at, r->count, q, 0, at, m))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "all_gather", .blocked = 1, .bus_factor = bench_factor_blocks,
        .buffers = buffers, .fill = fill, .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

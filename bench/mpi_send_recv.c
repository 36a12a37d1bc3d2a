/* MPI counterpart of send_recv_test: every rank sends to the next rank and receives from the
 * previous one at the same time (MPI_Sendrecv), as the tester's HcclBatchSendRecv does; with two
 * ranks, both directions of one pair at once (see mpi_bench.h). */
#include <mpi.h>

#include "mpi_bench.h"

static void buffers(struct bench_run *r)
{
    r->send_elems = r->recv_elems = r->count;
}

static void fill(const struct bench_run *r, float *send, float *recv)
{
    (void)recv;
    bench_fill_copy(send, r->count, r->rank, 0);
}

static int call(const struct bench_run *r, float *send, float *recv)
{
    int next = (r->rank + 1) % r->ranks, prev = (r->rank + r->ranks - 1) % r->ranks;
    return MPI_Sendrecv(send, (int)r->count, MPI_FLOAT, next, 0, recv, (int)r->count, MPI_FLOAT,
                        prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static int verify(const struct bench_run *r, const float *recv, struct bench_miss *m)
{
    int prev = (r->rank + r->ranks - 1) % r->ranks;
    return bench_check_copy(recv, r->count, prev, 0, 0, m);
}

int main(int argc, char **argv)
{
    static const struct bench_op op = {
        .name = "send_recv", .bus_factor = bench_factor_one, .buffers = buffers, .fill = fill,
        .call = call, .verify = verify,
    };
    return bench_main(argc, argv, &op);
}

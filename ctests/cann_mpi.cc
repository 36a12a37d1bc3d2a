// The CANN pattern with one process per device, launched by `mpirun -n N`: rank 0 creates the
// root info and ships it with MPI_Bcast; every process runs aclInit, aclrtSetDevice(rank),
// HcclCommInitRootInfo, every collective on a stream, aclrtSynchronizeStream, and tears down.
// Prints "cann_mpi: ok" on rank 0 when every rank's results are right.
//
// Build (after `source PREFIX/set_env.sh`):
//   mpicxx -std=c++14 -Werror -fPIE -pie -O2 -Wl,-z,relro -Wl,-z,now \
//       -Wl,--copy-dt-needed-entries cann_mpi.cc -I$ASCEND_HOME_PATH/include \
//       -L$ASCEND_HOME_PATH/lib64 -lhccl -lascendcl
//   mpirun -n 4 ./cann_mpi
#include <mpi.h>

#include <cstdio>

#include "cann_colls.h"

static int rank_main(uint32_t rank, uint32_t n)
{
    ACL_CHECK(aclInit(nullptr));
    uint32_t count = 0;
    ACL_CHECK(aclrtGetDeviceCount(&count));
    ACL_CHECK(aclrtSetDevice((int32_t)(rank % count)));
    HcclRootInfo root;
    if (rank == 0) {
        HCCL_CHECK(HcclGetRootInfo(&root));
    }
    MPI_Bcast(&root, (int)sizeof(root), MPI_BYTE, 0, MPI_COMM_WORLD);
    HcclComm comm = nullptr;
    HCCL_CHECK(HcclCommInitRootInfo(n, &root, rank, &comm));
    aclrtStream stream = nullptr;
    ACL_CHECK(aclrtCreateStream(&stream));
    int bad = cann::run_collectives(comm, stream, rank, n);
    HCCL_CHECK(HcclCommDestroy(comm));
    ACL_CHECK(aclrtDestroyStream(stream));
    ACL_CHECK(aclrtResetDevice((int32_t)(rank % count)));
    ACL_CHECK(aclFinalize());
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int bad = rank_main((uint32_t)rank, (uint32_t)size);
    if (bad != 0) {
        std::fprintf(stderr, "rank %d: %d failure(s)\n", rank, bad);
    }
    int total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && total == 0) {
        std::printf("cann_mpi: ok (%d processes)\n", size);
    }
    MPI_Finalize();
    return total == 0 || rank != 0 ? (bad != 0) : 1;
}

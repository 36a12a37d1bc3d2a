/* A 2-rank AllReduce (one thread per device) on ACL streams: the program the CMake and
 * pkg-config consumer projects build against an installed prefix. Each rank contributes
 * rank + 1 + i % 5 at index i; the sum on every rank is checked exactly (small integers in fp32).
 * Prints "package_allreduce: ok (2 ranks)" when both ranks hold the right result. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "hccl/hccl.h"

#define NRANKS 2
#define COUNT 4096

static HcclRootInfo g_root;
static int g_fail[NRANKS];

#define TRY(call)                                                                       \
    do {                                                                                \
        long rc_ = (long)(call);                                                        \
        if (rc_ != 0) {                                                                 \
            fprintf(stderr, "rank %u: %s failed: %ld\n", rank, #call, rc_);             \
            g_fail[rank] = 1;                                                           \
            return NULL;                                                                \
        }                                                                               \
    } while (0)

static void *rank_main(void *arg)
{
    uint32_t rank = (uint32_t)(size_t)arg;
    size_t bytes = sizeof(float) * COUNT;
    float host[COUNT];
    void *send = NULL, *recv = NULL;
    aclrtStream stream = NULL;
    HcclComm comm = NULL;
    int i;

    TRY(aclrtSetDevice((int32_t)rank));
    TRY(aclrtCreateStream(&stream));
    TRY(aclrtMalloc(&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    TRY(aclrtMalloc(&recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    for (i = 0; i < COUNT; i++) host[i] = (float)(rank + 1 + i % 5);
    TRY(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    TRY(HcclCommInitRootInfo(NRANKS, &g_root, rank, &comm));
    TRY(HcclAllReduce(send, recv, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    TRY(aclrtSynchronizeStream(stream));
    TRY(aclrtMemcpy(host, bytes, recv, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < COUNT; i++) {
        float want = (float)(3 + 2 * (i % 5));
        if (host[i] != want) {
            fprintf(stderr, "rank %u: element %d is %g, want %g\n", rank, i, host[i], want);
            g_fail[rank] = 1;
            break;
        }
    }
    TRY(HcclCommDestroy(comm));
    TRY(aclrtFree(send));
    TRY(aclrtFree(recv));
    TRY(aclrtDestroyStream(stream));
    TRY(aclrtResetDevice((int32_t)rank));
    return NULL;
}

int main(void)
{
    pthread_t threads[NRANKS];
    size_t r;

    if (aclInit(NULL) != ACL_SUCCESS || HcclGetRootInfo(&g_root) != HCCL_SUCCESS) {
        fprintf(stderr, "package_allreduce: initialisation failed\n");
        return 1;
    }
    for (r = 0; r < NRANKS; r++) {
        if (pthread_create(&threads[r], NULL, rank_main, (void *)r) != 0) {
            fprintf(stderr, "package_allreduce: pthread_create failed\n");
            return 1;
        }
    }
    for (r = 0; r < NRANKS; r++) pthread_join(threads[r], NULL);
    aclFinalize();
    for (r = 0; r < NRANKS; r++) {
        if (g_fail[r]) return 1;
    }
    printf("package_allreduce: ok (%d ranks)\n", NRANKS);
    return 0;
}

/* Thread-per-rank program: every collective once, checked against values computed here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hccl/hccl.h"

#define NRANKS 4
#define COUNT 1000

static HcclRootInfo g_root;
static int g_fail;

#define CHECK(x)                                                                       \
    do {                                                                               \
        HcclResult r_ = (x);                                                           \
        if (r_ != HCCL_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)r_,  \
                    HcclGetErrorString(r_));                                           \
            g_fail = 1;                                                                \
            return NULL;                                                               \
        }                                                                              \
    } while (0)

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d expectation failed: %s\n", __FILE__,    \
                    __LINE__, #cond);                                       \
            g_fail = 1;                                                     \
        }                                                                   \
    } while (0)

static void *rank_main(void *arg)
{
    uint32_t rank = (uint32_t)(size_t)arg;
    HcclComm comm;
    uint32_t size = 0, id = 99;
    float *send = malloc(sizeof(float) * COUNT * NRANKS);
    float *recv = malloc(sizeof(float) * COUNT * NRANKS);
    int i, p;

    if (send == NULL || recv == NULL) {
        fprintf(stderr, "rank %u: out of memory\n", rank);
        g_fail = 1;
        free(send);
        free(recv);
        return NULL;
    }
    CHECK(HcclCommInitRootInfo(NRANKS, &g_root, rank, &comm));
    CHECK(HcclGetRankSize(comm, &size));
    CHECK(HcclGetRankId(comm, &id));
    EXPECT(size == NRANKS && id == rank);

    for (i = 0; i < COUNT; i++) send[i] = (float)(rank + i % 7);
    CHECK(HcclAllReduce(send, recv, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL));
    for (i = 0; i < COUNT; i++) EXPECT(recv[i] == (float)(6 + 4 * (i % 7)));

    CHECK(HcclAllGather(send, recv, COUNT, HCCL_DATA_TYPE_FP32, comm, NULL));
    for (p = 0; p < NRANKS; p++)
        for (i = 0; i < COUNT; i++) EXPECT(recv[p * COUNT + i] == (float)(p + i % 7));

    for (i = 0; i < COUNT; i++) recv[i] = rank == 2 ? (float)i : -1.0f;
    CHECK(HcclBroadcast(recv, COUNT, HCCL_DATA_TYPE_FP32, 2, comm, NULL));
    for (i = 0; i < COUNT; i++) EXPECT(recv[i] == (float)i);

    for (p = 0; p < NRANKS; p++)
        for (i = 0; i < COUNT; i++) send[p * COUNT + i] = (float)(rank * 10 + p);
    CHECK(HcclReduceScatter(send, recv, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, comm, NULL));
    for (i = 0; i < COUNT; i++) EXPECT(recv[i] == (float)(30 + rank));

    CHECK(HcclAlltoAll(send, COUNT, HCCL_DATA_TYPE_FP32, recv, COUNT, HCCL_DATA_TYPE_FP32, comm, NULL));
    for (p = 0; p < NRANKS; p++)
        for (i = 0; i < COUNT; i++) EXPECT(recv[p * COUNT + i] == (float)(p * 10 + rank));

    /* A ring of Send/Recv inside a group must not deadlock. */
    for (i = 0; i < COUNT; i++) send[i] = (float)rank;
    CHECK(HcclGroupStart());
    CHECK(HcclSend(send, COUNT, HCCL_DATA_TYPE_FP32, (rank + 1) % NRANKS, comm, NULL));
    CHECK(HcclRecv(recv, COUNT, HCCL_DATA_TYPE_FP32, (rank + NRANKS - 1) % NRANKS, comm, NULL));
    CHECK(HcclGroupEnd());
    for (i = 0; i < COUNT; i++) EXPECT(recv[i] == (float)((rank + NRANKS - 1) % NRANKS));

    CHECK(HcclBarrier(comm, NULL));
    EXPECT(HcclAllReduce(send, recv, COUNT, (HcclDataType)99, HCCL_REDUCE_SUM, comm, NULL) == HCCL_E_PARA);
    EXPECT(HcclAllReduce(NULL, recv, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) == HCCL_E_PTR);
    CHECK(HcclCommDestroy(comm));
    free(send);
    free(recv);
    return NULL;
}

int main(void)
{
    pthread_t t[NRANKS];
    size_t r, started;
    if (HcclGetRootInfo(&g_root) != HCCL_SUCCESS) return 1;
    for (started = 0; started < NRANKS; started++) {
        int e = pthread_create(&t[started], NULL, rank_main, (void *)started);
        if (e != 0) {
            fprintf(stderr, "pthread_create: %s\n", strerror(e));
            /* The ranks started wait for the missing one until the connect timeout. */
            g_fail = 1;
            break;
        }
    }
    for (r = 0; r < started; r++) pthread_join(t[r], NULL);
    if (g_fail) return 1;
    printf("threads_collectives: ok\n");
    return 0;
}

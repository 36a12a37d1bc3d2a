/* A program linked against a different libhccl.so (the decoy from decoy_hccl.c, whose every
 * function exits with status 86). Run with LD_PRELOAD=<our libhccl.so>, our definitions take
 * precedence and it prints "preload_decoy: ok"; without the preload the decoy fails loudly. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "hccl/hccl.h"

#define N 3
#define COUNT 4099

static HcclRootInfo root;

static void *rank_main(void *p)
{
    uint32_t rank = (uint32_t)(size_t)p, size = 0;
    HcclComm comm = NULL;
    static float buf[N][COUNT];
    int i;
    for (i = 0; i < COUNT; ++i) {
        buf[rank][i] = rank == 2 ? (float)(i % 17) : 0.0f;
    }
    if (HcclCommInitRootInfo(N, &root, rank, &comm) != HCCL_SUCCESS ||
        HcclGetRankSize(comm, &size) != HCCL_SUCCESS || size != N ||
        HcclBroadcast(buf[rank], COUNT, HCCL_DATA_TYPE_FP32, 2, comm, NULL) != HCCL_SUCCESS ||
        HcclCommDestroy(comm) != HCCL_SUCCESS) {
        return (void *)1;
    }
    for (i = 0; i < COUNT; ++i) {
        if (buf[rank][i] != (float)(i % 17)) {
            fprintf(stderr, "rank %u: buf[%d] = %g (%s)\n", rank, i, (double)buf[rank][i],
                    HcclGetErrorString(HCCL_SUCCESS));
            return (void *)1;
        }
    }
    return NULL;
}

int main(void)
{
    pthread_t t[N];
    void *res;
    size_t r, started;
    int bad = 0;
    if (HcclGetRootInfo(&root) != HCCL_SUCCESS) {
        fprintf(stderr, "HcclGetRootInfo failed\n");
        return 1;
    }
    for (started = 0; started < N; ++started) {
        int e = pthread_create(&t[started], NULL, rank_main, (void *)started);
        if (e != 0) {
            fprintf(stderr, "pthread_create: %s\n", strerror(e));
            bad = 1;
            break;
        }
    }
    for (r = 0; r < started; ++r) {
        pthread_join(t[r], &res);
        bad |= res != NULL;
    }
    if (bad) {
        return 1;
    }
    printf("preload_decoy: ok\n");
    return 0;
}

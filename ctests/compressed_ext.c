/* Compressed AllReduce and communicator counters through hccl/hccl_ext.h: 4 rank threads laid
 * out as 2 hosts of 2 (HCCL_RANK_HOST_MAP), every method, results within their error bounds
 * and bit-identical on all ranks, level1 bytes shrinking, bad configs rejected. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers, setenv */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hccl/hccl.h"
#include "hccl/hccl_ext.h"

#define NRANKS 4
#define COUNT 4096

static HcclRootInfo g_root;
static int g_fail;
static float g_out[NRANKS][COUNT];
static float g_exact[COUNT];

#define FAIL(...)                         \
    do {                                  \
        fprintf(stderr, __VA_ARGS__);     \
        g_fail = 1;                       \
    } while (0)

#define CHECK(x)                                                                  \
    do {                                                                          \
        HcclResult r_ = (x);                                                      \
        if (r_ != HCCL_SUCCESS) {                                                 \
            FAIL("%s:%d %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)r_,        \
                 HcclGetErrorString(r_));                                         \
            return NULL;                                                          \
        }                                                                         \
    } while (0)

#define EXPECT_CODE(x, want)                                                                 \
    do {                                                                                     \
        HcclResult r_ = (x);                                                                 \
        if (r_ != (want)) FAIL("%s:%d %s -> %d, expected %d\n", __FILE__, __LINE__, #x,    \
                              (int)r_, (int)(want));                                         \
    } while (0)

static float input(uint32_t rank, int i)
{
    /* Deterministic values in (-1, 1) that differ per rank and element. */
    uint32_t x = (rank + 1) * 2654435761u ^ (uint32_t)i * 40503u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (float)((double)(x & 0xffffff) / (double)0x800000 - 1.0);
}

static pthread_barrier_t g_bar;

static double rel_l2(const float *got)
{
    double num = 0, den = 0;
    int i;
    for (i = 0; i < COUNT; i++) {
        num += ((double)got[i] - g_exact[i]) * ((double)got[i] - g_exact[i]);
        den += (double)g_exact[i] * g_exact[i];
    }
    return sqrt(num / den);
}

static void *rank_main(void *arg)
{
    uint32_t rank = (uint32_t)(size_t)arg;
    static const struct {
        uint32_t method;
        float ratio;
        double bound;
        const char *name;
    } cases[] = {
        {HCCL_EXT_COMPRESS_FP16, 0, 1e-3, "fp16"},
        {HCCL_EXT_COMPRESS_BF16, 0, 1e-2, "bf16"},
        {HCCL_EXT_COMPRESS_INT8, 0, 1e-2, "int8"},
        {HCCL_EXT_COMPRESS_TOPK, 0.5f, 0.9, "topk"},
    };
    HcclComm comm;
    HcclExtCompressConfig cfg;
    HcclExtCommStats st;
    float *send = malloc(sizeof(float) * COUNT);
    float *residual = calloc(COUNT, sizeof(float));
    int32_t *ints = calloc(COUNT, sizeof(int32_t));
    uint64_t plain_l1 = 0;
    size_t c;
    int i, p;

    if (!send || !residual || !ints) {
        FAIL("rank %u: out of memory\n", rank);
        return NULL;
    }
    for (i = 0; i < COUNT; i++) send[i] = input(rank, i);
    CHECK(HcclCommInitRootInfo(NRANKS, &g_root, rank, &comm));

    /* A plain AllReduce first: the counters see it, level1 bytes as the baseline. */
    CHECK(HcclAllReduce(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL));
    CHECK(HcclExtGetCommStats(comm, &st));
    if (st.ops != 1 || st.compressedOps != 0 || st.level1BytesSent == 0 || st.level0BytesSent == 0)
        FAIL("rank %u: counters after one AllReduce: ops %llu compressed %llu l0 %llu l1 %llu\n",
             rank, (unsigned long long)st.ops, (unsigned long long)st.compressedOps,
             (unsigned long long)st.level0BytesSent, (unsigned long long)st.level1BytesSent);
    plain_l1 = st.level1BytesSent;

    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK(HcclExtResetCommStats(comm));
        memset(&cfg, 0, sizeof cfg);
        cfg.method = cases[c].method;
        cfg.topkRatio = cases[c].ratio;
        memset(residual, 0, sizeof(float) * COUNT);
        cfg.residual = residual;
        cfg.residualCount = COUNT;
        CHECK(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                         HCCL_REDUCE_SUM, &cfg, comm, NULL));
        CHECK(HcclExtGetCommStats(comm, &st));
        if (st.ops != 1 || st.compressedOps != 1)
            FAIL("rank %u %s: ops %llu compressed %llu\n", rank, cases[c].name,
                 (unsigned long long)st.ops, (unsigned long long)st.compressedOps);
        if (cases[c].method != HCCL_EXT_COMPRESS_TOPK && st.level1BytesSent * 10 > plain_l1 * 6)
            FAIL("rank %u %s: level1 bytes %llu vs %llu uncompressed\n", rank, cases[c].name,
                 (unsigned long long)st.level1BytesSent, (unsigned long long)plain_l1);
        pthread_barrier_wait(&g_bar);
        if (rank == 0) {
            double e = rel_l2(g_out[0]);
            if (!(e <= cases[c].bound)) FAIL("%s: relative L2 error %g > %g\n", cases[c].name, e,
                                             cases[c].bound);
            for (p = 1; p < NRANKS; p++)
                if (memcmp(g_out[0], g_out[p], sizeof g_out[0]) != 0)
                    FAIL("%s: rank %d's result differs from rank 0's\n", cases[c].name, p);
            printf("compressed_ext: %s relative L2 error %.3g\n", cases[c].name, e);
        }
        pthread_barrier_wait(&g_bar);
    }

    /* Bad configurations: rejected before anything moves, the communicator stays usable. */
    memset(&cfg, 0, sizeof cfg);
    cfg.method = 9;
    EXPECT_CODE(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                           HCCL_REDUCE_SUM, &cfg, comm, NULL), HCCL_E_PARA);
    cfg.method = HCCL_EXT_COMPRESS_TOPK;
    cfg.topkRatio = 0.0f;
    EXPECT_CODE(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                           HCCL_REDUCE_SUM, &cfg, comm, NULL), HCCL_E_PARA);
    cfg.topkRatio = 1.5f;
    EXPECT_CODE(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                           HCCL_REDUCE_SUM, &cfg, comm, NULL), HCCL_E_PARA);
    cfg.method = HCCL_EXT_COMPRESS_INT8;
    cfg.residual = residual;
    cfg.residualCount = COUNT - 1;
    EXPECT_CODE(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                           HCCL_REDUCE_SUM, &cfg, comm, NULL), HCCL_E_PARA);
    cfg.residualCount = COUNT;
    EXPECT_CODE(HcclExtAllReduceCompressed(ints, ints, COUNT, HCCL_DATA_TYPE_INT32,
                                           HCCL_REDUCE_SUM, &cfg, comm, NULL), HCCL_E_PARA);
    EXPECT_CODE(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                           HCCL_REDUCE_MAX, &cfg, comm, NULL), HCCL_E_PARA);
    EXPECT_CODE(HcclExtAllReduceCompressed(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32,
                                           HCCL_REDUCE_SUM, NULL, comm, NULL), HCCL_E_PTR);
    EXPECT_CODE(HcclExtGetCommStats(comm, NULL), HCCL_E_PTR);
    CHECK(HcclAllReduce(send, g_out[rank], COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL));
    for (i = 0; i < COUNT; i++)
        if (fabs((double)g_out[rank][i] - g_exact[i]) > 1e-5) {
            FAIL("rank %u: plain AllReduce after the rejected calls: element %d\n", rank, i);
            break;
        }
    CHECK(HcclCommDestroy(comm));
    free(send);
    free(residual);
    free(ints);
    return NULL;
}

int main(void)
{
    pthread_t t[NRANKS];
    uint32_t r;
    int i;

    setenv("HCCL_RANK_HOST_MAP", "a,a,b,b", 1);
    for (i = 0; i < COUNT; i++) {
        double s = 0;
        for (r = 0; r < NRANKS; r++) s += input(r, i);
        g_exact[i] = (float)s;
    }
    pthread_barrier_init(&g_bar, NULL, NRANKS);
    if (HcclGetRootInfo(&g_root) != HCCL_SUCCESS) {
        fprintf(stderr, "HcclGetRootInfo failed\n");
        return 1;
    }
    for (r = 0; r < NRANKS; r++) pthread_create(&t[r], NULL, rank_main, (void *)(size_t)r);
    for (r = 0; r < NRANKS; r++) pthread_join(t[r], NULL);
    pthread_barrier_destroy(&g_bar);
    if (g_fail) return 1;
    printf("compressed_ext: ok\n");
    return 0;
}

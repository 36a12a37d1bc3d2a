/* Shared by cann_threads.cc and cann_mpi.cc: every collective of one rank on device memory,
 * all enqueued on one stream, one aclrtSynchronizeStream, then the results copied back and
 * checked exactly (small integers in fp32). Returns the number of wrong results. */
#ifndef CANN_COLLS_H
#define CANN_COLLS_H

#include <cstdio>
#include <cstdint>
#include <vector>

#include "acl/acl.h"
#include "hccl/hccl.h"

#define ACL_CHECK(call)                                                                 \
    do {                                                                                \
        aclError acl_rc_ = (call);                                                      \
        if (acl_rc_ != ACL_SUCCESS) {                                                   \
            std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call,   \
                         (int)acl_rc_);                                                 \
            return 1000;                                                                \
        }                                                                               \
    } while (0)

#define HCCL_CHECK(call)                                                                \
    do {                                                                                \
        HcclResult hccl_rc_ = (call);                                                   \
        if (hccl_rc_ != HCCL_SUCCESS) {                                                 \
            std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call,   \
                         (int)hccl_rc_);                                                \
            return 1000;                                                                \
        }                                                                               \
    } while (0)

namespace cann {

/* A device buffer with a host mirror from aclrtMallocHost. */
struct Buf {
    void *dev = nullptr;
    float *host = nullptr;
    size_t bytes = 0;
};

static int alloc(Buf &b, size_t count)
{
    b.bytes = count * sizeof(float);
    ACL_CHECK(aclrtMalloc(&b.dev, b.bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    void *h = nullptr;
    ACL_CHECK(aclrtMallocHost(&h, b.bytes));
    b.host = static_cast<float *>(h);
    return 0;
}

static int upload(Buf &b)
{
    ACL_CHECK(aclrtMemcpy(b.dev, b.bytes, b.host, b.bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    return 0;
}

static int download(Buf &b)
{
    ACL_CHECK(aclrtMemcpy(b.host, b.bytes, b.dev, b.bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    return 0;
}

static int release(Buf &b)
{
    ACL_CHECK(aclrtFree(b.dev));
    ACL_CHECK(aclrtFreeHost(b.host));
    return 0;
}

static int expect(const char *what, uint32_t rank, const Buf &b, size_t count,
                  float (*want)(size_t i, uint32_t rank, uint32_t n), uint32_t n)
{
    for (size_t i = 0; i < count; ++i) {
        float w = want(i, rank, n);
        if (b.host[i] != w) {
            std::fprintf(stderr, "rank %u %s: element %zu is %g, expected %g\n", rank, what, i,
                         (double)b.host[i], (double)w);
            return 1;
        }
    }
    return 0;
}

static const size_t C = 4096 + 7; /* elements per rank and collective */

static float ar_want(size_t i, uint32_t, uint32_t n) { return n * (n + 1) / 2.0f + n * (float)(i % 13); }
static float bc_want(size_t i, uint32_t, uint32_t) { return (float)(i % 251); }
static float ag_want(size_t i, uint32_t, uint32_t) { return (float)((i / C) * 1000 + (i % C) % 100); }
static float rs_want(size_t i, uint32_t rank, uint32_t n)
{
    return n * (n - 1) / 2.0f + n * (float)((rank * C + i) % 7);
}
static float rd_want(size_t i, uint32_t, uint32_t n) { return (float)(n - 1) + (float)(i % 5); }
static float a2a_want(size_t i, uint32_t rank, uint32_t) { return (float)((i / C) * 100 + rank); }
static float sc_want(size_t i, uint32_t rank, uint32_t) { return (float)(rank * 10 + i % 3); }
static float p2p_want(size_t i, uint32_t rank, uint32_t n)
{
    return (float)((rank + n - 1) % n) + (float)(i % 11);
}

/* Runs every collective of rank `rank` of `n` on `stream`; 0 when all results are right. */
static int run_collectives(HcclComm comm, aclrtStream stream, uint32_t rank, uint32_t n)
{
    const HcclDataType F = HCCL_DATA_TYPE_FP32;
    Buf ar_in, ar_out, bc, ag_in, ag_out, rs_in, rs_out, rd_in, rd_out, a2a_in, a2a_out, sc_in,
        sc_out, p_in, p_out;
    int rc = alloc(ar_in, C) + alloc(ar_out, C) + alloc(bc, C) + alloc(ag_in, C) +
             alloc(ag_out, C * n) + alloc(rs_in, C * n) + alloc(rs_out, C) + alloc(rd_in, C) +
             alloc(rd_out, C) + alloc(a2a_in, C * n) + alloc(a2a_out, C * n) +
             alloc(sc_in, C * n) + alloc(sc_out, C) + alloc(p_in, C) + alloc(p_out, C);
    if (rc != 0) {
        return rc;
    }
    const uint32_t root = 1 % n;
    for (size_t i = 0; i < C; ++i) {
        ar_in.host[i] = (float)(rank + 1) + (float)(i % 13);
        bc.host[i] = rank == root ? (float)(i % 251) : -1.0f;
        ag_in.host[i] = (float)(rank * 1000 + i % 100);
        rd_in.host[i] = (float)rank + (float)(i % 5);
        p_in.host[i] = (float)rank + (float)(i % 11);
    }
    for (size_t j = 0; j < C * n; ++j) {
        rs_in.host[j] = (float)rank + (float)(j % 7);
        a2a_in.host[j] = (float)(rank * 100 + j / C);
        sc_in.host[j] = (float)((j / C) * 10 + (j % C) % 3);
    }
    rc = upload(ar_in) + upload(bc) + upload(ag_in) + upload(rs_in) + upload(rd_in) +
         upload(a2a_in) + upload(sc_in) + upload(p_in);
    if (rc != 0) {
        return rc;
    }

    HCCL_CHECK(HcclAllReduce(ar_in.dev, ar_out.dev, C, F, HCCL_REDUCE_SUM, comm, stream));
    HCCL_CHECK(HcclBroadcast(bc.dev, C, F, root, comm, stream));
    HCCL_CHECK(HcclAllGather(ag_in.dev, ag_out.dev, C, F, comm, stream));
    HCCL_CHECK(HcclReduceScatter(rs_in.dev, rs_out.dev, C, F, HCCL_REDUCE_SUM, comm, stream));
    HCCL_CHECK(HcclReduce(rd_in.dev, rd_out.dev, C, F, HCCL_REDUCE_MAX, 0, comm, stream));
    HCCL_CHECK(HcclAlltoAll(a2a_in.dev, C, F, a2a_out.dev, C, F, comm, stream));
    HCCL_CHECK(HcclScatter(sc_in.dev, sc_out.dev, C, F, 0, comm, stream));
    HcclSendRecvItem items[2] = {
        {HCCL_SEND, p_in.dev, C, F, (rank + 1) % n},
        {HCCL_RECV, p_out.dev, C, F, (rank + n - 1) % n},
    };
    HCCL_CHECK(HcclBatchSendRecv(items, 2, comm, stream));
    HCCL_CHECK(HcclBarrier(comm, stream));
    ACL_CHECK(aclrtSynchronizeStream(stream));

    rc = download(ar_out) + download(bc) + download(ag_out) + download(rs_out) +
         download(rd_out) + download(a2a_out) + download(sc_out) + download(p_out);
    if (rc != 0) {
        return rc;
    }
    int bad = expect("AllReduce", rank, ar_out, C, ar_want, n) +
              expect("Broadcast", rank, bc, C, bc_want, n) +
              expect("AllGather", rank, ag_out, C * n, ag_want, n) +
              expect("ReduceScatter", rank, rs_out, C, rs_want, n) +
              (rank == 0 ? expect("Reduce", rank, rd_out, C, rd_want, n) : 0) +
              expect("AlltoAll", rank, a2a_out, C * n, a2a_want, n) +
              expect("Scatter", rank, sc_out, C, sc_want, n) +
              expect("BatchSendRecv", rank, p_out, C, p2p_want, n);
    Buf *all[] = {&ar_in, &ar_out, &bc, &ag_in, &ag_out, &rs_in, &rs_out, &rd_in,
                  &rd_out, &a2a_in, &a2a_out, &sc_in, &sc_out, &p_in, &p_out};
    for (Buf *b : all) {
        bad += release(*b);
    }
    return bad;
}

} /* namespace cann */

#endif

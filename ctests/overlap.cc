// Measures how much of an AllReduce enqueued on a stream hides behind host computation.
// Thread per device; each rank times (1) the AllReduce alone (enqueue + aclrtSynchronizeStream),
// (2) a compute loop calibrated to last about as long, (3) both: enqueue, compute, synchronize.
// Rank 0 prints the medians of 5 rounds: comm, compute, total, and total against
// max(compute, comm) and compute + comm. Every result code and every AllReduce output is checked
// (the outputs outside the timed spans); the test suite runs it on a small message and asserts
// nothing about its timings. Build as cann_threads.cc is built, then: ./overlap [ranks=2] [MiB=64]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "hccl/hccl.h"

using Clock = std::chrono::steady_clock;

static double secs(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

// A latency-bound floating-point chain: one core, no memory traffic.
static double compute(long iters)
{
    double x = 1.0;
    for (long i = 0; i < iters; ++i) {
        x = x * 1.0000000001 + 1e-12;
    }
    return x;
}

struct Result {
    double comm, work, both;
};

static HcclRootInfo root;
static volatile double sink;

// Every element of the AllReduce output is the sum of the ranks' inputs (rank r sends r + 1).
static bool reduced_right(const void *recv, size_t count, uint32_t n)
{
    std::vector<float> host(count, -1.0f);
    if (aclrtMemcpy(host.data(), count * sizeof(float), recv, count * sizeof(float),
                    ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS)
        return false;
    const float want = (float)n * (float)(n + 1) / 2.0f;
    for (size_t i = 0; i < count; ++i)
        if (host[i] != want) {
            std::fprintf(stderr, "AllReduce output[%zu] = %g, want %g\n", i, (double)host[i],
                         (double)want);
            return false;
        }
    return true;
}

static int rank_main(uint32_t rank, uint32_t n, size_t count, Result *out)
{
    if (aclrtSetDevice((int32_t)rank) != ACL_SUCCESS) return 1;
    void *send = nullptr, *recv = nullptr;
    size_t bytes = count * sizeof(float);
    std::vector<float> input(count, (float)(rank + 1));
    if (aclrtMalloc(&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS ||
        aclrtMalloc(&recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS ||
        aclrtMemcpy(send, bytes, input.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS)
        return 1;
    HcclComm comm = nullptr;
    aclrtStream s = nullptr;
    if (HcclCommInitRootInfo(n, &root, rank, &comm) != HCCL_SUCCESS ||
        aclrtCreateStream(&s) != ACL_SUCCESS)
        return 1;
    auto allreduce = [&] {
        return HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s);
    };
    auto sync_ranks = [&] { return HcclBarrier(comm, nullptr) == HCCL_SUCCESS; };
    // Warm-up, checked.
    if (allreduce() != HCCL_SUCCESS || aclrtSynchronizeStream(s) != ACL_SUCCESS ||
        !reduced_right(recv, count, n))
        return 1;
    // Every rank computes for the same number of iterations, calibrated on rank 0 (alone, then
    // with its peers computing too) to last as long as the AllReduce.
    long iters = 1 << 20;
    for (int cal = 0; cal < 3; ++cal) {
        if (!sync_ranks()) return 1;
        auto t0 = Clock::now();
        if (allreduce() != HCCL_SUCCESS || aclrtSynchronizeStream(s) != ACL_SUCCESS) return 1;
        double c = secs(t0, Clock::now());
        if (!sync_ranks()) return 1;
        t0 = Clock::now();
        sink = compute(iters);
        double w = secs(t0, Clock::now());
        iters = std::max(1L, (long)((double)iters * c / w));
        if (HcclBroadcast(&iters, 1, HCCL_DATA_TYPE_INT64, 0, comm, nullptr) != HCCL_SUCCESS)
            return 1;
    }
    long my_iters = iters;
    std::vector<double> comm_t, work_t, both_t;
    for (int round = 0; round < 5; ++round) {
        if (!sync_ranks()) return 1;
        auto t0 = Clock::now();
        if (allreduce() != HCCL_SUCCESS || aclrtSynchronizeStream(s) != ACL_SUCCESS) return 1;
        comm_t.push_back(secs(t0, Clock::now()));
        if (!sync_ranks()) return 1;
        t0 = Clock::now();
        sink = compute(my_iters);
        work_t.push_back(secs(t0, Clock::now()));
        if (!sync_ranks()) return 1;
        t0 = Clock::now();
        if (allreduce() != HCCL_SUCCESS) return 1;
        sink = compute(my_iters);
        if (aclrtSynchronizeStream(s) != ACL_SUCCESS) return 1;
        both_t.push_back(secs(t0, Clock::now()));
        // Overlapped with computation, the result must be just as right (checked untimed).
        if (!reduced_right(recv, count, n)) return 1;
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    *out = {median(comm_t), median(work_t), median(both_t)};
    if (HcclCommDestroy(comm) != HCCL_SUCCESS || aclrtDestroyStream(s) != ACL_SUCCESS ||
        aclrtFree(send) != ACL_SUCCESS || aclrtFree(recv) != ACL_SUCCESS)
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t n = argc > 1 ? (uint32_t)std::atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)std::atol(argv[2]) : 64;
    size_t count = mib * 1024 * 1024 / sizeof(float);
    if (aclInit(nullptr) != ACL_SUCCESS || HcclGetRootInfo(&root) != HCCL_SUCCESS) return 1;
    std::vector<Result> res(n);
    std::vector<int> rc(n);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] { rc[r] = rank_main(r, n, count, &res[r]); });
    for (auto &t : threads) t.join();
    if (aclFinalize() != ACL_SUCCESS) {
        std::fprintf(stderr, "aclFinalize failed\n");
        return 1;
    }
    for (uint32_t r = 0; r < n; ++r)
        if (rc[r] != 0) {
            std::fprintf(stderr, "rank %u failed\n", r);
            return 1;
        }
    const Result &r0 = res[0];
    double mx = std::max(r0.comm, r0.work), sum = r0.comm + r0.work;
    std::printf("overlap: %u ranks, %zu MiB fp32 AllReduce (rank 0, median of 5)\n", n, mib);
    std::printf("  comm %.1f ms, compute %.1f ms, both %.1f ms\n", r0.comm * 1e3, r0.work * 1e3,
                r0.both * 1e3);
    std::printf("  max %.1f ms, sum %.1f ms: total/max %.2f, total/sum %.2f, hidden %.0f%%\n",
                mx * 1e3, sum * 1e3, r0.both / mx, r0.both / sum,
                100.0 * (sum - r0.both) / (sum - mx));
    return 0;
}

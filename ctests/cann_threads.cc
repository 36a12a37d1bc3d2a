// The documented CANN pattern with one thread per device: aclInit, aclrtGetDeviceCount, then per
// thread aclrtSetDevice, aclrtMalloc/aclrtMallocHost, aclrtMemcpy host->device,
// HcclCommInitRootInfo (root info from HcclGetRootInfo), aclrtCreateStream, every collective on
// the stream, aclrtSynchronizeStream, aclrtMemcpy device->host, HcclCommDestroy, aclrtFree,
// aclrtDestroyStream, and aclFinalize. Prints "cann_threads: ok" when every result is right.
//
// Build (after `source PREFIX/set_env.sh`):
//   g++ -std=c++14 -Werror -fPIE -pie -O2 -Wl,-z,relro -Wl,-z,now -Wl,--copy-dt-needed-entries \
//       cann_threads.cc -I$ASCEND_HOME_PATH/include -L$ASCEND_HOME_PATH/lib64 -lhccl -lascendcl
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cann_colls.h"

static int rank_main(uint32_t dev, uint32_t n, const HcclRootInfo *root)
{
    ACL_CHECK(aclrtSetDevice((int32_t)dev));
    HcclComm comm = nullptr;
    HCCL_CHECK(HcclCommInitRootInfo(n, root, dev, &comm));
    aclrtStream stream = nullptr;
    ACL_CHECK(aclrtCreateStream(&stream));
    int bad = cann::run_collectives(comm, stream, dev, n);
    HCCL_CHECK(HcclCommDestroy(comm));
    ACL_CHECK(aclrtDestroyStream(stream));
    ACL_CHECK(aclrtResetDevice((int32_t)dev));
    return bad;
}

int main(int argc, char **argv)
{
    if (aclInit(nullptr) != ACL_SUCCESS) {
        std::fprintf(stderr, "aclInit failed\n");
        return 1;
    }
    uint32_t count = 0;
    if (aclrtGetDeviceCount(&count) != ACL_SUCCESS || count == 0) {
        std::fprintf(stderr, "aclrtGetDeviceCount failed\n");
        return 1;
    }
    uint32_t n = argc > 1 ? (uint32_t)std::atoi(argv[1]) : 4;
    if (n == 0 || n > count) {
        std::fprintf(stderr, "need 1..%u devices, asked for %u\n", count, n);
        return 1;
    }
    HcclRootInfo root;
    if (HcclGetRootInfo(&root) != HCCL_SUCCESS) {
        std::fprintf(stderr, "HcclGetRootInfo failed\n");
        return 1;
    }
    std::atomic<int> failures(0);
    std::vector<std::thread> threads;
    for (uint32_t d = 0; d < n; ++d) {
        threads.emplace_back([d, n, &root, &failures] {
            int bad = rank_main(d, n, &root);
            if (bad != 0) {
                std::fprintf(stderr, "device %u: %d failure(s)\n", d, bad);
                failures += 1;
            }
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    if (aclFinalize() != ACL_SUCCESS) {
        std::fprintf(stderr, "aclFinalize failed\n");
        return 1;
    }
    if (failures.load() != 0) {
        return 1;
    }
    std::printf("cann_threads: ok (%u devices)\n", n);
    return 0;
}

// C++ program: communicators created with HcclCommConfigInit + HcclCommInitRootInfoConfig.
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "hccl/hccl.h"

int main()
{
    const uint32_t n = 2;
    HcclRootInfo root;
    if (HcclGetRootInfo(&root) != HCCL_SUCCESS) return 1;
    std::vector<int> ok(n, 0);
    std::vector<std::thread> ranks;
    for (uint32_t r = 0; r < n; ++r) {
        ranks.emplace_back([&, r] {
            HcclCommConfig cfg;
            HcclCommConfigInit(&cfg);
            HcclComm comm = nullptr;
            // The fields are read, not ignored: values out of range are refused before any
            // rendezvous, and the root info stays usable.
            cfg.hcclDeterministic = 7;
            if (HcclCommInitRootInfoConfig(n, &root, r, &cfg, &comm) != HCCL_E_PARA) return;
            HcclCommConfigInit(&cfg);
            cfg.hcclBufferSize = 0;
            if (HcclCommInitRootInfoConfig(n, &root, r, &cfg, &comm) != HCCL_E_PARA) return;
            HcclCommConfigInit(&cfg);
            cfg.hcclBufferSize = 64;
            cfg.hcclDeterministic = 1;
            std::strcpy(cfg.hcclCommName, "cpp_comm");
            if (HcclCommInitRootInfoConfig(n, &root, r, &cfg, &comm) != HCCL_SUCCESS) return;
            // The name took effect.
            char name[COMM_NAME_MAX_LENGTH] = {};
            if (HcclGetCommName(comm, name) != HCCL_SUCCESS || std::strcmp(name, "cpp_comm") != 0) return;
            std::vector<double> in(513, 1.5 + r), out(513, 0.0);
            if (HcclAllReduce(in.data(), out.data(), in.size(), HCCL_DATA_TYPE_FP64, HCCL_REDUCE_SUM,
                              comm, nullptr) != HCCL_SUCCESS)
                return;
            for (double v : out)
                if (v != 4.0) return;
            // Both ranks' communicators are named cpp_comm; each thread finds the one it created.
            HcclComm found = nullptr;
            if (HcclCommGetHandleWithName("cpp_comm", &found) != HCCL_SUCCESS || found != comm) return;
            uint32_t id = n;
            if (HcclGetRankId(found, &id) != HCCL_SUCCESS || id != r) return;
            if (HcclCommDestroy(comm) != HCCL_SUCCESS) return;
            ok[r] = 1;
        });
    }
    for (auto &t : ranks) t.join();
    for (int v : ok)
        if (!v) return 1;
    std::printf("config_init: ok\n");
    return 0;
}

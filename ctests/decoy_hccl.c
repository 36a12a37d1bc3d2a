/* A decoy libhccl.so exporting HCCL's names, each of which fails loudly. preload_decoy links
 * against it; with our library in LD_PRELOAD the decoy must never be called. */
#include <stdio.h>
#include <stdlib.h>

#define DECOY(name)                                                                     \
    int name(void)                                                                      \
    {                                                                                   \
        fprintf(stderr, "DECOY libhccl.so called: %s\n", #name);                        \
        exit(86);                                                                       \
    }

DECOY(HcclGetRootInfo)
DECOY(HcclCommInitRootInfo)
DECOY(HcclCommInitAll)
DECOY(HcclAllReduce)
DECOY(HcclBroadcast)
DECOY(HcclAllGather)
DECOY(HcclReduceScatter)
DECOY(HcclGetRankSize)
DECOY(HcclGetRankId)
DECOY(HcclCommDestroy)
DECOY(HcclGetErrorString)

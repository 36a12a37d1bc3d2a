/* Sizes, offsets and values of the HCCL ABI, checked at compile time against the spec. */
#include <stddef.h>
#include "hccl/hccl.h"

#define CHECK(cond) _Static_assert(cond, #cond)

CHECK(sizeof(HcclRootInfo) == 4108);
CHECK(HCCL_ROOT_INFO_BYTES == 4108);
CHECK(sizeof(HcclComm) == sizeof(void *));
CHECK(sizeof(HcclResult) == 4);
CHECK(sizeof(HcclDataType) == 4);

CHECK(sizeof(HcclSendRecvItem) == 32);
CHECK(offsetof(HcclSendRecvItem, sendRecvType) == 0);
CHECK(offsetof(HcclSendRecvItem, buf) == 8);
CHECK(offsetof(HcclSendRecvItem, count) == 16);
CHECK(offsetof(HcclSendRecvItem, dataType) == 24);
CHECK(offsetof(HcclSendRecvItem, remoteRank) == 28);

CHECK(sizeof(HcclCommConfig) == 2240);
CHECK(offsetof(HcclCommConfig, hcclBufferSize) == 24);
CHECK(offsetof(HcclCommConfig, hcclDeterministic) == 28);
CHECK(offsetof(HcclCommConfig, hcclCommName) == 32);
CHECK(offsetof(HcclCommConfig, hcclUdi) == 160);
CHECK(offsetof(HcclCommConfig, hcclOpExpansionMode) == 288);
CHECK(offsetof(HcclCommConfig, hcclRdmaTrafficClass) == 292);
CHECK(offsetof(HcclCommConfig, hcclRdmaServiceLevel) == 296);
CHECK(offsetof(HcclCommConfig, hcclWorldRankID) == 300);
CHECK(offsetof(HcclCommConfig, hcclJobID) == 304);
CHECK(offsetof(HcclCommConfig, aclGraphZeroCopyEnable) == 312);
CHECK(offsetof(HcclCommConfig, hcclExecTimeOut) == 316);
CHECK(offsetof(HcclCommConfig, hcclAlgo) == 320);
CHECK(offsetof(HcclCommConfig, hcclRetryEnable) == 1920);
CHECK(offsetof(HcclCommConfig, hcclRetryParams) == 1970);
CHECK(offsetof(HcclCommConfig, hcclBufferName) == 2098);
CHECK(offsetof(HcclCommConfig, hcclQos) == 2228);
CHECK(offsetof(HcclCommConfig, hcclSymWinMaxMemSizePerRank) == 2232);

CHECK(HCCL_SUCCESS == 0 && HCCL_E_PARA == 1 && HCCL_E_PTR == 2 && HCCL_E_MEMORY == 3);
CHECK(HCCL_E_INTERNAL == 4 && HCCL_E_NOT_SUPPORT == 5 && HCCL_E_NOT_FOUND == 6);
CHECK(HCCL_E_UNAVAIL == 7 && HCCL_E_SYSCALL == 8 && HCCL_E_TIMEOUT == 9);
CHECK(HCCL_E_OPEN_FILE_FAILURE == 10 && HCCL_E_TCP_CONNECT == 11 && HCCL_E_ROCE_CONNECT == 12);
CHECK(HCCL_E_TCP_TRANSFER == 13 && HCCL_E_ROCE_TRANSFER == 14 && HCCL_E_RUNTIME == 15);
CHECK(HCCL_E_DRV == 16 && HCCL_E_PROFILING == 17 && HCCL_E_CCE == 18 && HCCL_E_NETWORK == 19);
CHECK(HCCL_E_AGAIN == 20 && HCCL_E_REMOTE == 21 && HCCL_E_SUSPENDING == 22);
CHECK(HCCL_E_OPRETRY_FAIL == 23 && HCCL_E_OOM == 24 && HCCL_E_IN_STATUS == 1041);
CHECK(HCCL_E_RESERVED == 1042);

CHECK(HCCL_REDUCE_SUM == 0 && HCCL_REDUCE_PROD == 1 && HCCL_REDUCE_MAX == 2);
CHECK(HCCL_REDUCE_MIN == 3 && HCCL_REDUCE_RESERVED == 255);

CHECK(HCCL_DATA_TYPE_INT8 == 0 && HCCL_DATA_TYPE_INT16 == 1 && HCCL_DATA_TYPE_INT32 == 2);
CHECK(HCCL_DATA_TYPE_FP16 == 3 && HCCL_DATA_TYPE_FP32 == 4 && HCCL_DATA_TYPE_INT64 == 5);
CHECK(HCCL_DATA_TYPE_UINT64 == 6 && HCCL_DATA_TYPE_UINT8 == 7 && HCCL_DATA_TYPE_UINT16 == 8);
CHECK(HCCL_DATA_TYPE_UINT32 == 9 && HCCL_DATA_TYPE_FP64 == 10 && HCCL_DATA_TYPE_BFP16 == 11);
CHECK(HCCL_DATA_TYPE_INT128 == 12 && HCCL_DATA_TYPE_HIF8 == 14);
CHECK(HCCL_DATA_TYPE_FP8E4M3 == 15 && HCCL_DATA_TYPE_FP8E5M2 == 16);
CHECK(HCCL_DATA_TYPE_FP8E8M0 == 17 && HCCL_DATA_TYPE_RESERVED == 255);

CHECK(HCCL_SEND == 0 && HCCL_RECV == 1 && HCCL_SEND_RECV_RESERVED == 2);
CHECK(HCCL_DETERMINISTIC == 0);
CHECK(HCCL_COMM_STATUS_READY == 0 && HCCL_COMM_STATUS_SUSPENDING == 1);
CHECK(HCCL_COMM_STATUS_INVALID == 254 && HCCL_COMM_STATUS_RESERVED == 255);

CHECK(HCCL_CMD_INVALID == 0 && HCCL_CMD_BROADCAST == 1 && HCCL_CMD_ALLREDUCE == 2);
CHECK(HCCL_CMD_REDUCE == 3 && HCCL_CMD_SEND == 4 && HCCL_CMD_RECEIVE == 5);
CHECK(HCCL_CMD_ALLGATHER == 6 && HCCL_CMD_REDUCE_SCATTER == 7 && HCCL_CMD_ALLTOALLV == 8);
CHECK(HCCL_CMD_ALLTOALLVC == 9 && HCCL_CMD_ALLTOALL == 10 && HCCL_CMD_GATHER == 11);
CHECK(HCCL_CMD_SCATTER == 12 && HCCL_CMD_BATCH_SEND_RECV == 13 && HCCL_CMD_BATCH_PUT == 14);
CHECK(HCCL_CMD_BATCH_GET == 15 && HCCL_CMD_ALLGATHER_V == 16 && HCCL_CMD_REDUCE_SCATTER_V == 17);
CHECK(HCCL_CMD_BATCH_WRITE == 18 && HCCL_CMD_HALF_ALLTOALLV == 20 && HCCL_CMD_ALL == 21);
CHECK(HCCL_CMD_FINALIZE == 100 && HCCL_CMD_INTER_GROUP_SYNC == 101 && HCCL_CMD_INIT == 102);
CHECK(HCCL_CMD_BARRIER == 103 && HCCL_CMD_MAX == 104);

CHECK(HCCL_COMM_CONFIG_BUFFER_SIZE == 0 && HCCL_COMM_CONFIG_DETERMINISTIC == 1);
CHECK(HCCL_COMM_CONFIG_COMM_NAME == 2 && HCCL_COMM_CONFIG_OP_EXPANSION_MODE == 3);
CHECK(HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV == 4 && HCCL_COMM_CONFIG_WORLD_RANKID == 5);
CHECK(HCCL_COMM_CONFIG_JOBID == 6 && HCCL_COMM_CONFIG_ACLGRAPH_ZEROCOPY_ENABLE == 7);
CHECK(HCCL_COMM_CONFIG_EXEC_TIMEOUT == 8 && HCCL_COMM_CONFIG_ALGO == 9);
CHECK(HCCL_COMM_CONFIG_RETRY == 10 && HCCL_COMM_CONFIG_BUFFER_NAME == 11);
CHECK(HCCL_COMM_CONFIG_RESERVED == 12);

int main(void)
{
    HcclCommConfig cfg;
    HcclCommConfigInit(&cfg);
    /* The inline initialiser writes the versioned header and the "not set" markers. */
    if (*(size_t *)(void *)&cfg != sizeof(HcclCommConfig)) return 1;
    if (((uint32_t *)(void *)&cfg)[2] != HCCL_COMM_CONFIG_MAGIC_WORD) return 2;
    if (((uint32_t *)(void *)&cfg)[3] != HCCL_COMM_CONFIG_VERSION) return 3;
    if (cfg.hcclBufferSize != 0xffffffffu || cfg.hcclDeterministic != 0xffffffffu) return 4;
    if (cfg.hcclExecTimeOut != -1 || cfg.hcclSymWinMaxMemSizePerRank != 16) return 5;
    if (COMM_NAME_MAX_LENGTH != 128 || BUFFER_NAME_MAX_LENGTH != 128 || UDI_MAX_LENGTH != 128) return 6;
    if (HCCL_COMM_ALGO_MAX_LENGTH != 1600 || HCCL_COMM_CONFIG_INFO_BYTES != 24) return 7;
    if (HCCL_COMM_DEFAULT_BUFFSIZE != 200) return 8;
    if (HcclGetCommConfigCapability() <= HCCL_COMM_CONFIG_EXEC_TIMEOUT) return 9;
    if (HcclGetErrorString(HCCL_E_PARA) == NULL) return 10;
    return 0;
}

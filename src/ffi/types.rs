//! The C ABI types of `hccl_types.h`.
//!
//! This file is the source cbindgen reads for `include/hccl/hccl_types.h`: every name, value,
//! size and offset here is part of the binary interface and must match the vendor headers.
//! Enum-typed parameters and fields arrive from C as raw integers (the `*Raw` aliases, which the
//! header spells with the enum's name): a value outside the enum must be rejected, not assumed.

#![allow(non_camel_case_types, non_snake_case)]

use std::fmt;
use std::os::raw::{c_char, c_void};

/// Opaque communicator handle.
pub type HcclComm = *mut c_void;
/// Opaque connection handle.
pub type HcclConn = *mut c_void;
/// Opaque symmetric-window handle.
pub type HcclCommSymWindow = *mut c_void;

/// Size in bytes of the opaque root info blob.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// Result code of every HCCL call: the literal enum lives in the result-code table (cbindgen
/// reads it there), from which the error kinds and `HcclGetErrorString` derive.
pub use result_codes::HcclResult;

/// Reduction operator.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclReduceOp {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED = 255,
}

/// Element data type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclDataType {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_INT128 = 12,
    HCCL_DATA_TYPE_HIF8 = 14,
    HCCL_DATA_TYPE_FP8E4M3 = 15,
    HCCL_DATA_TYPE_FP8E5M2 = 16,
    HCCL_DATA_TYPE_FP8E8M0 = 17,
    HCCL_DATA_TYPE_RESERVED = 255,
}

/// Direction of one item of a batched send/receive.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclSendRecvType {
    HCCL_SEND = 0,
    HCCL_RECV = 1,
    HCCL_SEND_RECV_RESERVED = 2,
}

/// Process-wide configuration keys for `HcclSetConfig`/`HcclGetConfig`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclConfig {
    HCCL_DETERMINISTIC = 0,
}

/// Value of a process-wide configuration key.
#[repr(C)]
#[derive(Clone, Copy)]
pub union HcclConfigValue {
    pub value: i32,
}

impl HcclConfigValue {
    /// The value (the union's only member).
    pub fn get(self) -> i32 {
        // SAFETY: the union's only member is an i32, and every bit pattern is a valid i32.
        unsafe { self.value }
    }
}

impl fmt::Debug for HcclConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get())
    }
}

/// Communicator status.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclCommStatus {
    HCCL_COMM_STATUS_READY = 0,
    HCCL_COMM_STATUS_SUSPENDING = 1,
    HCCL_COMM_STATUS_INVALID = 254,
    HCCL_COMM_STATUS_RESERVED = 255,
}

/// Operation kinds, as reported by diagnostic interfaces.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclCMDType {
    HCCL_CMD_INVALID = 0,
    HCCL_CMD_BROADCAST = 1,
    HCCL_CMD_ALLREDUCE = 2,
    HCCL_CMD_REDUCE = 3,
    HCCL_CMD_SEND = 4,
    HCCL_CMD_RECEIVE = 5,
    HCCL_CMD_ALLGATHER = 6,
    HCCL_CMD_REDUCE_SCATTER = 7,
    HCCL_CMD_ALLTOALLV = 8,
    HCCL_CMD_ALLTOALLVC = 9,
    HCCL_CMD_ALLTOALL = 10,
    HCCL_CMD_GATHER = 11,
    HCCL_CMD_SCATTER = 12,
    HCCL_CMD_BATCH_SEND_RECV = 13,
    HCCL_CMD_BATCH_PUT = 14,
    HCCL_CMD_BATCH_GET = 15,
    HCCL_CMD_ALLGATHER_V = 16,
    HCCL_CMD_REDUCE_SCATTER_V = 17,
    HCCL_CMD_BATCH_WRITE = 18,
    HCCL_CMD_HALF_ALLTOALLV = 20,
    HCCL_CMD_ALL = 21,
    HCCL_CMD_FINALIZE = 100,
    HCCL_CMD_INTER_GROUP_SYNC = 101,
    HCCL_CMD_INIT = 102,
    HCCL_CMD_BARRIER = 103,
    HCCL_CMD_MAX = 104,
}

/// Communicator configuration capabilities, in the order they were introduced.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclCommConfigCapability {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0,
    HCCL_COMM_CONFIG_DETERMINISTIC = 1,
    HCCL_COMM_CONFIG_COMM_NAME = 2,
    HCCL_COMM_CONFIG_OP_EXPANSION_MODE = 3,
    HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV = 4,
    HCCL_COMM_CONFIG_WORLD_RANKID = 5,
    HCCL_COMM_CONFIG_JOBID = 6,
    HCCL_COMM_CONFIG_ACLGRAPH_ZEROCOPY_ENABLE = 7,
    HCCL_COMM_CONFIG_EXEC_TIMEOUT = 8,
    HCCL_COMM_CONFIG_ALGO = 9,
    HCCL_COMM_CONFIG_RETRY = 10,
    HCCL_COMM_CONFIG_BUFFER_NAME = 11,
    HCCL_COMM_CONFIG_RESERVED = 12,
}

/// Opaque root info: the rendezvous address, job token, format version and checksum.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfoDef {
    pub internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

/// Root info as passed to `HcclCommInitRootInfo`.
pub type HcclRootInfo = HcclRootInfoDef;

/// Raw C value of an `HcclDataType` (validated before use).
pub type HcclDataTypeRaw = u32;
/// Raw C value of an `HcclReduceOp` (validated before use).
pub type HcclReduceOpRaw = u32;
/// Raw C value of an `HcclSendRecvType` (validated before use).
pub type HcclSendRecvTypeRaw = u32;
/// Raw C value of an `HcclConfig` key (validated before use).
pub type HcclConfigRaw = u32;

/// One item of `HcclBatchSendRecv`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclSendRecvItemDef {
    pub sendRecvType: HcclSendRecvTypeRaw,
    pub buf: *mut c_void,
    pub count: u64,
    pub dataType: HcclDataTypeRaw,
    pub remoteRank: u32,
}

/// Communicator configuration; the first 24 bytes are the versioned header written by
/// `HcclCommConfigInit`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclCommConfigDef {
    pub reserved: [c_char; 24],
    pub hcclBufferSize: u32,
    pub hcclDeterministic: u32,
    pub hcclCommName: [c_char; 128],
    pub hcclUdi: [c_char; 128],
    pub hcclOpExpansionMode: u32,
    pub hcclRdmaTrafficClass: u32,
    pub hcclRdmaServiceLevel: u32,
    pub hcclWorldRankID: u32,
    pub hcclJobID: u64,
    pub aclGraphZeroCopyEnable: u8,
    pub hcclExecTimeOut: i32,
    pub hcclAlgo: [c_char; 1600],
    pub hcclRetryEnable: [c_char; 50],
    pub hcclRetryParams: [c_char; 128],
    pub hcclBufferName: [c_char; 128],
    pub hcclQos: u32,
    pub hcclSymWinMaxMemSizePerRank: u64,
}

/// One item of `HcclBatchSendRecv`.
pub type HcclSendRecvItem = HcclSendRecvItemDef;

/// Communicator configuration (see `HcclCommConfigDef`).
pub type HcclCommConfig = HcclCommConfigDef;

/// Callback registered with `HcclCommRegCommStateCallback`.
pub type HcclCommStateCallback =
    Option<unsafe extern "C" fn(comm: HcclComm, phase: i32, args: *mut c_void) -> HcclResult>;

/// Runtime stream handle (declared by `acl/acl_base.h`, not by this header).
pub type aclrtStream = *mut c_void;

/// Raw C value of an `HcclResult` given as an argument (validated before use).
pub type HcclResultRaw = u32;

//! Hard bounds on every input the library accepts, in one place.
//!
//! Values beyond these are rejected with `HCCL_E_PARA` before anything is allocated, on the rank
//! that received them and on the root that serves them, so one bad argument can fail a job's
//! initialisation but never exhaust another rank's process. Each bound is tested at its value
//! and one past it.

/// Most ranks a communicator may have: `nRanks` of `HcclCommInitRootInfo`, `ndev` of
/// `HcclCommInitAll`, the ranks of a rank table, the world size a launcher announces, and the
/// labels of `HCCL_RANK_HOST_MAP`.
pub const MAX_RANKS: u32 = 65_536;

/// Largest buffer one operation may describe, in bytes: `count` × element size, and for the
/// V forms (displacement + count) × element size, counts and displacements being read as
/// unsigned 64-bit numbers of elements. 2^46 bytes (64 TiB) is more than any host's memory yet
/// far below the top of the x86-64 and AArch64 user address spaces (2^47 and 2^48), so a buffer
/// address plus an accepted extent never wraps: a displacement near 2^60 elements is an
/// `HCCL_E_PARA`, not a wild pointer.
pub const MAX_BUFFER_BYTES: u64 = 1 << 46;

/// Most items of one `HcclBatchSendRecv` call: a send and a receive for every peer of the
/// largest communicator (a call at the bound runs in about a second).
pub const MAX_BATCH_ITEMS: u32 = 2 * MAX_RANKS;

/// Longest communicator name in bytes, without the terminating NUL (`COMM_NAME_MAX_LENGTH` − 1):
/// `hcclCommName`, and the names given to `HcclCommGetHandleWithName` and `HcclCommGetStatus`.
pub const MAX_COMM_NAME_BYTES: usize = 127;

/// Longest file path in bytes, without the terminating NUL (Linux `PATH_MAX` − 1): the rank
/// table path of `HcclCommInitClusterInfo` and `HCCL_WHITELIST_FILE`.
pub const MAX_PATH_BYTES: usize = 4095;

/// Longest algorithm string in bytes (`HCCL_COMM_ALGO_MAX_LENGTH` − 1): `HCCL_ALGO` and
/// `hcclAlgo`.
pub const MAX_ALGO_BYTES: usize = 1599;

/// Longest `HCCL_RANK_HOST_MAP` value in bytes: room for [`MAX_RANKS`] labels of 15 bytes.
pub const MAX_RANK_HOST_MAP_BYTES: usize = 16 * MAX_RANKS as usize;

/// Longest value of every other environment variable the library reads, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 4096;

/// Largest rank table file in bytes (32 MiB: about 500 bytes for each of [`MAX_RANKS`]
/// devices). A larger file is rejected after reading one byte past this, never more.
pub const MAX_RANK_TABLE_BYTES: u64 = 32 << 20;

/// Deepest nesting of JSON arrays and objects in a rank table (the format itself uses 5; the
/// rest is room for extra fields of vendor tables, which are ignored).
pub const MAX_RANK_TABLE_DEPTH: usize = 32;

/// The bound on the value of environment variable `var`, in bytes.
pub fn env_value_bytes(var: &str) -> usize {
    match var {
        "HCCL_ALGO" => MAX_ALGO_BYTES,
        "HCCL_WHITELIST_FILE" => MAX_PATH_BYTES,
        "HCCL_RANK_HOST_MAP" => MAX_RANK_HOST_MAP_BYTES,
        _ => MAX_ENV_VALUE_BYTES,
    }
}

// The one table of result codes of libhccl.so and libascendcl.so.
//
// The two enums below are written out literally because cbindgen reads them: `HcclResult` is the
// C enum of `hccl_types.h`. Everything else — the library's internal error kinds, the strings of
// `HcclGetErrorString`, the `aclError` constants and their `static const int` lines in
// `acl_base.h` — is generated from this file by `build.rs`. Each code's one-line doc comment is
// its description. Keep one item per line: the generator rejects anything it does not expect.

/// Result code of every HCCL call.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HcclResult {
    /// success
    HCCL_SUCCESS = 0,
    /// parameter error
    HCCL_E_PARA = 1,
    /// empty pointer
    HCCL_E_PTR = 2,
    /// memory error
    HCCL_E_MEMORY = 3,
    /// internal error
    HCCL_E_INTERNAL = 4,
    /// not supported
    HCCL_E_NOT_SUPPORT = 5,
    /// resource not found
    HCCL_E_NOT_FOUND = 6,
    /// resource unavailable
    HCCL_E_UNAVAIL = 7,
    /// system call error
    HCCL_E_SYSCALL = 8,
    /// timeout
    HCCL_E_TIMEOUT = 9,
    /// open file failure
    HCCL_E_OPEN_FILE_FAILURE = 10,
    /// tcp connect failure
    HCCL_E_TCP_CONNECT = 11,
    /// roce connect failure
    HCCL_E_ROCE_CONNECT = 12,
    /// tcp transfer failure
    HCCL_E_TCP_TRANSFER = 13,
    /// roce transfer failure
    HCCL_E_ROCE_TRANSFER = 14,
    /// runtime error
    HCCL_E_RUNTIME = 15,
    /// driver error
    HCCL_E_DRV = 16,
    /// profiling error
    HCCL_E_PROFILING = 17,
    /// cce error
    HCCL_E_CCE = 18,
    /// network error
    HCCL_E_NETWORK = 19,
    /// try again
    HCCL_E_AGAIN = 20,
    /// error on a remote rank
    HCCL_E_REMOTE = 21,
    /// communicator suspending
    HCCL_E_SUSPENDING = 22,
    /// operation retry failed
    HCCL_E_OPRETRY_FAIL = 23,
    /// out of memory
    HCCL_E_OOM = 24,
    /// error in communicator status
    HCCL_E_IN_STATUS = 1041,
    /// reserved: not a result code
    HCCL_E_RESERVED = 1042,
}

/// Status code of every ACL runtime call (an `aclError` value; `static const int` in C).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AclCode {
    /// The call succeeded.
    ACL_SUCCESS = 0,
    /// An argument was invalid (NULL pointer, size, count > destMax, enum out of range, unknown memory...).
    ACL_ERROR_INVALID_PARAM = 100000,
    /// The runtime is not initialised: call `aclInit` first (or it was finalized).
    ACL_ERROR_UNINITIALIZE = 100001,
    /// `aclInit` was called while the runtime is already initialised.
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    /// `aclFinalize` was called while the runtime is not initialised.
    ACL_ERROR_REPEAT_FINALIZE = 100037,
    /// Memory could not be allocated.
    ACL_ERROR_BAD_ALLOC = 200000,
    /// The API is not supported by this runtime.
    ACL_ERROR_API_NOT_SUPPORT = 200001,
    /// The device id is out of range.
    ACL_ERROR_INVALID_DEVICE = 200002,
    /// A stream, event or context handle is unknown or already destroyed.
    ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005,
    /// The feature is not supported by this runtime.
    ACL_ERROR_FEATURE_UNSUPPORTED = 200006,
    /// Internal error (an unexpected failure inside the runtime).
    ACL_ERROR_INTERNAL_ERROR = 500000,
    /// Generic failure.
    ACL_ERROR_FAILURE = 500001,
    /// Work executed on a stream failed (reported by the next synchronisation).
    ACL_ERROR_RT_FAILURE = 500003,
    /// `aclrtProcessReport` found no callback to run before its timeout.
    ACL_ERROR_RT_REPORT_TIMEOUT = 507012,
    /// `aclrtSynchronizeStreamWithTimeout` timed out.
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046,
    /// An event synchronisation timed out.
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT = 507047,
}

/// Legacy alias of `ACL_SUCCESS`.
pub const ACL_ERROR_NONE: AclCode = AclCode::ACL_SUCCESS;

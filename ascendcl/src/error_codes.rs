// The list of AscendCL status codes, written once as a macro invocation.
//
// This file is `include!`d twice: by `lib.rs` (where the macro expands to `pub const` items) and by
// `build.rs` (where it expands to a table that becomes `static const int` lines in `acl_base.h`,
// the form the vendor header uses). Keeping a single list means the header cannot drift from the
// values the library returns.

acl_error_codes! {
    /// The call succeeded.
    ACL_SUCCESS = 0;
    /// Legacy alias of `ACL_SUCCESS`.
    ACL_ERROR_NONE = 0;
    /// An argument was invalid (NULL pointer, size, count > destMax, enum out of range, unknown memory...).
    ACL_ERROR_INVALID_PARAM = 100000;
    /// The runtime is not initialised: call `aclInit` first (or it was finalized).
    ACL_ERROR_UNINITIALIZE = 100001;
    /// `aclInit` was called while the runtime is already initialised.
    ACL_ERROR_REPEAT_INITIALIZE = 100002;
    /// `aclFinalize` was called while the runtime is not initialised.
    ACL_ERROR_REPEAT_FINALIZE = 100037;
    /// Memory could not be allocated.
    ACL_ERROR_BAD_ALLOC = 200000;
    /// The API is not supported by this runtime.
    ACL_ERROR_API_NOT_SUPPORT = 200001;
    /// The device id is out of range.
    ACL_ERROR_INVALID_DEVICE = 200002;
    /// A stream, event or context handle is unknown or already destroyed.
    ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005;
    /// The feature is not supported by this runtime.
    ACL_ERROR_FEATURE_UNSUPPORTED = 200006;
    /// Internal error (an unexpected failure inside the runtime).
    ACL_ERROR_INTERNAL_ERROR = 500000;
    /// Generic failure.
    ACL_ERROR_FAILURE = 500001;
    /// Work executed on a stream failed (reported by the next synchronisation).
    ACL_ERROR_RT_FAILURE = 500003;
    /// `aclrtProcessReport` found no callback to run before its timeout.
    ACL_ERROR_RT_REPORT_TIMEOUT = 507012;
    /// `aclrtSynchronizeStreamWithTimeout` timed out.
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046;
    /// An event synchronisation timed out.
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT = 507047;
}

//! Error values, the per-thread "recent error message" and the one-line error log.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::fmt::Display;

use crate::types::aclError;

/// A failed call: the status code to return to C. Creating one through [`fail`] has already
/// logged it and stored its message for `aclGetRecentErrMsg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclErr(aclError);

impl AclErr {
    /// An error that is an expected answer (e.g. "not a live stream"): not logged as a failure.
    pub fn quiet(code: aclError) -> Self {
        AclErr(code)
    }

    /// The status code.
    pub fn code(self) -> aclError {
        self.0
    }
}

/// Result of an internal operation.
pub type AclResult<T = ()> = Result<T, AclErr>;

thread_local! {
    static CURRENT_API: Cell<&'static str> = const { Cell::new("ascendcl") };
    static PENDING_MSG: RefCell<Option<CString>> = const { RefCell::new(None) };
    static RETURNED_MSG: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Names the entry point running on this thread (for log lines); restores the outer name on drop
/// because entry points nest (a callback run by `aclrtProcessReport` may call the API).
pub struct ApiScope(&'static str);

impl ApiScope {
    /// Marks `name` as the running entry point.
    pub fn enter(name: &'static str) -> Self {
        ApiScope(CURRENT_API.with(|c| c.replace(name)))
    }
}

impl Drop for ApiScope {
    fn drop(&mut self) {
        CURRENT_API.with(|c| c.set(self.0));
    }
}

/// Logs `msg` once at error level, stores it as this thread's recent error and returns the error.
pub fn fail(code: aclError, msg: impl Display) -> AclErr {
    let api = CURRENT_API.with(|c| c.get());
    let text = match result_codes::AclCode::from_raw(code) {
        Some(c) => format!("{api}: {msg} (error {code} {})", c.name()),
        None => format!("{api}: {msg} (error {code})"),
    };
    log::error!("{text}");
    // Interior NULs cannot appear in our own messages, but never panic on them.
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    PENDING_MSG.with(|m| *m.borrow_mut() = Some(c));
    AclErr(code)
}

/// Takes this thread's pending error message; the returned pointer stays valid until the next
/// call on the same thread. NULL when no error happened since the last call.
pub fn take_recent_message() -> *const std::os::raw::c_char {
    let pending = PENDING_MSG.with(|m| m.borrow_mut().take());
    RETURNED_MSG.with(|r| {
        let mut r = r.borrow_mut();
        *r = pending;
        r.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_is_taken_once() {
        let e = fail(7, "boom");
        assert_eq!(e.code(), 7);
        let p = take_recent_message();
        assert!(!p.is_null());
        // SAFETY: a non-NULL message stays valid until the next call on this thread.
        let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap();
        assert!(s.contains("boom") && s.contains("error 7"), "{s}");
        assert!(take_recent_message().is_null());
        fail(crate::codes::ACL_ERROR_INVALID_PARAM, "bad");
        // SAFETY: the message pointer stays valid until the next call on this thread.
        let s = unsafe { std::ffi::CStr::from_ptr(take_recent_message()) };
        let s = s.to_str().unwrap();
        assert!(s.ends_with("(error 100000 ACL_ERROR_INVALID_PARAM)"), "{s}");
    }
}

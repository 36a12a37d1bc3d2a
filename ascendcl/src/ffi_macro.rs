//! The guard every `extern "C"` entry point runs in.
//!
//! It initialises logging, names the API for log lines, converts `AclResult` into a status code
//! and catches panics so that no unwind ever crosses into C (`ACL_ERROR_INTERNAL_ERROR` instead).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::codes::{ACL_ERROR_INTERNAL_ERROR, ACL_SUCCESS};
use crate::error::{self, AclResult};
use crate::logging;
use crate::types::aclError;

/// Runs the body of a status-returning entry point.
macro_rules! acl_api {
    ($name:literal, $body:block) => {
        $crate::ffi_macro::run_status($name, || -> $crate::error::AclResult { $body })
    };
}

/// Runs the body of an entry point returning a plain value, with `$fallback` on panic.
macro_rules! acl_api_value {
    ($name:literal, $fallback:expr, $body:block) => {
        $crate::ffi_macro::run_value($name, $fallback, || $body)
    };
}

/// Implementation of [`acl_api!`].
pub fn run_status(name: &'static str, body: impl FnOnce() -> AclResult) -> aclError {
    logging::init();
    let _api = error::ApiScope::enter(name);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ACL_SUCCESS,
        Ok(Err(e)) => e.code(),
        Err(payload) => {
            error::fail(
                ACL_ERROR_INTERNAL_ERROR,
                format!("panic: {}", panic_text(&payload)),
            );
            ACL_ERROR_INTERNAL_ERROR
        }
    }
}

/// Implementation of [`acl_api_value!`].
pub fn run_value<T>(name: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    logging::init();
    let _api = error::ApiScope::enter(name);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            error::fail(
                ACL_ERROR_INTERNAL_ERROR,
                format!("panic: {}", panic_text(&payload)),
            );
            fallback
        }
    }
}

/// Best-effort text of a panic payload.
pub fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::ACL_ERROR_INVALID_PARAM;

    #[test]
    fn panics_become_internal_error() {
        assert_eq!(
            run_status("test", || panic!("boom")),
            ACL_ERROR_INTERNAL_ERROR
        );
        assert_eq!(run_value("test", 5, || -> i32 { panic!("boom") }), 5);
        assert_eq!(run_status("test", || Ok(())), ACL_SUCCESS);
        let code = run_status("test", || Err(error::fail(ACL_ERROR_INVALID_PARAM, "bad")));
        assert_eq!(code, ACL_ERROR_INVALID_PARAM);
    }
}

//! The edge between C and Rust: every entry point runs inside [`call`], which catches panics,
//! maps errors to `HcclResult` and logs one line naming the API.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use super::types::HcclResult;
use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};

/// Maps an internal error kind to its C result code.
pub fn result_of(kind: ErrorKind) -> HcclResult {
    match kind {
        ErrorKind::Para => HcclResult::HCCL_E_PARA,
        ErrorKind::Ptr => HcclResult::HCCL_E_PTR,
        ErrorKind::Memory => HcclResult::HCCL_E_MEMORY,
        ErrorKind::Internal => HcclResult::HCCL_E_INTERNAL,
        ErrorKind::NotSupport => HcclResult::HCCL_E_NOT_SUPPORT,
        ErrorKind::NotFound => HcclResult::HCCL_E_NOT_FOUND,
        ErrorKind::Unavail => HcclResult::HCCL_E_UNAVAIL,
        ErrorKind::Syscall => HcclResult::HCCL_E_SYSCALL,
        ErrorKind::Timeout => HcclResult::HCCL_E_TIMEOUT,
        ErrorKind::OpenFile => HcclResult::HCCL_E_OPEN_FILE_FAILURE,
        ErrorKind::TcpConnect => HcclResult::HCCL_E_TCP_CONNECT,
        ErrorKind::TcpTransfer => HcclResult::HCCL_E_TCP_TRANSFER,
        ErrorKind::Runtime => HcclResult::HCCL_E_RUNTIME,
        ErrorKind::Network => HcclResult::HCCL_E_NETWORK,
        ErrorKind::Remote => HcclResult::HCCL_E_REMOTE,
    }
}

/// Whether `HCCL_ENTRY_LOG_ENABLE` asks for a log line at every API entry (read once).
pub fn entry_log() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| EnvConfig::global().map(|c| c.entry_log).unwrap_or(false))
}

/// Runs `f` as the body of C entry point `api`.
pub fn call(api: &'static str, f: impl FnOnce() -> Result<()>) -> HcclResult {
    crate::base::logging::init_from_env();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HcclResult::HCCL_SUCCESS,
        Ok(Err(e)) => {
            log::error!("{api}: {}", e.msg);
            result_of(e.kind)
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            log::error!("{api}: internal error (panic caught at the API boundary): {what}");
            HcclResult::HCCL_E_INTERNAL
        }
    }
}

/// An error for an API that needs NPU hardware or a feature this library does not offer.
pub fn not_supported(api: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::NotSupport,
        format!("{api} is not supported: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_internal_errors() {
        let r = call("test_api", || panic!("deliberate"));
        assert_eq!(r, HcclResult::HCCL_E_INTERNAL);
        let r = call("test_api", || -> Result<()> {
            let v: Vec<u8> = Vec::new();
            // An out-of-bounds index panics inside the boundary.
            let _ = v[std::hint::black_box(3)];
            Ok(())
        });
        assert_eq!(r, HcclResult::HCCL_E_INTERNAL);
    }

    #[test]
    fn errors_map_to_their_codes() {
        assert_eq!(
            call("test_api", || Err(Error::new(ErrorKind::Timeout, "late"))),
            HcclResult::HCCL_E_TIMEOUT
        );
        assert_eq!(call("test_api", || Ok(())), HcclResult::HCCL_SUCCESS);
        assert_eq!(result_of(ErrorKind::Ptr), HcclResult::HCCL_E_PTR);
    }
}

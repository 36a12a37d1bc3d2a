//! The plugin's error type and its `hcclNetResult_t` codes.

use crate::abi::code;
use std::fmt;

/// Why a call did not succeed. `Again` is the one non-error: retry after progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetError {
    Again,
    Invalid(String),
    NotInitialized,
    NotSupported(String),
    NoDevice(String),
    NoMemory(String),
    Truncated(String),
    Remote(String),
    Internal(String),
}

/// Result of the plugin's internal functions.
pub type NetResult<T> = Result<T, NetError>;

impl NetError {
    /// The `hcclNetResult_t` of this error.
    pub fn code(&self) -> i32 {
        match self {
            NetError::Again => code::AGAIN,
            NetError::Invalid(_) => code::E_INVALID,
            NetError::NotInitialized => code::E_NOT_INITIALIZED,
            NetError::NotSupported(_) => code::E_NOT_SUPPORTED,
            NetError::NoDevice(_) => code::E_NO_DEVICE,
            NetError::NoMemory(_) => code::E_NO_MEMORY,
            NetError::Truncated(_) => code::E_TRUNCATED,
            NetError::Remote(_) => code::E_REMOTE,
            NetError::Internal(_) => code::E_INTERNAL,
        }
    }

    /// Maps a failed libfabric call (negative code) to an error naming the call.
    pub fn fabric(call: &str, rc: i64) -> NetError {
        let text = crate::sys::strerror(rc);
        let msg = format!("{call} failed: {text} ({rc})");
        match -rc {
            12 => NetError::NoMemory(msg),
            // Connection refused/reset/aborted, host or network unreachable, timed out.
            104 | 103 | 111 | 113 | 101 | 110 | 107 => NetError::Remote(msg),
            _ => NetError::Internal(msg),
        }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Again => write!(f, "try again"),
            NetError::Invalid(m) => write!(f, "invalid argument: {m}"),
            NetError::NotInitialized => write!(f, "not initialized: call init first"),
            NetError::NotSupported(m) => write!(f, "not supported: {m}"),
            NetError::NoDevice(m) => write!(f, "no device: {m}"),
            NetError::NoMemory(m) => write!(f, "out of memory: {m}"),
            NetError::Truncated(m) => write!(f, "truncated: {m}"),
            NetError::Remote(m) => write!(f, "peer: {m}"),
            NetError::Internal(m) => write!(f, "internal: {m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_again_is_not_an_error_code() {
        let all = [
            NetError::Again,
            NetError::Invalid(String::new()),
            NetError::NotInitialized,
            NetError::NotSupported(String::new()),
            NetError::NoDevice(String::new()),
            NetError::NoMemory(String::new()),
            NetError::Truncated(String::new()),
            NetError::Remote(String::new()),
            NetError::Internal(String::new()),
        ];
        let mut codes: Vec<i32> = all.iter().map(NetError::code).collect();
        assert_eq!(codes[0], code::AGAIN);
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes, (1..=9).collect::<Vec<_>>());
    }

    #[test]
    fn fabric_errors_name_the_call_and_classify_peer_failures() {
        let e = NetError::fabric("fi_tsend", -111);
        assert_eq!(e.code(), code::E_REMOTE);
        assert!(e.to_string().contains("fi_tsend"), "{e}");
        assert_eq!(NetError::fabric("fi_mr_reg", -12).code(), code::E_NO_MEMORY);
        assert_eq!(NetError::fabric("fi_enable", -22).code(), code::E_INTERNAL);
    }
}

//! The library's one internal error type.
//!
//! An error carries its kind (which maps 1:1 onto an `HcclResult` code at the C edge) and a
//! message that already names the context (comm, rank, peer, op) where it was raised.

use std::fmt;

/// Error category: one per error code of `HcclResult`, with the same value (generated from the
/// result-code table, so kinds, codes and their descriptions cannot drift apart).
pub use result_codes::ErrorKind;

/// An error with its context already rendered into the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Category, mapped to an `HcclResult` at the C edge.
    pub kind: ErrorKind,
    /// Human-readable description including context.
    pub msg: String,
}

impl Error {
    /// Creates an error of `kind` with message `msg`.
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
        }
    }

    /// Prefixes the message with more context, keeping the kind.
    pub fn context(mut self, ctx: impl fmt::Display) -> Error {
        self.msg = format!("{ctx}: {}", self.msg);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.msg)
    }
}

impl std::error::Error for Error {}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand constructors.
#[macro_export]
macro_rules! err {
    ($kind:ident, $($arg:tt)*) => {
        $crate::base::error::Error::new($crate::base::error::ErrorKind::$kind, format!($($arg)*))
    };
}

/// Returns early with an error of the given kind.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::err!($kind, $($arg)*))
    };
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        use std::io::ErrorKind as K;
        let kind = match e.kind() {
            K::TimedOut | K::WouldBlock => ErrorKind::Timeout,
            K::ConnectionRefused => ErrorKind::TcpConnect,
            K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::UnexpectedEof
            | K::NotConnected => ErrorKind::TcpTransfer,
            K::NotFound => ErrorKind::OpenFile,
            K::OutOfMemory => ErrorKind::Memory,
            _ => ErrorKind::Syscall,
        };
        Error::new(kind, e.to_string())
    }
}

//! The library's one internal error type.
//!
//! An error carries its kind (which maps 1:1 onto an `HcclResult` code at the C edge) and a
//! message that already names the context (comm, rank, peer, op) where it was raised.

use std::fmt;

/// Error category: one per error code of `HcclResult`, with the same value (generated from the
/// result-code table, so kinds, codes and their descriptions cannot drift apart).
pub use result_codes::ErrorKind;

/// What an [`Error`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorBody {
    /// Category, mapped to an `HcclResult` at the C edge.
    pub kind: ErrorKind,
    /// Human-readable description including context.
    pub msg: String,
}

/// An error with its context already rendered into the message. Boxed, so that `Result<()>`
/// is one register wide: a wider result is returned through memory, written piecewise and read
/// back whole, and that read cannot be forwarded from the store buffer. It then waits for every
/// earlier store to reach the cache, among them a small message's store into a line its
/// receiver is polling, which takes a cross-core round trip (a fifth of a 16 B Broadcast
/// root's time before the change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(Box<ErrorBody>);

impl Error {
    /// Creates an error of `kind` with message `msg`.
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Error {
        Error(Box::new(ErrorBody {
            kind,
            msg: msg.into(),
        }))
    }

    /// The message, without the kind.
    pub fn into_msg(self) -> String {
        self.0.msg
    }

    /// Prefixes the message with more context, keeping the kind.
    pub fn context(mut self, ctx: impl fmt::Display) -> Error {
        self.0.msg = format!("{ctx}: {}", self.0.msg);
        self
    }
}

impl std::ops::Deref for Error {
    type Target = ErrorBody;
    fn deref(&self) -> &ErrorBody {
        &self.0
    }
}

impl std::ops::DerefMut for Error {
    fn deref_mut(&mut self) -> &mut ErrorBody {
        &mut self.0
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

//! A raw pointer that may move to a stream worker thread.

use std::os::raw::c_void;

/// A C pointer carried into work that runs on another thread. The C caller guarantees the memory
/// stays valid until the work has run (the same contract as the vendor's async APIs).
#[derive(Debug, Clone, Copy)]
pub struct SendPtr(*mut c_void);

// SAFETY: the pointer is only dereferenced by the work it was captured for, under the C caller's
// validity guarantee; the wrapper itself carries no thread affinity.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// Wraps a pointer.
    pub fn new(p: *mut c_void) -> Self {
        SendPtr(p)
    }

    /// The pointer. (A method, not field access, so closures capture the whole `Send` wrapper.)
    pub fn get(self) -> *mut c_void {
        self.0
    }
}

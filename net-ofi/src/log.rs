//! Log lines go to the callback the caller gave to init; before that they are dropped.

use crate::abi::{level, LogFn};
use std::ffi::{c_void, CString};
use std::sync::OnceLock;

struct Sink {
    f: unsafe extern "C" fn(*mut c_void, i32, *const std::ffi::c_char),
    ctx: usize,
}

static SINK: OnceLock<Option<Sink>> = OnceLock::new();

/// Installs the callback (first call wins, as init does).
pub fn install(f: LogFn, ctx: *mut c_void) {
    let _ = SINK.set(f.map(|f| Sink {
        f,
        ctx: ctx as usize,
    }));
}

/// Sends one line, prefixed with the plugin's name, to the callback.
pub fn emit(lvl: i32, msg: &str) {
    let Some(Some(sink)) = SINK.get() else {
        return;
    };
    let line = CString::new(format!("net-ofi: {msg}").replace('\0', " "))
        .unwrap_or_else(|_| CString::from(c"net-ofi: (unprintable message)"));
    // SAFETY: the caller promised a callback valid for the process's life that takes a
    // NUL-terminated line valid for the call's duration.
    unsafe { (sink.f)(sink.ctx as *mut c_void, lvl, line.as_ptr()) };
}

pub fn error(msg: &str) {
    emit(level::ERROR, msg)
}

pub fn warn(msg: &str) {
    emit(level::WARN, msg)
}

pub fn info(msg: &str) {
    emit(level::INFO, msg)
}

pub fn debug(msg: &str) {
    emit(level::DEBUG, msg)
}

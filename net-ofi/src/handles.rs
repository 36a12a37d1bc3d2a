//! The handles the C caller holds. A handle is a number, never a pointer: every call looks it up
//! here, so a NULL, stale, closed or foreign handle is an error instead of a wild pointer.
//! Numbers are never reused.

use crate::comm::{Comm, ListenComm, Request};
use crate::error::{NetError, NetResult};
use crate::mr::Mr;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

/// What a handle names.
#[derive(Clone)]
pub enum Obj {
    Listen(Arc<ListenComm>),
    Comm(Arc<Comm>),
    Mr(Arc<Mr>),
    Request(Arc<Request>),
}

struct Table {
    next: usize,
    objs: HashMap<usize, Obj>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    // The table is consistent after every statement, so a panic elsewhere leaves it usable.
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers `obj` and returns its new handle.
pub fn insert(obj: Obj) -> *mut c_void {
    let mut g = table();
    let t = g.get_or_insert_with(|| Table {
        // Far from 0 and from small integers a caller might pass by mistake.
        next: 0x1000,
        objs: HashMap::new(),
    });
    let h = t.next;
    t.next += 1;
    t.objs.insert(h, obj);
    h as *mut c_void
}

fn lookup(h: *mut c_void) -> Option<Obj> {
    table().as_ref()?.objs.get(&(h as usize)).cloned()
}

/// Removes a handle; returns what it named.
pub fn remove(h: *mut c_void) -> Option<Obj> {
    table().as_mut()?.objs.remove(&(h as usize))
}

fn wrong(what: &str, h: *mut c_void) -> NetError {
    if h.is_null() {
        NetError::Invalid(format!("{what} is NULL"))
    } else {
        NetError::Invalid(format!("{what} {h:p} is not an open {what}"))
    }
}

pub fn listen(h: *mut c_void) -> NetResult<Arc<ListenComm>> {
    match lookup(h) {
        Some(Obj::Listen(l)) => Ok(l),
        _ => Err(wrong("listen comm", h)),
    }
}

pub fn comm(h: *mut c_void) -> NetResult<Arc<Comm>> {
    match lookup(h) {
        Some(Obj::Comm(c)) => Ok(c),
        _ => Err(wrong("comm", h)),
    }
}

/// A registration, or None for a NULL handle.
pub fn mr_opt(h: *mut c_void) -> NetResult<Option<Arc<Mr>>> {
    if h.is_null() {
        return Ok(None);
    }
    match lookup(h) {
        Some(Obj::Mr(m)) => Ok(Some(m)),
        _ => Err(wrong("memory handle", h)),
    }
}

pub fn request(h: *mut c_void) -> NetResult<Arc<Request>> {
    match lookup(h) {
        Some(Obj::Request(r)) => Ok(r),
        _ => Err(wrong("request", h)),
    }
}

/// Removes `h` only if it still names the same kind of object.
pub fn remove_kind(h: *mut c_void, kind: fn(&Obj) -> bool) -> bool {
    let mut g = table();
    let Some(t) = g.as_mut() else { return false };
    match t.objs.get(&(h as usize)) {
        Some(o) if kind(o) => {
            t.objs.remove(&(h as usize));
            true
        }
        _ => false,
    }
}

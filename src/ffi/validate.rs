//! Argument checks shared by the entry points: null pointers, enum values, ranks, and the
//! overflow of count × element size.

use std::os::raw::c_void;
use std::sync::Arc;

use super::types::{HcclComm, HcclDataTypeRaw, HcclReduceOpRaw};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::comm::registry;
use crate::comm::Communicator;

/// A non-null pointer, or `HCCL_E_PTR` naming the argument.
pub fn non_null<T>(p: *const T, what: &str) -> Result<*const T> {
    if p.is_null() {
        Err(Error::new(ErrorKind::Ptr, format!("{what} is NULL")))
    } else {
        Ok(p)
    }
}

/// A non-null mutable pointer, or `HCCL_E_PTR` naming the argument.
pub fn non_null_mut<T>(p: *mut T, what: &str) -> Result<*mut T> {
    if p.is_null() {
        Err(Error::new(ErrorKind::Ptr, format!("{what} is NULL")))
    } else {
        Ok(p)
    }
}

/// The communicator behind a handle.
pub fn comm(h: HcclComm) -> Result<Arc<Communicator>> {
    if h.is_null() {
        return Err(Error::new(ErrorKind::Ptr, "comm is NULL"));
    }
    registry::get(h as usize)
}

/// A data type from its raw C value.
pub fn dtype(raw: HcclDataTypeRaw) -> Result<DataType> {
    DataType::from_raw(raw)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("invalid HcclDataType {raw}")))
}

/// A reduction operator from its raw C value, checked against the data type.
pub fn reduce_op(raw: HcclReduceOpRaw, dt: DataType) -> Result<ReduceOp> {
    let op = ReduceOp::from_raw(raw)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("invalid HcclReduceOp {raw}")))?;
    crate::exec::reduce::check_reducible(dt, op)?;
    Ok(op)
}

/// `count` elements of `dt` in bytes, rejecting overflow.
pub fn bytes(count: u64, dt: DataType) -> Result<usize> {
    count
        .checked_mul(dt.size() as u64)
        .filter(|&b| b <= isize::MAX as u64)
        .map(|b| b as usize)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Para,
                format!("count {count} of {} overflows the address space", dt.name()),
            )
        })
}

/// `a * b` elements as a count, rejecting overflow.
pub fn mul(a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("count {a} x {b} overflows")))
}

/// A count that fits the address space.
pub fn count(c: u64) -> Result<usize> {
    usize::try_from(c)
        .ok()
        .filter(|&c| c <= isize::MAX as usize)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("count {c} is too large")))
}

/// A data buffer: may be NULL only when it holds no bytes.
pub fn buffer(p: *const c_void, nbytes: usize, what: &str) -> Result<usize> {
    if p.is_null() && nbytes > 0 {
        return Err(Error::new(
            ErrorKind::Ptr,
            format!("{what} is NULL for {nbytes} bytes"),
        ));
    }
    Ok(p as usize)
}

/// A rank of `c` (root, peer, destination).
pub fn rank_in(r: u32, c: &Communicator, what: &str) -> Result<u32> {
    if r >= c.size() {
        return Err(Error::new(
            ErrorKind::Para,
            format!(
                "{what} {r} is out of range for {} ranks (comm {})",
                c.size(),
                c.name()
            ),
        ));
    }
    Ok(r)
}

/// Reads an array of `n` uint64 counts from C.
///
/// # Safety
/// `p` must point to `n` readable uint64 values when non-null.
pub unsafe fn u64_array(p: *const c_void, n: u32, what: &str) -> Result<Vec<usize>> {
    let p = non_null(p, what)? as *const u64;
    (0..n as usize)
        .map(|i| count(std::ptr::read_unaligned(p.add(i))))
        .collect()
}

/// Checks that every block `displs[i] + counts[i]` fits, returning the extent in elements.
pub fn extent(counts: &[usize], displs: &[usize]) -> Result<usize> {
    let mut ext = 0usize;
    for (c, d) in counts.iter().zip(displs) {
        let end = c
            .checked_add(*d)
            .ok_or_else(|| Error::new(ErrorKind::Para, "count + displacement overflows"))?;
        ext = ext.max(end);
    }
    Ok(ext)
}

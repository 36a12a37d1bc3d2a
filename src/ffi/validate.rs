//! Argument checks shared by the entry points: null pointers, enum values, ranks, strings, and
//! sizes — every one bounded by [`crate::base::limits`].

use std::os::raw::{c_char, c_void};
use std::sync::Arc;

use super::types::{HcclComm, HcclDataTypeRaw, HcclReduceOpRaw};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::{MAX_BUFFER_BYTES, MAX_RANKS};
use crate::comm::registry::{self, Pinned};
use crate::comm::Communicator;

// Every check below is inlined into the entry points and builds its error out of line: an
// out-of-line check costs a call and a frame (saved registers are stores), and a small call's
// stores are what its time goes on while its message's cache line travels to the receiver.

/// A non-null pointer, or `HCCL_E_PTR` naming the argument.
#[inline]
pub fn non_null<T>(p: *const T, what: &str) -> Result<*const T> {
    if p.is_null() {
        return Err(null(what));
    }
    Ok(p)
}

/// A non-null mutable pointer, or `HCCL_E_PTR` naming the argument.
#[inline]
pub fn non_null_mut<T>(p: *mut T, what: &str) -> Result<*mut T> {
    if p.is_null() {
        return Err(null(what));
    }
    Ok(p)
}

#[cold]
#[inline(never)]
fn null(what: &str) -> Error {
    Error::new(ErrorKind::Ptr, format!("{what} is NULL"))
}

/// The communicator behind a handle.
#[inline]
pub fn comm(h: HcclComm) -> Result<Pinned> {
    if h.is_null() {
        return Err(null("comm"));
    }
    registry::pin(h as usize)
}

/// The communicator behind a handle, referenced but not pinned (see [`registry::get`]).
pub fn comm_unpinned(h: HcclComm) -> Result<Arc<Communicator>> {
    if h.is_null() {
        return Err(Error::new(ErrorKind::Ptr, "comm is NULL"));
    }
    registry::get(h as usize)
}

/// A data type from its raw C value.
#[inline]
pub fn dtype(raw: HcclDataTypeRaw) -> Result<DataType> {
    match DataType::from_raw(raw) {
        Some(dt) => Ok(dt),
        None => Err(bad_dtype(raw)),
    }
}

#[cold]
#[inline(never)]
fn bad_dtype(raw: HcclDataTypeRaw) -> Error {
    Error::new(ErrorKind::Para, format!("invalid HcclDataType {raw}"))
}

/// A reduction operator from its raw C value, checked against the data type.
#[inline]
pub fn reduce_op(raw: HcclReduceOpRaw, dt: DataType) -> Result<ReduceOp> {
    match ReduceOp::from_raw(raw) {
        Some(op) if dt.reducible() => Ok(op),
        _ => bad_reduce_op(raw, dt),
    }
}

/// [`reduce_op`]'s error, out of line: every collective call checks its operator.
#[cold]
#[inline(never)]
fn bad_reduce_op(raw: HcclReduceOpRaw, dt: DataType) -> Result<ReduceOp> {
    let op = ReduceOp::from_raw(raw)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("invalid HcclReduceOp {raw}")))?;
    crate::exec::reduce::check_reducible(dt, op)?;
    Ok(op)
}

/// A rank count given by the caller: 1 ..= [`MAX_RANKS`].
pub fn rank_count(n: u32, what: &str) -> Result<u32> {
    if n == 0 || n > MAX_RANKS {
        return Err(Error::new(
            ErrorKind::Para,
            format!("{what} {n} must be in 1..={MAX_RANKS}"),
        ));
    }
    Ok(n)
}

/// `count` elements of `dt` in bytes, at most [`MAX_BUFFER_BYTES`].
#[inline]
pub fn bytes(count: u64, dt: DataType) -> Result<usize> {
    match count.checked_mul(dt.size() as u64) {
        Some(b) if b <= MAX_BUFFER_BYTES => Ok(b as usize),
        _ => too_many_bytes(count, dt),
    }
}

/// [`bytes`]'s error, out of line.
#[cold]
#[inline(never)]
fn too_many_bytes(count: u64, dt: DataType) -> Result<usize> {
    Err(Error::new(
        ErrorKind::Para,
        format!(
            "count {count} of {} is more than the {MAX_BUFFER_BYTES}-byte limit of one buffer",
            dt.name()
        ),
    ))
}

/// `a * b` elements as a count, rejecting overflow.
pub fn mul(a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("count {a} x {b} overflows")))
}

/// A count (or displacement) of elements: at most [`MAX_BUFFER_BYTES`], the bound for the
/// smallest elements; [`bytes`] applies the element size.
#[inline]
pub fn count(c: u64) -> Result<usize> {
    if c > MAX_BUFFER_BYTES {
        return Err(too_many(c));
    }
    Ok(c as usize)
}

#[cold]
#[inline(never)]
fn too_many(c: u64) -> Error {
    Error::new(
        ErrorKind::Para,
        format!("count {c} is more than the {MAX_BUFFER_BYTES}-byte limit of one buffer"),
    )
}

/// A data buffer: may be NULL only when it holds no bytes, and must not wrap around the end of
/// the address space.
#[inline]
pub fn buffer(p: *const c_void, nbytes: usize, what: &str) -> Result<usize> {
    let at = p as usize;
    if (p.is_null() && nbytes > 0) || at.checked_add(nbytes).is_none() {
        return Err(bad_buffer(at, nbytes, what));
    }
    Ok(at)
}

#[cold]
#[inline(never)]
fn bad_buffer(at: usize, nbytes: usize, what: &str) -> Error {
    if at == 0 {
        Error::new(ErrorKind::Ptr, format!("{what} is NULL for {nbytes} bytes"))
    } else {
        Error::new(
            ErrorKind::Para,
            format!("{what} {at:#x} + {nbytes} bytes wraps around the address space"),
        )
    }
}

/// A rank of `c` (root, peer, destination).
#[inline]
pub fn rank_in(r: u32, c: &Communicator, what: &str) -> Result<u32> {
    if r >= c.size() {
        return Err(rank_out_of_range(r, c, what));
    }
    Ok(r)
}

#[cold]
#[inline(never)]
fn rank_out_of_range(r: u32, c: &Communicator, what: &str) -> Error {
    Error::new(
        ErrorKind::Para,
        format!(
            "{what} {r} is out of range for {} ranks (comm {})",
            c.size(),
            c.name()
        ),
    )
}

/// Reads entry `i` of a C array of uint64 counts or displacements, as a bounded [`count`].
///
/// # Safety
/// `p` must point to at least `i + 1` readable uint64 values.
pub unsafe fn u64_at(p: *const u64, i: usize, what: &str) -> Result<usize> {
    // SAFETY: the caller guarantees `i + 1` readable values; C arrays need not be aligned for us.
    let v = unsafe { p.add(i).read_unaligned() };
    count(v).map_err(|e| e.context(format!("{what}[{i}] = {v}")))
}

/// Reads an array of `n` uint64 counts or displacements from C, each a bounded [`count`].
///
/// # Safety
/// `p` must point to `n` readable uint64 values when non-null.
pub unsafe fn u64_array(p: *const c_void, n: u32, what: &str) -> Result<Vec<usize>> {
    let p = non_null(p, what)? as *const u64;
    // SAFETY: forwarded from the caller: `n` readable values.
    (0..n as usize)
        .map(|i| unsafe { u64_at(p, i, what) })
        .collect()
}

/// Checks that every block `displs[i] + counts[i]` fits, returning the extent in elements.
pub fn extent(counts: &[usize], displs: &[usize]) -> Result<usize> {
    let mut ext = 0usize;
    for (i, (c, d)) in counts.iter().zip(displs).enumerate() {
        let end = c.checked_add(*d).ok_or_else(|| {
            Error::new(
                ErrorKind::Para,
                format!("block {i}: count {c} + displacement {d} overflows"),
            )
        })?;
        ext = ext.max(end);
    }
    Ok(ext)
}

/// A NUL-terminated C string of at most `max` bytes (before the NUL), read without touching
/// any byte past the terminator or past `max + 1` bytes.
///
/// # Safety
/// `p`, when non-null, must point to a NUL-terminated string or to at least `max + 1` readable
/// bytes.
pub unsafe fn c_str<'a>(p: *const c_char, max: usize, what: &str) -> Result<&'a str> {
    let p = non_null(p, what)? as *const u8;
    let mut len = 0;
    // SAFETY: every byte read lies before the terminator or within the first `max + 1` bytes,
    // both readable per the caller's contract.
    while unsafe { p.add(len).read() } != 0 {
        if len == max {
            return Err(Error::new(
                ErrorKind::Para,
                format!("{what} is longer than {max} bytes"),
            ));
        }
        len += 1;
    }
    // SAFETY: the `len` bytes before the terminator were just read, so they are readable and
    // stay borrowed from the caller for the duration of the call.
    let bytes = unsafe { std::slice::from_raw_parts(p, len) };
    std::str::from_utf8(bytes)
        .map_err(|_| Error::new(ErrorKind::Para, format!("{what} is not valid UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::limits::MAX_COMM_NAME_BYTES;

    #[test]
    fn buffer_bytes_at_and_past_the_limit() {
        let u8t = DataType::Uint8;
        let f32t = DataType::Fp32;
        assert_eq!(
            bytes(MAX_BUFFER_BYTES, u8t).unwrap() as u64,
            MAX_BUFFER_BYTES
        );
        assert_eq!(
            bytes(MAX_BUFFER_BYTES + 1, u8t).unwrap_err().kind,
            ErrorKind::Para
        );
        assert_eq!(
            bytes(MAX_BUFFER_BYTES / 4, f32t).unwrap() as u64,
            MAX_BUFFER_BYTES
        );
        assert!(bytes(MAX_BUFFER_BYTES / 4 + 1, f32t).is_err());
        assert!(bytes(u64::MAX, f32t).is_err(), "overflow of count x size");
        assert_eq!(count(MAX_BUFFER_BYTES).unwrap() as u64, MAX_BUFFER_BYTES);
        assert!(count(MAX_BUFFER_BYTES + 1).is_err());
        assert!(count(1 << 60).is_err());
    }

    #[test]
    fn rank_counts_at_and_past_the_limit() {
        assert_eq!(rank_count(MAX_RANKS, "nRanks").unwrap(), MAX_RANKS);
        assert!(rank_count(MAX_RANKS + 1, "nRanks").is_err());
        assert!(rank_count(0, "nRanks").is_err());
        assert!(rank_count(u32::MAX, "nRanks").is_err());
    }

    #[test]
    fn huge_displacements_are_named() {
        let displs = [0u64, 1 << 60];
        // SAFETY: two readable values.
        let e = unsafe { u64_array(displs.as_ptr().cast(), 2, "recvDispls") }.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(e.msg.contains("recvDispls[1]"), "{}", e.msg);
        assert_eq!(
            extent(&[usize::MAX, 0], &[1, 0]).unwrap_err().kind,
            ErrorKind::Para
        );
        assert_eq!(extent(&[4, 2], &[0, 4]).unwrap(), 6);
    }

    #[test]
    fn buffers_may_not_wrap() {
        let top = (usize::MAX - 3) as *const c_void;
        assert_eq!(buffer(top, 3, "b").unwrap(), usize::MAX - 3);
        assert_eq!(buffer(top, 4, "b").unwrap_err().kind, ErrorKind::Para);
        assert_eq!(
            buffer(std::ptr::null(), 1, "b").unwrap_err().kind,
            ErrorKind::Ptr
        );
        assert_eq!(buffer(std::ptr::null(), 0, "b").unwrap(), 0);
    }

    #[test]
    fn c_strings_at_and_past_the_limit() {
        let at = format!("{}\0", "n".repeat(MAX_COMM_NAME_BYTES));
        // SAFETY: NUL-terminated.
        let s = unsafe { c_str(at.as_ptr().cast(), MAX_COMM_NAME_BYTES, "name") }.unwrap();
        assert_eq!(s.len(), MAX_COMM_NAME_BYTES);
        // No terminator within max + 1 bytes: refused after reading exactly max + 1 bytes.
        let past = "n".repeat(MAX_COMM_NAME_BYTES + 1);
        // SAFETY: max + 1 readable bytes.
        let e = unsafe { c_str(past.as_ptr().cast(), MAX_COMM_NAME_BYTES, "name") }.unwrap_err();
        assert!(e.msg.contains("longer than 127"), "{}", e.msg);
        let bad = b"\xff\0";
        // SAFETY: NUL-terminated.
        assert!(unsafe { c_str(bad.as_ptr().cast(), 8, "name") }.is_err());
        assert_eq!(
            // SAFETY: NULL is allowed (and refused).
            unsafe { c_str(std::ptr::null(), 8, "name") }
                .unwrap_err()
                .kind,
            ErrorKind::Ptr
        );
    }
}

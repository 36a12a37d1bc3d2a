//! Copies that bypass the cache on their way to memory (non-temporal stores).
//!
//! A plain store to a line not in cache first reads that line from memory (a read for
//! ownership), so copying `n` bytes into a cold buffer moves `3n` bytes over the memory bus. A
//! streaming store writes the line without reading it: `2n`. Worth it only for destinations
//! that will not be read again soon, e.g. the final output of an operation much larger than
//! the cache; the C library's `memcpy` picks streaming stores by the cache size it is told,
//! which some virtual machines report as hundreds of MiB.

/// Copies below this many bytes are left to `memcpy`: the fence and the unaligned edges cost
/// more than the read for ownership saves.
pub const STREAM_MIN: usize = 64 * 1024;

/// Copies `len` bytes from `src` to `dst` with streaming stores where the target supports
/// them (x86-64), a plain copy elsewhere or below [`STREAM_MIN`]. The stores are fenced before
/// returning, so a release store that follows publishes them like ordinary ones.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the ranges must not
/// overlap.
pub unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= STREAM_MIN {
        // SAFETY: forwarded from this function's contract.
        unsafe { copy_streaming_x86(src, dst, len) };
        return;
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// [`copy_streaming`] at every length (no [`STREAM_MIN`] threshold) and without the fence, for
/// a caller that streams many pieces and then calls [`fence`] once before publishing them.
///
/// # Safety
/// As for [`copy_streaming`].
pub unsafe fn stream_unfenced(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded from this function's contract.
    unsafe {
        stream_body_x86(src, dst, len)
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded from this function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming_x86(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: forwarded from this function's contract.
    unsafe { stream_body_x86(src, dst, len) };
    fence();
}

#[cfg(target_arch = "x86_64")]
unsafe fn stream_body_x86(src: *const u8, dst: *mut u8, len: usize) {
    // Plain copy up to the destination's first line boundary: streaming stores need 16-byte
    // alignment, and a line they fill only in part is flushed from the write-combining buffer
    // partly full (each copy at 16 mod 64, as `malloc` returns large blocks, measured at half
    // the rate).
    let head = dst.align_offset(LINE_BYTES).min(len);
    // SAFETY: head ≤ len bytes of both ranges, per the contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let body = (len - head) / LINE_BYTES * LINE_BYTES;
    let mut i = head;
    while i < head + body {
        // SAFETY: i + 64 ≤ len; dst + i is line-aligned (head aligned it, i - head is a
        // multiple of 64).
        unsafe { store_line(dst.add(i), src.add(i)) };
        i += LINE_BYTES;
    }
    // SAFETY: the tail lies within both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
}

/// Bytes [`store_line`] writes: one cache line.
pub const LINE_BYTES: usize = 64;

/// Stores the [`LINE_BYTES`] bytes at `src` to `dst` with streaming stores (x86-64; a plain
/// copy elsewhere). They are weakly ordered: [`fence`] before publishing them.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of [`LINE_BYTES`] bytes, `dst` 16-byte
/// aligned, and the ranges must not overlap.
#[inline(always)]
pub unsafe fn store_line(dst: *mut u8, src: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        // SAFETY: SSE2 is part of x86-64; loads may be unaligned, `dst` is 16-byte aligned and
        // both hold 64 bytes (the contract).
        unsafe {
            let s = src as *const __m128i;
            let d = dst as *mut __m128i;
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded from this function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, LINE_BYTES)
    };
}

/// Orders the streaming stores made so far before any later store, so a release store that
/// follows publishes them like ordinary ones.
#[inline]
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..STREAM_MIN * 2 + 300)
            .map(|i| (i * 7 + 3) as u8)
            .collect();
        for len in [
            0,
            1,
            63,
            STREAM_MIN - 1,
            STREAM_MIN,
            STREAM_MIN + 77,
            STREAM_MIN * 2,
        ] {
            for (so, d_off) in [(0, 0), (1, 0), (0, 5), (13, 31), (64, 17)] {
                let mut dst = vec![0xAAu8; len + 200];
                // SAFETY: both ranges lie inside their vectors and do not overlap.
                unsafe { copy_streaming(src.as_ptr().add(so), dst.as_mut_ptr().add(d_off), len) };
                assert_eq!(
                    &dst[d_off..d_off + len],
                    &src[so..so + len],
                    "len {len} {so}/{d_off}"
                );
                assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "before, len {len}");
                assert!(
                    dst[d_off + len..].iter().all(|&b| b == 0xAA),
                    "after, len {len}"
                );
            }
        }
    }
}

//! Copies of a few bytes without a `memcpy` call: for a length known only at run time the call
//! costs about as much as the rest of a small operation's send or combine step.

/// The longest copy [`copy_short`] does with word loads and stores; longer ones call `memcpy`.
pub const SHORT_COPY_MAX: usize = 32;

/// Copies `len` bytes; up to [`SHORT_COPY_MAX`] with word loads and stores that overlap where
/// `len` is not a multiple of the word.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`] of `len` bytes.
#[inline(always)]
pub unsafe fn copy_short(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: every access lies within the `len` bytes at `src` and `dst` (the caller's
    // contract): the words overlap when `len` is not a multiple of their size.
    unsafe {
        let word = |at: usize| src.add(at).cast::<u64>().read_unaligned();
        let put = |at: usize, w: u64| dst.add(at).cast::<u64>().write_unaligned(w);
        if (8..=SHORT_COPY_MAX).contains(&len) {
            let (a, z) = (word(0), word(len - 8));
            if len > 16 {
                put(8, word(8));
            }
            if len > 24 {
                put(16, word(16));
            }
            put(0, a);
            put(len - 8, z);
        } else if (4..8).contains(&len) {
            let a = src.cast::<u32>().read_unaligned();
            let z = src.add(len - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(a);
            dst.add(len - 4).cast::<u32>().write_unaligned(z);
        } else {
            std::ptr::copy_nonoverlapping(src, dst, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_exactly_and_nothing_past_it() {
        let src: Vec<u8> = (1..=64).collect();
        for len in 0..=40 {
            let mut dst = [0u8; 48];
            // SAFETY: both buffers hold more than `len` bytes and do not overlap.
            unsafe { copy_short(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..len], "len {len}");
            assert!(
                dst[len..].iter().all(|&b| b == 0),
                "len {len} wrote past the end"
            );
        }
    }
}

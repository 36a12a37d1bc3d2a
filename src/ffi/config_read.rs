//! Reading a caller's `HcclCommConfig` under the size/version header rule: only fields that lie
//! within the caller's declared size are read, so programs built against older headers work.

use std::mem::{offset_of, size_of};

use super::types::HcclCommConfig;
use crate::base::error::{Error, ErrorKind, Result};
use crate::comm::config::Overrides;

const MAGIC: u32 = 0xf0f0_f0f0;
const HEADER: usize = 24;
const NOT_SET: u32 = 0xffff_ffff;

fn field_str(raw: &[u8], what: &str) -> Result<Option<String>> {
    let end = raw
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("{what} is not NUL-terminated")))?;
    if end == 0 {
        return Ok(None);
    }
    String::from_utf8(raw[..end].to_vec())
        .map(Some)
        .map_err(|_| Error::new(ErrorKind::Para, format!("{what} is not valid UTF-8")))
}

/// The bytes of field `$f` of the caller's config, or `None` when the field lies beyond the
/// size the caller declared (an older header).
macro_rules! field {
    ($bytes:ident, $f:ident) => {{
        let off = offset_of!(HcclCommConfig, $f);
        // The field's size, from a pointer to it (no value is needed).
        let len = size_of_field(|c: &HcclCommConfig| &c.$f);
        $bytes.get(off..off + len)
    }};
}

fn size_of_field<T>(_: impl Fn(&HcclCommConfig) -> &T) -> usize {
    size_of::<T>()
}

fn u32_of(b: &[u8]) -> u32 {
    u32::from_ne_bytes(b.try_into().expect("a 4-byte field"))
}

/// Reads the fields the caller set.
///
/// # Safety
/// `p` must point to at least as many readable bytes as its header's `size` field declares
/// (and at least the 24-byte header).
pub unsafe fn read(p: *const HcclCommConfig) -> Result<Overrides> {
    let base = p as *const u8;
    // SAFETY: the 24-byte header is readable (the caller's contract); C need not align it.
    let (size, magic, version) = unsafe {
        (
            base.cast::<usize>().read_unaligned(),
            base.add(8).cast::<u32>().read_unaligned(),
            base.add(12).cast::<u32>().read_unaligned(),
        )
    };
    if magic != MAGIC {
        return Err(Error::new(
            ErrorKind::Para,
            format!("HcclCommConfig has magic word {magic:#x}; call HcclCommConfigInit first"),
        ));
    }
    if size < HEADER {
        return Err(Error::new(
            ErrorKind::Para,
            format!("HcclCommConfig declares size {size}, smaller than its header"),
        ));
    }
    log::debug!("HcclCommConfig version {version}, size {size}");
    // Nothing past our own struct is ever read, whatever a newer caller declares.
    let len = size.min(size_of::<HcclCommConfig>());
    // SAFETY: the caller declared `size` readable bytes at `p`, of which we view at most the
    // size of the struct we know, as plain bytes (no alignment, no reference to the struct,
    // whose tail an older caller's struct may lack).
    let bytes = unsafe { std::slice::from_raw_parts(base, len) };
    let mut ov = Overrides::default();
    let set = |v: u32| (v != NOT_SET).then_some(v);
    if let Some(b) = field!(bytes, hcclBufferSize) {
        ov.buffer_mb = set(u32_of(b));
    }
    if let Some(b) = field!(bytes, hcclDeterministic) {
        ov.deterministic = set(u32_of(b));
    }
    if let Some(b) = field!(bytes, hcclCommName) {
        ov.name = field_str(b, "hcclCommName")?;
    }
    if let Some(b) = field!(bytes, hcclUdi) {
        ov.udi = field_str(b, "hcclUdi")?;
    }
    if let Some(b) = field!(bytes, hcclOpExpansionMode) {
        ov.op_expansion_mode = u32_of(b);
    }
    if let Some(b) = field!(bytes, hcclWorldRankID) {
        ov.world_rank_id = u32_of(b);
    }
    if let Some(b) = field!(bytes, hcclJobID) {
        ov.job_id = u64::from_ne_bytes(b.try_into().expect("an 8-byte field"));
    }
    if let Some(b) = field!(bytes, hcclExecTimeOut) {
        if u32_of(b) != NOT_SET {
            ov.exec_timeout_s = Some(u32_of(b) as i32);
        }
    }
    if let Some(b) = field!(bytes, hcclAlgo) {
        ov.algo = field_str(b, "hcclAlgo")?;
    }
    if let Some(b) = field!(bytes, hcclBufferName) {
        ov.buffer_name = field_str(b, "hcclBufferName")?;
    }
    Ok(ov)
}

//! Reading a caller's `HcclCommConfig` under the size/version header rule: only fields that lie
//! within the caller's declared size are read, so programs built against older headers work.

use std::os::raw::c_char;

use super::types::HcclCommConfig;
use crate::base::error::{Error, ErrorKind, Result};
use crate::comm::config::Overrides;

const MAGIC: u32 = 0xf0f0_f0f0;
const HEADER: usize = 24;
const NOT_SET: u32 = 0xffff_ffff;

fn field_str(bytes: &[c_char], what: &str) -> Result<Option<String>> {
    let raw: Vec<u8> = bytes.iter().map(|&c| c as u8).collect();
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

/// Reads the fields the caller set.
///
/// # Safety
/// `p` must point to at least as many readable bytes as its header's `size` field declares
/// (and at least the 24-byte header).
pub unsafe fn read(p: *const HcclCommConfig) -> Result<Overrides> {
    let base = p as *const u8;
    let size = std::ptr::read_unaligned(base as *const usize);
    let magic = std::ptr::read_unaligned(base.add(8) as *const u32);
    let version = std::ptr::read_unaligned(base.add(12) as *const u32);
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
    let cfg = &*p;
    let has = |off: usize, len: usize| off + len <= size;
    let mut ov = Overrides::default();
    let u = |v: u32| (v != NOT_SET).then_some(v);
    if has(24, 4) {
        ov.buffer_mb = u(cfg.hcclBufferSize);
    }
    if has(28, 4) {
        ov.deterministic = u(cfg.hcclDeterministic);
    }
    if has(32, 128) {
        ov.name = field_str(&cfg.hcclCommName, "hcclCommName")?;
    }
    if has(160, 128) {
        ov.udi = field_str(&cfg.hcclUdi, "hcclUdi")?;
    }
    if has(288, 4) {
        ov.op_expansion_mode = cfg.hcclOpExpansionMode;
    }
    if has(300, 4) {
        ov.world_rank_id = cfg.hcclWorldRankID;
    }
    if has(304, 8) {
        ov.job_id = cfg.hcclJobID;
    }
    if has(316, 4) && cfg.hcclExecTimeOut as u32 != NOT_SET {
        ov.exec_timeout_s = Some(cfg.hcclExecTimeOut);
    }
    if has(320, 1600) {
        ov.algo = field_str(&cfg.hcclAlgo, "hcclAlgo")?;
    }
    if has(2098, 128) {
        ov.buffer_name = field_str(&cfg.hcclBufferName, "hcclBufferName")?;
    }
    Ok(ov)
}

//! Where ranks live: which host and which process each rank belongs to.
//!
//! Ranks in the same process exchange through memory; ranks on the same host could use shared
//! memory; ranks on different hosts use the network. Identity is decided once per process.

use parking_lot::Mutex;
use std::hash::Hasher;

/// The location of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Host identity (hash of the host's boot id, name and network namespace, or `HCCL_HOST_ID`).
    pub host: u64,
    /// Process identity (random per process, so it never repeats across hosts or restarts).
    pub process: u128,
}

/// 64-bit FNV-1a, a stable (cross-process, cross-build) hash.
#[derive(Clone, Copy, Debug)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv64 {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Hashes a byte string with FNV-1a.
pub fn fnv64(bytes: &[u8]) -> u64 {
    let mut h = Fnv64::default();
    h.write(bytes);
    h.finish()
}

/// Fills a buffer from the kernel's random source.
pub fn random_bytes(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: writes at most the remaining length into buf.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // getrandom cannot fail on supported kernels; mix time and pid as a last resort.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let v = t ^ ((std::process::id() as u128) << 64);
            for (i, b) in buf[filled..].iter_mut().enumerate() {
                *b = (v >> ((i % 16) * 8)) as u8;
            }
            return;
        }
    }
}

/// A random 128-bit value.
pub fn random_u128() -> u128 {
    let mut b = [0u8; 16];
    random_bytes(&mut b);
    u128::from_le_bytes(b)
}

fn compute_host_id(override_id: Option<&str>) -> u64 {
    if let Some(id) = override_id {
        return fnv64(id.as_bytes());
    }
    let mut h = Fnv64::default();
    if let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        h.write(boot.trim().as_bytes());
    }
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most len bytes.
    if unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0 {
        h.write(&name);
    }
    // Network namespaces model separate hosts in tests: include ours.
    if let Ok(ns) = std::fs::read_link("/proc/self/ns/net") {
        h.write(ns.to_string_lossy().as_bytes());
    }
    h.finish()
}

/// This process's location (`host_override` is `HCCL_HOST_ID`). Computed once per process;
/// a forked child gets its own process identity, so it is never mistaken for its parent.
pub fn local(host_override: Option<&str>) -> Location {
    static LOC: Mutex<Option<(u32, Location)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut g = LOC.lock();
    match *g {
        Some((p, loc)) if p == pid => loc,
        _ => {
            let loc = Location {
                host: compute_host_id(host_override),
                process: random_u128(),
            };
            *g = Some((pid, loc));
            loc
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_known_value() {
        assert_eq!(fnv64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn host_override_is_stable() {
        assert_eq!(compute_host_id(Some("h1")), compute_host_id(Some("h1")));
        assert_ne!(compute_host_id(Some("h1")), compute_host_id(Some("h2")));
    }

    #[test]
    fn random_differs() {
        assert_ne!(random_u128(), random_u128());
    }
}

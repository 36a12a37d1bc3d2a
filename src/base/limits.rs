//! Hard bounds on every input the library accepts, in one place.
//!
//! Values beyond these are rejected with `HCCL_E_PARA` before anything is allocated, on the rank
//! that received them and on the root that serves them, so one bad argument can fail a job's
//! initialisation but never exhaust another rank's process. Each bound is tested at its value
//! and one past it.

/// Most ranks a communicator may have: `nRanks` of `HcclCommInitRootInfo`, `ndev` of
/// `HcclCommInitAll`, the ranks of a rank table, the world size a launcher announces, and the
/// labels of `HCCL_RANK_HOST_MAP`.
pub const MAX_RANKS: u32 = 65_536;

/// Largest buffer one operation may describe, in bytes: `count` × element size, and for the
/// V forms (displacement + count) × element size, counts and displacements being read as
/// unsigned 64-bit numbers of elements. 2^46 bytes (64 TiB) is more than any host's memory yet
/// far below the top of the x86-64 and AArch64 user address spaces (2^47 and 2^48), so a buffer
/// address plus an accepted extent never wraps: a displacement near 2^60 elements is an
/// `HCCL_E_PARA`, not a wild pointer.
pub const MAX_BUFFER_BYTES: u64 = 1 << 46;

/// Most items of one `HcclBatchSendRecv` call: a send and a receive for every peer of the
/// largest communicator (a call at the bound runs in about a second).
pub const MAX_BATCH_ITEMS: u32 = 2 * MAX_RANKS;

/// Longest communicator name in bytes, without the terminating NUL (`COMM_NAME_MAX_LENGTH` − 1):
/// `hcclCommName`, and the names given to `HcclCommGetHandleWithName` and `HcclCommGetStatus`.
pub const MAX_COMM_NAME_BYTES: usize = 127;

/// Longest file path in bytes, without the terminating NUL (Linux `PATH_MAX` − 1): the rank
/// table path of `HcclCommInitClusterInfo`, `HCCL_WHITELIST_FILE` and `HCCL_TRACE_FILE`.
pub const MAX_PATH_BYTES: usize = 4095;

/// Longest algorithm string in bytes (`HCCL_COMM_ALGO_MAX_LENGTH` − 1): `HCCL_ALGO` and
/// `hcclAlgo`.
pub const MAX_ALGO_BYTES: usize = 1599;

/// Longest `HCCL_RANK_HOST_MAP` value in bytes: room for [`MAX_RANKS`] labels of 15 bytes.
pub const MAX_RANK_HOST_MAP_BYTES: usize = 16 * MAX_RANKS as usize;

/// Longest value of every other environment variable the library reads, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 4096;

/// Largest rank table file in bytes (32 MiB: about 500 bytes for each of [`MAX_RANKS`]
/// devices). A larger file is rejected after reading one byte past this, never more.
pub const MAX_RANK_TABLE_BYTES: u64 = 32 << 20;

/// Deepest nesting of JSON arrays and objects in a rank table (the format itself uses 5; the
/// rest is room for extra fields of vendor tables, which are ignored).
pub const MAX_RANK_TABLE_DEPTH: usize = 32;

/// Most ranks a single message lists by number (longer lists end with "... N more"), so that
/// log lines stay short whatever the rank count.
pub const MAX_REPORTED_RANKS: usize = 16;

/// Longest text (an error reason) sent to or accepted from another rank over the wire.
pub const MAX_WIRE_MESSAGE: usize = 4096;

/// The bound on the value of environment variable `var`, in bytes.
pub fn env_value_bytes(var: &str) -> usize {
    match var {
        "HCCL_ALGO" => MAX_ALGO_BYTES,
        "HCCL_WHITELIST_FILE" | "HCCL_TRACE_FILE" => MAX_PATH_BYTES,
        "HCCL_RANK_HOST_MAP" => MAX_RANK_HOST_MAP_BYTES,
        _ => MAX_ENV_VALUE_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::env::EnvConfig;
    use crate::base::error::{Error, ErrorKind};

    fn parse(vars: &[(&str, &str)]) -> Result<EnvConfig, Error> {
        EnvConfig::from_lookup(|k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        })
    }

    /// `prefix` followed by `pad` characters up to exactly `len` bytes.
    fn padded(prefix: &str, pad: char, len: usize) -> String {
        let mut s = prefix.to_string();
        while s.len() < len {
            s.push(pad);
        }
        s
    }

    fn too_long(vars: &[(&str, &str)], var: &str) {
        let e = parse(vars).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg.contains(var) && e.msg.contains("bytes long"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn algo_and_path_lengths() {
        let at = padded("level0:NA;level1:ring", ';', MAX_ALGO_BYTES);
        assert_eq!(
            parse(&[("HCCL_ALGO", &at)]).unwrap().algo.unwrap().len(),
            MAX_ALGO_BYTES
        );
        let past = padded("level0:NA;level1:ring", ';', MAX_ALGO_BYTES + 1);
        too_long(&[("HCCL_ALGO", &past)], "HCCL_ALGO");

        let path_at = padded("/tmp/", 'w', MAX_PATH_BYTES);
        let on = ("HCCL_WHITELIST_DISABLE", "0");
        let c = parse(&[on, ("HCCL_WHITELIST_FILE", &path_at)]).unwrap();
        assert_eq!(c.whitelist_file.unwrap().as_os_str().len(), MAX_PATH_BYTES);
        // The length is the error, not "HCCL_WHITELIST_FILE is not set".
        let path_past = padded("/tmp/", 'w', MAX_PATH_BYTES + 1);
        too_long(
            &[on, ("HCCL_WHITELIST_FILE", &path_past)],
            "HCCL_WHITELIST_FILE",
        );
    }

    #[test]
    fn other_values_at_and_past_their_bound() {
        let at = padded("gamma=4e9", ';', MAX_ENV_VALUE_BYTES);
        assert!(parse(&[("HCCL_COST_MODEL", &at)]).is_ok());
        let past = padded("gamma=4e9", ';', MAX_ENV_VALUE_BYTES + 1);
        too_long(&[("HCCL_COST_MODEL", &past)], "HCCL_COST_MODEL");
        let id_past = "h".repeat(MAX_ENV_VALUE_BYTES + 1);
        too_long(&[("HCCL_HOST_ID", &id_past)], "HCCL_HOST_ID");
    }

    #[test]
    fn rank_host_map_labels_and_bytes() {
        let labels = |n: u32, label: &str| vec![label; n as usize].join(",");
        let at = labels(MAX_RANKS, "a");
        let c = parse(&[("HCCL_RANK_HOST_MAP", &at)]).unwrap();
        assert_eq!(c.rank_host_map.unwrap().len(), MAX_RANKS as usize);
        let e = parse(&[("HCCL_RANK_HOST_MAP", &labels(MAX_RANKS + 1, "a"))]).unwrap_err();
        assert!(e.msg.contains("65537 labels"), "{}", e.msg);
        // Bytes: the longest labels that fit, then one byte more.
        let long = padded(
            &labels(MAX_RANKS, "abcdefghijklmno"),
            ' ',
            MAX_RANK_HOST_MAP_BYTES,
        );
        assert_eq!(long.len(), MAX_RANK_HOST_MAP_BYTES);
        assert!(parse(&[("HCCL_RANK_HOST_MAP", &long)]).is_ok());
        let past = format!("{long} ");
        too_long(&[("HCCL_RANK_HOST_MAP", &past)], "HCCL_RANK_HOST_MAP");
    }
}

//! HCCL rank table (the JSON file given to `HcclCommInitClusterInfo`), version "1.0".
//!
//! ```text
//! { "status": "completed", "version": "1.0", "server_count": "2",
//!   "server_list": [ { "server_id": "node_0", "host_ip": "10.0.0.1",
//!      "device": [ { "device_id": "0", "device_ip": "192.168.1.8",
//!                    "device_port": "16667", "rank_id": "0" }, ... ] }, ... ] }
//! ```
//!
//! The format writes every value as a string; numeric fields also accept JSON numbers because
//! hand-written tables often use them. Unknown keys are ignored so tables produced for the
//! vendor library (which carry extra fields) load unchanged. A key repeated in one object is an
//! error. The file may be at most [`MAX_RANK_TABLE_BYTES`] long, nest at most
//! [`MAX_RANK_TABLE_DEPTH`] deep and describe at most [`MAX_RANKS`] ranks.

use std::io::Read;
use std::net::IpAddr;
use std::path::Path;

use serde_json::Value as Json;

use crate::base::error::Result;
use crate::base::limits::{MAX_RANKS, MAX_RANK_TABLE_BYTES, MAX_RANK_TABLE_DEPTH};
use crate::base::strict_json;

/// A validated rank table.
///
/// Invariants established by [`RankTable::parse`]: at least one server, every server has at
/// least one device, rank ids are exactly `0..rank_count()`, and each server's ranks form one
/// consecutive range in device order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankTable {
    /// Servers in document order.
    pub servers: Vec<ServerEntry>,
    /// `ranks[r]` = (server index, device index) of rank `r`.
    ranks: Vec<(usize, usize)>,
}

/// One server (host) of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerEntry {
    /// `server_id`, an opaque host name/identifier.
    pub server_id: String,
    /// `host_ip`, if given.
    pub host_ip: Option<IpAddr>,
    /// Devices (one per rank) in document order.
    pub devices: Vec<DeviceEntry>,
}

/// One device, i.e. one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEntry {
    /// `device_id` (the device ordinal on its server).
    pub device_id: u32,
    /// `device_ip`: address this rank listens on, if given.
    pub device_ip: Option<IpAddr>,
    /// `device_port`: port this rank listens on, if given (never 0).
    pub device_port: Option<u16>,
    /// `rank_id`, the global rank.
    pub rank_id: u32,
}

impl RankTable {
    /// Parses and validates a rank table document.
    ///
    /// Every failure is `ErrorKind::Para` with a message naming the offending field as a path,
    /// e.g. `server_list[1].device[0].rank_id`.
    pub fn parse(text: &str) -> Result<RankTable> {
        let doc =
            strict_json::parse(text, MAX_RANK_TABLE_DEPTH).map_err(|e| e.context("rank table"))?;
        if doc.as_object().is_none() {
            crate::bail!(Para, "rank table: the top level must be a JSON object");
        }

        let status = req_str(&doc, "status", "")?;
        if status != "completed" {
            crate::bail!(
                Para,
                "rank table: status is {status:?}, expected \"completed\""
            );
        }
        let version = req_str(&doc, "version", "")?;
        if version != "1.0" {
            crate::bail!(
                Para,
                "rank table: version {version:?} is not supported (expected \"1.0\")"
            );
        }
        let server_count = req_uint(&doc, "server_count", "")?;
        let list = match required(&doc, "server_list", "")? {
            Json::Array(items) => items,
            other => crate::bail!(
                Para,
                "rank table: server_list must be an array, found {}",
                describe(other)
            ),
        };
        if list.is_empty() {
            crate::bail!(Para, "rank table: server_list is empty");
        }
        if server_count != list.len() as u64 {
            crate::bail!(
                Para,
                "rank table: server_count is {server_count} but server_list has {} entries",
                list.len()
            );
        }

        let mut servers = Vec::with_capacity(list.len());
        for (si, entry) in list.iter().enumerate() {
            servers.push(parse_server(entry, si)?);
        }
        let ranks = index_ranks(&servers)?;
        Ok(RankTable { servers, ranks })
    }

    /// Reads and parses the rank table at `path`.
    ///
    /// An unreadable file is `ErrorKind::OpenFile`; content errors, and a file longer than
    /// [`MAX_RANK_TABLE_BYTES`] (of which one byte past the bound is read, no more), are
    /// `ErrorKind::Para`. Both messages name the path.
    pub fn load(path: &Path) -> Result<RankTable> {
        let unreadable = |e: std::io::Error| {
            crate::err!(OpenFile, "cannot read rank table {}: {e}", path.display())
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_RANK_TABLE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_RANK_TABLE_BYTES {
            crate::bail!(
                Para,
                "rank table {} is larger than {MAX_RANK_TABLE_BYTES} bytes",
                path.display()
            );
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            crate::err!(
                Para,
                "rank table {} is not valid UTF-8 (byte offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        RankTable::parse(&text).map_err(|e| e.context(path.display()))
    }

    /// Number of ranks (total devices over all servers).
    pub fn rank_count(&self) -> u32 {
        // Cannot truncate: parse rejects tables with more than MAX_RANKS ranks.
        self.ranks.len() as u32
    }

    /// The server and device of `rank`, or `None` if out of range.
    pub fn rank(&self, rank: u32) -> Option<(&ServerEntry, &DeviceEntry)> {
        let &(si, di) = self.ranks.get(rank as usize)?;
        // `servers` is public, so look up defensively rather than index.
        let server = self.servers.get(si)?;
        Some((server, server.devices.get(di)?))
    }

    /// Index into [`RankTable::servers`] of the server hosting `rank`.
    pub fn server_index_of(&self, rank: u32) -> Option<usize> {
        self.ranks.get(rank as usize).map(|&(si, _)| si)
    }

    /// Stable 128-bit fingerprint of the table's semantic content (used to derive a rendezvous
    /// key shared by all ranks reading the same table); same for semantically identical tables
    /// regardless of whitespace/key order.
    ///
    /// It hashes the parsed values (so `"0"` and `0` agree, and ignored keys do not count) in
    /// document order of servers and devices, with an explicitly specified hash (FNV-1a 128)
    /// over a length-prefixed encoding, so it is identical across processes, builds and
    /// platforms. It is not cryptographic.
    pub fn fingerprint(&self) -> u128 {
        let mut h = Fnv128::new();
        h.bytes(b"hccl-rank-table-1.0");
        h.u64(self.servers.len() as u64);
        for server in &self.servers {
            h.u64(server.server_id.len() as u64);
            h.bytes(server.server_id.as_bytes());
            h.ip(server.host_ip);
            h.u64(server.devices.len() as u64);
            for dev in &server.devices {
                h.u64(dev.device_id.into());
                h.ip(dev.device_ip);
                // 0 is never a valid port, so it can encode "absent".
                h.u64(dev.device_port.map_or(0, u64::from));
                h.u64(dev.rank_id.into());
            }
        }
        h.0
    }
}

fn parse_server(entry: &Json, si: usize) -> Result<ServerEntry> {
    let at = format!("server_list[{si}]");
    if entry.as_object().is_none() {
        crate::bail!(
            Para,
            "rank table: {at} must be an object, found {}",
            describe(entry)
        );
    }
    let server_id = req_str(entry, "server_id", &at)?;
    if server_id.is_empty() {
        crate::bail!(Para, "rank table: {at}.server_id is empty");
    }
    let host_ip = opt_ip(entry, "host_ip", &at)?;
    let list = match required(entry, "device", &at)? {
        Json::Array(items) => items,
        other => crate::bail!(
            Para,
            "rank table: {at}.device must be an array, found {}",
            describe(other)
        ),
    };
    if list.is_empty() {
        crate::bail!(
            Para,
            "rank table: {at} ({server_id:?}) has an empty device list"
        );
    }
    let mut devices: Vec<DeviceEntry> = Vec::with_capacity(list.len());
    for (di, dev) in list.iter().enumerate() {
        let dat = format!("{at}.device[{di}]");
        if dev.as_object().is_none() {
            crate::bail!(
                Para,
                "rank table: {dat} must be an object, found {}",
                describe(dev)
            );
        }
        let device = DeviceEntry {
            device_id: req_u32(dev, "device_id", &dat)?,
            device_ip: opt_ip(dev, "device_ip", &dat)?,
            device_port: opt_port(dev, "device_port", &dat)?,
            rank_id: req_u32(dev, "rank_id", &dat)?,
        };
        // A server's ranks must be one consecutive block in device order: intra-server
        // algorithms derive local rank = rank - first rank of the server.
        if let Some(prev) = devices.last() {
            if Some(device.rank_id) != prev.rank_id.checked_add(1) {
                crate::bail!(
                    Para,
                    "rank table: {dat}.rank_id is {} but the previous device of this server has \
                     rank {}; a server's ranks must be consecutive in device order",
                    device.rank_id,
                    prev.rank_id
                );
            }
        }
        devices.push(device);
    }
    Ok(ServerEntry {
        server_id: server_id.to_owned(),
        host_ip,
        devices,
    })
}

/// Builds rank -> (server, device), checking the rank ids are exactly `0..N`.
fn index_ranks(servers: &[ServerEntry]) -> Result<Vec<(usize, usize)>> {
    let total: usize = servers.iter().map(|s| s.devices.len()).sum();
    if total > MAX_RANKS as usize {
        crate::bail!(
            Para,
            "rank table: {total} ranks is more than the {MAX_RANKS} a communicator may have"
        );
    }
    let mut slots: Vec<Option<(usize, usize)>> = vec![None; total];
    for (si, server) in servers.iter().enumerate() {
        for (di, dev) in server.devices.iter().enumerate() {
            let r = dev.rank_id as usize;
            let Some(slot) = slots.get_mut(r) else {
                crate::bail!(
                    Para,
                    "rank table: server_list[{si}].device[{di}].rank_id {r} is out of range: \
                     the table has {total} ranks, so rank ids must be 0..{}",
                    total - 1
                );
            };
            if let Some((psi, pdi)) = *slot {
                crate::bail!(
                    Para,
                    "rank table: rank_id {r} appears twice, at server_list[{psi}].device[{pdi}] \
                     and server_list[{si}].device[{di}]"
                );
            }
            *slot = Some((si, di));
        }
    }
    // N unique ids all below N cover 0..N, so every slot is filled.
    Ok(slots.into_iter().flatten().collect())
}

/// Short rendering of a value for error messages.
fn describe(v: &Json) -> String {
    let text = v.to_string();
    if text.chars().count() > 40 {
        let head: String = text.chars().take(37).collect();
        format!("{head}...")
    } else {
        text
    }
}

/// `at.key` for messages (`at` empty at top level).
fn path(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

fn required<'a>(obj: &'a Json, key: &str, at: &str) -> Result<&'a Json> {
    obj.get(key)
        .ok_or_else(|| crate::err!(Para, "rank table: missing {}", path(at, key)))
}

fn req_str<'a>(obj: &'a Json, key: &str, at: &str) -> Result<&'a str> {
    let v = required(obj, key, at)?;
    v.as_str().ok_or_else(|| {
        crate::err!(
            Para,
            "rank table: {} must be a string, found {}",
            path(at, key),
            describe(v)
        )
    })
}

/// A non-negative integer written as a decimal string (the format's convention) or as a JSON
/// number.
fn uint_value(v: &Json, key: &str, at: &str) -> Result<u64> {
    let parsed = match v {
        // Digits only: `str::parse` would also take "+5", which no generator writes.
        Json::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        Json::Number(n) => n.as_u64().or_else(|| {
            // Integral floats (`1.0`) count; the bound keeps the conversion exact.
            n.as_f64()
                .filter(|x| x.fract() == 0.0 && (0.0..9.007_199_254_740_992e15).contains(x))
                .map(|x| x as u64)
        }),
        _ => None,
    };
    parsed.ok_or_else(|| {
        crate::err!(
            Para,
            "rank table: {} must be a non-negative integer (string or number), found {}",
            path(at, key),
            describe(v)
        )
    })
}

fn req_uint(obj: &Json, key: &str, at: &str) -> Result<u64> {
    uint_value(required(obj, key, at)?, key, at)
}

fn req_u32(obj: &Json, key: &str, at: &str) -> Result<u32> {
    let v = req_uint(obj, key, at)?;
    u32::try_from(v).map_err(|_| {
        crate::err!(
            Para,
            "rank table: {} is {v}, larger than {}",
            path(at, key),
            u32::MAX
        )
    })
}

/// Optional fields: an empty string counts as absent, since generators commonly emit `""`
/// placeholders for fields that do not apply (e.g. `device_ip` on a single server).
fn optional<'a>(obj: &'a Json, key: &str) -> Option<&'a Json> {
    obj.get(key)
        .filter(|v| !v.is_null() && v.as_str() != Some(""))
}

fn opt_ip(obj: &Json, key: &str, at: &str) -> Result<Option<IpAddr>> {
    let Some(v) = optional(obj, key) else {
        return Ok(None);
    };
    match v.as_str().map(str::parse::<IpAddr>) {
        Some(Ok(ip)) => Ok(Some(ip)),
        _ => crate::bail!(
            Para,
            "rank table: {} must be an IPv4 or IPv6 address string, found {}",
            path(at, key),
            describe(v)
        ),
    }
}

fn opt_port(obj: &Json, key: &str, at: &str) -> Result<Option<u16>> {
    let Some(v) = optional(obj, key) else {
        return Ok(None);
    };
    let port = uint_value(v, key, at)?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(Some(p)),
        _ => crate::bail!(
            Para,
            "rank table: {} is {port}, must be in 1..=65535",
            path(at, key)
        ),
    }
}

/// FNV-1a, 128-bit variant: tiny, fully specified, and stable forever, unlike
/// `std::collections::hash_map::DefaultHasher` whose algorithm may change between Rust releases.
struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    fn new() -> Fnv128 {
        Fnv128(Self::OFFSET)
    }

    fn bytes(&mut self, data: &[u8]) {
        for &b in data {
            self.0 ^= u128::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn ip(&mut self, ip: Option<IpAddr>) {
        match ip {
            None => self.bytes(&[0]),
            Some(IpAddr::V4(a)) => {
                self.bytes(&[4]);
                self.bytes(&a.octets());
            }
            Some(IpAddr::V6(a)) => {
                self.bytes(&[6]);
                self.bytes(&a.octets());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::ErrorKind;

    const SINGLE: &str = r#"{
        "status": "completed", "version": "1.0", "server_count": "1",
        "server_list": [ { "server_id": "node_0",
            "device": [
                { "device_id": "0", "rank_id": "0" },
                { "device_id": "1", "rank_id": "1" },
                { "device_id": "2", "rank_id": "2" },
                { "device_id": "3", "rank_id": "3" } ] } ] }"#;

    const TWO: &str = r#"{
        "status": "completed", "version": "1.0", "server_count": "2",
        "server_list": [
          { "server_id": "node_0", "host_ip": "10.0.0.1",
            "device": [
              { "device_id": "0", "device_ip": "192.168.1.8", "device_port": "16667", "rank_id": "0" },
              { "device_id": "1", "device_ip": "192.168.1.9", "device_port": "16668", "rank_id": "1" } ] },
          { "server_id": "node_1", "host_ip": "fe80::1",
            "device": [
              { "device_id": "0", "device_ip": "192.168.2.8", "device_port": "16667", "rank_id": "2" },
              { "device_id": "1", "device_ip": "192.168.2.9", "device_port": "16668", "rank_id": "3" } ] } ] }"#;

    /// Parses `text` expecting a Para error whose message contains every needle.
    fn fails(text: &str, needles: &[&str]) {
        let e = RankTable::parse(text).expect_err(text);
        assert_eq!(e.kind, ErrorKind::Para, "{}", e.msg);
        for n in needles {
            assert!(e.msg.contains(n), "message {:?} lacks {n:?}", e.msg);
        }
    }

    /// `TWO` with one textual substitution (which must apply).
    fn two_with(from: &str, to: &str) -> String {
        assert!(TWO.contains(from), "{from}");
        TWO.replacen(from, to, 1)
    }

    #[test]
    fn single_server_without_device_ip() {
        let t = RankTable::parse(SINGLE).unwrap();
        assert_eq!(t.rank_count(), 4);
        assert_eq!(t.servers.len(), 1);
        assert_eq!(t.servers[0].server_id, "node_0");
        assert_eq!(t.servers[0].host_ip, None);
        for r in 0..4 {
            let (s, d) = t.rank(r).unwrap();
            assert_eq!(s.server_id, "node_0");
            assert_eq!((d.device_id, d.rank_id), (r, r));
            assert_eq!((d.device_ip, d.device_port), (None, None));
            assert_eq!(t.server_index_of(r), Some(0));
        }
        assert!(t.rank(4).is_none());
        assert_eq!(t.server_index_of(4), None);
    }

    #[test]
    fn two_servers_with_device_ip_and_port() {
        let t = RankTable::parse(TWO).unwrap();
        assert_eq!(t.rank_count(), 4);
        assert_eq!(t.servers[0].host_ip, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(t.servers[1].host_ip, Some("fe80::1".parse().unwrap()));
        let (s, d) = t.rank(3).unwrap();
        assert_eq!(s.server_id, "node_1");
        assert_eq!(d.device_id, 1);
        assert_eq!(d.device_ip, Some("192.168.2.9".parse().unwrap()));
        assert_eq!(d.device_port, Some(16668));
        assert_eq!(t.server_index_of(1), Some(0));
        assert_eq!(t.server_index_of(2), Some(1));
    }

    #[test]
    fn servers_need_not_be_listed_in_rank_order() {
        let text = r#"{"status":"completed","version":"1.0","server_count":2,"server_list":[
            {"server_id":"b","device":[{"device_id":0,"rank_id":2},{"device_id":1,"rank_id":3}]},
            {"server_id":"a","device":[{"device_id":0,"rank_id":0},{"device_id":1,"rank_id":1}]}]}"#;
        let t = RankTable::parse(text).unwrap();
        assert_eq!(t.server_index_of(0), Some(1));
        assert_eq!(t.server_index_of(3), Some(0));
        assert_eq!(t.rank(2).unwrap().0.server_id, "b");
    }

    #[test]
    fn numbers_empty_strings_and_unknown_keys_accepted() {
        let text = r#"{"status":"completed","version":"1.0","server_count":1,"extra":[1,{}],
            "server_list":[{"server_id":"n","host_ip":"","pod":"x","device":[
              {"device_id":7,"rank_id":0,"device_ip":"","device_port":""},
              {"device_id":"8","rank_id":1.0,"device_port":65535,"note":null}]}]}"#;
        let t = RankTable::parse(text).unwrap();
        assert_eq!(t.servers[0].host_ip, None);
        assert_eq!(t.servers[0].devices[0].device_id, 7);
        assert_eq!(t.servers[0].devices[0].device_port, None);
        assert_eq!(t.servers[0].devices[1].device_port, Some(65535));
        assert_eq!(t.servers[0].devices[1].rank_id, 1);
    }

    #[test]
    fn top_level_validation() {
        fails("{", &["rank table", "JSON parse error", "line 1"]);
        fails("[]", &["top level must be a JSON object"]);
        fails(
            &TWO.replace("\"completed\"", "\"pending\""),
            &["status", "pending"],
        );
        fails(
            &TWO.replace("\"status\": \"completed\",", ""),
            &["missing status"],
        );
        fails(
            &TWO.replace("\"status\": \"completed\"", "\"status\": 1"),
            &["status must be a string"],
        );
        fails(&two_with("\"1.0\"", "\"1.1\""), &["version", "1.1"]);
        fails(&two_with("\"version\": \"1.0\",", ""), &["missing version"]);
        fails(
            &two_with("\"server_count\": \"2\"", "\"server_count\": \"3\""),
            &["server_count is 3", "2 entries"],
        );
        fails(
            &two_with("\"server_count\": \"2\"", "\"server_count\": \"two\""),
            &["server_count must be a non-negative integer", "\"two\""],
        );
        fails(
            &two_with("\"server_count\": \"2\"", "\"server_count\": -2"),
            &["server_count must be"],
        );
        fails(
            &two_with("\"server_count\": \"2\"", "\"server_count\": \"+2\""),
            &["server_count must be"],
        );
        fails(
            &two_with("\"server_count\": \"2\",", ""),
            &["missing server_count"],
        );
        fails(
            r#"{"status":"completed","version":"1.0","server_count":"0","server_list":[]}"#,
            &["server_list is empty"],
        );
        fails(
            r#"{"status":"completed","version":"1.0","server_count":"1","server_list":{}}"#,
            &["server_list must be an array"],
        );
        fails(
            r#"{"status":"completed","version":"1.0","server_count":"1"}"#,
            &["missing server_list"],
        );
    }

    #[test]
    fn server_and_device_validation() {
        fails(
            &two_with("\"server_id\": \"node_1\",", ""),
            &["missing server_list[1].server_id"],
        );
        fails(
            &two_with("\"node_1\"", "\"\""),
            &["server_list[1].server_id is empty"],
        );
        fails(
            &two_with("\"fe80::1\"", "\"not-an-ip\""),
            &["server_list[1].host_ip", "not-an-ip"],
        );
        fails(
            &two_with("\"192.168.2.9\"", "\"192.168.2.300\""),
            &["server_list[1].device[1].device_ip", "IPv4 or IPv6"],
        );
        fails(
            &two_with("\"16668\"", "\"0\""),
            &["server_list[0].device[1].device_port is 0", "1..=65535"],
        );
        fails(
            &two_with("\"16668\"", "\"65536\""),
            &["server_list[0].device[1].device_port is 65536"],
        );
        fails(
            &two_with("\"16668\"", "\"port\""),
            &["server_list[0].device[1].device_port must be"],
        );
        fails(
            &two_with("\"device_id\": \"1\"", "\"device_id\": \"x\""),
            &["server_list[0].device[1].device_id"],
        );
        fails(
            &two_with("\"device_id\": \"1\",", ""),
            &["missing server_list[0].device[1].device_id"],
        );
        fails(
            &two_with("\"device_id\": \"1\"", "\"device_id\": 4294967296"),
            &["device_id is 4294967296"],
        );
        fails(
            &two_with(", \"rank_id\": \"3\"", ""),
            &["missing server_list[1].device[1].rank_id"],
        );
        fails(
            &two_with("\"rank_id\": \"3\"", "\"rank_id\": 3.5"),
            &["server_list[1].device[1].rank_id must be"],
        );
        let text = r#"{"status":"completed","version":"1.0","server_count":"1",
            "server_list":[{"server_id":"n","device":[]}]}"#;
        fails(text, &["server_list[0]", "empty device list"]);
        let text = r#"{"status":"completed","version":"1.0","server_count":"1",
            "server_list":[{"server_id":"n"}]}"#;
        fails(text, &["missing server_list[0].device"]);
        let text = r#"{"status":"completed","version":"1.0","server_count":"1",
            "server_list":[{"server_id":"n","device":[1]}]}"#;
        fails(text, &["server_list[0].device[0] must be an object"]);
        let text =
            r#"{"status":"completed","version":"1.0","server_count":"1","server_list":["n"]}"#;
        fails(text, &["server_list[0] must be an object"]);
    }

    #[test]
    fn rank_id_validation() {
        // Gap: ranks 0,1,3,4 (4 is out of range for N=4).
        let gap = TWO
            .replacen("\"rank_id\": \"3\"", "\"rank_id\": \"4\"", 1)
            .replacen("\"rank_id\": \"2\"", "\"rank_id\": \"3\"", 1);
        fails(&gap, &["server_list[1].device[1]", "out of range"]);
        // Not consecutive within a server: 0,2 then 1,3.
        let swapped = TWO
            .replacen("\"rank_id\": \"1\"", "\"rank_id\": \"X\"", 1)
            .replacen("\"rank_id\": \"2\"", "\"rank_id\": \"1\"", 1)
            .replacen("\"rank_id\": \"X\"", "\"rank_id\": \"2\"", 1);
        fails(
            &swapped,
            &["server_list[0].device[1].rank_id is 2", "consecutive"],
        );
        // Reversed device order inside a server.
        let reversed = TWO
            .replacen("\"rank_id\": \"0\"", "\"rank_id\": \"X\"", 1)
            .replacen("\"rank_id\": \"1\"", "\"rank_id\": \"0\"", 1)
            .replacen("\"rank_id\": \"X\"", "\"rank_id\": \"1\"", 1);
        fails(&reversed, &["server_list[0].device[1]", "consecutive"]);
        // Duplicate: both servers claim 0,1.
        let dup = TWO
            .replacen("\"rank_id\": \"2\"", "\"rank_id\": \"0\"", 1)
            .replacen("\"rank_id\": \"3\"", "\"rank_id\": \"1\"", 1);
        fails(
            &dup,
            &[
                "rank_id 0 appears twice",
                "server_list[0].device[0]",
                "server_list[1].device[0]",
            ],
        );
        // Not starting at 0.
        fails(
            &SINGLE.replace("\"rank_id\": \"", "\"rank_id\": \"1"),
            &["out of range", "0..3"],
        );
    }

    #[test]
    fn fingerprint_is_stable_across_formatting() {
        let a = RankTable::parse(TWO).unwrap();
        // Same content: compact, keys reordered, numbers instead of strings, extra keys.
        let b_text = r#"{"server_list":[{"device":[
            {"rank_id":0,"device_port":16667,"device_ip":"192.168.1.8","device_id":0},
            {"rank_id":1,"device_port":"16668","device_ip":"192.168.1.9","device_id":"1"}],
            "host_ip":"10.0.0.1","server_id":"node_0","x":1},
           {"server_id":"node_1","host_ip":"FE80:0:0::1","device":[
            {"device_id":"0","device_ip":"192.168.2.8","device_port":"16667","rank_id":"2"},
            {"device_id":"1","device_ip":"192.168.2.9","device_port":"16668","rank_id":"3"}]}],
           "server_count":2,"version":"1.0","status":"completed"}"#;
        let b = RankTable::parse(b_text).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.fingerprint(), b.fingerprint());
        // Pinned value: the fingerprint must never change between builds or releases, or
        // ranks running different builds would not rendezvous.
        let single = RankTable::parse(SINGLE).unwrap().fingerprint();
        assert_eq!(single, PINNED_SINGLE, "got {single:#x}");
    }

    /// Recorded fingerprint of `SINGLE`.
    const PINNED_SINGLE: u128 = 0x0443_ca2b_9056_6fd1_5305_0a5d_fae0_5d9f;

    #[test]
    fn fingerprint_changes_with_content() {
        let base = RankTable::parse(TWO).unwrap().fingerprint();
        let variants = [
            two_with("\"16668\"", "\"16669\""),
            two_with("\"192.168.1.8\"", "\"192.168.1.7\""),
            two_with("\"10.0.0.1\"", "\"10.0.0.2\""),
            two_with("\"host_ip\": \"10.0.0.1\",", ""),
            two_with("\"node_1\"", "\"node_2\""),
            two_with("\"device_id\": \"1\"", "\"device_id\": \"5\""),
            two_with(", \"device_port\": \"16667\"", ""),
        ];
        for v in &variants {
            let f = RankTable::parse(v).unwrap().fingerprint();
            assert_ne!(f, base, "{v}");
        }
        // Moving a boundary between length-prefixed fields must change the hash.
        let x = two_with("\"node_0\"", "\"node_0x\"");
        assert_ne!(RankTable::parse(&x).unwrap().fingerprint(), base);
    }

    #[test]
    fn truncated_tables_are_errors() {
        for (i, _) in TWO.char_indices() {
            assert!(RankTable::parse(&TWO[..i]).is_err(), "prefix of {i} bytes");
        }
    }

    /// `TWO` with an extra top-level member nesting `depth` arrays (the document's own object
    /// makes it `depth + 1` deep).
    fn two_with_nesting(depth: usize) -> String {
        let extra = format!("\"extra\": {}{},", "[".repeat(depth), "]".repeat(depth));
        TWO.replacen('{', &format!("{{ {extra}"), 1)
    }

    #[test]
    fn nesting_depth_at_and_past_the_bound() {
        assert!(RankTable::parse(&two_with_nesting(MAX_RANK_TABLE_DEPTH - 1)).is_ok());
        fails(
            &two_with_nesting(MAX_RANK_TABLE_DEPTH),
            &["rank table", "nested more than 32 deep"],
        );
        // 200,000 levels: a clear error, not a stack overflow.
        fails(&two_with_nesting(200_000), &["nested more than 32 deep"]);
    }

    #[test]
    fn repeated_keys_are_refused() {
        fails(
            &two_with(
                "\"rank_id\": \"3\"",
                "\"rank_id\": \"3\", \"rank_id\": \"2\"",
            ),
            &["\"rank_id\" appears twice", "line 11"],
        );
    }

    /// One server with `n` devices, ranks 0..n.
    fn one_server(n: u32) -> String {
        let devices: Vec<String> = (0..n)
            .map(|r| format!("{{\"device_id\":\"{r}\",\"rank_id\":\"{r}\"}}"))
            .collect();
        format!(
            "{{\"status\":\"completed\",\"version\":\"1.0\",\"server_count\":\"1\",\
             \"server_list\":[{{\"server_id\":\"s\",\"device\":[{}]}}]}}",
            devices.join(",")
        )
    }

    #[test]
    fn rank_count_at_and_past_the_bound() {
        assert_eq!(
            RankTable::parse(&one_server(MAX_RANKS))
                .unwrap()
                .rank_count(),
            MAX_RANKS
        );
        fails(&one_server(MAX_RANKS + 1), &["65537 ranks", "65536"]);
    }

    #[test]
    fn file_size_at_and_past_the_bound() {
        let dir = std::env::temp_dir().join(format!("rank-table-size-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let limit = MAX_RANK_TABLE_BYTES as usize;
        // Trailing whitespace is part of the document, so it counts towards the size.
        let mut at = TWO.as_bytes().to_vec();
        at.resize(limit, b' ');
        let at_path = dir.join("at.json");
        std::fs::write(&at_path, &at).unwrap();
        assert_eq!(RankTable::load(&at_path).unwrap().rank_count(), 4);
        at.push(b' ');
        let past_path = dir.join("past.json");
        std::fs::write(&past_path, &at).unwrap();
        let e = RankTable::load(&past_path).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg.contains("past.json") && e.msg.contains("larger than"),
            "{}",
            e.msg
        );
        std::fs::remove_dir_all(&dir).unwrap();
        // An endless file is refused after reading one byte past the bound.
        let e = RankTable::load(Path::new("/dev/zero")).unwrap_err();
        assert!(e.msg.contains("larger than"), "{}", e.msg);
    }

    #[test]
    fn load_reports_path() {
        let dir = std::env::temp_dir().join(format!("rank-table-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.json");
        let e = RankTable::load(&missing).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OpenFile);
        assert!(e.msg.contains("missing.json"), "{}", e.msg);

        let good = dir.join("good.json");
        std::fs::write(&good, TWO).unwrap();
        assert_eq!(RankTable::load(&good).unwrap().rank_count(), 4);

        let bad = dir.join("bad.json");
        std::fs::write(&bad, TWO.replace("completed", "failed")).unwrap();
        let e = RankTable::load(&bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg.contains("bad.json") && e.msg.contains("status"),
            "{}",
            e.msg
        );

        let binary = dir.join("binary.json");
        std::fs::write(&binary, b"{\"status\xff\"").unwrap();
        let e = RankTable::load(&binary).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg.contains("binary.json") && e.msg.contains("UTF-8"),
            "{}",
            e.msg
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Environment configuration, parsed once.
//!
//! Every variable from `shared/spec/env-vars.md` is read here and only here, into a typed
//! [`EnvConfig`]. The rest of the library asks [`EnvConfig::global`] (or gets a config passed in)
//! so hot paths never touch the process environment, and a malformed value is reported once, with
//! the variable name, instead of surfacing as odd behaviour deep inside a collective.
//!
//! General rules, applied to every variable:
//! * leading/trailing whitespace is trimmed, and an empty (or all-blank) value counts as unset;
//! * a malformed value (not a number, out of range, unknown keyword) is an
//!   [`ErrorKind::Para`](crate::base::error::ErrorKind::Para) error naming the variable, the value
//!   and what is accepted — never a silent fallback to the default;
//! * things worth telling the user that are not errors (alias used, value below the vendor
//!   minimum, knob without effect on this hardware) are collected in [`EnvConfig::warnings`] for
//!   the caller to log once logging is up (logging itself depends on this config).

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::limits::{self, MAX_RANKS};

/// `HCCL_DETERMINISTIC`: whether reductions must be reproducible run to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Deterministic {
    /// `false`/`0`: the algorithm layer may pick any reduction order (default).
    #[default]
    Off,
    /// `true`/`1`: identical output on every run with the same inputs and topology.
    On,
    /// `strict`: additionally a fixed reduction order independent of the algorithm chosen.
    Strict,
}

/// `HCCL_SOCKET_FAMILY`: address family used for bootstrap and host sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SocketFamily {
    /// `AF_INET` (default).
    #[default]
    V4,
    /// `AF_INET6`.
    V6,
}

/// `HCCL_SOCKET_IFNAME`: which network interfaces may be used.
///
/// Syntax (as in the vendor and NCCL docs): a comma-separated list of names, optionally
/// preceded by `^` (exclude the listed interfaces instead of selecting them) and/or `=`
/// (names must match exactly instead of as prefixes), in that order: `eth,enp` selects
/// interfaces whose names start with `eth` or `enp`; `^docker,lo` excludes those prefixes;
/// `=eth0` selects exactly `eth0`; `^=eth0` excludes exactly `eth0`. The markers written on the
/// first item apply to the whole list; later items may repeat the same markers (`^eth,^lo`) but
/// may not contradict them. Whitespace around items is ignored, empty items are skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfNameFilter {
    /// `true` when the list names interfaces to avoid (`^`).
    pub exclude: bool,
    /// `true` when names must match exactly (`=`) rather than as prefixes.
    pub exact: bool,
    /// The interface names or prefixes, never empty.
    pub names: Vec<String>,
}

impl IfNameFilter {
    /// Parses the `HCCL_SOCKET_IFNAME` syntax; `var` names the source in error messages.
    pub fn parse(var: &str, text: &str) -> Result<IfNameFilter> {
        let accepted = "expected a comma list of interface names or prefixes, optionally \
                        preceded by '^' (exclude) and/or '=' (exact match), e.g. \"eth,enp\", \
                        \"^docker,lo\", \"=eth0\", \"^=eth0\"";
        let mut mode: Option<(bool, bool)> = None;
        let mut names = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (exclude, rest) = match item.strip_prefix('^') {
                Some(r) => (true, r.trim_start()),
                None => (false, item),
            };
            let (exact, name) = match rest.strip_prefix('=') {
                Some(r) => (true, r.trim_start()),
                None => (false, rest),
            };
            match mode {
                None => mode = Some((exclude, exact)),
                // A later item without markers inherits the list's mode; one with markers
                // must agree, since a mixed list ("eth,^lo") has no single meaning.
                Some(m) if (exclude || exact) && m != (exclude, exact) => crate::bail!(
                    Para,
                    "{var}={text:?}: item {item:?} uses different '^'/'=' markers than the \
                     first item; the markers of the first item apply to the whole list"
                ),
                Some(_) => {}
            }
            check_ifname(var, text, name, accepted)?;
            names.push(name.to_string());
        }
        let Some((exclude, exact)) = mode else {
            crate::bail!(Para, "{var}={text:?}: no interface name given; {accepted}");
        };
        Ok(IfNameFilter {
            exclude,
            exact,
            names,
        })
    }

    /// Whether interface `ifname` may be used under this filter.
    pub fn matches(&self, ifname: &str) -> bool {
        let listed = self.names.iter().any(|n| {
            if self.exact {
                ifname == n
            } else {
                ifname.starts_with(n.as_str())
            }
        });
        listed != self.exclude
    }
}

/// RoCE knobs. They only matter to an RDMA transport; the TCP/shared-memory transports keep
/// them so a job script written for an NPU cluster still parses. `None` = vendor default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdmaEnv {
    /// `HCCL_RDMA_TC`: traffic class (IP ToS byte, DSCP × 4), 0..=255 and a multiple of 4 as
    /// the vendor requires; vendor default 132.
    pub tc: Option<u8>,
    /// `HCCL_RDMA_SL`: service level (PFC priority), 0..=7; vendor default 4.
    pub sl: Option<u8>,
    /// `HCCL_RDMA_TIMEOUT`: ack timeout exponent (4.096 µs × 2^n), 5..=24 (the widest vendor
    /// range; newer products cap at 20); vendor default 20.
    pub timeout: Option<u8>,
    /// `HCCL_RDMA_RETRY_CNT`: retransmission count, 1..=7; vendor default 7.
    pub retry_cnt: Option<u8>,
    /// `HCCL_RDMA_QPS_PER_CONNECTION`: queue pairs per rank pair, 1..=32; vendor default 1.
    pub qps_per_connection: Option<u32>,
}

/// All environment configuration of the library. See the module docs for the common rules.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvConfig {
    /// `HCCL_BUFFSIZE`: per-communicator staging buffer in MB (integer ≥ 1); each communicator
    /// holds two (send and receive). Alias `HCCL_BUFF_SIZE` gives the size in bytes and is
    /// rounded up to whole MB; `HCCL_BUFFSIZE` wins if both are set. `None` = unset (the
    /// consumer applies the vendor default of 200 MB).
    pub buffsize_mb: Option<u32>,
    /// `HCCL_CONNECT_TIMEOUT`: how long ranks wait for each other while connecting during init,
    /// in seconds, 1..=7200, default 120. The vendor minimum is 120; shorter values are accepted
    /// (tests want quick failures) with a warning.
    pub connect_timeout: Duration,
    /// `HCCL_EXEC_TIMEOUT`: how long a collective may wait for peers, in seconds,
    /// 0..=2147483647, default 1836; `0` means never time out (`None`). Alias `HCCL_TIMEOUT_SEC`;
    /// `HCCL_EXEC_TIMEOUT` wins if both are set.
    pub exec_timeout: Option<Duration>,
    /// `HCCL_IF_IP`: the host address used for bootstrap (one IPv4 or IPv6 address);
    /// `None` = choose automatically.
    pub if_ip: Option<IpAddr>,
    /// `HCCL_SOCKET_IFNAME`: interface selection filter, see [`IfNameFilter`]; `None` = automatic
    /// (non-docker/non-lo first, then docker, then lo).
    pub socket_ifname: Option<IfNameFilter>,
    /// `HCCL_IF_BASE_PORT`: first of the 32 host ports used for bootstrap, 1024..=65520,
    /// default 60000. Alias `HCCL_SERVER_PORT`; `HCCL_IF_BASE_PORT` wins if both are set.
    pub if_base_port: u16,
    /// `HCCL_HOST_SOCKET_PORT_RANGE`: ports for host data sockets, `a-b` with
    /// 1024 ≤ a ≤ b ≤ 65535, or `auto` (`None`, the default: let the kernel pick).
    pub host_port_range: Option<(u16, u16)>,
    /// `HCCL_SOCKET_FAMILY`: `AF_INET` (default) or `AF_INET6`, case-insensitive.
    pub socket_family: SocketFamily,
    /// `HCCL_ALGO`: algorithm selection, kept as raw trimmed text (including `hybrid`) because
    /// the algorithm layer owns its grammar; `None` = automatic selection.
    pub algo: Option<String>,
    /// `HCCL_DETERMINISTIC`: `false`/`true`/`strict` (case-insensitive) or `0`/`1`;
    /// default `Off`.
    pub deterministic: Deterministic,
    /// `HCCL_INTRA_ROCE_ENABLE=1` forces the network transport between ranks of the same host
    /// instead of shared memory. `HCCL_INTRA_PCIE_ENABLE` (0/1) is accepted for compatibility;
    /// setting both to 1 is an error. Default `false`.
    pub intra_roce: bool,
    /// `HCCL_WHITELIST_DISABLE`: `1` (default) lets any host join; `0` admits only the IPs
    /// listed in [`EnvConfig::whitelist_file`].
    pub whitelist_disable: bool,
    /// `HCCL_WHITELIST_FILE`: path of the JSON whitelist; required when
    /// `HCCL_WHITELIST_DISABLE=0`. Only the variable is checked here; the consumer opens it.
    pub whitelist_file: Option<PathBuf>,
    /// `HCCL_ENTRY_LOG_ENABLE` (0/1): log every API entry with its arguments. Default off.
    pub entry_log: bool,
    /// `HCCL_DIAGNOSE_ENABLE` (0/1): vendor NPU diagnostics; kept, with a warning when set,
    /// since there is no NPU to diagnose. Default off.
    pub diagnose: bool,
    /// Log level. `ASCEND_GLOBAL_LOG_LEVEL`: `0` debug, `1` info, `2` warning, `3` error
    /// (default), `4` off. Alias `HCCL_LOG_LEVEL` accepts the same digits or the names
    /// `DEBUG`/`INFO`/`WARNING`/`WARN`/`ERROR`/`NULL`/`OFF` (case-insensitive); if both are set,
    /// `HCCL_LOG_LEVEL` wins (it is the more specific of the two), with a warning if they differ.
    pub log_level: log::LevelFilter,
    /// `HCCL_SOCKET_NUM_PER_PEER` (our extension): TCP sockets per peer connection, 1..=16;
    /// `None` = transport default.
    pub sockets_per_peer: Option<u32>,
    /// `HCCL_MAX_CHANNEL_NUM` (our extension): parallel channels per peer, 1..=64;
    /// `None` = algorithm default.
    pub max_channels: Option<u32>,
    /// `HCCL_COMPRESSION` (our extension): `fp16`, `bf16`, `int8[:BLOCK]` or `topk[:RATIO]`
    /// (case-insensitive), or `none`/unset (`None`, the default): compress the cross-host part
    /// of SUM AllReduces on fp32/fp16/bf16 (see [`crate::base::compress`]).
    pub compression: Option<crate::base::compress::Method>,
    /// `HCCL_RETRY_COUNT` (our extension): how many times a failed operation is retried,
    /// 0..=4294967295, default 0.
    pub retry_count: u32,
    /// `HCCL_RDMA_*` knobs, see [`RdmaEnv`].
    pub rdma: RdmaEnv,
    /// `HCCL_PEER_NICS` (our extension): comma list of interface names to use for peer data
    /// traffic; empty = unset.
    pub peer_nics: Vec<String>,
    /// `HCCL_TRACE_FILE` (our extension): path template of the Chrome trace-event file each
    /// rank writes its operations to (`%r`: the rank, `%p`: the process id); unset: no tracing.
    pub trace_file: Option<String>,
    /// `HCCL_NET_PLUGIN` (our extension): path of the net plugin to load, or `none`; unset or
    /// `auto`: the plugin beside `libhccl.so`, if there is one and its provider is not a
    /// kernel-sockets one unless `FI_PROVIDER` asks for it (see `transport::plugin`).
    pub net_plugin: Option<String>,
    /// `HCCL_HOST_ID` (our extension): overrides this host's identity, so several "hosts" can be
    /// simulated on one machine for topology tests.
    pub host_id: Option<String>,
    /// `HCCL_RANK_HOST_MAP` (our extension, for tests): one host label per rank of a
    /// communicator, comma-separated in rank order (`a,a,b,b,b`), telling the algorithms which
    /// ranks share a host whatever the real layout — e.g. to run two-level algorithms on rank
    /// threads of one process. Applied to communicators whose size equals the list length.
    pub rank_host_map: Option<Vec<String>>,
    /// `HCCL_SHM_SINGLE_COPY` (our extension, 0/1): whether the shared-memory link copies large
    /// messages straight out of the sender's memory (`process_vm_readv`); `0` forces copies
    /// through the staging rings. Unset (`None`): the link decides by the number of peers and the
    /// operation's size (see `transport::shm::single_copy_max`), and the link of a rank with one
    /// peer, a core each and a ring taking streaming stores stages stored messages in pieces
    /// instead (`transport::shm::staged_copy_max`).
    pub shm_single_copy: Option<bool>,
    /// `HCCL_SHM_SHARE` (our extension, 0/1, default 1): whether the sender of a single-copy
    /// one-way message writes part of it into the receiver's buffer while the receiver reads
    /// the rest (`transport::shm`).
    pub shm_share: bool,
    /// `HCCL_SHM_STREAM` (our extension, 0/1): whether staged messages (Reduce, large
    /// AllReduce and ReduceScatter chunks) are written into the shared-memory ring with
    /// streaming stores (while a link streams, stored messages are staged in pieces too: see
    /// `transport::shm::staged_copy_max`). Unset (`None`): each link chooses from the cache-line
    /// round trip between its two processes, measured at set-up and again while it runs (see
    /// `transport::ring_stores`).
    pub shm_stream: Option<bool>,
    /// `HCCL_COST_MODEL` (our extension): overrides of the algorithm selector's α-β link costs,
    /// e.g. `level1:alpha=1e-3,beta=1.25e8;gamma=4e9` (parsed by the algorithm layer).
    pub cost_model: Option<String>,
    /// `HCCL_COST_CALIBRATE` (our extension, 0/1): measure the link costs with a short probe
    /// when a communicator is created. Default `false`.
    pub cost_calibrate: bool,
    /// `HCCL_TOPOLOGY_FILE` (our extension): path of a file describing the network (NICs per
    /// host, switch layout, oversubscription) for the selector's shared-link model; its
    /// contents are parsed by the algorithm layer (`algo::fabric`). Only the variable is
    /// checked here.
    pub topology_file: Option<PathBuf>,
    /// Non-fatal findings (aliases used, values below vendor minimums, knobs without effect).
    /// Logged at WARN by [`crate::base::logging::init_from_env`].
    pub warnings: Vec<String>,
}

/// Default `HCCL_CONNECT_TIMEOUT`, seconds (also the vendor minimum).
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 120;
/// Default `HCCL_EXEC_TIMEOUT`, seconds.
pub const DEFAULT_EXEC_TIMEOUT_S: u64 = 1836;
/// Default `HCCL_IF_BASE_PORT`.
pub const DEFAULT_IF_BASE_PORT: u16 = 60000;
/// Number of consecutive bootstrap ports starting at `HCCL_IF_BASE_PORT`.
pub const IF_PORT_COUNT: u16 = 32;

const MB: u64 = 1 << 20;
// Linux IFNAMSIZ is 16 including the terminating NUL.
const MAX_IFNAME_LEN: usize = 15;

/// Reads variables through the caller's lookup, applying the trim/empty rule once.
struct Reader<F> {
    get: F,
    warnings: Vec<String>,
}

impl<F: Fn(&str) -> Option<String>> Reader<F> {
    /// The trimmed value of `var`, or `None` if unset, empty or blank.
    fn raw(&self, var: &str) -> Option<String> {
        let v = (self.get)(var)?;
        let t = v.trim();
        (!t.is_empty()).then(|| t.to_string())
    }

    /// The value of `primary`, else of `alias` (with a warning either way the alias is set).
    /// Returns the name actually used alongside the value, for error messages.
    fn with_alias(
        &mut self,
        primary: &'static str,
        alias: &'static str,
    ) -> Option<(&'static str, String)> {
        match (self.raw(primary), self.raw(alias)) {
            (Some(p), Some(_)) => {
                self.warnings
                    .push(format!("{alias} is ignored because {primary} is also set"));
                Some((primary, p))
            }
            (Some(p), None) => Some((primary, p)),
            (None, Some(a)) => {
                self.warnings
                    .push(format!("{alias} is an alias; prefer {primary}"));
                Some((alias, a))
            }
            (None, None) => None,
        }
    }

    /// An integer in `lo..=hi`, or `None` if unset.
    fn int<T>(&self, var: &str, lo: T, hi: T) -> Result<Option<T>>
    where
        T: FromStr + PartialOrd + Copy + std::fmt::Display,
    {
        self.raw(var)
            .map(|v| parse_int(var, &v, lo, hi))
            .transpose()
    }

    /// A `0`/`1` switch (also `true`/`false`), or `None` if unset.
    fn flag(&self, var: &str) -> Result<Option<bool>> {
        self.raw(var).map(|v| parse_flag(var, &v)).transpose()
    }
}

fn parse_int<T>(var: &str, v: &str, lo: T, hi: T) -> Result<T>
where
    T: FromStr + PartialOrd + Copy + std::fmt::Display,
{
    match v.parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(n),
        _ => Err(crate::err!(
            Para,
            "{var}={v:?}: expected an integer in [{lo}, {hi}]"
        )),
    }
}

fn parse_flag(var: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(crate::err!(
            Para,
            "{var}={v:?}: expected 0 or 1 (true/false also accepted)"
        )),
    }
}

/// Linux interface names: 1..=15 bytes, no whitespace or '/'. `^`, `=` and `,` are refused too:
/// they are our list syntax, so a name containing one is almost surely a misplaced marker.
fn check_ifname(var: &str, text: &str, name: &str, accepted: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > MAX_IFNAME_LEN
        || name
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '/' | ',' | '^' | '='))
    {
        crate::bail!(
            Para,
            "{var}={text:?}: {name:?} is not a valid interface name (1 to {MAX_IFNAME_LEN} \
             characters, no whitespace, '/', '^' or '='); {accepted}"
        );
    }
    Ok(())
}

fn parse_log_digit(v: &str) -> Option<log::LevelFilter> {
    use log::LevelFilter as L;
    Some(match v {
        "0" => L::Debug,
        "1" => L::Info,
        "2" => L::Warn,
        "3" => L::Error,
        "4" => L::Off,
        _ => return None,
    })
}

fn parse_log_name(v: &str) -> Option<log::LevelFilter> {
    use log::LevelFilter as L;
    Some(match v.to_ascii_uppercase().as_str() {
        "DEBUG" => L::Debug,
        "INFO" => L::Info,
        "WARNING" | "WARN" => L::Warn,
        "ERROR" => L::Error,
        "NULL" | "OFF" => L::Off,
        _ => return parse_log_digit(v),
    })
}

impl<F: Fn(&str) -> Option<String>> Reader<F> {
    fn buffsize(&mut self) -> Result<Option<u32>> {
        let Some((var, v)) = self.with_alias("HCCL_BUFFSIZE", "HCCL_BUFF_SIZE") else {
            return Ok(None);
        };
        if var == "HCCL_BUFFSIZE" {
            return parse_int(var, &v, 1u32, u32::MAX).map(Some);
        }
        // The alias is in bytes; round up so a request is never shrunk.
        let bytes = parse_int(var, &v, 1u64, u64::from(u32::MAX) * MB)?;
        Ok(Some(bytes.div_ceil(MB) as u32))
    }

    fn connect_timeout(&mut self) -> Result<Duration> {
        let var = "HCCL_CONNECT_TIMEOUT";
        let s = self
            .int(var, 1u64, 7200)?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT_S);
        if s < DEFAULT_CONNECT_TIMEOUT_S {
            self.warnings.push(format!(
                "{var}={s} is below the vendor minimum of {DEFAULT_CONNECT_TIMEOUT_S} s; \
                 accepted, but large jobs may fail to connect in time"
            ));
        }
        Ok(Duration::from_secs(s))
    }

    fn exec_timeout(&mut self) -> Result<Option<Duration>> {
        let s = match self.with_alias("HCCL_EXEC_TIMEOUT", "HCCL_TIMEOUT_SEC") {
            Some((var, v)) => parse_int(var, &v, 0u64, i32::MAX as u64)?,
            None => DEFAULT_EXEC_TIMEOUT_S,
        };
        Ok((s != 0).then(|| Duration::from_secs(s)))
    }

    fn if_ip(&self) -> Result<Option<IpAddr>> {
        let var = "HCCL_IF_IP";
        self.raw(var)
            .map(|v| {
                v.parse::<IpAddr>().map_err(|_| {
                    crate::err!(
                        Para,
                        "{var}={v:?}: expected one IPv4 or IPv6 address, e.g. 192.168.1.10"
                    )
                })
            })
            .transpose()
    }

    fn if_base_port(&mut self) -> Result<u16> {
        Ok(
            match self.with_alias("HCCL_IF_BASE_PORT", "HCCL_SERVER_PORT") {
                Some((var, v)) => parse_int(var, &v, 1024u16, 65520)?,
                None => DEFAULT_IF_BASE_PORT,
            },
        )
    }

    fn host_port_range(&self) -> Result<Option<(u16, u16)>> {
        let var = "HCCL_HOST_SOCKET_PORT_RANGE";
        let Some(v) = self.raw(var) else {
            return Ok(None);
        };
        if v.eq_ignore_ascii_case("auto") {
            return Ok(None);
        }
        let bad = || {
            crate::err!(
                Para,
                "{var}={v:?}: expected \"auto\" or \"a-b\" with 1024 <= a <= b <= 65535"
            )
        };
        let (a, b) = v.split_once('-').ok_or_else(bad)?;
        let a: u16 = a.trim().parse().map_err(|_| bad())?;
        let b: u16 = b.trim().parse().map_err(|_| bad())?;
        if a < 1024 || a > b {
            return Err(bad());
        }
        Ok(Some((a, b)))
    }

    fn socket_family(&self) -> Result<SocketFamily> {
        let var = "HCCL_SOCKET_FAMILY";
        match self.raw(var) {
            None => Ok(SocketFamily::V4),
            Some(v) => match v.to_ascii_uppercase().as_str() {
                "AF_INET" => Ok(SocketFamily::V4),
                "AF_INET6" => Ok(SocketFamily::V6),
                _ => Err(crate::err!(
                    Para,
                    "{var}={v:?}: expected AF_INET or AF_INET6"
                )),
            },
        }
    }

    fn deterministic(&self) -> Result<Deterministic> {
        let var = "HCCL_DETERMINISTIC";
        match self.raw(var) {
            None => Ok(Deterministic::Off),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "false" | "0" => Ok(Deterministic::Off),
                "true" | "1" => Ok(Deterministic::On),
                "strict" => Ok(Deterministic::Strict),
                _ => Err(crate::err!(
                    Para,
                    "{var}={v:?}: expected false, true or strict (or 0/1)"
                )),
            },
        }
    }

    fn intra_roce(&self) -> Result<bool> {
        let roce = self.flag("HCCL_INTRA_ROCE_ENABLE")?;
        let pcie = self.flag("HCCL_INTRA_PCIE_ENABLE")?;
        if roce == Some(true) && pcie == Some(true) {
            crate::bail!(
                Para,
                "HCCL_INTRA_ROCE_ENABLE=1 and HCCL_INTRA_PCIE_ENABLE=1: only one intra-host \
                 link can be chosen; set one of them to 0"
            );
        }
        Ok(roce == Some(true))
    }

    fn whitelist(&self) -> Result<(bool, Option<PathBuf>)> {
        let disable = self.flag("HCCL_WHITELIST_DISABLE")?.unwrap_or(true);
        let file = self.raw("HCCL_WHITELIST_FILE").map(PathBuf::from);
        if !disable && file.is_none() {
            crate::bail!(
                Para,
                "HCCL_WHITELIST_DISABLE=0 enables the whitelist, but HCCL_WHITELIST_FILE is not \
                 set; set it to the path of the JSON whitelist or set HCCL_WHITELIST_DISABLE=1"
            );
        }
        Ok((disable, file))
    }

    fn log_level(&mut self) -> Result<log::LevelFilter> {
        let ascend = "ASCEND_GLOBAL_LOG_LEVEL";
        let hccl = "HCCL_LOG_LEVEL";
        // Both are validated even when one wins, so a typo never goes unnoticed.
        let a = self
            .raw(ascend)
            .map(|v| {
                parse_log_digit(&v).ok_or_else(|| {
                    crate::err!(
                        Para,
                        "{ascend}={v:?}: expected 0 (debug), 1 (info), 2 (warning), 3 (error) \
                         or 4 (off)"
                    )
                })
            })
            .transpose()?;
        let h = self
            .raw(hccl)
            .map(|v| {
                parse_log_name(&v).ok_or_else(|| {
                    crate::err!(
                        Para,
                        "{hccl}={v:?}: expected DEBUG, INFO, WARNING/WARN, ERROR or NULL/OFF \
                         (case-insensitive), or a digit 0-4 as for {ascend}"
                    )
                })
            })
            .transpose()?;
        if let (Some(a), Some(h)) = (a, h) {
            if a != h {
                self.warnings.push(format!(
                    "{hccl} ({h}) overrides {ascend} ({a}); the library logs at {h}"
                ));
            }
        }
        Ok(h.or(a).unwrap_or(log::LevelFilter::Error))
    }

    fn compression(&self) -> Result<Option<crate::base::compress::Method>> {
        let var = "HCCL_COMPRESSION";
        match self.raw(var) {
            None => Ok(None),
            Some(v) if v.trim().eq_ignore_ascii_case("none") => Ok(None),
            Some(v) => crate::base::compress::Method::parse(&v)
                .map(Some)
                .map_err(|e| crate::err!(Para, "{var}={}", e.msg)),
        }
    }

    fn rdma(&mut self) -> Result<RdmaEnv> {
        let tc = self.int("HCCL_RDMA_TC", 0u8, 255)?;
        if let Some(t) = tc {
            // The vendor treats the value as a ToS byte whose low two bits must be zero.
            if t % 4 != 0 {
                crate::bail!(
                    Para,
                    "HCCL_RDMA_TC=\"{t}\": expected an integer in [0, 255] that is a multiple of 4 \
                     (DSCP × 4)"
                );
            }
        }
        let rdma = RdmaEnv {
            tc,
            sl: self.int("HCCL_RDMA_SL", 0u8, 7)?,
            timeout: self.int("HCCL_RDMA_TIMEOUT", 5u8, 24)?,
            retry_cnt: self.int("HCCL_RDMA_RETRY_CNT", 1u8, 7)?,
            qps_per_connection: self.int("HCCL_RDMA_QPS_PER_CONNECTION", 1u32, 32)?,
        };
        if rdma != RdmaEnv::default() {
            self.warnings.push(
                "HCCL_RDMA_* settings are kept but have no effect: this host has no RDMA \
                 transport"
                    .to_string(),
            );
        }
        Ok(rdma)
    }

    fn peer_nics(&self) -> Result<Vec<String>> {
        let var = "HCCL_PEER_NICS";
        let Some(v) = self.raw(var) else {
            return Ok(Vec::new());
        };
        let accepted = "expected a comma list of interface names, e.g. \"eth0,eth1\"";
        let mut nics = Vec::new();
        for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            check_ifname(var, &v, name, accepted)?;
            nics.push(name.to_string());
        }
        if nics.is_empty() {
            crate::bail!(Para, "{var}={v:?}: no interface name given; {accepted}");
        }
        Ok(nics)
    }
}

impl EnvConfig {
    /// Parses the configuration from any lookup function: tests pass a map, production passes
    /// the process environment. Returns the first malformed variable as an
    /// [`ErrorKind::Para`](crate::base::error::ErrorKind::Para) error; a value longer than its
    /// bound ([`limits::env_value_bytes`]) is that error whatever else is wrong.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<EnvConfig> {
        let too_long = std::cell::RefCell::new(None);
        let bounded = |var: &str| {
            let v = get(var)?;
            let max = limits::env_value_bytes(var);
            if v.len() > max {
                too_long.borrow_mut().get_or_insert_with(|| {
                    crate::err!(
                        Para,
                        "{var} is {} bytes long; at most {max} are accepted",
                        v.len()
                    )
                });
                return None;
            }
            Some(v)
        };
        let parsed = EnvConfig::parse(bounded);
        match too_long.into_inner() {
            Some(e) => Err(e),
            None => parsed,
        }
    }

    fn parse(get: impl Fn(&str) -> Option<String>) -> Result<EnvConfig> {
        let mut r = Reader {
            get,
            warnings: Vec::new(),
        };
        let buffsize_mb = r.buffsize()?;
        let connect_timeout = r.connect_timeout()?;
        let exec_timeout = r.exec_timeout()?;
        let if_ip = r.if_ip()?;
        let socket_ifname = r
            .raw("HCCL_SOCKET_IFNAME")
            .map(|v| IfNameFilter::parse("HCCL_SOCKET_IFNAME", &v))
            .transpose()?;
        let if_base_port = r.if_base_port()?;
        let host_port_range = r.host_port_range()?;
        let socket_family = r.socket_family()?;
        let algo = r.raw("HCCL_ALGO");
        let deterministic = r.deterministic()?;
        let intra_roce = r.intra_roce()?;
        let (whitelist_disable, whitelist_file) = r.whitelist()?;
        if whitelist_disable && whitelist_file.is_some() {
            r.warnings.push(
                "HCCL_WHITELIST_FILE is ignored because HCCL_WHITELIST_DISABLE is 1 (the default)"
                    .to_string(),
            );
        }
        let entry_log = r.flag("HCCL_ENTRY_LOG_ENABLE")?.unwrap_or(false);
        let diagnose = r.flag("HCCL_DIAGNOSE_ENABLE")?.unwrap_or(false);
        if diagnose {
            r.warnings.push(
                "HCCL_DIAGNOSE_ENABLE=1 is kept but has no effect: its diagnostics need an NPU"
                    .to_string(),
            );
        }
        let log_level = r.log_level()?;
        let sockets_per_peer = r.int("HCCL_SOCKET_NUM_PER_PEER", 1u32, 16)?;
        let max_channels = r.int("HCCL_MAX_CHANNEL_NUM", 1u32, 64)?;
        let compression = r.compression()?;
        let retry_count = r.int("HCCL_RETRY_COUNT", 0u32, u32::MAX)?.unwrap_or(0);
        let rdma = r.rdma()?;
        let peer_nics = r.peer_nics()?;
        let host_id = r.raw("HCCL_HOST_ID");
        let rank_host_map = match r.raw("HCCL_RANK_HOST_MAP") {
            None => None,
            Some(v) => {
                let labels: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
                if labels.len() > MAX_RANKS as usize {
                    crate::bail!(
                        Para,
                        "HCCL_RANK_HOST_MAP has {} labels; a communicator has at most {MAX_RANKS} \
                         ranks",
                        labels.len()
                    );
                }
                if labels.iter().any(String::is_empty) {
                    crate::bail!(
                        Para,
                        "HCCL_RANK_HOST_MAP={v:?}: empty host label; expected one label per \
                         rank, comma-separated, e.g. \"a,a,b,b\""
                    );
                }
                Some(labels)
            }
        };
        let shm_single_copy = r.flag("HCCL_SHM_SINGLE_COPY")?;
        let shm_share = r.flag("HCCL_SHM_SHARE")?.unwrap_or(true);
        let shm_stream = r.flag("HCCL_SHM_STREAM")?;
        let cost_model = r.raw("HCCL_COST_MODEL");
        let cost_calibrate = r.flag("HCCL_COST_CALIBRATE")?.unwrap_or(false);
        let topology_file = r.raw("HCCL_TOPOLOGY_FILE").map(PathBuf::from);
        Ok(EnvConfig {
            buffsize_mb,
            connect_timeout,
            exec_timeout,
            if_ip,
            socket_ifname,
            if_base_port,
            host_port_range,
            socket_family,
            algo,
            deterministic,
            intra_roce,
            whitelist_disable,
            whitelist_file,
            entry_log,
            diagnose,
            log_level,
            sockets_per_peer,
            max_channels,
            compression,
            retry_count,
            rdma,
            peer_nics,
            host_id,
            trace_file: r.raw("HCCL_TRACE_FILE"),
            net_plugin: r.raw("HCCL_NET_PLUGIN"),
            rank_host_map,
            shm_single_copy,
            shm_share,
            shm_stream,
            cost_model,
            cost_calibrate,
            topology_file,
            warnings: r.warnings,
        })
    }

    /// The process-wide configuration: read from the environment on first use and cached, so
    /// later calls (and later changes to the environment) cost nothing. Returns a clone of the
    /// cached result, including a cached error.
    pub fn global() -> Result<EnvConfig> {
        static GLOBAL: OnceLock<Result<EnvConfig>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                // var_os + lossy conversion: a non-UTF-8 value must fail parsing with its name
                // in the message rather than look unset, as std::env::var would make it.
                EnvConfig::from_lookup(|k| {
                    std::env::var_os(k).map(|v| v.to_string_lossy().into_owned())
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::ErrorKind;
    use log::LevelFilter;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<EnvConfig> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EnvConfig::from_lookup(|k| map.get(k).cloned())
    }

    fn ok(vars: &[(&str, &str)]) -> EnvConfig {
        parse(vars).unwrap_or_else(|e| panic!("{vars:?} should parse: {e}"))
    }

    /// Asserts a Para error whose message names the variable and the offending value.
    fn bad(var: &str, value: &str) {
        bad_with(&[(var, value)], var, value);
    }

    fn bad_with(vars: &[(&str, &str)], var: &str, value: &str) {
        match parse(vars) {
            Ok(c) => panic!("{vars:?} should be rejected, got {c:?}"),
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Para, "{e}");
                assert!(e.msg.contains(var), "message lacks {var}: {}", e.msg);
                assert!(
                    e.msg.contains(value.trim()),
                    "message lacks value: {}",
                    e.msg
                );
            }
        }
    }

    fn has_warning(c: &EnvConfig, needle: &str) -> bool {
        c.warnings.iter().any(|w| w.contains(needle))
    }

    #[test]
    fn defaults() {
        let c = ok(&[]);
        assert_eq!(c.buffsize_mb, None);
        assert_eq!(c.connect_timeout, Duration::from_secs(120));
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(1836)));
        assert_eq!(c.if_ip, None);
        assert_eq!(c.socket_ifname, None);
        assert_eq!(c.if_base_port, 60000);
        assert_eq!(c.host_port_range, None);
        assert_eq!(c.socket_family, SocketFamily::V4);
        assert_eq!(c.algo, None);
        assert_eq!(c.deterministic, Deterministic::Off);
        assert!(!c.intra_roce);
        assert!(c.whitelist_disable);
        assert_eq!(c.whitelist_file, None);
        assert!(!c.entry_log);
        assert!(!c.diagnose);
        assert_eq!(c.log_level, LevelFilter::Error);
        assert_eq!(c.sockets_per_peer, None);
        assert_eq!(c.max_channels, None);
        assert_eq!(c.compression, None);
        assert_eq!(c.retry_count, 0);
        assert_eq!(c.rdma, RdmaEnv::default());
        assert!(c.peer_nics.is_empty());
        assert_eq!(c.host_id, None);
        assert_eq!(c.trace_file, None);
        let c = ok(&[("HCCL_TRACE_FILE", " /tmp/t.%r.json ")]);
        assert_eq!(c.trace_file.as_deref(), Some("/tmp/t.%r.json"));
        assert_eq!(c.shm_single_copy, None);
        assert_eq!(
            ok(&[("HCCL_SHM_SINGLE_COPY", "0")]).shm_single_copy,
            Some(false)
        );
        assert_eq!(
            ok(&[("HCCL_SHM_SINGLE_COPY", "1")]).shm_single_copy,
            Some(true)
        );
        assert!(c.shm_share);
        assert_eq!(c.shm_stream, None);
        assert!(!ok(&[("HCCL_SHM_SHARE", "0")]).shm_share);
        assert_eq!(ok(&[("HCCL_SHM_STREAM", "false")]).shm_stream, Some(false));
        assert_eq!(ok(&[("HCCL_SHM_STREAM", "1")]).shm_stream, Some(true));
        bad("HCCL_SHM_SHARE", "off");
        bad("HCCL_SHM_STREAM", "2");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn empty_and_blank_values_are_unset() {
        let all = [
            "HCCL_BUFFSIZE",
            "HCCL_BUFF_SIZE",
            "HCCL_CONNECT_TIMEOUT",
            "HCCL_EXEC_TIMEOUT",
            "HCCL_TIMEOUT_SEC",
            "HCCL_IF_IP",
            "HCCL_SOCKET_IFNAME",
            "HCCL_IF_BASE_PORT",
            "HCCL_SERVER_PORT",
            "HCCL_HOST_SOCKET_PORT_RANGE",
            "HCCL_SOCKET_FAMILY",
            "HCCL_ALGO",
            "HCCL_DETERMINISTIC",
            "HCCL_INTRA_ROCE_ENABLE",
            "HCCL_INTRA_PCIE_ENABLE",
            "HCCL_WHITELIST_DISABLE",
            "HCCL_WHITELIST_FILE",
            "HCCL_ENTRY_LOG_ENABLE",
            "HCCL_DIAGNOSE_ENABLE",
            "ASCEND_GLOBAL_LOG_LEVEL",
            "HCCL_LOG_LEVEL",
            "HCCL_SOCKET_NUM_PER_PEER",
            "HCCL_MAX_CHANNEL_NUM",
            "HCCL_COMPRESSION",
            "HCCL_RETRY_COUNT",
            "HCCL_RDMA_TC",
            "HCCL_RDMA_SL",
            "HCCL_RDMA_TIMEOUT",
            "HCCL_RDMA_RETRY_CNT",
            "HCCL_RDMA_QPS_PER_CONNECTION",
            "HCCL_PEER_NICS",
            "HCCL_HOST_ID",
            "HCCL_RANK_HOST_MAP",
            "HCCL_SHM_SINGLE_COPY",
            "HCCL_SHM_SHARE",
            "HCCL_SHM_STREAM",
            "HCCL_COST_MODEL",
            "HCCL_COST_CALIBRATE",
            "HCCL_TOPOLOGY_FILE",
        ];
        for blank in ["", "   ", "\t\n"] {
            let vars: Vec<(&str, &str)> = all.iter().map(|k| (*k, blank)).collect();
            assert_eq!(ok(&vars), ok(&[]), "blank {blank:?}");
        }
    }

    #[test]
    fn buffsize() {
        assert_eq!(ok(&[("HCCL_BUFFSIZE", "1")]).buffsize_mb, Some(1));
        assert_eq!(ok(&[("HCCL_BUFFSIZE", " 300 ")]).buffsize_mb, Some(300));
        bad("HCCL_BUFFSIZE", "0");
        bad("HCCL_BUFFSIZE", "-5");
        bad("HCCL_BUFFSIZE", "abc");
        bad("HCCL_BUFFSIZE", "200MB");
        bad("HCCL_BUFFSIZE", "1.5");
        bad("HCCL_BUFFSIZE", "99999999999");
    }

    #[test]
    fn buff_size_alias_in_bytes_rounds_up() {
        let c = ok(&[("HCCL_BUFF_SIZE", "1048576")]);
        assert_eq!(c.buffsize_mb, Some(1));
        assert!(has_warning(&c, "HCCL_BUFF_SIZE"));
        assert_eq!(ok(&[("HCCL_BUFF_SIZE", "1048577")]).buffsize_mb, Some(2));
        assert_eq!(ok(&[("HCCL_BUFF_SIZE", "1")]).buffsize_mb, Some(1));
        assert_eq!(
            ok(&[("HCCL_BUFF_SIZE", "209715200")]).buffsize_mb,
            Some(200)
        );
        bad("HCCL_BUFF_SIZE", "0");
        bad("HCCL_BUFF_SIZE", "64M");
        // The primary name wins and the alias is reported as ignored.
        let c = ok(&[("HCCL_BUFFSIZE", "10"), ("HCCL_BUFF_SIZE", "1")]);
        assert_eq!(c.buffsize_mb, Some(10));
        assert!(has_warning(&c, "ignored"));
    }

    #[test]
    fn connect_timeout() {
        let c = ok(&[("HCCL_CONNECT_TIMEOUT", "600")]);
        assert_eq!(c.connect_timeout, Duration::from_secs(600));
        assert!(c.warnings.is_empty());
        assert_eq!(
            ok(&[("HCCL_CONNECT_TIMEOUT", "7200")]).connect_timeout,
            Duration::from_secs(7200)
        );
        let c = ok(&[("HCCL_CONNECT_TIMEOUT", "5")]);
        assert_eq!(c.connect_timeout, Duration::from_secs(5));
        assert!(
            has_warning(&c, "HCCL_CONNECT_TIMEOUT=5"),
            "{:?}",
            c.warnings
        );
        assert!(!ok(&[("HCCL_CONNECT_TIMEOUT", "120")])
            .warnings
            .iter()
            .any(|w| w.contains("minimum")));
        bad("HCCL_CONNECT_TIMEOUT", "0");
        bad("HCCL_CONNECT_TIMEOUT", "7201");
        bad("HCCL_CONNECT_TIMEOUT", "2m");
    }

    #[test]
    fn exec_timeout_and_alias() {
        assert_eq!(ok(&[("HCCL_EXEC_TIMEOUT", "0")]).exec_timeout, None);
        assert_eq!(
            ok(&[("HCCL_EXEC_TIMEOUT", "30")]).exec_timeout,
            Some(Duration::from_secs(30))
        );
        let c = ok(&[("HCCL_TIMEOUT_SEC", "45")]);
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(45)));
        assert!(has_warning(&c, "HCCL_TIMEOUT_SEC"));
        let c = ok(&[("HCCL_EXEC_TIMEOUT", "10"), ("HCCL_TIMEOUT_SEC", "45")]);
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(10)));
        bad("HCCL_EXEC_TIMEOUT", "-1");
        bad("HCCL_EXEC_TIMEOUT", "2147483648");
        bad("HCCL_EXEC_TIMEOUT", "never");
        bad("HCCL_TIMEOUT_SEC", "x");
    }

    #[test]
    fn if_ip() {
        assert_eq!(
            ok(&[("HCCL_IF_IP", " 10.0.0.7 ")]).if_ip,
            Some("10.0.0.7".parse().unwrap())
        );
        assert_eq!(
            ok(&[("HCCL_IF_IP", "fe80::1")]).if_ip,
            Some("fe80::1".parse().unwrap())
        );
        bad("HCCL_IF_IP", "10.0.0");
        bad("HCCL_IF_IP", "host.example");
        bad("HCCL_IF_IP", "10.0.0.1,10.0.0.2");
    }

    #[test]
    fn socket_ifname_parsing() {
        let f = ok(&[("HCCL_SOCKET_IFNAME", " eth , enp ,")])
            .socket_ifname
            .unwrap();
        assert_eq!(
            f,
            IfNameFilter {
                exclude: false,
                exact: false,
                names: vec!["eth".into(), "enp".into()]
            }
        );
        let f = IfNameFilter::parse("V", "^=eth0,eth1").unwrap();
        assert!(f.exclude && f.exact);
        assert_eq!(f.names, ["eth0", "eth1"]);
        // Repeating the list's markers on later items is tolerated.
        let f = IfNameFilter::parse("V", "^eth, ^lo").unwrap();
        assert!(f.exclude && !f.exact);
        assert_eq!(f.names, ["eth", "lo"]);
        bad("HCCL_SOCKET_IFNAME", "eth,^lo");
        bad("HCCL_SOCKET_IFNAME", "^eth,=lo");
        bad("HCCL_SOCKET_IFNAME", "^");
        bad("HCCL_SOCKET_IFNAME", "^=");
        bad("HCCL_SOCKET_IFNAME", ",,");
        bad("HCCL_SOCKET_IFNAME", "eth 0");
        bad("HCCL_SOCKET_IFNAME", "averyveryverylongname");
        bad("HCCL_SOCKET_IFNAME", "=^eth0");
    }

    #[test]
    fn socket_ifname_matching() {
        let m = |spec: &str, name: &str| IfNameFilter::parse("V", spec).unwrap().matches(name);
        // Prefix selection.
        assert!(m("eth", "eth0"));
        assert!(m("eth", "eth"));
        assert!(!m("eth", "enp3s0"));
        assert!(m("eth,enp", "enp3s0"));
        assert!(!m("eth,enp", "lo"));
        // Prefix exclusion.
        assert!(!m("^docker,lo", "docker0"));
        assert!(!m("^docker,lo", "lo"));
        assert!(m("^docker,lo", "eth0"));
        // Exact selection: a prefix is not enough.
        assert!(m("=eth0", "eth0"));
        assert!(!m("=eth0", "eth01"));
        assert!(!m("=eth0", "eth"));
        assert!(m("=eth0,eth1", "eth1"));
        // Exact exclusion.
        assert!(!m("^=eth0", "eth0"));
        assert!(m("^=eth0", "eth01"));
        assert!(m("^=eth0", "lo"));
        // Whitespace everywhere.
        assert!(m("  ^ = eth0 , eth1 ", "eth2"));
        assert!(!m("  ^ = eth0 , eth1 ", "eth1"));
    }

    #[test]
    fn base_port_and_alias() {
        assert_eq!(ok(&[("HCCL_IF_BASE_PORT", "1024")]).if_base_port, 1024);
        assert_eq!(ok(&[("HCCL_IF_BASE_PORT", "65520")]).if_base_port, 65520);
        let c = ok(&[("HCCL_SERVER_PORT", "50000")]);
        assert_eq!(c.if_base_port, 50000);
        assert!(has_warning(&c, "HCCL_SERVER_PORT"));
        let c = ok(&[
            ("HCCL_IF_BASE_PORT", "40000"),
            ("HCCL_SERVER_PORT", "50000"),
        ]);
        assert_eq!(c.if_base_port, 40000);
        bad("HCCL_IF_BASE_PORT", "1023");
        bad("HCCL_IF_BASE_PORT", "65521");
        bad("HCCL_IF_BASE_PORT", "70000");
        bad("HCCL_IF_BASE_PORT", "port");
        bad("HCCL_SERVER_PORT", "80");
    }

    #[test]
    fn host_port_range() {
        let v = "HCCL_HOST_SOCKET_PORT_RANGE";
        assert_eq!(
            ok(&[(v, "60050-60100")]).host_port_range,
            Some((60050, 60100))
        );
        assert_eq!(
            ok(&[(v, " 2000 - 2000 ")]).host_port_range,
            Some((2000, 2000))
        );
        assert_eq!(
            ok(&[(v, "1024-65535")]).host_port_range,
            Some((1024, 65535))
        );
        assert_eq!(ok(&[(v, "AUTO")]).host_port_range, None);
        assert_eq!(ok(&[(v, "auto")]).host_port_range, None);
        bad(v, "60100-60050");
        bad(v, "1000-2000");
        bad(v, "60000-65536");
        bad(v, "60000");
        bad(v, "a-b");
        bad(v, "1-2-3");
        bad(v, "-60000");
    }

    #[test]
    fn socket_family() {
        let v = "HCCL_SOCKET_FAMILY";
        assert_eq!(ok(&[(v, "AF_INET")]).socket_family, SocketFamily::V4);
        assert_eq!(ok(&[(v, "AF_INET6")]).socket_family, SocketFamily::V6);
        assert_eq!(ok(&[(v, "af_inet6")]).socket_family, SocketFamily::V6);
        bad(v, "inet6");
        bad(v, "AF_UNIX");
    }

    #[test]
    fn algo_is_kept_raw() {
        let v = "HCCL_ALGO";
        assert_eq!(ok(&[(v, " hybrid ")]).algo.as_deref(), Some("hybrid"));
        let text = "allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:ring";
        assert_eq!(ok(&[(v, text)]).algo.as_deref(), Some(text));
    }

    #[test]
    fn deterministic() {
        let v = "HCCL_DETERMINISTIC";
        assert_eq!(ok(&[(v, "false")]).deterministic, Deterministic::Off);
        assert_eq!(ok(&[(v, "0")]).deterministic, Deterministic::Off);
        assert_eq!(ok(&[(v, "TRUE")]).deterministic, Deterministic::On);
        assert_eq!(ok(&[(v, "1")]).deterministic, Deterministic::On);
        assert_eq!(ok(&[(v, "Strict")]).deterministic, Deterministic::Strict);
        bad(v, "yes");
        bad(v, "2");
    }

    #[test]
    fn intra_links() {
        let roce = "HCCL_INTRA_ROCE_ENABLE";
        let pcie = "HCCL_INTRA_PCIE_ENABLE";
        assert!(ok(&[(roce, "1")]).intra_roce);
        assert!(ok(&[(roce, "1"), (pcie, "0")]).intra_roce);
        assert!(!ok(&[(roce, "0")]).intra_roce);
        assert!(!ok(&[(pcie, "1")]).intra_roce);
        assert!(!ok(&[(pcie, "0")]).intra_roce);
        bad_with(&[(roce, "1"), (pcie, "1")], pcie, "1");
        bad(roce, "2");
        bad(pcie, "on");
    }

    #[test]
    fn whitelist() {
        let dis = "HCCL_WHITELIST_DISABLE";
        let file = "HCCL_WHITELIST_FILE";
        let c = ok(&[(dis, "0"), (file, " /etc/hccl/white.json ")]);
        assert!(!c.whitelist_disable);
        assert_eq!(
            c.whitelist_file,
            Some(PathBuf::from("/etc/hccl/white.json"))
        );
        assert!(ok(&[(dis, "1")]).whitelist_disable);
        let c = ok(&[(file, "/x.json")]);
        assert!(c.whitelist_disable);
        assert!(has_warning(&c, file));
        bad_with(&[(dis, "0")], file, "0");
        bad(dis, "off");
    }

    #[test]
    fn entry_log_and_diagnose() {
        assert!(ok(&[("HCCL_ENTRY_LOG_ENABLE", "1")]).entry_log);
        assert!(ok(&[("HCCL_ENTRY_LOG_ENABLE", "true")]).entry_log);
        assert!(!ok(&[("HCCL_ENTRY_LOG_ENABLE", "0")]).entry_log);
        bad("HCCL_ENTRY_LOG_ENABLE", "2");
        let c = ok(&[("HCCL_DIAGNOSE_ENABLE", "1")]);
        assert!(c.diagnose);
        assert!(has_warning(&c, "HCCL_DIAGNOSE_ENABLE"));
        assert!(!ok(&[("HCCL_DIAGNOSE_ENABLE", "0")]).diagnose);
        bad("HCCL_DIAGNOSE_ENABLE", "yes");
    }

    #[test]
    fn log_levels() {
        let a = "ASCEND_GLOBAL_LOG_LEVEL";
        let h = "HCCL_LOG_LEVEL";
        for (d, l) in [
            ("0", LevelFilter::Debug),
            ("1", LevelFilter::Info),
            ("2", LevelFilter::Warn),
            ("3", LevelFilter::Error),
            ("4", LevelFilter::Off),
        ] {
            assert_eq!(ok(&[(a, d)]).log_level, l);
            assert_eq!(ok(&[(h, d)]).log_level, l);
        }
        for (n, l) in [
            ("debug", LevelFilter::Debug),
            ("INFO", LevelFilter::Info),
            ("Warning", LevelFilter::Warn),
            ("WARN", LevelFilter::Warn),
            ("error", LevelFilter::Error),
            ("NULL", LevelFilter::Off),
            ("off", LevelFilter::Off),
        ] {
            assert_eq!(ok(&[(h, n)]).log_level, l, "{n}");
        }
        // HCCL_LOG_LEVEL wins over ASCEND_GLOBAL_LOG_LEVEL, with a warning when they differ.
        let c = ok(&[(a, "3"), (h, "INFO")]);
        assert_eq!(c.log_level, LevelFilter::Info);
        assert!(has_warning(&c, "overrides"));
        assert!(!has_warning(&ok(&[(a, "1"), (h, "INFO")]), "overrides"));
        bad(a, "5");
        bad(a, "INFO");
        bad(a, "-1");
        bad(h, "TRACE");
        bad(h, "7");
        // A malformed value is reported even when the other variable would win.
        bad_with(&[(a, "9"), (h, "INFO")], a, "9");
    }

    #[test]
    fn extension_counts() {
        assert_eq!(
            ok(&[("HCCL_SOCKET_NUM_PER_PEER", "1")]).sockets_per_peer,
            Some(1)
        );
        assert_eq!(
            ok(&[("HCCL_SOCKET_NUM_PER_PEER", "16")]).sockets_per_peer,
            Some(16)
        );
        bad("HCCL_SOCKET_NUM_PER_PEER", "0");
        bad("HCCL_SOCKET_NUM_PER_PEER", "17");
        bad("HCCL_SOCKET_NUM_PER_PEER", "four");
        assert_eq!(ok(&[("HCCL_MAX_CHANNEL_NUM", "64")]).max_channels, Some(64));
        assert_eq!(ok(&[("HCCL_MAX_CHANNEL_NUM", "1")]).max_channels, Some(1));
        bad("HCCL_MAX_CHANNEL_NUM", "0");
        bad("HCCL_MAX_CHANNEL_NUM", "65");
        assert_eq!(ok(&[("HCCL_RETRY_COUNT", "3")]).retry_count, 3);
        assert_eq!(ok(&[("HCCL_RETRY_COUNT", "0")]).retry_count, 0);
        bad("HCCL_RETRY_COUNT", "-1");
        bad("HCCL_RETRY_COUNT", "many");
        bad("HCCL_RETRY_COUNT", "4294967296");
    }

    #[test]
    fn compression() {
        use crate::base::compress::Method;
        let v = "HCCL_COMPRESSION";
        assert_eq!(ok(&[(v, "None")]).compression, None);
        assert_eq!(ok(&[(v, "FP16")]).compression, Some(Method::Fp16));
        assert_eq!(ok(&[(v, "bf16")]).compression, Some(Method::Bf16));
        assert_eq!(
            ok(&[(v, "int8")]).compression,
            Some(Method::Int8 { block: 256 })
        );
        assert_eq!(
            ok(&[(v, "topk:0.01")]).compression,
            Some(Method::TopK { ratio: 0.01 })
        );
        bad(v, "sparse");
        bad(v, "zstd");
        bad(v, "topk:2");
    }

    #[test]
    fn rdma_knobs() {
        let c = ok(&[
            ("HCCL_RDMA_TC", "132"),
            ("HCCL_RDMA_SL", "4"),
            ("HCCL_RDMA_TIMEOUT", "20"),
            ("HCCL_RDMA_RETRY_CNT", "7"),
            ("HCCL_RDMA_QPS_PER_CONNECTION", "32"),
        ]);
        assert_eq!(
            c.rdma,
            RdmaEnv {
                tc: Some(132),
                sl: Some(4),
                timeout: Some(20),
                retry_cnt: Some(7),
                qps_per_connection: Some(32),
            }
        );
        assert!(has_warning(&c, "HCCL_RDMA_"));
        assert_eq!(ok(&[("HCCL_RDMA_TC", "0")]).rdma.tc, Some(0));
        assert_eq!(ok(&[("HCCL_RDMA_TIMEOUT", "5")]).rdma.timeout, Some(5));
        assert_eq!(ok(&[("HCCL_RDMA_TIMEOUT", "24")]).rdma.timeout, Some(24));
        bad("HCCL_RDMA_TC", "256");
        bad("HCCL_RDMA_TC", "130");
        bad("HCCL_RDMA_TC", "x");
        bad("HCCL_RDMA_SL", "8");
        bad("HCCL_RDMA_TIMEOUT", "4");
        bad("HCCL_RDMA_TIMEOUT", "25");
        bad("HCCL_RDMA_RETRY_CNT", "0");
        bad("HCCL_RDMA_RETRY_CNT", "8");
        bad("HCCL_RDMA_QPS_PER_CONNECTION", "0");
        bad("HCCL_RDMA_QPS_PER_CONNECTION", "33");
    }

    #[test]
    fn peer_nics_and_host_id() {
        let c = ok(&[("HCCL_PEER_NICS", " eth0, eth1 ,,ib0 ")]);
        assert_eq!(c.peer_nics, ["eth0", "eth1", "ib0"]);
        bad("HCCL_PEER_NICS", ",");
        bad("HCCL_PEER_NICS", "eth0,bad name");
        bad("HCCL_PEER_NICS", "a/b");
        assert_eq!(
            ok(&[("HCCL_HOST_ID", " node-7 ")]).host_id.as_deref(),
            Some("node-7")
        );
    }

    #[test]
    fn rank_host_map() {
        let c = ok(&[("HCCL_RANK_HOST_MAP", " a, a ,b ")]);
        assert_eq!(
            c.rank_host_map,
            Some(vec!["a".into(), "a".into(), "b".into()])
        );
        bad("HCCL_RANK_HOST_MAP", "a,,b");
    }

    #[test]
    fn first_error_is_returned_alone() {
        let e = parse(&[("HCCL_BUFFSIZE", "x"), ("HCCL_RDMA_SL", "9")]).unwrap_err();
        assert!(e.msg.contains("HCCL_BUFFSIZE") && !e.msg.contains("HCCL_RDMA_SL"));
    }

    #[test]
    fn global_is_cached() {
        // Whatever the test process environment holds, two calls agree.
        assert_eq!(EnvConfig::global(), EnvConfig::global());
    }
}

//! The namespace test bed of the multi-host suites (tests/multihost.rs, tests/compress_netns.rs):
//! network namespaces made by `scripts/netns.sh` (veth links, a bridge, addresses in
//! 198.18.0.0/15 and, with `--ipv6`, 2001:2::/48), one process per host (the test binary
//! re-run with `ip netns exec`), and the job protocol between the parent and those processes:
//! the parent passes each host its ranks ([`RANKS_VAR`]), the rank count ([`NRANKS_VAR`]) and,
//! to every host but the first, the root info host 0 printed on a `ROOTINFO` line
//! ([`ROOT_VAR`]).
//!
//! Making a bed needs root and iproute2 (CI has both via scripts/setup.sh); without them
//! [`bed`] says why (`SKIPPED <test>: <why>`, a failure under CI) and returns `None`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use hccl::ffi::types::HcclRootInfo;

use super::*;

/// A host process's ranks, comma-separated.
pub const RANKS_VAR: &str = "HCCL_NS_RANKS";
/// The job's rank count.
pub const NRANKS_VAR: &str = "HCCL_NS_NRANKS";
/// The root info (hex) made by host 0, for the other hosts.
pub const ROOT_VAR: &str = "HCCL_NS_ROOT";
/// How long host 0 may take to print its root info (a hang guard only).
const ROOT_LIMIT: Duration = Duration::from_secs(30);

/// A set of namespaces, removed again on drop (also when the test panics).
pub struct Bed {
    pub prefix: String,
    pub ns: Vec<String>,
    pub ip: Vec<String>,
    /// IPv6 addresses, when the bed was made with `--ipv6`.
    pub ip6: Vec<String>,
    /// The net plugin every host process loads (with libfabric's tcp provider), if any; without
    /// one, host processes use the default links whatever this process was started with.
    pub plugin: Option<PathBuf>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/netns.sh")
}

/// Creates a bed of `k` hosts (`extra`: further `netns.sh up` options), or returns `None`
/// (after saying why) when this machine cannot make network namespaces at all. Any failure to
/// build the bed on a machine that can fails the test.
pub fn bed(k: usize, extra: &[&str]) -> Option<Bed> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip::skip_unless_ci("multi-host tests need root for network namespaces");
        return None;
    }
    let probe = Command::new("ip").args(["netns", "list"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skip::skip_unless_ci("`ip netns` is unavailable (install iproute2)");
        return None;
    }
    let out = Command::new(script())
        .arg("up")
        .arg(k.to_string())
        .args(["--owner", &std::process::id().to_string()])
        .args(extra)
        .output()
        .expect("run scripts/netns.sh");
    assert!(
        out.status.success(),
        "netns.sh up failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let find = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    };
    let get = |key: &str| find(key).unwrap_or_else(|| panic!("netns.sh printed no {key}:\n{text}"));
    let ip6: Vec<String> = (0..k).filter_map(|i| find(&format!("IP6_{i}"))).collect();
    assert_eq!(
        ip6.len(),
        if extra.contains(&"--ipv6") { k } else { 0 },
        "IPv6 addresses printed by netns.sh:\n{text}"
    );
    Some(Bed {
        prefix: get("NETNS_PREFIX"),
        ns: (0..k).map(|i| get(&format!("NS_{i}"))).collect(),
        ip: (0..k).map(|i| get(&format!("IP_{i}"))).collect(),
        ip6,
        plugin: None,
    })
}

impl Bed {
    /// This test binary in host `h`, running only `test`, as a child process (`CHILD_VAR`),
    /// with the bed's plugin choice.
    pub fn command(&self, h: usize, test: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[h]])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &test_path(test),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, "1");
        match &self.plugin {
            Some(p) => c.env("HCCL_NET_PLUGIN", p).env("FI_PROVIDER", "tcp"),
            // The default, whatever this process was started with.
            None => c.env_remove("HCCL_NET_PLUGIN").env_remove("FI_PROVIDER"),
        };
        c
    }

    /// The host id of host `h` (`HCCL_HOST_ID`), unique to this bed.
    pub fn host_id(&self, h: usize) -> String {
        format!("{}-{h}", self.prefix)
    }

    /// Runs a shell command inside host `h`.
    pub fn sh(&self, h: usize, cmd: &str) {
        let st = Command::new("ip")
            .args(["netns", "exec", &self.ns[h], "sh", "-c", cmd])
            .status()
            .expect("ip netns exec");
        assert!(st.success(), "`{cmd}` in host {h} failed");
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", &self.prefix]).status();
    }
}

/// An environment entry.
pub fn kv(k: &str, v: impl ToString) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// `r` as a comma-separated list.
pub fn ranks_list(r: std::ops::Range<u32>) -> String {
    r.map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

/// Waits for the line starting with `prefix` from a child, within `limit`; returns the rest.
pub fn wait_line(s: &Spawned, prefix: &str, limit: Duration, seen: &mut Vec<String>) -> String {
    let dl = Instant::now() + limit;
    loop {
        let left = dl.saturating_duration_since(Instant::now());
        match s.lines.recv_timeout(left) {
            Ok(l) => {
                seen.push(l.clone());
                // The first line printed shares its line with libtest's "test name ... ".
                if let Some(i) = l.find(prefix) {
                    return l[i + prefix.len()..].trim().to_string();
                }
            }
            Err(_) => panic!("no `{prefix}` line within {limit:?}; output so far:\n{seen:#?}"),
        }
    }
}

/// Waits for every host process (within `limit` in all) and asserts that each passed its one
/// test; returns their outputs in host order.
pub fn finish_ok(
    kids: Vec<(Spawned, Vec<String>)>,
    what: &str,
    limit: Duration,
) -> Vec<ChildOutput> {
    let dl = Instant::now() + limit;
    let outs: Vec<ChildOutput> = kids
        .into_iter()
        .map(|(k, seen)| k.finish(dl.saturating_duration_since(Instant::now()), seen))
        .collect();
    for (h, o) in outs.iter().enumerate() {
        assert!(
            o.success && o.stdout.contains("1 passed"),
            "{what}: host {h} failed (code {:?}):\n--- stdout\n{}\n--- stderr\n{}",
            o.code,
            o.stdout,
            tail(&o.stderr, 5000)
        );
    }
    outs
}

/// Starts one process per host with the ranks `layout[h]` (`spawn(h, env)` starts host `h` with
/// the job's variables and `HCCL_HOST_ID` in `env`), rendezvousing through a root info made in
/// host 0; waits for all of them within `limit`. Returns the root info (hex) and every host's
/// output.
pub fn run_job(
    bed: &Bed,
    test: &str,
    layout: &[std::ops::Range<u32>],
    limit: Duration,
    mut spawn: impl FnMut(usize, Vec<(String, String)>) -> Spawned,
) -> (String, Vec<ChildOutput>) {
    let n = layout.iter().map(|r| r.len() as u32).sum::<u32>();
    let mut kids = Vec::new();
    let mut root = String::new();
    for (h, ranks) in layout.iter().enumerate() {
        let mut e = vec![
            kv(RANKS_VAR, ranks_list(ranks.clone())),
            kv(NRANKS_VAR, n),
            kv("HCCL_HOST_ID", bed.host_id(h)),
        ];
        if h > 0 {
            e.push(kv(ROOT_VAR, &root));
        }
        let s = spawn(h, e);
        let mut seen = Vec::new();
        if h == 0 {
            root = wait_line(&s, "ROOTINFO", ROOT_LIMIT, &mut seen);
        }
        kids.push((s, seen));
    }
    (root, finish_ok(kids, test, limit))
}

/// In a host process: its ranks and the job's rank count.
pub fn job_ranks() -> (Vec<u32>, u32) {
    let ranks = std::env::var(RANKS_VAR)
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    let n = std::env::var(NRANKS_VAR).unwrap().parse().unwrap();
    (ranks, n)
}

/// In a host process: the job's root info, from [`ROOT_VAR`], or made here and printed on a
/// `ROOTINFO` line (host 0).
pub fn job_root_info() -> HcclRootInfo {
    match std::env::var(ROOT_VAR) {
        Ok(hex) => root_info_from_bytes(&hex_decode(&hex)),
        Err(_) => {
            let ri = root_info();
            println!("ROOTINFO {}", hex_encode(&root_info_bytes(&ri)));
            ri
        }
    }
}

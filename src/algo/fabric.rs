//! The network a job runs on, as the shared-link cost model and the flow simulator see it:
//! each host has one or more NICs shared by its ranks, hosts hang off leaf switches joined by a
//! spine (a two-level tree) or off one switch per NIC index (a rail layout), and the uplinks of
//! those switches may be oversubscribed. Link speeds and latencies not given here come from the
//! α-β model ([`CostModel`](super::cost::CostModel)): a NIC runs at level1 β, a message across
//! hosts pays level1 α.
//!
//! # Topology file (`HCCL_TOPOLOGY_FILE`, `hccl_sim --topology`)
//!
//! One `key value` per line; `#` starts a comment; blank lines are ignored; every key is
//! optional and may appear once:
//!
//! | key | value | default |
//! |---|---|---|
//! | `nics` | NICs per host, 1…64; local rank j uses NIC j mod `nics` | 1 |
//! | `nic_bandwidth` | per NIC and direction: bytes/s, or with a unit `Gbit`, `Mbit`, `Kbit` (bits/s), `GB`, `MB`, `KB` (10^x bytes/s), `GiB`, `MiB`, `KiB`; `/s` may follow | level1 β |
//! | `latency` | per message between hosts: seconds, or `ns`, `us`, `ms`, `s` | level1 α |
//! | `layout` | `tree` (leaf switches of `hosts_per_leaf` consecutive hosts under a spine) or `rail` (NIC i of every host on rail switch i; rails joined by a spine) | `tree` |
//! | `hosts_per_leaf` | hosts under one leaf switch (`tree`); 0 = one switch for all hosts | 0 |
//! | `oversubscription` | ≥ 1: a switch's downlink capacity over its uplink capacity (leaf switches in `tree`, rail switches in `rail`) | 1 |
//! | `host_memory_bandwidth` | bytes/s (units as above) shared by all traffic between the ranks of one host | unlimited |
//!
//! For example, 16 hosts per leaf with 2 × 100 Gbit/s NICs and 4:1 oversubscribed leaf uplinks:
//!
//! ```text
//! nics 2
//! nic_bandwidth 100Gbit
//! latency 5us
//! hosts_per_leaf 16
//! oversubscription 4
//! ```

/// How hosts are wired to switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// Leaf switches of consecutive hosts under a non-blocking spine.
    #[default]
    Tree,
    /// NIC i of every host on rail switch i; traffic between different rails crosses the spine.
    Rail,
}

/// A network description. `None` fields take their value from the α-β model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fabric {
    /// NICs per host.
    pub nics: u32,
    /// Bandwidth of one NIC per direction, bytes/s.
    pub nic_bw: Option<f64>,
    /// Latency of a message between hosts, seconds.
    pub latency: Option<f64>,
    /// Switch layout.
    pub layout: Layout,
    /// Hosts per leaf switch (tree layout); 0 = one switch for every host.
    pub hosts_per_leaf: u32,
    /// Downlink over uplink capacity of the leaf (tree) or rail switches, ≥ 1.
    pub oversub: f64,
    /// Bandwidth shared by all traffic between the ranks of one host, bytes/s.
    pub host_mem_bw: Option<f64>,
}

impl Default for Fabric {
    /// One NIC per host at level1 β, every host on one non-blocking switch: the shared-link
    /// model derived from the rank layout alone.
    fn default() -> Fabric {
        Fabric {
            nics: 1,
            nic_bw: None,
            latency: None,
            layout: Layout::Tree,
            hosts_per_leaf: 0,
            oversub: 1.0,
            host_mem_bw: None,
        }
    }
}

/// The keys of the topology file.
pub const KEYS: [&str; 7] = [
    "nics",
    "nic_bandwidth",
    "latency",
    "layout",
    "hosts_per_leaf",
    "oversubscription",
    "host_memory_bandwidth",
];

/// Parses a number with an optional unit: `units` lists (suffix, multiplier, divisor),
/// matched case-sensitively after the number; `/s` may follow a bandwidth unit.
fn quantity(v: &str, units: &[(&str, f64, f64)], what: &str) -> Result<f64, String> {
    let v = v.strip_suffix("/s").unwrap_or(v);
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    // An exponent ("1e9", "2.5E-6") is part of the number, not a unit.
    let split = match v[split..].chars().next() {
        Some('e' | 'E')
            if v[split + 1..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+') =>
        {
            v[split + 1..]
                .find(|c: char| c.is_ascii_alphabetic())
                .map_or(v.len(), |i| split + 1 + i)
        }
        _ => split,
    };
    let (num, unit) = v.split_at(split);
    let (mul, div) = if unit.is_empty() {
        (1.0, 1.0)
    } else {
        units
            .iter()
            .find(|(u, ..)| *u == unit)
            .map(|&(_, m, d)| (m, d))
            .ok_or_else(|| {
                let names: Vec<&str> = units.iter().map(|(u, ..)| *u).collect();
                format!(
                    "unknown unit {unit:?} for {what} (use {})",
                    names.join(", ")
                )
            })?
    };
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && (x * mul / div).is_finite() => Ok(x * mul / div),
        _ => Err(format!("{what} {v:?} is not a positive number")),
    }
}

const BANDWIDTH: [(&str, f64, f64); 12] = [
    ("Tbit", 1e12, 8.0),
    ("Gbit", 1e9, 8.0),
    ("Mbit", 1e6, 8.0),
    ("Kbit", 1e3, 8.0),
    ("TB", 1e12, 1.0),
    ("GB", 1e9, 1.0),
    ("MB", 1e6, 1.0),
    ("KB", 1e3, 1.0),
    ("GiB", (1u64 << 30) as f64, 1.0),
    ("MiB", (1u64 << 20) as f64, 1.0),
    ("KiB", 1024.0, 1.0),
    ("B", 1.0, 1.0),
];

const TIME: [(&str, f64, f64); 4] = [
    ("ns", 1.0, 1e9),
    ("us", 1.0, 1e6),
    ("ms", 1.0, 1e3),
    ("s", 1.0, 1.0),
];

impl Fabric {
    /// Parses the topology file format (see the module docs). Pure: no I/O, any input
    /// returns; errors name the line.
    pub fn parse(text: &str) -> Result<Fabric, String> {
        let mut f = Fabric::default();
        let mut seen = [false; KEYS.len()];
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |e: String| format!("line {}: {e}", i + 1);
            let mut words = line.split_whitespace();
            let key = words.next().unwrap_or("");
            let Some(k) = KEYS.iter().position(|&x| x == key) else {
                return Err(at(format!(
                    "unknown key {key:?} (known: {})",
                    KEYS.join(", ")
                )));
            };
            let value = match (words.next(), words.next()) {
                (Some(v), None) => v,
                (None, _) => return Err(at(format!("{key} needs a value"))),
                (Some(_), Some(_)) => {
                    return Err(at(format!("{key} takes one value, got {:?}", line)))
                }
            };
            if std::mem::replace(&mut seen[k], true) {
                return Err(at(format!("{key} is given twice")));
            }
            let int = |lo: u32, hi: u32| match value.parse::<u32>() {
                Ok(x) if (lo..=hi).contains(&x) => Ok(x),
                _ => Err(at(format!(
                    "{key} {value:?} is not a whole number in {lo}…{hi}"
                ))),
            };
            match key {
                "nics" => f.nics = int(1, 64)?,
                "nic_bandwidth" => f.nic_bw = Some(quantity(value, &BANDWIDTH, key).map_err(at)?),
                "latency" => f.latency = Some(quantity(value, &TIME, key).map_err(at)?),
                "layout" => {
                    f.layout = match value {
                        "tree" => Layout::Tree,
                        "rail" => Layout::Rail,
                        _ => return Err(at(format!("layout {value:?}: tree or rail"))),
                    }
                }
                "hosts_per_leaf" => f.hosts_per_leaf = int(0, 1 << 20)?,
                "oversubscription" => {
                    let x = quantity(value, &[], key).map_err(at)?;
                    if x < 1.0 {
                        return Err(at(format!("oversubscription {value:?} is below 1")));
                    }
                    f.oversub = x;
                }
                _ => {
                    f.host_mem_bw = Some(quantity(value, &BANDWIDTH, key).map_err(at)?);
                }
            }
        }
        if f.layout == Layout::Rail && f.hosts_per_leaf != 0 {
            return Err("hosts_per_leaf applies to the tree layout, not rail".into());
        }
        Ok(f)
    }

    /// The file text that parses back to this description (numbers in base units).
    pub fn to_text(&self) -> String {
        let mut s = format!("nics {}\n", self.nics);
        if let Some(b) = self.nic_bw {
            s += &format!("nic_bandwidth {b:e}\n");
        }
        if let Some(l) = self.latency {
            s += &format!("latency {l:e}\n");
        }
        s += match self.layout {
            Layout::Tree => "layout tree\n",
            Layout::Rail => "layout rail\n",
        };
        if self.layout == Layout::Tree {
            s += &format!("hosts_per_leaf {}\n", self.hosts_per_leaf);
        }
        s += &format!("oversubscription {:e}\n", self.oversub);
        if let Some(b) = self.host_mem_bw {
            s += &format!("host_memory_bandwidth {b:e}\n");
        }
        s
    }

    /// The NIC rank `local` (its index on its host) sends and receives through.
    pub fn nic_of(&self, local: u32) -> u32 {
        local % self.nics.max(1)
    }

    /// The leaf switch of `host` (tree layout; every host on switch 0 without leaves).
    pub fn leaf_of(&self, host: u32) -> u32 {
        host.checked_div(self.hosts_per_leaf).unwrap_or(0)
    }

    /// Capacity of one switch uplink per direction, bytes/s, given the NIC bandwidth and the
    /// host count (tree: a leaf's hosts × NICs; rail: every host's NIC on that rail), or
    /// `None` when no uplink is crossed (one switch, or a single rail).
    pub fn uplink_bw(&self, nic_bw: f64, hosts: u32) -> Option<f64> {
        match self.layout {
            Layout::Tree if self.hosts_per_leaf > 0 && hosts > self.hosts_per_leaf => {
                Some(self.hosts_per_leaf as f64 * self.nics as f64 * nic_bw / self.oversub)
            }
            Layout::Rail if self.nics > 1 => Some(hosts as f64 * nic_bw / self.oversub),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key_with_units() {
        let f = Fabric::parse(
            "# two rails\n nics 2 \nnic_bandwidth 100Gbit/s # per NIC\nlatency 5us\n\n\
             layout rail\noversubscription 2.5\nhost_memory_bandwidth 20GB\n",
        )
        .unwrap();
        assert_eq!(f.nics, 2);
        assert_eq!(f.nic_bw, Some(12.5e9));
        assert_eq!(f.latency, Some(5e-6));
        assert_eq!(f.layout, Layout::Rail);
        assert_eq!(f.oversub, 2.5);
        assert_eq!(f.host_mem_bw, Some(20e9));
        assert_eq!(Fabric::parse("").unwrap(), Fabric::default());
        let g = Fabric::parse("nic_bandwidth 1.25e9\nlatency 2e-3\nhosts_per_leaf 8").unwrap();
        assert_eq!(g.nic_bw, Some(1.25e9));
        assert_eq!(g.latency, Some(2e-3));
        assert_eq!(g.hosts_per_leaf, 8);
        assert_eq!(
            Fabric::parse("nic_bandwidth 500Mbit").unwrap().nic_bw,
            Some(62.5e6)
        );
        assert_eq!(
            Fabric::parse("nic_bandwidth 2MiB").unwrap().nic_bw,
            Some(2097152.0)
        );
        // What to_text writes parses back.
        for x in [f, g, Fabric::default()] {
            assert_eq!(Fabric::parse(&x.to_text()).unwrap(), x);
        }
    }

    #[test]
    fn rejects_malformed_lines_naming_them() {
        for (bad, want) in [
            ("nics 0", "line 1"),
            ("nics 65", "1…64"),
            ("nics two", "whole number"),
            ("\nspeed 1", "line 2: unknown key"),
            ("nics", "needs a value"),
            ("nics 1 2", "one value"),
            ("nics 1\nnics 2", "twice"),
            ("nic_bandwidth 10Gbps", "unknown unit"),
            ("nic_bandwidth -1", "positive"),
            ("nic_bandwidth 0", "positive"),
            ("nic_bandwidth inf", "unknown unit"),
            ("nic_bandwidth NaN", "unknown unit"),
            ("latency 1e", "unknown unit"),
            ("nic_bandwidth 1e400", "positive"),
            ("latency 5 us", "one value"),
            ("latency 5min", "unknown unit"),
            ("layout ring", "tree or rail"),
            ("oversubscription 0.5", "below 1"),
            ("layout rail\nhosts_per_leaf 4", "tree layout"),
            ("hosts_per_leaf -1", "whole number"),
        ] {
            let e = Fabric::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }

    #[test]
    fn uplinks_follow_the_layout() {
        let tree = Fabric {
            hosts_per_leaf: 4,
            oversub: 2.0,
            nics: 2,
            ..Fabric::default()
        };
        assert_eq!(tree.leaf_of(9), 2);
        assert_eq!(tree.uplink_bw(10.0, 16), Some(40.0));
        assert_eq!(tree.uplink_bw(10.0, 4), None);
        assert_eq!(Fabric::default().uplink_bw(10.0, 100), None);
        let rail = Fabric {
            layout: Layout::Rail,
            nics: 4,
            oversub: 4.0,
            ..Fabric::default()
        };
        assert_eq!(rail.nic_of(6), 2);
        assert_eq!(rail.uplink_bw(10.0, 8), Some(20.0));
    }
}

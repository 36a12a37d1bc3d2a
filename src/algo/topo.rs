//! The algorithm layer's view of where ranks live: which "host" (level0 group) each rank is on.
//!
//! Ranks on one host talk over level0 links (process memory or shared memory), ranks on
//! different hosts over level1 links (the network). Hosts are numbered densely in order of
//! their lowest rank, so every rank derives the same numbering from the same table.

/// Host membership of every rank of a communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topo {
    host_of: Vec<u32>,
    hosts: Vec<Vec<u32>>,
    local: Vec<u32>,
}

impl Topo {
    /// Builds the topology from one host label per rank (any values; equal labels mean the
    /// same host).
    pub fn from_labels<T: PartialEq>(labels: &[T]) -> Topo {
        let mut firsts: Vec<usize> = Vec::new();
        let host_of: Vec<u32> = labels
            .iter()
            .enumerate()
            .map(
                |(r, l)| match firsts.iter().position(|&f| labels[f] == *l) {
                    Some(h) => h as u32,
                    None => {
                        firsts.push(r);
                        (firsts.len() - 1) as u32
                    }
                },
            )
            .collect();
        Topo::from_host_ids(host_of)
    }

    fn from_host_ids(host_of: Vec<u32>) -> Topo {
        let nh = host_of.iter().map(|&h| h as usize + 1).max().unwrap_or(0);
        let mut hosts = vec![Vec::new(); nh];
        let mut local = vec![0; host_of.len()];
        for (r, &h) in host_of.iter().enumerate() {
            local[r] = hosts[h as usize].len() as u32;
            hosts[h as usize].push(r as u32);
        }
        Topo {
            host_of,
            hosts,
            local,
        }
    }

    /// All `n` ranks on one host.
    pub fn flat(n: u32) -> Topo {
        Topo::from_host_ids(vec![0; n as usize])
    }

    /// `hosts` hosts of `per_host` consecutive ranks each.
    pub fn uniform(hosts: u32, per_host: u32) -> Topo {
        Topo::from_host_ids((0..hosts * per_host).map(|r| r / per_host.max(1)).collect())
    }

    /// Hosts with the given rank counts, ranks numbered host by host.
    pub fn sized(sizes: &[u32]) -> Topo {
        Topo::from_host_ids(
            sizes
                .iter()
                .enumerate()
                .flat_map(|(h, &m)| std::iter::repeat_n(h as u32, m as usize))
                .collect(),
        )
    }

    /// Number of ranks.
    pub fn n(&self) -> u32 {
        self.host_of.len() as u32
    }

    /// Host index of rank `r`.
    pub fn host(&self, r: u32) -> u32 {
        self.host_of[r as usize]
    }

    /// Index of rank `r` among the ranks of its host.
    pub fn local_index(&self, r: u32) -> u32 {
        self.local[r as usize]
    }

    /// The ranks of every host, each list in rank order.
    pub fn hosts(&self) -> &[Vec<u32>] {
        &self.hosts
    }

    /// Whether ranks `a` and `b` share a host.
    pub fn same_host(&self, a: u32, b: u32) -> bool {
        self.host(a) == self.host(b)
    }

    /// Largest number of ranks on one host.
    pub fn max_per_host(&self) -> u32 {
        self.hosts.iter().map(|h| h.len() as u32).max().unwrap_or(0)
    }

    /// Whether every host holds the same number of ranks.
    pub fn uniform_hosts(&self) -> bool {
        self.hosts.iter().all(|h| h.len() == self.hosts[0].len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_numbered_by_first_rank() {
        let t = Topo::from_labels(&["b", "a", "b", "c", "a"]);
        assert_eq!(t.hosts(), &[vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(t.host(4), 1);
        assert_eq!(t.local_index(4), 1);
        assert_eq!(t.max_per_host(), 2);
        assert!(!t.uniform_hosts());
        assert_eq!(Topo::uniform(3, 2), Topo::sized(&[2, 2, 2]));
        assert!(Topo::flat(5).uniform_hosts());
    }
}

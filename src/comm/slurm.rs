//! Slurm's description of a job step, as `srun` gives it to every task: the host list
//! (`SLURM_STEP_NODELIST`, e.g. `node[01-04,07],login1`) and the tasks per node
//! (`SLURM_STEP_TASKS_PER_NODE`, e.g. `2(x3),1`). [`crate::comm::world`] reads the variables;
//! this module only parses their values.
//!
//! Host lists: names separated by commas; a name may hold bracketed ranges (`a[1-3,7]`, several
//! brackets form every combination, `r[1-2]n[1-2]`). A range's numbers keep the width of its
//! lower bound when that is written with leading zeros (`[08-10]` gives `08 09 10`).

/// Expands a Slurm host list into host names, in order. More than `limit` names is an error
/// (so a hostile `[1-4000000000]` cannot exhaust memory).
pub fn expand_hostlist(list: &str, limit: usize) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top(list)? {
        let parts = parse_item(item)?;
        // The item's name count, checked before anything is expanded.
        let count = parts.iter().try_fold(1u64, |n, p| match p {
            Part::Text(_) => Some(n),
            Part::Set(ranges) => ranges
                .iter()
                .try_fold(0u64, |t, r| t.checked_add(r.len()))
                .and_then(|k| n.checked_mul(k)),
        });
        match count {
            Some(c) if c <= (limit - hosts.len().min(limit)) as u64 => {}
            _ => return Err(too_many(list, limit)),
        }
        let mut names = vec![String::new()];
        for part in &parts {
            match part {
                Part::Text(t) => names.iter_mut().for_each(|n| n.push_str(t)),
                Part::Set(ranges) => {
                    names = names
                        .iter()
                        .flat_map(|n| {
                            ranges
                                .iter()
                                .flat_map(|r| (r.lo..=r.hi).map(move |x| r.format(x)))
                                .map(move |x| format!("{n}{x}"))
                        })
                        .collect();
                }
            }
        }
        hosts.extend(names);
    }
    if hosts.is_empty() {
        return Err(format!("host list '{list}' names no host"));
    }
    Ok(hosts)
}

/// The first host of a Slurm host list (without expanding the rest).
pub fn first_host(list: &str) -> Result<String, String> {
    let items = split_top(list)?;
    let Some(first) = items.first() else {
        return Err(format!("host list '{list}' names no host"));
    };
    let mut name = String::new();
    for part in parse_item(first)? {
        match part {
            Part::Text(t) => name.push_str(t),
            Part::Set(ranges) => name.push_str(&ranges[0].format(ranges[0].lo)),
        }
    }
    Ok(name)
}

/// The task count of node `node` (0-based, in host-list order) from a tasks-per-node value
/// such as `2(x3),1` (three nodes with 2 tasks, then one with 1).
pub fn tasks_on_node(per_node: &str, node: u32) -> Result<u32, String> {
    let bad = || format!("tasks per node '{per_node}' is not like '2(x3),1'");
    let mut left = u64::from(node);
    let mut found = None;
    // Every group is checked, not only those up to `node`: a malformed value is an error
    // whichever node reads it.
    for group in per_node.trim().split(',') {
        let (count, repeat) = match group.split_once("(x") {
            Some((c, r)) => (c, r.strip_suffix(')').ok_or_else(bad)?),
            None => (group, "1"),
        };
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let repeat: u64 = repeat.trim().parse().map_err(|_| bad())?;
        if repeat == 0 {
            return Err(bad());
        }
        if found.is_none() {
            if left < repeat {
                found = Some(count);
            } else {
                left -= repeat;
            }
        }
    }
    found.ok_or_else(|| format!("tasks per node '{per_node}' has no entry for node {node}"))
}

fn too_many(list: &str, limit: usize) -> String {
    let shown: String = list.chars().take(64).collect();
    format!("host list '{shown}' names more than {limit} hosts")
}

/// The comma-separated items of a host list (commas inside brackets do not separate).
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            ']' if depth == 1 => depth = 0,
            '[' | ']' => return Err(format!("host list '{list}': unbalanced brackets")),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("host list '{list}': unbalanced brackets"));
    }
    items.push(&list[start..]);
    let items: Vec<&str> = items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    Ok(items)
}

/// A piece of one host-list item: literal text, or the ranges of one bracket.
enum Part<'a> {
    Text(&'a str),
    Set(Vec<Range>),
}

/// `lo-hi` (or one number) of a bracket, with the width of zero-padded numbers.
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> u64 {
        self.hi - self.lo + 1
    }

    fn format(&self, x: u64) -> String {
        format!("{x:0width$}", width = self.width)
    }
}

fn parse_item(item: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            parts.push(Part::Text(&rest[..open]));
        }
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("host list item '{item}': '[' without ']'"))?;
        parts.push(Part::Set(parse_ranges(item, &rest[open + 1..close])?));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    Ok(parts)
}

/// `01-04,07` → the ranges 01…04 and 07 (width 2).
fn parse_ranges(item: &str, inner: &str) -> Result<Vec<Range>, String> {
    let bad = || format!("host list item '{item}': bad range '[{inner}]'");
    let digits = |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
    let mut out = Vec::new();
    for r in inner.split(',') {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let (lo, hi) = (lo.trim(), hi.trim());
        if !digits(lo) || !digits(hi) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if b < a {
            return Err(bad());
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.push(Range {
            lo: a,
            hi: b,
            width,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(s: &str) -> Vec<String> {
        expand_hostlist(s, 1000).unwrap()
    }

    #[test]
    fn plain_names_and_ranges() {
        assert_eq!(hosts("localhost"), ["localhost"]);
        assert_eq!(hosts("a,b , c"), ["a", "b", "c"]);
        assert_eq!(
            hosts("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(hosts("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(hosts("n[098-100]"), ["n098", "n099", "n100"]);
        assert_eq!(hosts("n[0-1]"), ["n0", "n1"]);
        assert_eq!(
            hosts("gpu[1-2],login,cpu[3]"),
            ["gpu1", "gpu2", "login", "cpu3"]
        );
        assert_eq!(hosts("r[1-2]n[1-2]x"), ["r1n1x", "r1n2x", "r2n1x", "r2n2x"]);
        assert_eq!(hosts("a-b[1-2]"), ["a-b1", "a-b2"]);
    }

    #[test]
    fn first_host_needs_no_expansion() {
        assert_eq!(first_host("node[01-04,07]").unwrap(), "node01");
        assert_eq!(first_host("login,node[1-2]").unwrap(), "login");
        assert_eq!(first_host("r[3-4]n[007-9]").unwrap(), "r3n007");
        // Too many hosts to list, yet the first is known.
        assert_eq!(first_host("n[1-999999999]").unwrap(), "n1");
        assert!(expand_hostlist("n[1-999999999]", 65536).is_err());
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in [
            "",
            " , ",
            "n[1-2",
            "n1-2]",
            "n[[1]]",
            "n[]",
            "n[a-b]",
            "n[3-1]",
            "n[1-]",
            "n[-1]",
            "n[1,,2]",
            "n[1234567890123456789]",
        ] {
            let e = expand_hostlist(bad, 1000);
            assert!(e.is_err(), "'{bad}' gave {e:?}");
            assert!(first_host(bad).is_err() || !bad.contains('['), "'{bad}'");
        }
    }

    #[test]
    fn host_limit_is_enforced_before_allocating() {
        assert_eq!(expand_hostlist("n[1-4]", 4).unwrap().len(), 4);
        assert!(expand_hostlist("n[1-5]", 4)
            .unwrap_err()
            .contains("more than 4"));
        assert!(expand_hostlist("a[1-3],b[1-2]", 4).is_err());
        assert!(expand_hostlist("a[1-1000]b[1-1000]c[1-1000]", 65536).is_err());
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(tasks_on_node("4", 0), Ok(4));
        assert_eq!(tasks_on_node("2(x3),1", 0), Ok(2));
        assert_eq!(tasks_on_node("2(x3),1", 2), Ok(2));
        assert_eq!(tasks_on_node("2(x3),1", 3), Ok(1));
        assert!(tasks_on_node("2(x3),1", 4).is_err());
        assert!(tasks_on_node("4", 1).is_err());
        for bad in ["", "x", "2(x0)", "2(x3", "2(3)", "-1", "2(x3),"] {
            assert!(tasks_on_node(bad, 0).is_err(), "'{bad}'");
        }
        assert_eq!(tasks_on_node("1(x4294967295),7", 4_294_967_295), Ok(7));
    }
}

//! `hccl_sim`: proves collective schedules correct symbolically and predicts their time.
//!
//! For an operation, a set of algorithms, a rank count and a topology (hosts × ranks per host,
//! α/β per level) it (1) builds every rank's schedule and checks it symbolically — each output
//! element holds exactly the right contributions, once each; no step reads data not yet
//! received; no deadlock — and (2) prints, per message size, each algorithm's predicted time
//! and bus bandwidth under the α-β model, marking the selector's pick with `*`. With
//! `--topology FILE` (the format of `HCCL_TOPOLOGY_FILE`, see `hccl::algo::fabric`) the times
//! come from simulating every rank's schedule as flows over NICs shared by each host's ranks
//! and oversubscribed switch uplinks instead (`--formula`: the selector's closed form of that
//! model, instant at any scale). `--json` writes the table, `--plot` draws it.
//!
//! ```text
//! hccl_sim [--op allreduce|allgather|reducescatter|broadcast|reduce]
//!          [--hosts H] [--per-host M] [--algo ring,rhd,...|all]
//!          [--sizes 8,65536,1M,64M] [--alpha0 US] [--beta0 GBPS] [--peer0 US]
//!          [--alpha1 US] [--beta1 GBPS] [--peer1 US] [--level0 memory|hostipc|network]
//!          [--model HCCL_COST_MODEL-TEXT] [--check-count ELEMS] [--no-check] [--exact]
//!          [--topology FILE [--formula]] [--json FILE] [--plot FILE.png|FILE.svg]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use hccl::algo::cost::{predict, CostModel, LinkCost, LinkKind, Shape};
use hccl::algo::fabric::Fabric;
use hccl::algo::{fingerprint, flows, symbolic, Algo, Coll, Topo};
use hccl_tools::simtable::{Proof, Table};

struct Args {
    op: String,
    hosts: u32,
    per_host: u32,
    algos: Vec<Algo>,
    sizes: Vec<usize>,
    model: CostModel,
    check_count: Option<usize>,
    check: bool,
    exact: bool,
    memory: bool,
    /// The topology file's path, text and description.
    topology: Option<(PathBuf, String, Fabric)>,
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
    /// With a topology, price by the selector's closed form instead of simulating flows.
    formula: bool,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let m = match s[i..].to_ascii_lowercase().as_str() {
                "k" | "kb" | "kib" => 1 << 10,
                "m" | "mb" | "mib" => 1 << 20,
                "g" | "gb" | "gib" => 1 << 30,
                "b" => 1,
                u => return Err(format!("unknown size unit {u:?}")),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    num.parse::<usize>()
        .map(|v| v * mul)
        .map_err(|e| format!("bad size {s:?}: {e}"))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        op: "allreduce".into(),
        hosts: 128,
        per_host: 8,
        algos: Algo::ALL.to_vec(),
        sizes: vec![8, 64 << 10, 1 << 20, 64 << 20],
        model: CostModel {
            level0: LinkKind::HostIpc.default_cost(),
            level1: LinkKind::Network.default_cost(),
            gamma: 3e9,
            fabric: None,
        },
        check_count: None,
        check: true,
        exact: false,
        memory: false,
        topology: None,
        json: None,
        plot: None,
        formula: false,
    };
    let mut topology = None;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{k} needs a value"));
        let num = |v: String| v.parse::<f64>().map_err(|e| format!("{k}: {e}"));
        match k.as_str() {
            "--op" => a.op = val()?.to_ascii_lowercase(),
            "--hosts" => a.hosts = val()?.parse().map_err(|e| format!("--hosts: {e}"))?,
            "--per-host" => a.per_host = val()?.parse().map_err(|e| format!("--per-host: {e}"))?,
            "--algo" => {
                let v = val()?;
                if v != "all" {
                    a.algos = v
                        .split(',')
                        .map(|n| {
                            Algo::from_name(n.trim())
                                .ok_or_else(|| format!("unknown algorithm {n:?}"))
                        })
                        .collect::<Result<_, _>>()?;
                }
            }
            "--sizes" => {
                a.sizes = val()?
                    .split(',')
                    .map(parse_size)
                    .collect::<Result<_, _>>()?
            }
            "--level0" => {
                let v = val()?;
                a.memory = matches!(v.as_str(), "memory" | "shm");
                a.model.level0 = match v.as_str() {
                    "memory" | "shm" => LinkKind::Memory,
                    "hostipc" | "tcp" => LinkKind::HostIpc,
                    "network" => LinkKind::Network,
                    o => return Err(format!("--level0 {o:?}: memory, hostipc or network")),
                }
                .default_cost()
            }
            "--alpha0" => a.model.level0.alpha = num(val()?)? * 1e-6,
            "--peer0" => a.model.level0.peer = num(val()?)? * 1e-6,
            "--peer1" => a.model.level1.peer = num(val()?)? * 1e-6,
            "--beta0" => {
                a.model.level0.beta = num(val()?)? * 1e9;
                a.model.level0.mesh_beta = a.model.level0.beta;
            }
            "--alpha1" => a.model.level1.alpha = num(val()?)? * 1e-6,
            "--beta1" => {
                a.model.level1.beta = num(val()?)? * 1e9;
                a.model.level1.mesh_beta = a.model.level1.beta;
            }
            "--model" => {
                a.model = a
                    .model
                    .with_overrides(&val()?)
                    .map_err(|e| format!("--model: {e}"))?
            }
            "--check-count" => a.check_count = Some(parse_size(&val()?)?),
            "--no-check" => a.check = false,
            "--exact" => a.exact = true,
            "--topology" => topology = Some(PathBuf::from(val()?)),
            "--formula" => a.formula = true,
            "--json" => a.json = Some(PathBuf::from(val()?)),
            "--plot" => a.plot = Some(PathBuf::from(val()?)),
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {k:?}")),
        }
    }
    let n = a.hosts * a.per_host;
    if n == 0 || n > 65536 {
        return Err(format!("rank count {n} out of range 1..=65536"));
    }
    // Read once every argument is known, so `--help` anywhere answers without the file.
    if let Some(path) = topology {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("--topology {}: {e}", path.display()))?;
        let f = Fabric::parse(&text).map_err(|e| format!("--topology {}: {e}", path.display()))?;
        a.topology = Some((path, text, f));
    }
    Ok(a)
}

/// The operation on `n` ranks moving `bytes` (element size 1).
fn coll(op: &str, n: u32, bytes: usize) -> Result<Coll, String> {
    coll_of(op, n, bytes, 1)
}

/// The operation on `n` ranks moving `bytes` in elements of `elem` bytes.
fn coll_of(op: &str, n: u32, bytes: usize, elem: usize) -> Result<Coll, String> {
    let count = (bytes / elem).max(1);
    let per = (count / n as usize).max(1);
    Ok(match op {
        "allreduce" => Coll::AllReduce { count },
        "allgather" => Coll::AllGather { count: per },
        "reducescatter" => Coll::ReduceScatter { count: per },
        "broadcast" => Coll::Broadcast { count, root: 0 },
        "reduce" => Coll::Reduce { count, root: 0 },
        _ => {
            return Err(format!(
                "unsupported --op {op:?} (allreduce, allgather, reducescatter, broadcast, reduce)"
            ))
        }
    })
}

/// Bus bandwidth factor (as the vendor's hccl_test reports it).
fn bus_factor(op: &str, n: f64) -> f64 {
    match op {
        "allreduce" => 2.0 * (n - 1.0) / n,
        "allgather" | "reducescatter" => (n - 1.0) / n,
        _ => 1.0,
    }
}

fn human(b: usize) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The usage text: the fenced block of this file's doc comment.
fn usage() -> String {
    include_str!("hccl_sim.rs")
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .skip_while(|l| l.trim() != "```text")
        .skip(1)
        .take_while(|l| l.trim() != "```")
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

fn main() -> ExitCode {
    hccl_tools::quiet_on_closed_pipe();
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("hccl_sim: {e}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let topo = Topo::uniform(a.hosts, a.per_host);
    let n = topo.n();
    let show = |l: LinkCost| format!("α={:.1} µs β={:.2} GB/s", l.alpha * 1e6, l.beta / 1e9);
    println!(
        "{} on {n} ranks ({} hosts × {}), level0 {}, level1 {}",
        a.op,
        a.hosts,
        a.per_host,
        show(a.model.level0),
        show(a.model.level1)
    );
    if let Some((path, _, f)) = &a.topology {
        println!(
            "topology {}: {} NIC(s) per host at {:.3} GB/s, latency {:.1} µs, {:?} layout, {} \
             hosts per leaf, oversubscription {}",
            path.display(),
            f.nics,
            f.nic_bw.unwrap_or(a.model.level1.beta) / 1e9,
            f.latency.unwrap_or(a.model.level1.alpha) * 1e6,
            f.layout,
            f.hosts_per_leaf,
            f.oversub
        );
    }
    let probe = match coll(&a.op, n, a.check_count.unwrap_or(2 * n as usize + 5)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hccl_sim: {e}");
            return ExitCode::from(2);
        }
    };
    let algos: Vec<Algo> = a
        .algos
        .iter()
        .copied()
        .filter(|x| x.supports(&probe))
        .collect();
    let mut proofs = Vec::new();
    if a.check {
        for &algo in &algos {
            let t = Instant::now();
            let proof = if a.exact {
                symbolic::check(&topo, &|_| probe.clone(), algo, true)
            } else {
                fingerprint::check(&topo, &|_| probe.clone(), algo, true)
            };
            let seconds = t.elapsed().as_secs_f64();
            match &proof {
                Ok(r) => println!(
                    "  {:<8} correct ({} steps, {} messages, most sent by one rank {} elements, fixed reduction order: {}) [{:.2?}]",
                    algo.name(),
                    r.steps,
                    r.messages,
                    r.max_sent,
                    if r.order_fixed { "yes" } else { "no" },
                    t.elapsed()
                ),
                Err(e) => println!("  {:<8} WRONG: {e}", algo.name()),
            }
            let r = proof.as_ref().cloned().unwrap_or_default();
            proofs.push(Proof {
                algo: algo.name().into(),
                error: proof.err(),
                steps: r.steps,
                messages: r.messages,
                order_fixed: r.order_fixed,
                seconds,
            });
        }
    }
    let failed = proofs.iter().any(|p| p.error.is_some());
    let table = match predict_table(&a, &topo, &algos, proofs) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hccl_sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("\n{:>10}", "size");
    for algo in &algos {
        print!(" {:>22}", algo.name());
    }
    println!();
    for (row, &bytes) in table.sizes.iter().enumerate() {
        print!("{:>10}", human(bytes));
        for (i, p) in table.times[row].iter().enumerate() {
            let cell = match p {
                Some(t) => {
                    let bw = bytes as f64 / t * table.bus_factor / 1e9;
                    format!(
                        "{:.1} us {:.2} GB/s{}",
                        t * 1e6,
                        bw,
                        if table.pick[row] == Some(i) { "*" } else { " " }
                    )
                }
                None => "-".into(),
            };
            print!(" {cell:>22}");
        }
        println!();
    }
    println!(
        "\n(time = predicted completion ({}); GB/s = bus bandwidth; * = the selector's pick)",
        table.model
    );
    if let Some(p) = &a.json {
        if let Err(e) = std::fs::write(p, table.to_json()) {
            eprintln!("hccl_sim: {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
    }
    if let Some(p) = &a.plot {
        if let Err(e) = table.plot(p) {
            eprintln!("hccl_sim: {e}");
            return ExitCode::FAILURE;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Element size of the simulated calls (fp32, as the testers default to).
const SIM_ELEM: usize = 4;

/// Predicted times of `algos` for every size: from the flow simulation when a topology is
/// given, else from the α-β formulas; and the selector's pick among all algorithms.
fn predict_table(
    a: &Args,
    topo: &Topo,
    algos: &[Algo],
    proofs: Vec<Proof>,
) -> Result<Table, String> {
    let n = topo.n();
    let sh = Shape::of(topo);
    // Links are all memory only within one host: across hosts communicators use the network
    // forms (as the selector sees it: `network` is set whenever some peer is remote).
    let memory = a.memory && a.hosts == 1;
    let mut model = a.model;
    model.fabric = a.topology.as_ref().map(|t| t.2);
    let mut times = Vec::new();
    let mut pick = Vec::new();
    for &bytes in &a.sizes {
        let c = coll(&a.op, n, bytes)?;
        let row: Vec<Option<f64>> = match &a.topology {
            Some((_, _, f)) if !a.formula => {
                let ce = coll_of(&a.op, n, bytes, SIM_ELEM)?;
                let mut row = Vec::new();
                for &x in algos {
                    row.push(
                        flows::predict(topo, &|_| ce.clone(), x, SIM_ELEM, false, &model, f)
                            .map_err(|e| format!("{} {}: {e}", x.name(), human(bytes)))?
                            .time,
                    );
                }
                row.into_iter().map(Some).collect()
            }
            _ => algos
                .iter()
                .map(|&x| predict(x, &c, bytes as f64, sh, &model, memory))
                .collect(),
        };
        // The selector's choice among every algorithm, shown where it is a column.
        let chosen = Algo::ALL
            .into_iter()
            .filter_map(|x| predict(x, &c, bytes as f64, sh, &model, memory).map(|t| (x, t)))
            .min_by(|p, q| p.1.total_cmp(&q.1))
            .map(|p| p.0);
        pick.push(chosen.and_then(|x| algos.iter().position(|&y| y == x)));
        times.push(row);
    }
    let mut params = vec![
        ("level0_alpha".to_string(), model.level0.alpha),
        ("level0_beta".to_string(), model.level0.beta),
        ("level0_peer".to_string(), model.level0.peer),
        ("level0_mesh_beta".to_string(), model.level0.mesh_beta),
        ("level1_alpha".to_string(), model.level1.alpha),
        ("level1_beta".to_string(), model.level1.beta),
        ("level1_peer".to_string(), model.level1.peer),
        ("gamma".to_string(), model.gamma),
    ];
    params.retain(|p| p.1.is_finite());
    Ok(Table {
        op: a.op.clone(),
        hosts: a.hosts,
        per_host: a.per_host,
        model: match (&a.topology, a.formula) {
            (Some(_), false) => "flow simulation".into(),
            (Some(_), true) => "shared-link formulas".into(),
            (None, _) => "alpha-beta".into(),
        },
        params,
        topology: a.topology.as_ref().map(|t| t.1.clone()),
        algos: algos.iter().map(|x| x.name().to_string()).collect(),
        sizes: a.sizes.clone(),
        times,
        pick,
        bus_factor: bus_factor(&a.op, n as f64),
        proofs,
    })
}

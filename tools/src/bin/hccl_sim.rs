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
//! model, instant at any scale). `--json` writes the table, `--plot` draws it. `--help` lists
//! the flags.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use hccl::algo::cost::{predict, CostModel, LinkCost, LinkKind, Shape};
use hccl::algo::fabric::Fabric;
use hccl::algo::{fingerprint, flows, symbolic, Algo, Coll, Topo};
use hccl_tools::cli;
use hccl_tools::progress::Progress;
use hccl_tools::simtable::{Proof, Table};

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser};

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

/// `hccl_sim`'s flags.
#[derive(Parser, Debug)]
#[command(
    name = "hccl_sim",
    about = "Proves collective schedules correct symbolically and predicts their time.",
    disable_version_flag = true
)]
struct Cli {
    /// Operation
    #[arg(long, default_value = "allreduce", ignore_case = true,
          value_parser = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce"])]
    op: String,
    /// Hosts
    #[arg(long, value_name = "H", default_value_t = 128)]
    hosts: u32,
    /// Ranks per host
    #[arg(long = "per-host", value_name = "M", default_value_t = 8)]
    per_host: u32,
    /// Algorithms, comma-separated, or all
    #[arg(long = "algo", value_name = "ring,rhd,...|all", default_value = "all",
          value_parser = algos_arg)]
    algos: AlgoList,
    /// Message sizes, comma-separated (K, M, G suffixes)
    #[arg(long, value_name = "LIST", default_value = "8,64K,1M,64M", value_delimiter = ',',
          value_parser = cli::size_arg)]
    sizes: Vec<u64>,
    /// Level-0 (within a host) link kind
    #[arg(long, value_name = "KIND", value_parser = link_arg)]
    level0: Option<LinkKind>,
    /// Level-0 latency α in µs
    #[arg(long, value_name = "US")]
    alpha0: Option<f64>,
    /// Level-0 bandwidth β in GB/s
    #[arg(long, value_name = "GBPS")]
    beta0: Option<f64>,
    /// Level-0 per-peer cost in µs
    #[arg(long, value_name = "US")]
    peer0: Option<f64>,
    /// Level-1 (across hosts) latency α in µs
    #[arg(long, value_name = "US")]
    alpha1: Option<f64>,
    /// Level-1 bandwidth β in GB/s
    #[arg(long, value_name = "GBPS")]
    beta1: Option<f64>,
    /// Level-1 per-peer cost in µs
    #[arg(long, value_name = "US")]
    peer1: Option<f64>,
    /// Cost model overrides, as HCCL_COST_MODEL takes them
    #[arg(long, value_name = "HCCL_COST_MODEL-TEXT")]
    model: Option<String>,
    /// Elements of the proof's operation [default: 2 × ranks + 5]
    #[arg(long = "check-count", value_name = "ELEMS", value_parser = cli::size_arg)]
    check_count: Option<u64>,
    /// Skip the proof
    #[arg(long = "no-check")]
    no_check: bool,
    /// Prove with the exact (rank-set) checker instead of fingerprints
    #[arg(long)]
    exact: bool,
    /// Price by simulating flows over the links this topology file describes
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// With --topology, price by the selector's closed form instead of simulating flows
    #[arg(long, requires = "topology")]
    formula: bool,
    /// Write the table as JSON
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Plot the table (.png or .svg)
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// `--algo`'s value: every algorithm, or the ones named.
#[derive(Clone, Debug)]
struct AlgoList(Vec<Algo>);

fn algos_arg(s: &str) -> Result<AlgoList, String> {
    if s == "all" {
        return Ok(AlgoList(Algo::ALL.to_vec()));
    }
    s.split(',')
        .map(|n| Algo::from_name(n.trim()).ok_or_else(|| format!("unknown algorithm {n:?}")))
        .collect::<Result<_, _>>()
        .map(AlgoList)
}

fn link_arg(s: &str) -> Result<LinkKind, String> {
    match s {
        "memory" | "shm" => Ok(LinkKind::Memory),
        "hostipc" | "tcp" => Ok(LinkKind::HostIpc),
        "network" => Ok(LinkKind::Network),
        _ => Err("memory, hostipc or network".into()),
    }
}

fn parse_args() -> Result<Args, clap::Error> {
    let mut cmd = Cli::command();
    let c = Cli::from_arg_matches(&cmd.try_get_matches_from_mut(std::env::args_os())?)
        .map_err(|e| e.format(&mut cmd))?;
    let invalid = |msg: String| cmd.clone().error(ErrorKind::ValueValidation, msg);
    let n = u64::from(c.hosts) * u64::from(c.per_host);
    if n == 0 || n > 65536 {
        return Err(invalid(format!("rank count {n} out of range 1..=65536")));
    }
    let size = |b: u64| usize::try_from(b).map_err(|_| invalid(format!("size {b} too large")));
    let mut model = CostModel {
        level0: c.level0.unwrap_or(LinkKind::HostIpc).default_cost(),
        level1: LinkKind::Network.default_cost(),
        gamma: 3e9,
        fabric: None,
    };
    if let Some(v) = c.alpha0 {
        model.level0.alpha = v * 1e-6;
    }
    if let Some(v) = c.peer0 {
        model.level0.peer = v * 1e-6;
    }
    if let Some(v) = c.beta0 {
        model.level0.beta = v * 1e9;
        model.level0.mesh_beta = model.level0.beta;
    }
    if let Some(v) = c.alpha1 {
        model.level1.alpha = v * 1e-6;
    }
    if let Some(v) = c.peer1 {
        model.level1.peer = v * 1e-6;
    }
    if let Some(v) = c.beta1 {
        model.level1.beta = v * 1e9;
        model.level1.mesh_beta = model.level1.beta;
    }
    if let Some(m) = &c.model {
        model = model
            .with_overrides(m)
            .map_err(|e| invalid(format!("--model: {e}")))?;
    }
    // Read once every argument is known, so `--help` anywhere answers without the file.
    let topology = match c.topology {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| invalid(format!("--topology {}: {e}", path.display())))?;
            let f = Fabric::parse(&text)
                .map_err(|e| invalid(format!("--topology {}: {e}", path.display())))?;
            Some((path, text, f))
        }
        None => None,
    };
    Ok(Args {
        op: c.op.to_ascii_lowercase(),
        hosts: c.hosts,
        per_host: c.per_host,
        algos: c.algos.0,
        sizes: c.sizes.into_iter().map(size).collect::<Result<_, _>>()?,
        model,
        check_count: c.check_count.map(size).transpose()?,
        check: !c.no_check,
        exact: c.exact,
        memory: c.level0 == Some(LinkKind::Memory),
        topology,
        json: c.json,
        plot: c.plot,
        formula: c.formula,
    })
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

fn main() -> ExitCode {
    hccl_tools::quiet_on_closed_pipe();
    let a = parse_args().unwrap_or_else(|e| e.exit());
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
        let bar = Progress::new(algos.len() as u64, "proofs");
        for (i, &algo) in algos.iter().enumerate() {
            bar.start(i, format!("proving {}", algo.name()));
            let t = Instant::now();
            let proof = if a.exact {
                symbolic::check(&topo, &|_| probe.clone(), algo, true)
            } else {
                fingerprint::check(&topo, &|_| probe.clone(), algo, true)
            };
            let seconds = t.elapsed().as_secs_f64();
            bar.print(|| match &proof {
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
            });
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
    let bar = Progress::new(a.sizes.len() as u64, "sizes");
    for (i, &bytes) in a.sizes.iter().enumerate() {
        bar.start(i, format!("predicting {}", human(bytes)));
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

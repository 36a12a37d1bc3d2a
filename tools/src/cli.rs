//! Command-line flags, with the vendor hccl_test's names and meanings, and the size sweep.

use std::path::PathBuf;

use crate::dtype::DType;

/// Reduction operator given with `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedOp {
    /// `sum`
    Sum,
    /// `prod`
    Prod,
    /// `max`
    Max,
    /// `min`
    Min,
}

impl RedOp {
    /// Parses `sum`, `prod`, `max` or `min`.
    pub fn parse(s: &str) -> Option<RedOp> {
        match s.to_ascii_lowercase().as_str() {
            "sum" => Some(RedOp::Sum),
            "prod" => Some(RedOp::Prod),
            "max" => Some(RedOp::Max),
            "min" => Some(RedOp::Min),
            _ => None,
        }
    }

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
        }
    }

    /// The `HcclReduceOp` value.
    pub fn raw(self) -> u32 {
        match self {
            RedOp::Sum => 0,
            RedOp::Prod => 1,
            RedOp::Max => 2,
            RedOp::Min => 3,
        }
    }
}

/// How sizes grow from `-b` to `-e`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Multiply by the factor (`-f`).
    Factor(u64),
    /// Add the increment in bytes (`-i`).
    Increment(u64),
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Smallest size in bytes (`-b`).
    pub min_bytes: u64,
    /// Largest size in bytes (`-e`).
    pub max_bytes: u64,
    /// Growth between sizes (`-f` / `-i`).
    pub step: Step,
    /// Reduction operator (`-o`); ignored by data-movement operations.
    pub red_op: RedOp,
    /// Root rank (`-r`) of broadcast, reduce and scatter.
    pub root: u32,
    /// Element type (`-d`).
    pub dtype: DType,
    /// Timed iterations per size (`-n`).
    pub iters: u32,
    /// Untimed warm-up iterations per size (`-w`).
    pub warmup: u32,
    /// Whether results are checked (`-c`).
    pub check: bool,
    /// Ranks per node (`-p`): informational, the library detects placement itself.
    pub ranks_per_node: Option<u32>,
    /// Zero-copy (`-z`): accepted for compatibility, no effect on host memory.
    pub zero_copy: bool,
    /// Run this many ranks as threads of this process (`-t`).
    pub threads: Option<u32>,
    /// Also write the table as CSV to this file (`--csv`).
    pub csv: Option<PathBuf>,
    /// Also write the table as JSON to this file (`--json`).
    pub json: Option<PathBuf>,
    /// Compress all-reduce with this method (`--compress`): results are approximate, so the
    /// check compares ranks with each other and an error column is added.
    pub compress: Option<hccl::base::compress::Method>,
}

/// Defaults a binary starts from before its flags are applied.
#[derive(Clone, Debug)]
pub struct Defaults {
    /// Smallest size in bytes.
    pub min_bytes: u64,
    /// Largest size in bytes.
    pub max_bytes: u64,
    /// Multiplication factor.
    pub factor: u64,
    /// Ranks as threads, when the binary runs threads without `-t`.
    pub threads: Option<u32>,
}

impl Defaults {
    /// Defaults of the `<op>_test` binaries.
    pub fn vendor() -> Defaults {
        Defaults {
            min_bytes: 8 << 10,
            max_bytes: 64 << 20,
            factor: 2,
            threads: None,
        }
    }

    /// Defaults of `hccl_bench`: 8 B to 64 MiB, ×4, four ranks as threads.
    pub fn bench() -> Defaults {
        Defaults {
            min_bytes: 8,
            max_bytes: 64 << 20,
            factor: 2,
            threads: Some(4),
        }
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// Run with this configuration.
    Run(Config),
    /// Print the usage text and exit successfully.
    Help,
}

/// Most sizes one sweep may have (guards against `-i 1` over gigabytes).
pub const MAX_SIZES: usize = 100_000;

/// Most ranks `-t` may start.
pub const MAX_THREADS: u32 = 4096;

/// The usage text of binary `bin`.
pub fn usage(bin: &str, d: &Defaults) -> String {
    let types: Vec<&str> = DType::ALL.iter().map(|t| t.name()).collect();
    format!(
        "usage: {bin} [options]\n\
         \n\
         Measures one collective of the HCCL library and checks its results.\n\
         \n\
         Sizes (bytes per rank; K, M, G suffixes are powers of 1024):\n\
         \x20 -b, --minbytes SIZE       smallest size (default {min})\n\
         \x20 -e, --maxbytes SIZE       largest size (default {max})\n\
         \x20 -f, --stepfactor N        multiply the size by N each step (default {f})\n\
         \x20 -i, --stepbytes SIZE      add SIZE each step instead of multiplying\n\
         Operation:\n\
         \x20 -o, --op OP               reduction: sum, prod, max, min (default sum)\n\
         \x20 -r, --root RANK           root of broadcast, reduce, scatter (default 0)\n\
         \x20 -d, --datatype TYPE       {types} (default fp32)\n\
         Measurement:\n\
         \x20 -n, --iters N             timed iterations per size (default 20)\n\
         \x20 -w, --warmup_iters N      warm-up iterations per size (default 5)\n\
         \x20 -c, --check 0|1           check results (default 1)\n\
         \x20 -p, --npus N              ranks per node (informational)\n\
         \x20 -z, --zero_copy 0|1       accepted for compatibility; no effect on host memory\n\
         \x20 --compress METHOD         all-reduce only: fp16, bf16, int8[:BLOCK], topk[:RATIO]\n\
         \x20                           (across hosts; between all ranks on one host); check:\n\
         \x20                           every rank got the same bytes; adds rel_l2_error, the\n\
         \x20                           relative L2 error against the exact sum\n\
         Launch:\n\
         \x20 -t, --threads N           run N ranks as threads of this process{tdef}\n\
         \x20 (without -t: one rank per process, from mpirun, torchrun or HCCL_RANK variables)\n\
         Output:\n\
         \x20 --csv FILE                also write the table as CSV\n\
         \x20 --json FILE               also write the table as JSON\n\
         \x20 -h, --help                print this text\n\
         \n\
         Columns: data_size (bytes per rank), aveg_time (us, slowest rank's mean),\n\
         alg_bandwidth (GB/s = data_size / time), bus_bandwidth (GB/s, NCCL convention),\n\
         check_result (success, failed, or NULL when unchecked or not exactly representable).\n",
        min = d.min_bytes,
        max = d.max_bytes,
        f = d.factor,
        types = types.join(", "),
        tdef = match d.threads {
            Some(t) => format!(" (default {t})"),
            None => String::new(),
        },
    )
}

/// Parses a byte size: decimal digits with an optional K, M or G (binary) suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid size '{s}' (expected e.g. 8, 64K, 16M, 1G)");
    let (digits, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(bad()),
            };
            (&s[..i], m)
        }
        Some(_) => (s, 1),
        None => return Err(bad()),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(bad)
}

fn parse_num(flag: &str, s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .map_err(|_| format!("invalid value '{s}' for {flag} (expected a non-negative integer)"))
}

fn parse_bool(flag: &str, s: &str) -> Result<bool, String> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("invalid value '{s}' for {flag} (expected 0 or 1)")),
    }
}

/// The short flag a long option stands for.
fn canonical(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "-b" | "--minbytes" => "-b",
        "-e" | "--maxbytes" => "-e",
        "-f" | "--stepfactor" => "-f",
        "-i" | "--stepbytes" => "-i",
        "-o" | "--op" => "-o",
        "-r" | "--root" => "-r",
        "-d" | "--datatype" => "-d",
        "-n" | "--iters" => "-n",
        "-w" | "--warmup_iters" => "-w",
        "-c" | "--check" => "-c",
        "-p" | "--npus" => "-p",
        "-z" | "--zero_copy" => "-z",
        "-t" | "--threads" => "-t",
        "--csv" => "--csv",
        "--json" => "--json",
        "--compress" => "--compress",
        "-h" | "--help" => "-h",
        _ => return None,
    })
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I, d: &Defaults) -> Result<Parsed, String> {
    let mut cfg = Config {
        min_bytes: d.min_bytes,
        max_bytes: d.max_bytes,
        step: Step::Factor(d.factor),
        red_op: RedOp::Sum,
        root: 0,
        dtype: DType::Fp32,
        iters: 20,
        warmup: 5,
        check: true,
        ranks_per_node: None,
        zero_copy: false,
        threads: d.threads,
        csv: None,
        json: None,
        compress: None,
    };
    let (mut min_set, mut max_set) = (false, false);
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        // Accepted spellings: "-b 8K", "-b8K", "--minbytes 8K", "--minbytes=8K".
        let (flag, inline) = if let Some(eq) = arg.strip_prefix("--").and_then(|s| s.find('=')) {
            (arg[..eq + 2].to_string(), Some(arg[eq + 3..].to_string()))
        } else if !arg.starts_with("--") && arg.starts_with('-') && arg.len() > 2 {
            (arg[..2].to_string(), Some(arg[2..].to_string()))
        } else {
            (arg.clone(), None)
        };
        let Some(flag) = canonical(&flag) else {
            return Err(format!("unknown option '{arg}'"));
        };
        if flag == "-h" {
            return Ok(Parsed::Help);
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .ok_or_else(|| format!("option '{arg}' needs a value"))?,
        };
        let v = value.as_str();
        match flag {
            "-b" => {
                cfg.min_bytes = parse_size(v)?;
                min_set = true;
            }
            "-e" => {
                cfg.max_bytes = parse_size(v)?;
                max_set = true;
            }
            "-f" => {
                let f = parse_num(flag, v)? as u64;
                if f < 2 {
                    return Err(format!("invalid factor '{v}' for -f (must be at least 2)"));
                }
                cfg.step = Step::Factor(f);
            }
            "-i" => {
                let i = parse_size(v)?;
                if i == 0 {
                    return Err("invalid increment 0 for -i (must be positive)".into());
                }
                cfg.step = Step::Increment(i);
            }
            "-o" => {
                cfg.red_op = RedOp::parse(v).ok_or_else(|| {
                    format!("invalid reduction '{v}' for -o (expected sum, prod, max or min)")
                })?
            }
            "-r" => cfg.root = parse_num(flag, v)?,
            "-d" => {
                cfg.dtype =
                    DType::parse(v).ok_or_else(|| format!("invalid data type '{v}' for -d"))?
            }
            "-n" => {
                cfg.iters = parse_num(flag, v)?;
                if cfg.iters == 0 {
                    return Err("-n must be at least 1".into());
                }
            }
            "-w" => cfg.warmup = parse_num(flag, v)?,
            "-c" => cfg.check = parse_bool(flag, v)?,
            "-p" => {
                let p = parse_num(flag, v)?;
                if p == 0 {
                    return Err("-p must be at least 1".into());
                }
                cfg.ranks_per_node = Some(p);
            }
            "-z" => cfg.zero_copy = parse_bool(flag, v)?,
            "-t" => {
                let t = parse_num(flag, v)?;
                if t == 0 || t > MAX_THREADS {
                    return Err(format!("-t must be between 1 and {MAX_THREADS}"));
                }
                cfg.threads = Some(t);
            }
            "--csv" => cfg.csv = Some(PathBuf::from(v)),
            "--json" => cfg.json = Some(PathBuf::from(v)),
            "--compress" => {
                cfg.compress = if v.eq_ignore_ascii_case("none") {
                    None
                } else {
                    Some(
                        hccl::base::compress::Method::parse(v)
                            .map_err(|e| format!("invalid method for --compress: {}", e.msg))?,
                    )
                }
            }
            _ => unreachable!("canonical() only returns handled flags"),
        }
    }
    // A single bound given alone moves the other default out of its way.
    if min_set && !max_set && cfg.max_bytes < cfg.min_bytes {
        cfg.max_bytes = cfg.min_bytes;
    }
    if max_set && !min_set && cfg.min_bytes > cfg.max_bytes {
        cfg.min_bytes = cfg.max_bytes;
    }
    if cfg.max_bytes < cfg.min_bytes {
        return Err(format!(
            "maximum size {} is smaller than minimum size {}",
            cfg.max_bytes, cfg.min_bytes
        ));
    }
    if matches!(cfg.step, Step::Factor(_)) && cfg.min_bytes == 0 {
        return Err("-b 0 needs -i (a factor never grows from zero)".into());
    }
    if sweep(&cfg).len() > MAX_SIZES {
        return Err(format!("the sweep has more than {MAX_SIZES} sizes"));
    }
    Ok(Parsed::Run(cfg))
}

/// The sizes of a sweep, from `min_bytes` up to and including the last one not above
/// `max_bytes`.
pub fn sweep(cfg: &Config) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = cfg.min_bytes;
    while s <= cfg.max_bytes && out.len() <= MAX_SIZES {
        out.push(s);
        let next = match cfg.step {
            Step::Factor(f) => s.checked_mul(f),
            Step::Increment(i) => s.checked_add(i),
        };
        match next {
            Some(n) if n > s => s = n,
            _ => break,
        }
    }
    out
}

//! Command-line flags, with the vendor hccl_test's names and meanings, and the size sweep.
//!
//! The testers' flags are a `clap` derive ([`TesterArgs`]); the defaults that differ between
//! the `<op>_test` binaries and `hccl_bench` ([`Defaults`]) are filled in when the command is
//! built, so `--help` shows the binary's own. [`parse_size`] is the one size parser of every
//! tool.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser};

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
    /// Where the buffers live (`--mem`).
    pub mem: crate::mem::Memory,
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

    /// Defaults of `hccl_bench`: 8 B to 64 MiB, ×2, four ranks as threads.
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

/// The testers' flags, spelled as the vendor's hccl_test spells them.
#[derive(Parser, Debug)]
#[command(
    about = "Measures one collective of the HCCL library and checks its results.",
    after_help = "Sizes are bytes per rank; K, M, G suffixes are powers of 1024.\n\
                  Without -t: one rank per process, from mpirun, srun, torchrun or HCCL_RANK \
                  variables.\n\n\
                  Columns: data_size (bytes per rank), aveg_time (us, slowest rank's mean),\n\
                  alg_bandwidth (GB/s = data_size / time), bus_bandwidth (GB/s, NCCL convention),\n\
                  check_result (success, failed, or NULL when unchecked or not exactly \
                  representable).",
    disable_version_flag = true
)]
pub struct TesterArgs {
    /// Smallest size
    #[arg(short = 'b', long = "minbytes", value_name = "SIZE", value_parser = size_arg, default_value = "8K", help_heading = "Sizes")]
    pub min_bytes: u64,
    /// Largest size
    #[arg(short = 'e', long = "maxbytes", value_name = "SIZE", value_parser = size_arg, default_value = "64M", help_heading = "Sizes")]
    pub max_bytes: u64,
    /// Multiply the size by N each step
    #[arg(short = 'f', long = "stepfactor", value_name = "N",
          value_parser = clap::value_parser!(u64).range(2..), default_value_t = 2,
          help_heading = "Sizes")]
    pub factor: u64,
    /// Add SIZE each step instead of multiplying
    #[arg(short = 'i', long = "stepbytes", value_name = "SIZE", value_parser = increment_arg,
          help_heading = "Sizes")]
    pub increment: Option<u64>,
    /// Reduction: sum, prod, max, min
    #[arg(short = 'o', long = "op", value_name = "OP", value_parser = red_op_arg,
          default_value = "sum", help_heading = "Operation")]
    pub red_op: RedOp,
    /// Root of broadcast, reduce, scatter
    #[arg(
        short = 'r',
        long = "root",
        value_name = "RANK",
        default_value_t = 0,
        help_heading = "Operation"
    )]
    pub root: u32,
    /// Element type
    #[arg(short = 'd', long = "datatype", value_name = "TYPE", value_parser = dtype_arg,
          default_value = "fp32", help_heading = "Operation")]
    pub dtype: DType,
    /// Timed iterations per size
    #[arg(short = 'n', long = "iters", value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..), help_heading = "Measurement")]
    pub iters: u32,
    /// Warm-up iterations per size
    #[arg(
        short = 'w',
        long = "warmup_iters",
        value_name = "N",
        default_value_t = 5,
        help_heading = "Measurement"
    )]
    pub warmup: u32,
    /// Check results
    #[arg(short = 'c', long = "check", value_name = "0|1", value_parser = bool_arg, action = ArgAction::Set,
          default_value = "1", help_heading = "Measurement")]
    pub check: bool,
    /// Ranks per node (informational)
    #[arg(short = 'p', long = "npus", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..), help_heading = "Measurement")]
    pub ranks_per_node: Option<u32>,
    /// Accepted for compatibility; no effect on host memory
    #[arg(short = 'z', long = "zero_copy", value_name = "0|1", value_parser = bool_arg, action = ArgAction::Set,
          default_value = "0", help_heading = "Measurement")]
    pub zero_copy: bool,
    /// Buffers in device memory (aclrtMalloc of the host ACL runtime, as the vendor's tester;
    /// other processes can map it) or plain host memory (copied by the kernel between processes)
    #[arg(long = "mem", value_name = "device|host", value_parser = mem_arg, default_value = "device",
          help_heading = "Measurement")]
    pub mem: crate::mem::Memory,
    /// Run N ranks as threads of this process
    #[arg(short = 't', long = "threads", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS as i64),
          help_heading = "Launch")]
    pub threads: Option<u32>,
    /// Also write the table as CSV
    #[arg(long = "csv", value_name = "FILE", help_heading = "Output")]
    pub csv: Option<PathBuf>,
    /// Also write the table as JSON
    #[arg(long = "json", value_name = "FILE", help_heading = "Output")]
    pub json: Option<PathBuf>,
    /// All-reduce only: fp16, bf16, int8 (or int8:BLOCK), topk (or topk:RATIO) or none (across
    /// hosts; between all ranks on one host); the check compares the ranks' bytes, and a
    /// rel_l2_error column gives the relative L2 error against the exact sum
    #[arg(long = "compress", value_name = "METHOD", help_heading = "Measurement")]
    pub compress: Option<String>,
}

/// Parses a byte size: decimal digits with an optional K, M or G (binary) suffix; a size that
/// does not fit in 64 bits is an error.
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

/// [`parse_size`] as a clap value parser.
pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn increment_arg(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("the increment must be positive".into()),
        i => Ok(i),
    }
}

fn red_op_arg(s: &str) -> Result<RedOp, String> {
    match s.to_ascii_lowercase().as_str() {
        "sum" => Ok(RedOp::Sum),
        "prod" => Ok(RedOp::Prod),
        "max" => Ok(RedOp::Max),
        "min" => Ok(RedOp::Min),
        _ => Err("expected sum, prod, max or min".into()),
    }
}

fn mem_arg(s: &str) -> Result<crate::mem::Memory, String> {
    match s {
        "device" => Ok(crate::mem::Memory::Device),
        "host" => Ok(crate::mem::Memory::Host),
        _ => Err(format!("invalid memory '{s}' (expected device or host)")),
    }
}

fn bool_arg(s: &str) -> Result<bool, String> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err("expected 0 or 1".into()),
    }
}

fn dtype_arg(s: &str) -> Result<DType, String> {
    DType::parse(s).ok_or_else(|| {
        let names: Vec<&str> = DType::ALL.iter().map(|t| t.name()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

/// `8`, `8K`, `64M`: a size as [`parse_size`] reads it, in the largest exact unit.
fn size_text(b: u64) -> String {
    for (unit, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if b >= 1 << unit && b.is_multiple_of(1 << unit) {
            return format!("{}{suffix}", b >> unit);
        }
    }
    b.to_string()
}

/// The tester command of binary `bin` with `d`'s defaults filled in.
pub fn command(bin: &str, d: &Defaults) -> clap::Command {
    let types: Vec<&str> = DType::ALL.iter().map(|t| t.name()).collect();
    let cmd = TesterArgs::command()
        .name(bin.to_string())
        .bin_name(bin.to_string())
        .mut_arg("min_bytes", |a| a.default_value(size_text(d.min_bytes)))
        .mut_arg("max_bytes", |a| a.default_value(size_text(d.max_bytes)))
        .mut_arg("factor", |a| a.default_value(d.factor.to_string()))
        .mut_arg("dtype", |a| {
            a.help(format!("Element type: {}", types.join(", ")))
        });
    match d.threads {
        Some(t) => cmd.mut_arg("threads", |a| a.default_value(t.to_string())),
        None => cmd,
    }
}

fn explicit(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

/// Parses the arguments after the program name for binary `bin`: clap's own errors for bad
/// flags and values, and errors of the same form for sweeps that cannot run.
pub fn try_parse<I, T>(bin: &str, args: I, d: &Defaults) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut cmd = command(bin, d);
    let argv = std::iter::once(OsString::from(bin)).chain(args.into_iter().map(Into::into));
    let m = cmd.try_get_matches_from_mut(argv)?;
    let a = TesterArgs::from_arg_matches(&m).map_err(|e| e.format(&mut cmd))?;
    let mut cfg = Config {
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step: match a.increment {
            Some(i) => Step::Increment(i),
            None => Step::Factor(a.factor),
        },
        red_op: a.red_op,
        root: a.root,
        dtype: a.dtype,
        iters: a.iters,
        warmup: a.warmup,
        check: a.check,
        ranks_per_node: a.ranks_per_node,
        zero_copy: a.zero_copy,
        threads: a.threads,
        mem: a.mem,
        csv: a.csv,
        json: a.json,
        compress: None,
    };
    // A single bound given alone moves the other default out of its way.
    let (min_set, max_set) = (explicit(&m, "min_bytes"), explicit(&m, "max_bytes"));
    if min_set && !max_set && cfg.max_bytes < cfg.min_bytes {
        cfg.max_bytes = cfg.min_bytes;
    }
    if max_set && !min_set && cfg.min_bytes > cfg.max_bytes {
        cfg.min_bytes = cfg.max_bytes;
    }
    let invalid = |cmd: &mut clap::Command, msg: String| cmd.error(ErrorKind::ValueValidation, msg);
    match a.compress.as_deref() {
        None => {}
        Some(v) if v.trim().eq_ignore_ascii_case("none") => {}
        Some(v) => {
            cfg.compress = Some(hccl::base::compress::Method::parse(v).map_err(|e| {
                invalid(
                    &mut cmd,
                    format!("invalid method for --compress: {}", e.msg),
                )
            })?)
        }
    }
    if cfg.max_bytes < cfg.min_bytes {
        return Err(invalid(
            &mut cmd,
            format!(
                "maximum size {} is smaller than minimum size {}",
                cfg.max_bytes, cfg.min_bytes
            ),
        ));
    }
    if matches!(cfg.step, Step::Factor(_)) && cfg.min_bytes == 0 {
        return Err(invalid(
            &mut cmd,
            "-b 0 needs -i (a factor never grows from zero)".into(),
        ));
    }
    if sweep(&cfg).len() > MAX_SIZES {
        return Err(invalid(
            &mut cmd,
            format!("the sweep has more than {MAX_SIZES} sizes"),
        ));
    }
    Ok(cfg)
}

/// Parses the arguments after the program name; `Err` holds clap's message.
pub fn parse<I: IntoIterator<Item = String>>(args: I, d: &Defaults) -> Result<Parsed, String> {
    match try_parse("tester", args, d) {
        Ok(c) => Ok(Parsed::Run(c)),
        Err(e) if e.kind() == ErrorKind::DisplayHelp => Ok(Parsed::Help),
        Err(e) => Err(e.to_string()),
    }
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

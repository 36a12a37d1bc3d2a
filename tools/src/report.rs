//! Output of rank 0: the table on stdout, a progress line on a terminal's stderr, and the
//! CSV / JSON files.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Outcome of the result check of one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckResult {
    /// Every element on every rank matched.
    Success,
    /// Some element on some rank differed.
    Failed,
    /// Not checked (`-c 0`, or the expected value is not exactly representable).
    Null,
}

impl CheckResult {
    /// The vendor's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckResult::Success => "success",
            CheckResult::Failed => "failed",
            CheckResult::Null => "NULL",
        }
    }
}

/// One measured size.
#[derive(Clone, Debug)]
pub struct Row {
    /// Bytes per rank (see [`crate::ops`] for what that is per operation).
    pub data_size: u64,
    /// Elements per block (the count argument of the call).
    pub count: u64,
    /// Slowest rank's mean time per iteration, µs.
    pub time_us: f64,
    /// `data_size / time`, GB/s (10^9 bytes).
    pub alg_bw: f64,
    /// Algorithm bandwidth times the operation's bus factor, GB/s.
    pub bus_bw: f64,
    /// Result check.
    pub check: CheckResult,
    /// Relative L2 error of the result against the exact one (compressed runs).
    pub error: Option<f64>,
}

impl Row {
    /// A row from a size, a count, a time in seconds and the bus factor.
    pub fn new(data_size: u64, count: u64, secs: f64, bus_factor: f64, check: CheckResult) -> Row {
        let alg_bw = if secs > 0.0 {
            data_size as f64 / secs / 1e9
        } else {
            0.0
        };
        Row {
            data_size,
            count,
            time_us: secs * 1e6,
            alg_bw,
            bus_bw: alg_bw * bus_factor,
            check,
            error: None,
        }
    }
}

/// The table's header line.
pub fn header() -> String {
    format!(
        "{:>16} {:>14} {:>20} {:>20} {:>13}",
        "data_size(Bytes)",
        "aveg_time(us)",
        "alg_bandwidth(GB/s)",
        "bus_bandwidth(GB/s)",
        "check_result"
    )
}

/// One table line (with the error column when the row has one).
pub fn format_row(r: &Row) -> String {
    let mut s = format!(
        "{:>16} {:>14.2} {:>20.6} {:>20.6} {:>13}",
        r.data_size,
        r.time_us,
        r.alg_bw,
        r.bus_bw,
        r.check.as_str()
    );
    if let Some(e) = r.error {
        let _ = write!(s, " {e:>12.3e}");
    }
    s
}

/// The header with the error column of compressed runs.
pub fn header_with_error() -> String {
    format!("{} {:>12}", header(), "rel_l2_error")
}

/// Description of the run, repeated in the CSV and JSON files.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// Operation name.
    pub op: &'static str,
    /// Element type name.
    pub dtype: &'static str,
    /// Reduction name (reducing operations only).
    pub reduce_op: Option<&'static str>,
    /// Root (rooted operations only).
    pub root: Option<u32>,
    /// Number of ranks.
    pub ranks: u32,
    /// Ranks per node (`-p`, or the launcher's local size).
    pub ranks_per_node: Option<u32>,
    /// Timed iterations.
    pub iters: u32,
    /// Warm-up iterations.
    pub warmup: u32,
    /// How the ranks were started.
    pub launch: String,
    /// Compression method of a compressed all-reduce run.
    pub compress: Option<String>,
}

/// Collects and prints the rows of rank 0.
pub struct Reporter {
    info: RunInfo,
    rows: Vec<Row>,
    total: usize,
    progress: bool,
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl Reporter {
    /// Prints the header; `total` sizes will follow.
    pub fn new(info: RunInfo, total: usize) -> Reporter {
        println!(
            "{}",
            if info.compress.is_some() {
                header_with_error()
            } else {
                header()
            }
        );
        Reporter {
            info,
            rows: Vec::new(),
            total,
            progress: std::io::stderr().is_terminal(),
        }
    }

    /// Notes that size `i` (of `bytes` bytes) is starting.
    pub fn start(&mut self, i: usize, bytes: u64) {
        if self.progress {
            eprint!("\r\x1b[K[{}/{}] {} bytes ...", i + 1, self.total, bytes);
            let _ = std::io::stderr().flush();
        }
    }

    /// Prints and keeps one row.
    pub fn row(&mut self, r: Row) {
        if self.progress {
            eprint!("\r\x1b[K");
        }
        println!("{}", format_row(&r));
        self.rows.push(r);
    }

    /// The rows so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The table as CSV.
    pub fn csv(&self) -> String {
        let i = &self.info;
        let mut s = String::from(
            "op,dtype,reduce_op,root,ranks,data_size,count,aveg_time_us,\
             alg_bandwidth_gbps,bus_bandwidth_gbps,check_result",
        );
        // Compressed runs add two columns; other runs keep the table as it was.
        s.push_str(if i.compress.is_some() {
            ",compress,rel_l2_error\n"
        } else {
            "\n"
        });
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:.3},{:.6},{:.6},{}{}",
                i.op,
                i.dtype,
                i.reduce_op.unwrap_or(""),
                i.root.map_or(String::new(), |r| r.to_string()),
                i.ranks,
                r.data_size,
                r.count,
                r.time_us,
                r.alg_bw,
                r.bus_bw,
                r.check.as_str(),
                match &i.compress {
                    Some(m) => format!(
                        ",{m},{}",
                        r.error.map_or(String::new(), |e| format!("{e:e}"))
                    ),
                    None => String::new(),
                }
            );
        }
        s
    }

    /// The run as a JSON document.
    pub fn json(&self) -> String {
        let i = &self.info;
        let opt_str = |o: Option<&str>| o.map_or("null".into(), json_str);
        let opt_num = |o: Option<u32>| o.map_or("null".into(), |v| v.to_string());
        let mut s = format!(
            "{{\n  \"op\": {},\n  \"dtype\": {},\n  \"reduce_op\": {},\n  \"root\": {},\n  \
             \"ranks\": {},\n  \"ranks_per_node\": {},\n  \"iters\": {},\n  \
             \"warmup_iters\": {},\n  \"launch\": {},{}\n  \"rows\": [",
            json_str(i.op),
            json_str(i.dtype),
            opt_str(i.reduce_op),
            opt_num(i.root),
            i.ranks,
            opt_num(i.ranks_per_node),
            i.iters,
            i.warmup,
            json_str(&i.launch),
            i.compress.as_deref().map_or(String::new(), |m| format!(
                "\n  \"compress\": {},",
                json_str(m)
            )),
        );
        for (k, r) in self.rows.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"data_size\": {}, \"count\": {}, \"aveg_time_us\": {}, \
                 \"alg_bandwidth_gbps\": {}, \"bus_bandwidth_gbps\": {}, \"check_result\": {}{}}}",
                if k == 0 { "" } else { "," },
                r.data_size,
                r.count,
                num(r.time_us),
                num(r.alg_bw),
                num(r.bus_bw),
                json_str(r.check.as_str()),
                r.error
                    .map_or(String::new(), |e| format!(", \"rel_l2_error\": {}", num(e)))
            );
        }
        s.push_str("\n  ]\n}\n");
        s
    }

    /// Clears the progress line and writes the requested files.
    pub fn finish(&mut self, csv: Option<&Path>, json: Option<&Path>) -> Result<(), String> {
        if self.progress {
            eprint!("\r\x1b[K");
        }
        let write = |p: &Path, text: String| {
            std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
        };
        if let Some(p) = csv {
            write(p, self.csv())?;
        }
        if let Some(p) = json {
            write(p, self.json())?;
        }
        Ok(())
    }
}

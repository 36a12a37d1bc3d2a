//! Output of rank 0: the table on stdout, a progress bar on a terminal's stderr, and the
//! CSV / JSON files.

use crate::progress::Progress;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

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
    progress: Progress,
}

/// The JSON file: the run, then one object per size. serde_json writes a non-finite number
/// (a zero-time size's bandwidth) as `null`.
#[derive(Serialize)]
struct JsonRun<'a> {
    op: &'a str,
    dtype: &'a str,
    reduce_op: Option<&'a str>,
    root: Option<u32>,
    ranks: u32,
    ranks_per_node: Option<u32>,
    iters: u32,
    warmup_iters: u32,
    launch: &'a str,
    /// The compression method of a compressed run (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    compress: Option<&'a str>,
    rows: Vec<JsonRow>,
}

#[derive(Serialize)]
struct JsonRow {
    data_size: u64,
    count: u64,
    aveg_time_us: f64,
    alg_bandwidth_gbps: f64,
    bus_bandwidth_gbps: f64,
    check_result: &'static str,
    /// Relative L2 error against the exact sum (compressed runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    rel_l2_error: Option<f64>,
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
            progress: Progress::new(total as u64, "sizes"),
        }
    }

    /// Notes that size `i` (of `bytes` bytes) is starting.
    pub fn start(&mut self, i: usize, bytes: u64) {
        self.progress.start(i, format!("{bytes} bytes"));
    }

    /// Prints and keeps one row.
    pub fn row(&mut self, r: Row) {
        self.progress.print(|| println!("{}", format_row(&r)));
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
        let run = JsonRun {
            op: i.op,
            dtype: i.dtype,
            reduce_op: i.reduce_op,
            root: i.root,
            ranks: i.ranks,
            ranks_per_node: i.ranks_per_node,
            iters: i.iters,
            warmup_iters: i.warmup,
            launch: &i.launch,
            compress: i.compress.as_deref(),
            rows: self
                .rows
                .iter()
                .map(|r| JsonRow {
                    data_size: r.data_size,
                    count: r.count,
                    aveg_time_us: r.time_us,
                    alg_bandwidth_gbps: r.alg_bw,
                    bus_bandwidth_gbps: r.bus_bw,
                    check_result: r.check.as_str(),
                    rel_l2_error: r.error,
                })
                .collect(),
        };
        // Serializing plain strings and numbers cannot fail.
        let mut text = serde_json::to_string_pretty(&run).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Clears the progress line and writes the requested files.
    pub fn finish(&mut self, csv: Option<&Path>, json: Option<&Path>) -> Result<(), String> {
        self.progress.finish();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_text_and_writes_non_finite_numbers_as_null() {
        let info = RunInfo {
            op: "all_reduce",
            dtype: "fp32",
            reduce_op: Some("sum"),
            root: None,
            ranks: 4,
            ranks_per_node: Some(2),
            iters: 20,
            warmup: 5,
            launch: "hcclrun \"q\" \\ \n\u{1}".into(),
            compress: None,
        };
        let mut rep = Reporter::new(info, 2);
        rep.row(Row::new(8, 2, 1.5e-6, 1.5, CheckResult::Success));
        rep.row(Row::new(16, 4, 0.0, 1.5, CheckResult::Null));
        let text = rep.json();
        let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(doc["launch"], "hcclrun \"q\" \\ \n\u{1}");
        assert_eq!(doc["reduce_op"], "sum");
        assert!(doc["root"].is_null());
        assert_eq!(doc["ranks_per_node"], 2);
        assert_eq!(doc["warmup_iters"], 5);
        let rows = doc["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["data_size"], 8);
        assert_eq!(rows[0]["count"], 2);
        assert_eq!(
            rows[0]["bus_bandwidth_gbps"].as_f64(),
            Some(8.0 / 1.5e-6 / 1e9 * 1.5)
        );
        assert_eq!(rows[1]["aveg_time_us"].as_f64(), Some(0.0));
        assert_eq!(rows[1]["alg_bandwidth_gbps"].as_f64(), Some(0.0));
        assert_eq!(rows[1]["check_result"], "NULL");
        // Non-finite values cannot be written as JSON numbers.
        rep.rows[1].bus_bw = f64::INFINITY;
        let doc: serde_json::Value = serde_json::from_str(&rep.json()).expect("valid JSON");
        assert!(doc["rows"][1]["bus_bandwidth_gbps"].is_null());
        assert!(doc.get("compress").is_none());
        assert!(doc["rows"][0].get("rel_l2_error").is_none());
    }

    #[test]
    fn json_of_a_compressed_run_names_the_method_and_the_error() {
        let info = RunInfo {
            op: "all_reduce",
            dtype: "fp32",
            reduce_op: Some("sum"),
            root: None,
            ranks: 2,
            ranks_per_node: None,
            iters: 1,
            warmup: 0,
            launch: "threads".into(),
            compress: Some("int8:256".into()),
        };
        let mut rep = Reporter::new(info, 1);
        let mut row = Row::new(8, 2, 1e-6, 1.0, CheckResult::Success);
        row.error = Some(0.25);
        rep.row(row);
        let doc: serde_json::Value = serde_json::from_str(&rep.json()).expect("valid JSON");
        assert_eq!(doc["compress"], "int8:256");
        assert_eq!(doc["rows"][0]["rel_l2_error"].as_f64(), Some(0.25));
    }
}

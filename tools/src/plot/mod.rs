//! `hccl_plot`: bus bandwidth against message size, log-log, as a PNG or SVG.
//!
//! Inputs are tables with a header line: the tester's `--csv` files, its stdout, or any CSV or
//! whitespace table (such as `mpi_allreduce`'s) whose header names a size column (`data_size`,
//! `bytes`, `size`) and a bandwidth column (`bus_bandwidth_gbps`, `bus_bandwidth`, `busbw`, ...;
//! header units in parentheses or after `_GB/s` are ignored). Each input is one line of the plot,
//! split further by its `algo` (or `op`) column when that has several values. `--ref` inputs are
//! drawn dashed, for overlaying a reference run.
//!
//! `hccl_plot timeline TRACE.json... -o OUT` draws the operations of `HCCL_TRACE_FILE` traces
//! instead: see [`timeline`].

pub mod chart;
pub mod timeline;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Which column is plotted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Metric {
    /// Bus bandwidth.
    Bus,
    /// Algorithm bandwidth.
    #[value(name = "alg")]
    Alg,
}

/// One line of the plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (bytes, GB/s) points, in input order.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (reference data).
    pub dashed: bool,
}

/// Command-line options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Output file, PNG or SVG by its extension.
    pub out: PathBuf,
    /// Inputs and their labels.
    pub inputs: Vec<(PathBuf, Option<String>)>,
    /// Reference inputs and their labels.
    pub refs: Vec<(PathBuf, Option<String>)>,
    /// Chart title.
    pub title: String,
    /// Plotted column.
    pub metric: Metric,
}

/// `hccl_plot`'s flags.
#[derive(Parser, Debug)]
#[command(
    name = "hccl_plot",
    about = "Plots bandwidth (GB/s) against message size (bytes), both axes logarithmic, one\n\
             line per FILE (and per algorithm/op when a file has several). FILE is a tester\n\
             --csv file, a tester stdout table or any table with size and bandwidth columns.\n\
             --ref files are drawn dashed. `hccl_plot timeline --help` for traces.",
    disable_version_flag = true,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    sub: Option<Sub>,
    /// Output file: PNG or SVG by its extension
    #[arg(short = 'o', long = "output", value_name = "OUT", required = true)]
    out: Option<PathBuf>,
    /// Chart title [default: bus bandwidth or algorithm bandwidth]
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// Plotted column: bus or algorithm bandwidth
    #[arg(long, value_enum, default_value = "bus")]
    metric: Metric,
    /// Reference table, drawn dashed (repeatable)
    #[arg(long = "ref", value_name = "FILE[=LABEL]", value_parser = labelled)]
    refs: Vec<(PathBuf, Option<String>)>,
    /// Tables to plot
    #[arg(value_name = "FILE[=LABEL]", value_parser = labelled, required_unless_present = "refs")]
    inputs: Vec<(PathBuf, Option<String>)>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Draws the operations and steps of HCCL_TRACE_FILE traces, one lane per rank
    Timeline {
        /// Output file: PNG or SVG by its extension
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        out: PathBuf,
        /// Chart title [default: the operation and rank counts]
        #[arg(long, value_name = "TEXT")]
        title: Option<String>,
        /// Trace files (all ranks' files of one run, e.g. trace.*.json)
        #[arg(value_name = "TRACE", required = true)]
        traces: Vec<PathBuf>,
    },
}

/// What `hccl_plot` is asked to draw.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Bandwidth against size from tables.
    Bandwidth(Options),
    /// A timeline of traces.
    Timeline {
        /// Output file.
        out: PathBuf,
        /// Title, when given.
        title: Option<String>,
        /// Trace files.
        traces: Vec<PathBuf>,
    },
}

fn labelled(s: &str) -> Result<(PathBuf, Option<String>), String> {
    Ok(match s.rsplit_once('=') {
        Some((p, l)) if !l.is_empty() && !p.is_empty() => (PathBuf::from(p), Some(l.to_string())),
        _ => (PathBuf::from(s), None),
    })
}

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Request, clap::Error> {
    let argv = std::iter::once(OsString::from("hccl_plot")).chain(args);
    let a = Args::try_parse_from(argv)?;
    if let Some(Sub::Timeline { out, title, traces }) = a.sub {
        return Ok(Request::Timeline { out, title, traces });
    }
    let title = a.title.unwrap_or_else(|| {
        match a.metric {
            Metric::Bus => "bus bandwidth",
            Metric::Alg => "algorithm bandwidth",
        }
        .to_string()
    });
    Ok(Request::Bandwidth(Options {
        out: a.out.unwrap_or_default(),
        inputs: a.inputs,
        refs: a.refs,
        title,
        metric: a.metric,
    }))
}

fn norm(h: &str) -> String {
    h.split('(').next().unwrap_or(h).trim().to_ascii_lowercase()
}

fn column(header: &[String], names: &[&str]) -> Option<usize> {
    names.iter().find_map(|n| {
        header
            .iter()
            .position(|h| h == n || h.starts_with(&format!("{n}_gb")))
    })
}

/// Reads the series of one table; `label` names it (the file stem when `None`).
pub fn read_table(
    text: &str,
    label: &str,
    metric: Metric,
    dashed: bool,
) -> Result<Vec<Series>, String> {
    let size_names = ["data_size", "bytes", "size", "msg_size", "size_bytes"];
    let bw_names: &[&str] = match metric {
        Metric::Bus => &["bus_bandwidth_gbps", "bus_bandwidth", "busbw", "bus_bw"],
        Metric::Alg => &["alg_bandwidth_gbps", "alg_bandwidth", "algbw", "alg_bw"],
    };
    let split = |l: &str, comma: bool| -> Vec<String> {
        if comma {
            l.split(',').map(|f| f.trim().to_string()).collect()
        } else {
            l.split_whitespace().map(String::from).collect()
        }
    };
    let mut lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
    let (header, comma, sc, bc) = loop {
        let l = lines
            .next()
            .ok_or_else(|| format!("{label}: no header naming a size and a bandwidth column"))?;
        let comma = l.contains(',');
        let h: Vec<String> = split(l, comma).iter().map(|f| norm(f)).collect();
        if let (Some(s), Some(b)) = (column(&h, &size_names), column(&h, bw_names)) {
            break (h, comma, s, b);
        }
    };
    let group = column(&header, &["algo", "algorithm", "op"]);
    let mut out: Vec<Series> = Vec::new();
    for l in lines {
        let f = split(l, comma);
        let (Some(x), Some(y)) = (
            f.get(sc).and_then(|v| v.parse::<f64>().ok()),
            f.get(bc).and_then(|v| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        let g = group.and_then(|g| f.get(g)).cloned().unwrap_or_default();
        let i = match out.iter().position(|s| s.label == g) {
            Some(i) => i,
            None => {
                out.push(Series {
                    label: g,
                    points: Vec::new(),
                    dashed,
                });
                out.len() - 1
            }
        };
        out[i].points.push((x, y));
    }
    if out.is_empty() {
        return Err(format!("{label}: no data rows"));
    }
    let several = out.len() > 1;
    for s in &mut out {
        s.label = if several {
            format!("{label} {}", s.label)
        } else {
            label.to_string()
        };
    }
    Ok(out)
}

pub use chart::size_label;

fn load(
    path: &Path,
    label: &Option<String>,
    metric: Metric,
    dashed: bool,
) -> Result<Vec<Series>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = label.clone().unwrap_or_else(|| {
        path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        )
    });
    read_table(&text, &name, metric, dashed)
}

/// Reads the inputs and writes the chart.
pub fn plot(o: &Options) -> Result<(), String> {
    let mut series = Vec::new();
    for (p, l) in &o.inputs {
        series.extend(load(p, l, o.metric, false)?);
    }
    for (p, l) in &o.refs {
        let l = l.clone().or_else(|| Some("reference".into()));
        series.extend(load(p, &l, o.metric, true)?);
    }
    let y_title = match o.metric {
        Metric::Bus => "bus bandwidth (GB/s)",
        Metric::Alg => "algorithm bandwidth (GB/s)",
    };
    chart::write_lines(&o.out, &series, &o.title, y_title)
}

/// `hccl_plot`'s entry point.
pub fn main() -> ExitCode {
    crate::quiet_on_closed_pipe();
    let (done, out) = match parse(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit()) {
        Request::Bandwidth(o) => (plot(&o), o.out),
        Request::Timeline { out, title, traces } => {
            (timeline::plot(&traces, &out, title.as_deref()), out)
        }
    };
    match done {
        Ok(()) => {
            println!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hccl_plot: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tester_csv_stdout_and_mpi_tables() {
        let csv = "op,dtype,reduce_op,root,ranks,data_size,count,aveg_time_us,alg_bandwidth_gbps,\
                   bus_bandwidth_gbps,check_result\nall_reduce,fp32,sum,,2,8,2,1.0,0.008,0.008,success\n\
                   all_reduce,fp32,sum,,2,1024,256,2.0,0.5,0.5,success\n";
        let s = read_table(csv, "ours", Metric::Bus, false).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].points, [(8.0, 0.008), (1024.0, 0.5)]);
        let out = "    data_size(Bytes)  aveg_time(us)  alg_bandwidth(GB/s)  bus_bandwidth(GB/s)  check_result\n\
                   8 1.5 0.01 0.02 success\n";
        assert_eq!(
            read_table(out, "x", Metric::Bus, false).unwrap()[0].points,
            [(8.0, 0.02)]
        );
        let mpi = "bytes time_us algbw_GB/s busbw_GB/s check\n 8 1.0 0.1 0.3 ok\n";
        let s = read_table(mpi, "mpi", Metric::Alg, true).unwrap();
        assert_eq!((s[0].points[0], s[0].dashed), ((8.0, 0.1), true));
        assert!(read_table("a,b\n1,2\n", "bad", Metric::Bus, false).is_err());
    }

    #[test]
    fn splits_by_algorithm() {
        let t = "algo,size,busbw\nring,8,1\ntree,8,2\nring,16,3\n";
        let s = read_table(t, "run", Metric::Bus, false).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label, "run ring");
        assert_eq!(s[0].points.len(), 2);
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(8.0), "8");
        assert_eq!(size_label(2048.0), "2K");
        assert_eq!(size_label(64.0 * 1048576.0), "64M");
        assert_eq!(chart::decade_label(-2), "0.01");
        assert_eq!(chart::decade_label(1), "10");
    }

    #[test]
    fn renders_lines_in_series_colours() {
        use plotters::prelude::{BitMapBackend, IntoDrawingArea};
        let s = vec![
            Series {
                label: "a".into(),
                points: vec![(8.0, 0.01), (1e6, 10.0)],
                dashed: false,
            },
            Series {
                label: "b".into(),
                points: vec![(8.0, 0.1), (1e6, 1.0)],
                dashed: true,
            },
        ];
        let (w, h) = chart::SIZE;
        let mut px = vec![0u8; (w * h * 3) as usize];
        {
            let area = BitMapBackend::with_buffer(&mut px, (w, h)).into_drawing_area();
            chart::draw_lines(&area, &s, "t", "y").unwrap();
            area.present().unwrap();
        }
        let count = |(r, g, b): (u8, u8, u8)| px.chunks(3).filter(|p| p == &[r, g, b]).count();
        let (solid, dashed) = (count(chart::PALETTE[0]), count(chart::PALETTE[1]));
        assert!(solid > 500, "{solid}");
        // The same length drawn dashed leaves gaps.
        assert!(dashed > 200 && dashed < solid, "{dashed} vs {solid}");
        assert_eq!(count(chart::PALETTE[2]), 0);
        let none: Vec<Series> = Vec::new();
        let area = BitMapBackend::with_buffer(&mut px, (w, h)).into_drawing_area();
        assert!(chart::draw_lines(&area, &none, "t", "y").is_err());
    }
}

//! `hccl_plot`: bus bandwidth against message size, log-log, as a PNG.
//!
//! Inputs are tables with a header line: the tester's `--csv` files, its stdout, or any CSV or
//! whitespace table (such as `mpi_allreduce`'s) whose header names a size column (`data_size`,
//! `bytes`, `size`) and a bandwidth column (`bus_bandwidth_gbps`, `bus_bandwidth`, `busbw`, ...;
//! header units in parentheses or after `_GB/s` are ignored). Each input is one line of the plot,
//! split further by its `algo` (or `op`) column when that has several values. `--ref` inputs are
//! drawn dashed, for overlaying a reference run.

pub mod canvas;
pub mod png;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use canvas::{text_width, Canvas, Rgb};
use clap::{Parser, ValueEnum};

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
    /// Output PNG.
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
             --ref files are drawn dashed.",
    disable_version_flag = true
)]
struct Args {
    /// Output PNG file
    #[arg(short = 'o', long = "output", value_name = "OUT", required = true)]
    out: PathBuf,
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

fn labelled(s: &str) -> Result<(PathBuf, Option<String>), String> {
    Ok(match s.rsplit_once('=') {
        Some((p, l)) if !l.is_empty() && !p.is_empty() => (PathBuf::from(p), Some(l.to_string())),
        _ => (PathBuf::from(s), None),
    })
}

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, clap::Error> {
    let argv = std::iter::once(OsString::from("hccl_plot")).chain(args);
    let a = Args::try_parse_from(argv)?;
    let title = a.title.unwrap_or_else(|| {
        match a.metric {
            Metric::Bus => "bus bandwidth",
            Metric::Alg => "algorithm bandwidth",
        }
        .to_string()
    });
    Ok(Options {
        out: a.out,
        inputs: a.inputs,
        refs: a.refs,
        title,
        metric: a.metric,
    })
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

const PALETTE: [Rgb; 8] = [
    [31, 119, 180],
    [214, 39, 40],
    [44, 160, 44],
    [255, 127, 14],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [90, 90, 90],
];
const BLACK: Rgb = [0, 0, 0];
const GRID: Rgb = [225, 225, 225];
const MINOR: Rgb = [242, 242, 242];
const WHITE: Rgb = [255, 255, 255];

/// `8`, `1K`, `64M`: a power-of-two byte count in 1024-based units.
pub fn size_label(b: f64) -> String {
    let b = b.round() as u64;
    for (u, s) in [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        if b >= u && b.is_multiple_of(u) {
            return format!("{}{s}", b / u);
        }
    }
    b.to_string()
}

fn decade_label(e: i32) -> String {
    if e >= 0 {
        format!("{}", 10f64.powi(e))
    } else {
        format!("{:.*}", (-e) as usize, 10f64.powi(e))
    }
}

/// Renders the chart.
pub fn render(series: &[Series], title: &str, y_title: &str) -> Result<Canvas, String> {
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| *x > 0.0 && *y > 0.0 && x.is_finite() && y.is_finite())
    };
    if pts().next().is_none() {
        return Err("no points with positive size and bandwidth to plot".into());
    }
    let (w, h) = (960, 600);
    let mut c = Canvas::new(w, h, WHITE);
    let (left, right, top, bottom) = (100, w - 24, 48, h - 72);
    let fold =
        |f: fn(f64, f64) -> f64, init: f64, by: fn(&(f64, f64)) -> f64| pts().map(by).fold(init, f);
    let (x_min, x_max) = (
        fold(f64::min, f64::MAX, |p| p.0).log2().floor() as i32,
        fold(f64::max, 0.0, |p| p.0).log2().ceil() as i32,
    );
    let x_max = x_max.max(x_min + 1);
    let x_step = ((x_max - x_min) as f64 / 12.0).ceil().max(1.0) as i32;
    let x_step = [1, 2, 4, 5, 10]
        .into_iter()
        .find(|&s| s >= x_step)
        .unwrap_or(x_step);
    // Widen the axis to the next tick so both ends are labelled.
    let x_max = x_min + (x_max - x_min + x_step - 1) / x_step * x_step;
    let (y_min, y_max) = (
        fold(f64::min, f64::MAX, |p| p.1).log10().floor() as i32,
        fold(f64::max, 0.0, |p| p.1).log10().ceil() as i32,
    );
    let y_max = y_max.max(y_min + 1);
    let px = |x: f64| {
        left as f64 + (x.log2() - x_min as f64) / (x_max - x_min) as f64 * (right - left) as f64
    };
    let py = |y: f64| {
        bottom as f64 - (y.log10() - y_min as f64) / (y_max - y_min) as f64 * (bottom - top) as f64
    };
    // Grid: minor lines at 2..9 × each decade, major lines at decades and at x ticks.
    for e in y_min..y_max {
        for m in 2..10 {
            let y = py(m as f64 * 10f64.powi(e)).round() as i32;
            c.fill(left, y, right, y + 1, MINOR);
        }
    }
    for e in x_min..=x_max {
        let x = px(2f64.powi(e)).round() as i32;
        if (e - x_min) % x_step != 0 {
            continue;
        }
        c.fill(x, top, x + 1, bottom, GRID);
        c.fill(x, bottom, x + 1, bottom + 6, BLACK);
        let l = size_label(2f64.powi(e));
        c.text(x - text_width(&l, 2) / 2, bottom + 10, &l, 2, BLACK);
    }
    for e in y_min..=y_max {
        let y = py(10f64.powi(e)).round() as i32;
        c.fill(left, y, right, y + 1, GRID);
        c.fill(left - 6, y, left, y + 1, BLACK);
        let l = decade_label(e);
        c.text(left - 10 - text_width(&l, 2), y - 7, &l, 2, BLACK);
    }
    c.rect(left, top, right + 1, bottom + 1, BLACK);
    let xt = "message size (bytes)";
    c.text((left + right - text_width(xt, 2)) / 2, h - 30, xt, 2, BLACK);
    c.text_up(
        12,
        (top + bottom + text_width(y_title, 2)) / 2,
        y_title,
        2,
        BLACK,
    );
    c.text((w - text_width(title, 3)) / 2, 12, title, 3, BLACK);
    for (k, s) in series.iter().enumerate() {
        let col = PALETTE[k % PALETTE.len()];
        let mut p: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let dash = if s.dashed { 8 } else { 0 };
        for seg in p.windows(2) {
            c.line(
                px(seg[0].0),
                py(seg[0].1),
                px(seg[1].0),
                py(seg[1].1),
                3,
                col,
                dash,
            );
        }
        for &(x, y) in &p {
            let (cx, cy) = (px(x).round() as i32, py(y).round() as i32);
            c.fill(cx - 3, cy - 3, cx + 4, cy + 4, col);
        }
    }
    // Legend, top left inside the plot area, where bandwidth curves start low.
    let lw = series
        .iter()
        .map(|s| text_width(&s.label, 2))
        .max()
        .unwrap_or(0)
        + 56;
    let lh = series.len() as i32 * 22 + 10;
    let (lx, ly) = (left + 12, top + 12);
    c.fill(lx, ly, lx + lw, ly + lh, WHITE);
    c.rect(lx, ly, lx + lw, ly + lh, BLACK);
    for (k, s) in series.iter().enumerate() {
        let col = PALETTE[k % PALETTE.len()];
        let y = ly + 8 + k as i32 * 22;
        let dash = if s.dashed { 6 } else { 0 };
        c.line(
            (lx + 8) as f64,
            (y + 7) as f64,
            (lx + 40) as f64,
            (y + 7) as f64,
            3,
            col,
            dash,
        );
        c.text(lx + 48, y, &s.label, 2, BLACK);
    }
    Ok(c)
}

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

/// Reads the inputs and writes the PNG.
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
    let c = render(&series, &o.title, y_title)?;
    let png = png::encode(c.w as u32, c.h as u32, &c.px);
    std::fs::write(&o.out, png).map_err(|e| format!("{}: {e}", o.out.display()))
}

/// `hccl_plot`'s entry point.
pub fn main() -> ExitCode {
    crate::quiet_on_closed_pipe();
    let o = parse(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit());
    match plot(&o) {
        Ok(()) => {
            println!("wrote {}", o.out.display());
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
        assert_eq!(decade_label(-2), "0.01");
        assert_eq!(decade_label(1), "10");
    }

    #[test]
    fn renders_lines_in_series_colours() {
        let s = vec![Series {
            label: "a".into(),
            points: vec![(8.0, 0.01), (1e6, 10.0)],
            dashed: false,
        }];
        let c = render(&s, "t", "y").unwrap();
        let blue = (0..c.h)
            .flat_map(|y| (0..c.w).map(move |x| (x, y)))
            .filter(|&(x, y)| c.get(x, y) == PALETTE[0])
            .count();
        assert!(blue > 500, "{blue}");
        assert!(render(&[], "t", "y").is_err());
    }
}

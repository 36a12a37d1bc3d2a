//! Log-log line charts drawn with `plotters`, written as PNG or SVG by the file's extension.
//!
//! Text is laid out with DejaVu Sans compiled into the tools (the `dejavu` crate, through
//! plotters' `ab_glyph` backend), so drawing needs no system font or fontconfig on any machine.
//! Both axes are drawn in log space (x: log2 of bytes, y: log10 of the value) so that ticks fall
//! on powers of two and on decades exactly, labelled `8`, `1K`, `64M` and `0.01`, `1`, `100`.

use std::ops::Range;
use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Series;

/// Chart size in pixels (PNG) or user units (SVG).
pub const SIZE: (u32, u32) = (960, 600);

/// Series colours, in order (the tab10 palette, then grey).
pub const PALETTE: [(u8, u8, u8); 8] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (90, 90, 90),
];

/// The font family every text of the charts is drawn in.
pub const FONT: &str = "sans-serif";

/// An output format, chosen by the file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.png`
    Png,
    /// `.svg`
    Svg,
}

impl Format {
    /// The format `path`'s extension names.
    pub fn of(path: &Path) -> Result<Format, String> {
        match path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .as_deref()
        {
            Some("png") => Ok(Format::Png),
            Some("svg") => Ok(Format::Svg),
            _ => Err(format!(
                "{}: the plot's name must end in .png or .svg",
                path.display()
            )),
        }
    }
}

/// Registers the embedded font under [`FONT`] (once per process).
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .unwrap_or_else(|_| unreachable!("the embedded DejaVu Sans parses"));
    });
}

/// The colour of series `k`.
pub fn colour(k: usize) -> RGBColor {
    let (r, g, b) = PALETTE[k % PALETTE.len()];
    RGBColor(r, g, b)
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the chart: {e}")
}

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

/// `0.01`, `1`, `100`: the decade `10^e`.
pub fn decade_label(e: i32) -> String {
    if e >= 0 {
        format!("{}", 10f64.powi(e))
    } else {
        format!("{:.*}", (-e) as usize, 10f64.powi(e))
    }
}

/// The axes' ranges in log space: whole powers of two (x) and decades (y) around the points.
fn log_ranges(series: &[Series]) -> Result<(Range<f64>, Range<f64>), String> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|&(x, y)| x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
        .collect();
    if pts.is_empty() {
        return Err("no points with positive size and value to plot".into());
    }
    let lo = |f: fn(&(f64, f64)) -> f64| pts.iter().map(f).fold(f64::MAX, f64::min);
    let hi = |f: fn(&(f64, f64)) -> f64| pts.iter().map(f).fold(f64::MIN, f64::max);
    let x0 = lo(|p| p.0).log2().floor();
    let x1 = hi(|p| p.0).log2().ceil().max(x0 + 1.0);
    let y0 = lo(|p| p.1).log10().floor();
    let y1 = hi(|p| p.1).log10().ceil().max(y0 + 1.0);
    Ok((x0..x1, y0..y1))
}

/// Draws the log-log chart of `series` (x: bytes, y: `y_title`) on `area`.
pub fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
    title: &str,
    y_title: &str,
) -> Result<(), String> {
    register_font();
    let (xr, yr) = log_ranges(series)?;
    area.fill(&WHITE).map_err(err)?;
    let x_ticks = ((xr.end - xr.start) as usize + 1).min(13);
    let y_ticks = (yr.end - yr.start) as usize + 1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(xr, yr)
        .map_err(err)?;
    let whole = |v: f64| (v - v.round()).abs() < 1e-9;
    let x_fmt = |v: &f64| {
        if whole(*v) {
            size_label(2f64.powf(v.round()))
        } else {
            String::new()
        }
    };
    let y_fmt = |v: &f64| {
        if whole(*v) {
            decade_label(v.round() as i32)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(x_ticks)
        .y_labels(y_ticks)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_desc("message size (bytes)")
        .y_desc(y_title)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .max_light_lines(4)
        .light_line_style(RGBColor(242, 242, 242))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(err)?;
    for (k, s) in series.iter().enumerate() {
        let col = colour(k);
        let mut p: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
            .map(|(x, y)| (x.log2(), y.log10()))
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = col.stroke_width(3);
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(p.clone(), 10, 6, style))
        } else {
            chart.draw_series(LineSeries::new(p.clone(), style))
        }
        .map_err(err)?;
        let dashed = s.dashed;
        drawn.label(s.label.as_str()).legend(move |(x, y)| {
            let a = (x, y);
            let b = (x + if dashed { 12 } else { 28 }, y);
            PathElement::new(vec![a, b], col.stroke_width(3))
        });
        chart
            .draw_series(p.iter().map(|&c| Circle::new(c, 4, col.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Writes the log-log chart of `series` to `path`, PNG or SVG by its extension.
pub fn write_lines(
    path: &Path,
    series: &[Series],
    title: &str,
    y_title: &str,
) -> Result<(), String> {
    write(
        path,
        SIZE,
        |a| draw_lines(a, series, title, y_title),
        |a| draw_lines(a, series, title, y_title),
    )
}

/// Writes `path` in the format its extension names: `png` draws on a bitmap, `svg` on an SVG
/// document, both of `size`.
pub fn write(
    path: &Path,
    size: (u32, u32),
    png: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> Result<(), String>,
    svg: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), String>,
) -> Result<(), String> {
    let io = |e: String| format!("{}: {e}", path.display());
    match Format::of(path)? {
        Format::Png => {
            let area = BitMapBackend::new(path, size).into_drawing_area();
            png(&area).map_err(io)?;
            area.present().map_err(|e| io(e.to_string()))
        }
        Format::Svg => {
            let area = SVGBackend::new(path, size).into_drawing_area();
            svg(&area).map_err(io)?;
            area.present().map_err(|e| io(e.to_string()))
        }
    }
}

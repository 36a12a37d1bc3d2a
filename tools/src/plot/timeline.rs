//! `hccl_plot timeline`: the operations of `HCCL_TRACE_FILE` traces as a per-rank timeline.
//!
//! Every rank (and communicator, when a rank traced several) gets a lane; each operation is a
//! bar in the upper part of its lane, coloured by operation, and each step of its schedule a
//! bar in the lower part, alternating two lighter tones of that colour so neighbouring steps
//! stay apart. Time runs from the earliest event of all the files; the traces' timestamps are
//! wall-clock microseconds, so ranks of different processes line up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;

use super::chart::{self, colour, FONT};

/// One complete (`"ph": "X"`) event of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Rank (`pid`).
    pub rank: u64,
    /// Communicator index within the rank's file (`tid`).
    pub comm: u64,
    /// `op` or `step`.
    pub kind: Kind,
    /// Operation name (of the step's operation, for steps).
    pub op: String,
    /// Start, µs of wall-clock time.
    pub ts: f64,
    /// Duration in µs.
    pub dur: f64,
}

/// What an event stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A whole operation.
    Op,
    /// One step of an operation's schedule.
    Step,
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    name: String,
    #[serde(default)]
    cat: String,
    ph: String,
    #[serde(default)]
    pid: u64,
    #[serde(default)]
    tid: u64,
    #[serde(default)]
    ts: f64,
    #[serde(default)]
    dur: f64,
    #[serde(default)]
    args: serde_json::Map<String, serde_json::Value>,
}

/// The complete events of one trace file's text (a JSON array of trace events); `name` is
/// used in errors.
pub fn read_trace(text: &str, name: &str) -> Result<Vec<Event>, String> {
    let raw: Vec<RawEvent> = serde_json::from_str(text)
        .map_err(|e| format!("{name}: not a Chrome trace-event array: {e}"))?;
    let events: Vec<Event> = raw
        .into_iter()
        .filter(|e| e.ph == "X" && (e.cat == "op" || e.cat == "step"))
        .map(|e| Event {
            rank: e.pid,
            comm: e.tid,
            kind: if e.cat == "op" { Kind::Op } else { Kind::Step },
            op: e
                .args
                .get("op")
                .and_then(|v| v.as_str())
                .map_or(e.name, str::to_string),
            ts: e.ts,
            dur: e.dur.max(0.0),
        })
        .collect();
    Ok(events)
}

/// Reads every file's events.
pub fn load(files: &[PathBuf]) -> Result<Vec<Event>, String> {
    let mut all = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        all.extend(read_trace(&text, &f.display().to_string())?);
    }
    if !all.iter().any(|e| e.kind == Kind::Op) {
        return Err("the traces hold no operations".into());
    }
    Ok(all)
}

/// The lanes: (rank, communicator) in order, and each one's label.
fn lanes(events: &[Event]) -> Vec<((u64, u64), String)> {
    let mut per_rank: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in events {
        let comms = per_rank.entry(e.rank).or_default();
        if !comms.contains(&e.comm) {
            comms.push(e.comm);
        }
    }
    let mut out = Vec::new();
    for (rank, mut comms) in per_rank {
        comms.sort_unstable();
        let several = comms.len() > 1;
        for c in comms {
            let label = if several {
                format!("rank {rank} comm {c}")
            } else {
                format!("rank {rank}")
            };
            out.push(((rank, c), label));
        }
    }
    out
}

/// The operation names, in the order their colours are given.
pub fn op_names(events: &[Event]) -> Vec<String> {
    let mut names: Vec<String> = events.iter().map(|e| e.op.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// `c` mixed with white: `keep` of the colour stays.
fn tint(c: RGBColor, keep: f64) -> RGBColor {
    let m = |v: u8| (f64::from(v) * keep + 255.0 * (1.0 - keep)).round() as u8;
    RGBColor(m(c.0), m(c.1), m(c.2))
}

/// Draws the timeline of `events` on `area`.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    events: &[Event],
    title: &str,
) -> Result<(), String> {
    chart::register_font();
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the timeline: {e}");
    let lanes = lanes(events);
    let names = op_names(events);
    let t0 = events.iter().map(|e| e.ts).fold(f64::MAX, f64::min);
    let t1 = events.iter().map(|e| e.ts + e.dur).fold(f64::MIN, f64::max);
    let span = (t1 - t0).max(1.0);
    let (unit, per) = if span >= 10e6 {
        ("s", 1e6)
    } else if span >= 10e3 {
        ("ms", 1e3)
    } else {
        ("us", 1.0)
    };
    let x_end = span / per;
    // Bars keep a visible width however short the operation.
    let min_w = x_end / 2000.0;
    area.fill(&WHITE).map_err(err)?;
    let n = lanes.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(130)
        .build_cartesian_2d(0.0..x_end, 0.0..n)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|v| format!("{v}"))
        .x_desc(format!("time ({unit}) since the first event"))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(err)?;
    // Lane k is drawn from the top: y from n-k-1 to n-k.
    let lane_of: BTreeMap<(u64, u64), usize> = lanes
        .iter()
        .enumerate()
        .map(|(k, (id, _))| (*id, k))
        .collect();
    let bottom = |k: usize| n - k as f64 - 1.0;
    chart
        .draw_series(
            lanes
                .iter()
                .enumerate()
                .filter(|(k, _)| !k.is_multiple_of(2))
                .map(|(k, _)| {
                    Rectangle::new(
                        [(0.0, bottom(k)), (x_end, bottom(k) + 1.0)],
                        RGBColor(246, 246, 246).filled(),
                    )
                }),
        )
        .map_err(err)?;
    for (c, name) in names.iter().enumerate() {
        let col = colour(c);
        let bar = |e: &Event, lo: f64, hi: f64, fill: RGBColor| {
            let k = lane_of[&(e.rank, e.comm)];
            let x0 = (e.ts - t0) / per;
            let x1 = x0 + (e.dur / per).max(min_w);
            Rectangle::new([(x0, bottom(k) + lo), (x1, bottom(k) + hi)], fill.filled())
        };
        let mine = || events.iter().filter(move |e| &e.op == name);
        let mut step_index: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        let mut steps: Vec<&Event> = mine().filter(|e| e.kind == Kind::Step).collect();
        steps.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        chart
            .draw_series(steps.into_iter().map(|e| {
                let i = step_index.entry((e.rank, e.comm)).or_default();
                *i += 1;
                let fill = tint(col, if i.is_multiple_of(2) { 0.35 } else { 0.6 });
                bar(e, 0.12, 0.48, fill)
            }))
            .map_err(err)?;
        chart
            .draw_series(
                mine()
                    .filter(|e| e.kind == Kind::Op)
                    .map(|e| bar(e, 0.52, 0.88, col)),
            )
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], col.filled()));
    }
    // Lane labels, left of the plotting area at each lane's middle.
    let style = TextStyle::from((FONT, 15).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (k, (_, label)) in lanes.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, bottom(k) + 0.5));
        area.draw(&Text::new(label.clone(), (x - 8, y), style.clone()))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 15))
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Writes the timeline of `files` to `out`, PNG or SVG by its extension.
pub fn plot(files: &[PathBuf], out: &Path, title: Option<&str>) -> Result<(), String> {
    let events = load(files)?;
    let ranks = lanes(&events)
        .iter()
        .map(|((r, _), _)| *r)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let ops = events.iter().filter(|e| e.kind == Kind::Op).count();
    let title = title.map_or_else(
        || format!("{ops} operations on {ranks} ranks"),
        str::to_string,
    );
    let height = (120 + 40 * lanes(&events).len()).clamp(300, 4000) as u32;
    chart::write(
        out,
        (chart::SIZE.0 + 240, height),
        |a| draw(a, &events, &title),
        |a| draw(a, &events, &title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_complete_events_and_names_lanes() {
        let t = r#"[
          {"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 1"}},
          {"name":"AllReduce","cat":"op","ph":"X","pid":1,"tid":0,"ts":10.0,"dur":5.0,
           "args":{"op":"AllReduce"}},
          {"name":"step 0","cat":"step","ph":"X","pid":1,"tid":0,"ts":10.5,"dur":2.0,
           "args":{"op":"AllReduce","index":0}},
          {"name":"Barrier","cat":"op","ph":"X","pid":1,"tid":1,"ts":20.0,"dur":1.0}
        ]"#;
        let ev = read_trace(t, "t").unwrap();
        assert_eq!(ev.len(), 3);
        assert_eq!((ev[1].kind, ev[1].op.as_str()), (Kind::Step, "AllReduce"));
        assert_eq!(ev[2].op, "Barrier");
        let l = lanes(&ev);
        assert_eq!(l[0].1, "rank 1 comm 0");
        assert_eq!(l[1].1, "rank 1 comm 1");
        assert_eq!(op_names(&ev), ["AllReduce", "Barrier"]);
        assert!(read_trace("{", "bad").unwrap_err().contains("bad"));
    }
}

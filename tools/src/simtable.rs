//! `hccl_sim`'s table of predicted times, and its machine-readable (`--json`) and plotted
//! (`--plot out.png|svg`) forms: predicted time against message size, one line per algorithm,
//! log-log.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::plot::{self, png, Series};

/// The result of proving one algorithm's schedules.
#[derive(Clone, Debug, PartialEq)]
pub struct Proof {
    /// Algorithm name.
    pub algo: String,
    /// `None` when correct, else what is wrong.
    pub error: Option<String>,
    /// Most steps of any rank.
    pub steps: usize,
    /// Messages in total.
    pub messages: usize,
    /// Whether reductions never follow arrival order.
    pub order_fixed: bool,
    /// Seconds the proof took.
    pub seconds: f64,
}

/// Predicted times per size and algorithm.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Operation name.
    pub op: String,
    /// Hosts and ranks per host.
    pub hosts: u32,
    /// Ranks per host.
    pub per_host: u32,
    /// What produced the times: `"alpha-beta"` or `"flow simulation"`.
    pub model: String,
    /// The model's parameters, for the record.
    pub params: Vec<(String, f64)>,
    /// The topology file's contents, when one was given.
    pub topology: Option<String>,
    /// Algorithm names, one column each.
    pub algos: Vec<String>,
    /// Message sizes in bytes, one row each.
    pub sizes: Vec<usize>,
    /// `times[row][col]`: predicted seconds, `None` where the algorithm has no schedule.
    pub times: Vec<Vec<Option<f64>>>,
    /// The column the library's selector picks for each row.
    pub pick: Vec<Option<usize>>,
    /// Bus bandwidth factor of the operation (vendor convention).
    pub bus_factor: f64,
    /// Proofs, when run.
    pub proofs: Vec<Proof>,
}

impl Table {
    /// The table as JSON: configuration, proofs, and one object per size.
    pub fn to_json(&self) -> String {
        let rows: Vec<Value> = self
            .sizes
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let algos: Map<String, Value> = self
                    .algos
                    .iter()
                    .zip(&self.times[i])
                    .filter_map(|(a, t)| {
                        t.map(|t| {
                            let busbw = b as f64 / t * self.bus_factor / 1e9;
                            (
                                a.clone(),
                                json!({ "seconds": t, "bus_bandwidth_gbps": busbw }),
                            )
                        })
                    })
                    .collect();
                json!({
                    "bytes": b as u64,
                    "pick": self.pick[i].map(|k| self.algos[k].as_str()),
                    "algorithms": algos,
                })
            })
            .collect();
        let proofs: Vec<Value> = self
            .proofs
            .iter()
            .map(|p| {
                json!({
                    "algorithm": p.algo,
                    "correct": p.error.is_none(),
                    "error": p.error,
                    "steps": p.steps as u64,
                    "messages": p.messages as u64,
                    "fixed_reduction_order": p.order_fixed,
                    "seconds": p.seconds,
                })
            })
            .collect();
        let params: Map<String, Value> = self
            .params
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let doc = json!({
            "op": self.op,
            "ranks": self.hosts * self.per_host,
            "hosts": self.hosts,
            "ranks_per_host": self.per_host,
            "model": self.model,
            "parameters": params,
            "topology": self.topology,
            "proofs": proofs,
            "rows": rows,
        });
        serde_json::to_string_pretty(&doc).expect("a JSON value always serialises") + "\n"
    }

    /// The time unit that keeps axis labels short: (name, seconds per unit).
    fn unit(&self) -> (&'static str, f64) {
        let most = self
            .times
            .iter()
            .flatten()
            .flatten()
            .fold(0.0f64, |a, &t| a.max(t));
        if most >= 10.0 {
            ("s", 1.0)
        } else if most >= 0.01 {
            ("ms", 1e-3)
        } else {
            ("us", 1e-6)
        }
    }

    /// One series per algorithm: (bytes, predicted time in [`Table::unit`]s).
    fn series(&self) -> Vec<Series> {
        let per = self.unit().1;
        self.algos
            .iter()
            .enumerate()
            .map(|(k, a)| Series {
                label: a.clone(),
                points: self
                    .sizes
                    .iter()
                    .zip(&self.times)
                    .filter_map(|(&b, row)| row[k].map(|t| (b as f64, t / per)))
                    .collect(),
                dashed: false,
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    }

    fn title(&self) -> String {
        format!(
            "{} on {} ranks ({} hosts x {}), {}",
            self.op,
            self.hosts * self.per_host,
            self.hosts,
            self.per_host,
            self.model
        )
    }

    /// Writes the plot to `path`: PNG or SVG by its extension.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        let series = self.series();
        let y = format!("predicted time ({})", self.unit().0);
        let out = match ext.as_deref() {
            Some("png") => {
                let c = plot::render(&series, &self.title(), &y)?;
                png::encode(c.w as u32, c.h as u32, &c.px)
            }
            Some("svg") => svg(&series, &self.title(), &y)?.into_bytes(),
            _ => {
                return Err(format!(
                    "{}: the plot's name must end in .png or .svg",
                    path.display()
                ))
            }
        };
        std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
    }
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#5a5a5a",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A log-log line chart as SVG: x in bytes (powers of two), y in decades.
pub fn svg(series: &[Series], title: &str, y_title: &str) -> Result<String, String> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|&(x, y)| x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
        .collect();
    if pts.is_empty() {
        return Err("nothing to plot".into());
    }
    let lo = |f: fn(&(f64, f64)) -> f64| pts.iter().map(f).fold(f64::MAX, f64::min);
    let hi = |f: fn(&(f64, f64)) -> f64| pts.iter().map(f).fold(0.0, f64::max);
    let x0 = lo(|p| p.0).log2().floor() as i32;
    let x1 = (hi(|p| p.0).log2().ceil() as i32).max(x0 + 1);
    let y0 = lo(|p| p.1).log10().floor() as i32;
    let y1 = (hi(|p| p.1).log10().ceil() as i32).max(y0 + 1);
    let (w, h) = (960.0, 600.0);
    let (left, right, top, bottom) = (90.0, w - 24.0, 48.0, h - 64.0);
    let px = |x: f64| left + (x.log2() - x0 as f64) / (x1 - x0) as f64 * (right - left);
    let py = |y: f64| bottom - (y.log10() - y0 as f64) / (y1 - y0) as f64 * (bottom - top);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"14\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"18\">{}</text>\n",
        w / 2.0,
        esc(title)
    );
    let step = ((x1 - x0) as f64 / 12.0).ceil().max(1.0) as i32;
    for e in (x0..=x1).filter(|e| (e - x0) % step == 0) {
        let x = px(2f64.powi(e));
        s += &format!(
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"#e1e1e1\"/>\n\
             <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            bottom + 20.0,
            plot::size_label(2f64.powi(e))
        );
    }
    for e in y0..=y1 {
        let y = py(10f64.powi(e));
        s += &format!(
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"#e1e1e1\"/>\n\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            left - 8.0,
            y + 5.0,
            10f64.powi(e)
        );
    }
    s += &format!(
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size (bytes)</text>\n\
         <text transform=\"translate(20 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        right - left,
        bottom - top,
        (left + right) / 2.0,
        h - 20.0,
        (top + bottom) / 2.0,
        esc(y_title)
    );
    for (k, ser) in series.iter().enumerate() {
        let col = COLORS[k % COLORS.len()];
        let mut p: Vec<(f64, f64)> = ser
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| x > 0.0 && y > 0.0)
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let line: Vec<String> = p
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        s += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{col}\" stroke-width=\"2.5\"/>\n",
            line.join(" ")
        );
        for &(x, y) in &p {
            s += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{col}\"/>\n",
                px(x),
                py(y)
            );
        }
        let ly = top + 20.0 + k as f64 * 22.0;
        s += &format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{col}\" stroke-width=\"3\"/>\n\
             <text x=\"{}\" y=\"{}\">{}</text>\n",
            left + 14.0,
            left + 44.0,
            left + 52.0,
            ly + 5.0,
            esc(&ser.label)
        );
    }
    s += "</svg>\n";
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            op: "allreduce".into(),
            hosts: 2,
            per_host: 2,
            model: "flow simulation".into(),
            params: vec![("level1_beta".into(), 1.25e8)],
            topology: Some("nics 1\n".into()),
            algos: vec!["ring".into(), "tree".into()],
            sizes: vec![1 << 20, 64 << 20],
            times: vec![vec![Some(0.01), None], vec![Some(0.5), Some(0.7)]],
            pick: vec![Some(0), None],
            bus_factor: 1.5,
            proofs: vec![Proof {
                algo: "ring".into(),
                error: None,
                steps: 6,
                messages: 24,
                order_fixed: true,
                seconds: 0.001,
            }],
        }
    }

    #[test]
    fn json_has_every_row_and_parses_back() {
        let t = table();
        let j: Value = serde_json::from_str(&t.to_json()).unwrap();
        let rows = j.get("rows").unwrap().as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get("pick").unwrap().as_str(), Some("ring"));
        assert!(rows[1].get("pick").unwrap().is_null());
        let algos = rows[0].get("algorithms").unwrap().as_object().unwrap();
        assert_eq!(
            algos.len(),
            1,
            "no entry where the algorithm has no schedule"
        );
        let ring = rows[1].get("algorithms").unwrap().get("ring").unwrap();
        assert_eq!(ring.get("seconds").unwrap().as_f64(), Some(0.5));
        let bw = ring.get("bus_bandwidth_gbps").unwrap().as_f64().unwrap();
        assert!((bw - (64 << 20) as f64 / 0.5 * 1.5 / 1e9).abs() < 1e-9);
        assert_eq!(j.get("ranks").unwrap().as_u64(), Some(4));
        assert_eq!(
            j.get("proofs").unwrap().as_array().unwrap()[0]
                .get("correct")
                .unwrap()
                .as_bool(),
            Some(true)
        );
    }

    #[test]
    fn plots_png_and_svg_by_extension() {
        let t = table();
        let dir = std::env::temp_dir().join(format!("simtable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("t.png");
        t.plot(&png).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        let svg = dir.join("t.svg");
        t.plot(&svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert_eq!(text.matches("<polyline").count(), 2);
        assert!(t
            .plot(&dir.join("t.jpg"))
            .unwrap_err()
            .contains(".png or .svg"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! `hccl_sim`'s table of predicted times, and its machine-readable (`--json`) and plotted
//! (`--plot out.png|svg`) forms: predicted time against message size, one line per algorithm,
//! log-log.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::plot::{chart, Series};

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
        let y = format!("predicted time ({})", self.unit().0);
        chart::write_lines(path, &self.series(), &self.title(), &y)
    }
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
        // One line per algorithm with a time, in its colour, and its name in the legend.
        let doc = roxmltree::Document::parse(&text).unwrap();
        for (k, name) in ["ring", "tree"].iter().enumerate() {
            let (r, g, b) = chart::PALETTE[k];
            let stroke = format!("#{r:02X}{g:02X}{b:02X}");
            assert!(
                doc.descendants().any(|n| n.has_tag_name("polyline")
                    && n.attribute("stroke") == Some(stroke.as_str())),
                "{name}"
            );
            assert!(
                doc.descendants()
                    .any(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some(name)),
                "{name}"
            );
        }
        assert!(t
            .plot(&dir.join("t.jpg"))
            .unwrap_err()
            .contains(".png or .svg"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! `hccl_plot timeline`: the traces of a real 4-rank run become a PNG and an SVG timeline with
//! one lane per rank and one bar per operation and per step, read back by independent
//! decoders (the `png` crate, an XML parser) and counted against the traces themselves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::cmd;
use hccl_tools::plot::chart::PALETTE;

const RANKS: usize = 4;

/// Traces of a 4-rank all_reduce_test sweep, one file per rank, in a fresh directory.
fn traces(tag: &str) -> (PathBuf, Vec<PathBuf>) {
    let dir = std::env::temp_dir().join(format!("hccl-timeline-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let o = cmd(
        "all_reduce_test",
        &[
            "-t", "4", "-b", "8", "-e", "64K", "-f", "64", "-n", "2", "-w", "0",
        ],
    )
    .env("HCCL_TRACE_FILE", dir.join("trace.%r.json"))
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files: Vec<PathBuf> = (0..RANKS)
        .map(|r| dir.join(format!("trace.{r}.json")))
        .collect();
    (dir, files)
}

/// (operation name → (operations, steps)) over every file, read with serde_json directly.
fn census(files: &[PathBuf]) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for f in files {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        for e in v.as_array().unwrap() {
            if e["ph"] != "X" {
                continue;
            }
            let op = e["args"]["op"].as_str().unwrap().to_string();
            let c = out.entry(op).or_default();
            match e["cat"].as_str() {
                Some("op") => c.0 += 1,
                Some("step") => c.1 += 1,
                other => panic!("unexpected category {other:?}"),
            }
        }
    }
    out
}

fn timeline(out: &Path, files: &[PathBuf]) {
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .arg("timeline")
        .args(files)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn svg_has_a_lane_per_rank_and_a_bar_per_operation_and_step() {
    let (dir, files) = traces("svg");
    let counts = census(&files);
    // The tester's own collectives: the timed AllReduce and its helpers, and the barrier.
    assert!(
        counts.contains_key("AllReduce") && counts.contains_key("Barrier"),
        "{counts:?}"
    );
    let out = dir.join("t.svg");
    timeline(&out, &files);
    let text = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    for r in 0..RANKS {
        assert!(
            texts.contains(&format!("rank {r}")),
            "lane of rank {r}: {texts:?}"
        );
    }
    let hex = |(r, g, b): (u8, u8, u8)| format!("#{r:02X}{g:02X}{b:02X}");
    let rects = |fill: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(fill))
            .count()
    };
    // Operations are coloured by name in sorted order; each colour also marks its legend entry.
    for (k, (name, (ops, steps))) in counts.iter().enumerate() {
        assert!(texts.contains(name), "{name} in the legend");
        assert_eq!(
            rects(&hex(PALETTE[k])),
            ops + 1,
            "{name}: one bar per operation"
        );
        assert!(*steps > 0, "{name} has steps");
    }
    let all_steps: usize = counts.values().map(|c| c.1).sum();
    let all_ops: usize = counts.values().map(|c| c.0).sum();
    let all_rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    // Background, striped lanes, legend box and entries besides the bars: every op and step
    // bar is there.
    assert!(
        all_rects >= all_ops + all_steps + counts.len(),
        "{all_rects}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn png_shows_every_operation_colour() {
    let (dir, files) = traces("png");
    let counts = census(&files);
    let out = dir.join("t.png");
    timeline(&out, &files);
    let mut reader = png::Decoder::new(std::fs::File::open(&out).unwrap())
        .read_info()
        .unwrap();
    let mut px = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut px).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let px = &px[..info.buffer_size()];
    let count = |(r, g, b): (u8, u8, u8)| px.chunks(3).filter(|p| p == &[r, g, b]).count();
    for (name, &c) in counts.keys().zip(&PALETTE) {
        assert!(count(c) > 100, "{name}");
    }
    assert_eq!(count(PALETTE[counts.len()]), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_traces_are_errors() {
    let dir = std::env::temp_dir().join(format!("hccl-timeline-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "[{\"ph\": \"X\", ").unwrap();
    let empty = dir.join("empty.json");
    std::fs::write(&empty, "[]").unwrap();
    for (f, why) in [(&bad, "not a Chrome trace"), (&empty, "no operations")] {
        let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
            .args(["timeline", "-o"])
            .arg(dir.join("x.svg"))
            .arg(f)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains(why));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .args(["timeline", "-o", "x.svg"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "no trace given is a usage error");
    std::fs::remove_dir_all(&dir).ok();
}

//! `hccl_plot`: a tester CSV plus a reference table become a valid PNG or SVG with one line per
//! series, read back by independent decoders (the `png` crate, an XML parser).

use std::path::{Path, PathBuf};
use std::process::Command;

use hccl_tools::plot::chart::PALETTE;

/// A tester CSV of a real 2-rank run and an MPI-style reference table, in a fresh directory.
fn inputs(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("hccl-plot-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("ours.csv");
    let o = Command::new(env!("CARGO_BIN_EXE_all_reduce_test"))
        .args([
            "-t", "2", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "0", "--csv",
        ])
        .arg(&csv)
        .env_remove("HCCL_RANK")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("RANK")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reference = dir.join("mpi.txt");
    std::fs::write(
        &reference,
        "bytes time_us algbw_GB/s busbw_GB/s check\n8 1 0.008 0.008 ok\n65536 9 7.2 7.2 ok\n",
    )
    .unwrap();
    (dir, csv, reference)
}

fn plot(out: &Path, csv: &Path, reference: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .arg("-o")
        .arg(out)
        .arg(format!("{}=hccl 2 ranks", csv.display()))
        .arg("--ref")
        .arg(format!("{}=MPI_Allreduce", reference.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn writes_a_png_with_both_series() {
    let (dir, csv, reference) = inputs("png");
    let out = dir.join("out.png");
    plot(&out, &csv, &reference);
    let decoder = png::Decoder::new(std::fs::File::open(&out).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut px = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut px).unwrap();
    assert_eq!((info.width, info.height), (960, 600));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let px = &px[..info.buffer_size()];
    let count = |(r, g, b): (u8, u8, u8)| px.chunks(3).filter(|p| p == &[r, g, b]).count();
    // Our series in the first colour, the reference in the second, nothing in a third.
    assert!(count(PALETTE[0]) > 300, "{}", count(PALETTE[0]));
    assert!(count(PALETTE[1]) > 300, "{}", count(PALETTE[1]));
    assert_eq!(count(PALETTE[2]), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn writes_an_svg_with_both_series() {
    let (dir, csv, reference) = inputs("svg");
    let out = dir.join("out.svg");
    plot(&out, &csv, &reference);
    let text = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let hex = |(r, g, b): (u8, u8, u8)| format!("#{r:02X}{g:02X}{b:02X}");
    let lines = |colour: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(colour))
            .count()
    };
    // A solid polyline for our run; the reference is dashed: several short segments.
    assert!(lines(&hex(PALETTE[0])) >= 1);
    assert!(lines(&hex(PALETTE[1])) >= 2);
    assert_eq!(lines(&hex(PALETTE[2])), 0);
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    for want in ["hccl 2 ranks", "MPI_Allreduce", "bus bandwidth", "64K"] {
        assert!(texts.iter().any(|t| t == want), "{want} not in {texts:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_usage_and_bad_input() {
    for args in [
        &["x.csv"][..],
        &["-o", "a.png"],
        &["-o", "a.png", "--metric", "x", "b"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
    let dir = std::env::temp_dir();
    let bad = dir.join(format!("hccl-plot-bad-{}.csv", std::process::id()));
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .arg("-o")
        .arg(dir.join("never.png"))
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no header"));
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .arg("-o")
        .arg(dir.join("never.jpg"))
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    std::fs::remove_file(&bad).ok();
}

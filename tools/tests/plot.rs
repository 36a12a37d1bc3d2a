//! `hccl_plot`: a tester CSV plus a reference table become a valid PNG.

mod common;

use std::process::Command;

/// Bitwise CRC-32, independent of the encoder's table.
fn crc(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn writes_a_valid_png() {
    let dir = std::env::temp_dir().join(format!("hccl-plot-{}", std::process::id()));
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
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reference = dir.join("mpi.txt");
    std::fs::write(
        &reference,
        "bytes time_us algbw_GB/s busbw_GB/s check\n8 1 0.008 0.008 ok\n65536 9 7.2 7.2 ok\n",
    )
    .unwrap();
    let png = dir.join("out.png");
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .arg("-o")
        .arg(&png)
        .arg(format!("{}=hccl 2 ranks", csv.display()))
        .arg("--ref")
        .arg(format!("{}=MPI_Allreduce", reference.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = std::fs::read(&png).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
    let mut at = 8;
    let mut kinds = Vec::new();
    let mut idat = Vec::new();
    while at < b.len() {
        let len = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let body = &b[at + 4..at + 8 + len];
        let want = u32::from_be_bytes(b[at + 8 + len..at + 12 + len].try_into().unwrap());
        assert_eq!(
            crc(body),
            want,
            "CRC of chunk {}",
            String::from_utf8_lossy(&body[..4])
        );
        kinds.push(String::from_utf8_lossy(&body[..4]).into_owned());
        if &body[..4] == b"IDAT" {
            idat.extend_from_slice(&body[4..]);
        }
        if &body[..4] == b"IHDR" {
            let w = u32::from_be_bytes(body[4..8].try_into().unwrap());
            let h = u32::from_be_bytes(body[8..12].try_into().unwrap());
            assert_eq!((w, h, body[12], body[13]), (960, 600, 8, 2));
        }
        at += 12 + len;
    }
    assert_eq!(kinds.first().map(String::as_str), Some("IHDR"));
    assert_eq!(kinds.last().map(String::as_str), Some("IEND"));
    // An independent inflater: zlib through Python, when the machine has it.
    let z = dir.join("idat.z");
    std::fs::write(&z, &idat).unwrap();
    match Command::new("python3")
        .arg("-c")
        .arg("import sys,zlib; print(len(zlib.decompress(open(sys.argv[1],'rb').read())))")
        .arg(&z)
        .output()
    {
        Ok(o) if o.status.success() => {
            let n: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
            assert_eq!(n, 600 * (1 + 3 * 960));
        }
        _ => common::skip::skip_unless_ci(
            "python3 with zlib not found (scripts/setup.sh installs python3): the PNG's \
             image data was not decoded by a second, independent inflater",
        ),
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_usage_and_bad_input() {
    let o = Command::new(env!("CARGO_BIN_EXE_hccl_plot"))
        .arg("x.csv")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
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
    std::fs::remove_file(&bad).ok();
}

//! Throughput of the compression kernels on one core, beside memcpy of the same buffer in the
//! same run: for each method, encode (f32 → block), decode-add (block → f32 accumulator) and
//! the round trip, in GB/s of f32 input (10^9 bytes per second).
//!
//! A last row decodes what a top-k AllReduce across two hosts writes: the sum of two hosts' 1%
//! blobs per 1 MiB piece, into the whole output, once by clearing the piece and adding blob by
//! blob, once by writing every line once (`decompress_sum`), in GB/s of f32 output.
//!
//! Usage: `hccl_compress_bench [SIZE_MIB] [REPS]` (default 64 MiB, 10 repetitions; the best
//! repetition counts, so other load on the machine shows less).

use std::time::Instant;

use clap::Parser;
use hccl::base::compress::Method;
use hccl::exec::compress::{
    blob_len, compress, decompress_add, decompress_set, decompress_sum, kernel_description, Scratch,
};

fn best(reps: u32, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// `hccl_compress_bench`'s arguments.
#[derive(Parser, Debug)]
#[command(
    name = "hccl_compress_bench",
    about = "Throughput of the compression kernels on one core, beside memcpy of the same buffer.",
    disable_version_flag = true
)]
struct Cli {
    /// Buffer size in MiB of f32
    #[arg(value_name = "SIZE_MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    mib: u32,
    /// Repetitions (the best one counts)
    #[arg(value_name = "REPS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    reps: u32,
}

fn main() {
    let cli = Cli::parse();
    let (mib, reps) = (cli.mib as usize, cli.reps);
    let n = mib << 18;
    let bytes = (n * 4) as f64;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as f32 / 8e6 - 1.0)
        .collect();
    let mut acc = vec![0f32; n];
    let mut dst = vec![0f32; n];
    let copy = best(reps, || dst.copy_from_slice(std::hint::black_box(&x)));
    println!(
        "hccl_compress_bench: {mib} MiB of f32, best of {reps}, one thread, kernels {}",
        kernel_description()
    );
    println!(
        "{:<12} {:>12} {:>12} {:>12} {:>8}",
        "method", "encode", "decode+add", "round trip", "ratio"
    );
    println!(
        "{:<12} {:>9.2} GB/s (memcpy of the same buffer)",
        "memcpy",
        bytes / copy / 1e9
    );
    let mut s = Scratch::default();
    for m in [
        Method::Fp16,
        Method::Bf16,
        Method::Int8 { block: 256 },
        Method::TopK { ratio: 0.01 },
    ] {
        let mut blob = vec![0u8; blob_len(m, n)];
        let enc = best(reps, || compress(m, &x, &mut blob, &mut s));
        let dec = best(reps, || {
            decompress_add(m, &blob, &mut acc).expect("own block")
        });
        println!(
            "{:<12} {:>7.2} GB/s {:>7.2} GB/s {:>7.2} GB/s {:>8.4}",
            m.to_string(),
            bytes / enc / 1e9,
            bytes / dec / 1e9,
            bytes / (enc + dec) / 1e9,
            blob.len() as f64 / bytes
        );
    }
    topk_sum_row(&x, &mut dst, reps, &mut s);
}

/// The sum of two top-k 1% blobs per 1 MiB piece into the whole output: cleared then added
/// (the decoding before `decompress_sum`), and merged with every line written once.
fn topk_sum_row(x: &[f32], out: &mut [f32], reps: u32, s: &mut Scratch) {
    const PIECE: usize = 1 << 18;
    let m = Method::TopK { ratio: 0.01 };
    let y: Vec<f32> = x.iter().rev().copied().collect();
    let blobs: Vec<[Vec<u8>; 2]> = x
        .chunks(PIECE)
        .zip(y.chunks(PIECE))
        .map(|(a, b)| {
            let mut pa = vec![0u8; blob_len(m, a.len())];
            let mut pb = vec![0u8; blob_len(m, b.len())];
            compress(m, a, &mut pa, s);
            compress(m, b, &mut pb, s);
            [pa, pb]
        })
        .collect();
    // Interleaved, so that load on the machine falls on both alike.
    let (mut twice, mut once) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        twice = twice.min(best(1, || {
            for (o, [a, b]) in out.chunks_mut(PIECE).zip(&blobs) {
                decompress_set(m, a, o).expect("own block");
                decompress_add(m, b, o).expect("own block");
            }
        }));
        once = once.min(best(1, || {
            for (o, [a, b]) in out.chunks_mut(PIECE).zip(&blobs) {
                decompress_sum(m, &[a, b], o).expect("own block");
            }
        }));
    }
    let bytes = (out.len() * 4) as f64;
    println!(
        "{:<12} {:>7.2} GB/s cleared then added, {:.2} GB/s each line written once (2 blobs a \
         1 MiB piece, GB/s of output)",
        "topk sum",
        bytes / twice / 1e9,
        bytes / once / 1e9
    );
}

//! Runs a compressed AllReduce: the schedules of [`crate::algo::compressed`] over the
//! communicator's endpoint, with the compression, error feedback and decoding between them.

use std::time::Instant;

use crate::algo::compressed::{self, Owned, Plan};
use crate::algo::{Schedule, Topo};
use crate::base::compress::Spec;
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::exec::compress::{self as kernels, blob_len, Scratch};
use crate::exec::executor::{self, Buffers};
use crate::exec::identity::{self, Inbound, OpTags};
use crate::exec::reduce::{f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::exec::trace::StepTrace;
use crate::transport::tag::{OpKind, OpTag};
use crate::transport::Endpoint;

use super::stats::Traffic;

/// The compression of one AllReduce call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compressed {
    /// Method and where it applies.
    pub spec: Spec,
    /// Address of the caller's error-feedback buffer: `count` f32 values (4-byte aligned, not
    /// overlapping the operation's buffers), or `None` for no error feedback.
    pub residual: Option<usize>,
}

/// Memory kept between calls.
#[derive(Default)]
pub struct Workspace {
    blobs: Vec<u8>,
    x: Vec<f32>,
    acc: Vec<f32>,
    scratch: Scratch,
}

/// Data types a compressed AllReduce accepts.
pub fn dtype_ok(dt: DataType) -> bool {
    matches!(dt, DataType::Fp32 | DataType::Fp16 | DataType::Bf16)
}

/// The groups compression runs over: the hosts, or every rank alone when level0 is
/// compressed too (or there is a single host).
pub fn groups(topo: &Topo, spec: &Spec) -> Topo {
    if spec.level0 || topo.hosts().len() == 1 {
        Topo::from_labels(&(0..topo.n()).collect::<Vec<_>>())
    } else {
        topo.clone()
    }
}

/// The tag of a compressed AllReduce of `count` elements of `dtype` with `spec`, the `seq`-th
/// operation of its communicator: ranks that disagree on any of these (or call a plain
/// AllReduce) refuse each other's messages.
pub fn call_tag(count: usize, dtype: DataType, spec: &Spec, seq: u32) -> OpTag {
    let (root, aux) = spec.to_wire();
    OpTag {
        seq,
        dtype: Some(dtype),
        op: Some(ReduceOp::Sum),
        root,
        aux,
        count: count as u64,
        ..OpTag::new(OpKind::CompressedAllReduce)
    }
}

/// Rank `me`'s plan of a compressed AllReduce of `count` elements of `dtype`; fails with
/// `NotSupport` for shards beyond what the kernels encode.
pub fn prepare(topo: &Topo, me: u32, count: usize, dtype: DataType, spec: &Spec) -> Result<Plan> {
    let m = spec.method;
    let g = groups(topo, spec);
    let plan = compressed::plan(&g, me, count, dtype.size(), &|n| blob_len(m, n));
    if plan.owned.iter().any(|o| o.len > kernels::MAX_ELEMS) {
        return Err(Error::new(
            ErrorKind::NotSupport,
            format!(
                "compressed AllReduce of {count} elements: shards above {} elements are not \
                 supported",
                kernels::MAX_ELEMS
            ),
        ));
    }
    Ok(plan)
}

impl Plan {
    /// The schedules, in the order they run.
    fn schedules(&self) -> [&Schedule; 3] {
        [&self.reduce, &self.exchange, &self.gather]
    }

    /// What rank `me` receives from each peer (see [`identity::inbound`]).
    pub fn inbound(&self, me: u32) -> Vec<Inbound> {
        identity::inbound(me, self.schedules().map(|s| (s, &[][..])))
    }

    /// The names of the schedules, for traces.
    pub fn algorithms(&self) -> Vec<&'static str> {
        self.schedules().iter().map(|s| s.algo).collect()
    }
}

/// Runs one compressed AllReduce planned by [`prepare`] from `send` to `recv`, its messages
/// tagged with `tags` (see [`call_tag`]), appending a step trace to `log` when given; returns
/// the traffic it moved.
///
/// Every result depends on every rank (as in a plain AllReduce), so no notices are needed: a
/// rank completes only after data of every rank reached it through ranks that checked its tag.
///
/// # Safety
/// `send` and `recv` must hold the planned count of elements of `dtype`, and `c.residual` as
/// many f32 values, that nothing else touches during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(
    ep: &mut Endpoint,
    ws: &mut Workspace,
    plan: &Plan,
    topo: &Topo,
    dtype: DataType,
    send: usize,
    recv: usize,
    c: &Compressed,
    deadline: Option<Instant>,
    tags: &mut OpTags,
    mut log: Option<&mut Vec<StepTrace>>,
) -> Result<Traffic> {
    let me = ep.rank();
    let m = c.spec.method;
    ws.blobs.resize(plan.workspace, 0);
    let red = executor::reduce_fn(dtype, ReduceOp::Sum);
    let bufs = Buffers {
        send,
        recv,
        scratch: 0,
        ext: vec![ws.blobs.as_mut_ptr() as usize],
    };
    // SAFETY: the spans of the level0 schedules lie inside `send`/`recv` (count elements),
    // those of the exchange inside the workspace just sized to `plan.workspace`.
    unsafe {
        executor::run_traced(
            ep,
            &plan.reduce,
            &bufs,
            Some(red),
            deadline,
            tags,
            &[],
            log.as_deref_mut(),
        )
    }?;
    for o in &plan.owned {
        // SAFETY: the shard lies inside `recv`, filled by the reduce step; nothing else touches
        // it until the gather step.
        let x = match unsafe { f32_shard(dtype, recv, o) } {
            Some(x) => x,
            None => {
                // SAFETY: as above.
                unsafe { load(dtype, recv, o, &mut ws.x) };
                &mut ws.x[..]
            }
        };
        // SAFETY: the caller's contract: `count` f32 values, exclusively ours for the call.
        let res = c.residual.map(|r| unsafe {
            std::slice::from_raw_parts_mut((r as *mut f32).add(o.first), o.len)
        });
        if let Some(res) = &res {
            for (x, r) in x.iter_mut().zip(res.iter()) {
                *x += *r;
            }
        }
        let mine = &mut ws.blobs[o.slot0 + plan.group * o.blob..][..o.blob];
        kernels::compress(m, x, mine, &mut ws.scratch);
        if let Some(res) = res {
            kernels::residual(m, mine, x)?;
            res.copy_from_slice(x);
        }
    }
    // SAFETY: as above.
    unsafe {
        executor::run_traced(
            ep,
            &plan.exchange,
            &bufs,
            None,
            deadline,
            tags,
            &[],
            log.as_deref_mut(),
        )
    }?;
    for o in &plan.owned {
        // fp32 output is the accumulator itself; other types go through `acc`.
        // SAFETY: the shard lies inside `recv`, which nothing else touches meanwhile.
        let direct = unsafe { f32_shard(dtype, recv, o) };
        let is_direct = direct.is_some();
        let acc = match direct {
            Some(a) => a,
            None => {
                ws.acc.resize(o.len, 0.0);
                &mut ws.acc[..o.len]
            }
        };
        for gi in 0..plan.groups {
            let blob = &ws.blobs[o.slot0 + gi * o.blob..][..o.blob];
            let r = if gi == 0 {
                kernels::decompress_set(m, blob, acc)
            } else {
                kernels::decompress_add(m, blob, acc)
            };
            if let Err(e) = r {
                // Peers must not finish with data this rank could not produce: breaking the
                // links makes every rank's call fail.
                let e = e.context(format!("rank {me}: block of group {gi}"));
                ep.abort(&e);
                return Err(e);
            }
        }
        if !is_direct {
            // SAFETY: the shard lies inside `recv`.
            unsafe { store(dtype, &ws.acc[..o.len], recv, o) };
        }
    }
    // SAFETY: as above.
    unsafe { executor::run_traced(ep, &plan.gather, &bufs, None, deadline, tags, &[], log) }?;
    Ok(plan
        .schedules()
        .into_iter()
        .map(|s| Traffic::of(s, me, topo))
        .fold(Traffic::default(), Traffic::plus))
}

/// Shard `o` of `buf` as f32 values in place, when the data are fp32 and aligned.
///
/// # Safety
/// The shard must lie inside `buf`, and nothing else may access it while the slice lives.
unsafe fn f32_shard<'a>(dtype: DataType, buf: usize, o: &Owned) -> Option<&'a mut [f32]> {
    let at = buf + o.first * 4;
    if dtype != DataType::Fp32 || !at.is_multiple_of(std::mem::align_of::<f32>()) {
        return None;
    }
    // SAFETY: the caller's contract; aligned and inside the buffer.
    Some(unsafe { std::slice::from_raw_parts_mut(at as *mut f32, o.len) })
}

/// Widens shard `o` of `buf` into `x`.
///
/// # Safety
/// The shard must lie inside `buf`.
unsafe fn load(dtype: DataType, buf: usize, o: &Owned, x: &mut Vec<f32>) {
    let es = dtype.size();
    // SAFETY: the caller's contract.
    let b = unsafe { std::slice::from_raw_parts((buf + o.first * es) as *const u8, o.len * es) };
    x.clear();
    match dtype {
        DataType::Fp16 => x.extend(
            b.chunks_exact(2)
                .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))),
        ),
        DataType::Bf16 => x.extend(
            b.chunks_exact(2)
                // Widening bf16 is exact: its bits are the top half of an f32's.
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)),
        ),
        _ => x.extend(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
    }
}

/// Narrows `acc` into shard `o` of `buf` (rounding to nearest even).
///
/// # Safety
/// The shard must lie inside `buf`.
unsafe fn store(dtype: DataType, acc: &[f32], buf: usize, o: &Owned) {
    let es = dtype.size();
    // SAFETY: the caller's contract.
    let b = unsafe { std::slice::from_raw_parts_mut((buf + o.first * es) as *mut u8, o.len * es) };
    match dtype {
        DataType::Fp16 => b
            .chunks_exact_mut(2)
            .zip(acc)
            .for_each(|(c, &v)| c.copy_from_slice(&f32_to_f16(v).to_le_bytes())),
        DataType::Bf16 => b
            .chunks_exact_mut(2)
            .zip(acc)
            .for_each(|(c, &v)| c.copy_from_slice(&f32_to_bf16(v).to_le_bytes())),
        _ => b
            .chunks_exact_mut(4)
            .zip(acc)
            .for_each(|(c, &v)| c.copy_from_slice(&v.to_le_bytes())),
    }
}

/// Checks a compressed AllReduce call: SUM on fp32/fp16/bf16, a valid method, and a residual
/// buffer (address, element count) of exactly `count` 4-byte-aligned f32 values that overlaps
/// neither data buffer. Every error is `Para` and names the offending field.
pub fn check_call(
    dtype: DataType,
    op: ReduceOp,
    count: usize,
    bufs: [(usize, usize); 2],
    spec: Spec,
    residual: Option<(usize, u64)>,
) -> Result<Compressed> {
    let para = |m: String| Error::new(ErrorKind::Para, m);
    if !dtype_ok(dtype) {
        return Err(para(format!(
            "dataType {} cannot be compressed: fp32, fp16 or bf16 only",
            dtype.name()
        )));
    }
    if op != ReduceOp::Sum {
        return Err(para(format!(
            "op {} cannot be compressed: SUM only",
            op.name()
        )));
    }
    spec.method.check()?;
    let residual = match residual {
        None => None,
        Some((at, n)) => {
            if n != count as u64 {
                return Err(para(format!(
                    "residualCount {n} must equal count {count} (one f32 per element)"
                )));
            }
            if !at.is_multiple_of(4) {
                return Err(para(format!("residual {at:#x} is not 4-byte aligned")));
            }
            let len = count
                .checked_mul(4)
                .filter(|l| at.checked_add(*l).is_some());
            let Some(len) = len else {
                return Err(para(format!(
                    "residual {at:#x} + {count} f32 wraps around the address space"
                )));
            };
            for (b, blen) in bufs {
                if len > 0 && blen > 0 && at < b + blen && b < at + len {
                    return Err(para(format!(
                        "residual {at:#x} overlaps a data buffer ({b:#x}, {blen} bytes)"
                    )));
                }
            }
            Some(at)
        }
    };
    Ok(Compressed { spec, residual })
}

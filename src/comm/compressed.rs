//! Runs a compressed AllReduce: the schedules of [`crate::algo::compressed`] over the
//! communicator's endpoint, with the compression, error feedback and decoding between them.

use std::time::Instant;

use crate::algo::compressed::{self, Owned, Plan, Sub};
use crate::algo::Topo;
use crate::base::compress::{Method, Spec};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::exec::compress::{self as kernels, blob_len, Scratch};
use crate::exec::executor::{self, Buffers};
use crate::exec::identity::{self, Inbound, OpTags};
use crate::exec::reduce::{f16_to_f32, f32_to_bf16, f32_to_f16, reduce_inplace};
use crate::exec::trace::StepTrace;
use crate::transport::tag::{OpKind, OpTag};
use crate::transport::{Endpoint, SendHint};

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
    kernels: Kernels,
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

/// Elements of one pipeline piece at most: big enough that per-step costs vanish, small
/// enough that a 64 MiB call has dozens of pieces to overlap.
const PIECE_ELEMS: usize = 1 << 18;

/// Rank `me`'s plan of a compressed AllReduce of `count` elements of `dtype`, its blob
/// workspace within `budget` bytes (`HCCL_BUFFSIZE`) as far as pieces of 1024 elements allow;
/// `deterministic` (`HCCL_DETERMINISTIC`): level0 sums in local rank order, not arrival order.
pub fn prepare(
    topo: &Topo,
    me: u32,
    count: usize,
    dtype: DataType,
    spec: &Spec,
    budget: usize,
    deterministic: bool,
) -> Plan {
    let m = spec.method;
    let g = groups(topo, spec);
    compressed::plan(
        &g,
        me,
        count,
        dtype.size(),
        &|n| blob_len(m, n),
        PIECE_ELEMS,
        budget,
        deterministic,
    )
}

/// What rank `me` receives from each peer over all of `plan`'s steps (see
/// [`identity::inbound`]).
pub fn inbound(plan: &Plan, me: u32) -> Vec<Inbound> {
    identity::inbound(me, plan.steps.iter().map(|s| (s, &[][..])))
}

/// Memory the compression and decoding of pieces use: the worker's own.
#[derive(Default)]
pub struct Kernels {
    x: Vec<f32>,
    acc: Vec<f32>,
    scratch: Scratch,
}

/// Where the pieces' data live during one call (addresses, as the executor takes them).
#[derive(Clone, Copy)]
struct Data<'p> {
    plan: &'p Plan,
    method: crate::base::compress::Method,
    dtype: DataType,
    send: usize,
    recv: usize,
    blobs: usize,
    residual: Option<usize>,
}

impl Data<'_> {
    /// The caller's work of pipeline step `i`.
    ///
    /// # Safety
    /// The output pieces, blob slots and residual ranges this step's work touches must be
    /// touched by nothing else meanwhile (the plan keeps them apart from the transfers of step
    /// `i`, see [`crate::algo::compressed`]).
    unsafe fn work(&self, i: usize, k: &mut Kernels) -> Result<()> {
        let w = self.plan.work[i];
        if let Some(t) = w.compress {
            // SAFETY: forwarded.
            unsafe { self.compress(t, k) }?;
        }
        if let Some(t) = w.reduce {
            // SAFETY: forwarded.
            unsafe { self.reduce(t, k) }?;
        }
        if let Some(t) = w.decode {
            // SAFETY: forwarded.
            unsafe { self.decode(t, &self.plan.owned[t], k) }?;
        }
        match w.decode_forwarded {
            // SAFETY: forwarded.
            Some(t) => unsafe { self.decode(t, &self.plan.forwarded[t], k) },
            None => Ok(()),
        }
    }

    /// Compresses this rank's parts of piece `t` (with error feedback) into its group's slot.
    ///
    /// # Safety
    /// As for [`Data::work`].
    unsafe fn compress(&self, t: usize, k: &mut Kernels) -> Result<()> {
        if self.plan.staged {
            for o in &self.plan.owned[t] {
                // SAFETY: forwarded.
                unsafe { self.fold(o) }?;
            }
            // SAFETY: forwarded.
            return unsafe { self.compress_subs(t, k) };
        }
        for o in &self.plan.owned[t] {
            // SAFETY: this group's blob of the piece, inside the workspace; its slot is not
            // in flight during this step.
            let mine = unsafe { self.blob_mut(o.slot0 + self.plan.group * o.blob, o.blob) };
            // SAFETY: forwarded.
            if unsafe { self.compress_topk_of_sum(o, mine, k) }? {
                continue;
            }
            // SAFETY: forwarded.
            unsafe { self.fold(o) }?;
            // SAFETY: forwarded.
            unsafe { self.compress_part(o, mine, k) }?;
        }
        Ok(())
    }

    /// Forwarding form, top-k of fp32 on hosts of two ranks: sums part `o` (this rank's input
    /// and its one peer's contribution, in that order, as [`Data::fold`] does) in the same pass
    /// as top-k selects from it, so the sum is never stored (without error feedback), and
    /// compresses it into `out`. False (nothing done) when this does not apply.
    ///
    /// # Safety
    /// As for [`Data::work`]: `o`'s fold slot is complete and nothing writes it meanwhile.
    unsafe fn compress_topk_of_sum(
        &self,
        o: &Owned,
        out: &mut [u8],
        k: &mut Kernels,
    ) -> Result<bool> {
        let Method::TopK { ratio } = self.method else {
            return Ok(false);
        };
        if !self.plan.forward || o.folds.len() != 1 {
            return Ok(false);
        }
        // SAFETY: the part lies inside `send` (read only) and `recv` (this rank's until its
        // decoding).
        let (own, spill) = unsafe {
            (
                f32_ref(self.dtype, self.send, o),
                f32_shard(self.dtype, self.recv, o),
            )
        };
        let (Some(own), Some(spill)) = (own, spill) else {
            return Ok(false);
        };
        // SAFETY: the fold slot, received in the previous step and not written again before
        // the next one.
        let theirs = unsafe { self.blob(o.folds[0], o.len * 4) };
        // SAFETY: every bit pattern is an f32.
        let (pre, theirs, post) = unsafe { theirs.align_to::<f32>() };
        if !pre.is_empty() || !post.is_empty() {
            return Ok(false);
        }
        // SAFETY: forwarded.
        let mut res = unsafe { self.residual_of(o) };
        kernels::compress_topk_of_sum(
            ratio,
            own,
            theirs,
            res.as_deref_mut(),
            spill,
            out,
            &mut k.scratch,
        );
        if let Some(res) = res {
            kernels::residual(self.method, out, res)?;
        }
        Ok(true)
    }

    /// Compresses part `o` of this rank's level0 sum (in the output; in the input when the
    /// rank is a group of its own) into `out`, with error feedback: the sum goes into the
    /// residual buffer, is compressed from there, and what the compression dropped stays there,
    /// so the data are only read.
    ///
    /// # Safety
    /// As for [`Data::work`]: `o` is complete and nothing writes it meanwhile.
    unsafe fn compress_part(&self, o: &Owned, out: &mut [u8], k: &mut Kernels) -> Result<()> {
        let src = if self.plan.solo { self.send } else { self.recv };
        let Kernels { x, scratch, .. } = k;
        // SAFETY: the part lies inside `src`; the caller's contract.
        let x: &[f32] = match unsafe { f32_ref(self.dtype, src, o) } {
            Some(v) => v,
            None => {
                // SAFETY: as above.
                unsafe { load(self.dtype, src, o, x) };
                &x[..]
            }
        };
        // SAFETY: forwarded.
        match unsafe { self.residual_of(o) } {
            None => kernels::compress(self.method, x, out, scratch),
            Some(res) => {
                for (r, v) in res.iter_mut().zip(x) {
                    *r += *v;
                }
                kernels::compress(self.method, res, out, scratch);
                kernels::residual(self.method, out, res)?;
            }
        }
        Ok(())
    }

    /// Deterministic level0 sums: adds the group peers' contributions to this rank's part `o`,
    /// which received them into fold slots, in local rank order. In the forwarding
    /// form, the sum starts from this rank's input (in the other forms its reduce step copied
    /// it to the output), in one pass with the first peer's for fp32.
    ///
    /// # Safety
    /// As for [`Data::work`].
    unsafe fn fold(&self, o: &Owned) -> Result<()> {
        let es = self.dtype.size();
        if !o.folds.is_empty() {
            // SAFETY: the part lies inside `recv`, holding this rank's own contribution since
            // its reduce step (forwarding form: nothing yet); nothing else touches it until
            // its gather step (forwarding form: its decoding).
            let acc = unsafe {
                std::slice::from_raw_parts_mut((self.recv + o.first * es) as *mut u8, o.len * es)
            };
            let mut folds = &o.folds[..];
            if self.plan.forward {
                // SAFETY: the part lies inside `send`, which nothing writes.
                let own = unsafe {
                    std::slice::from_raw_parts((self.send + o.first * es) as *const u8, o.len * es)
                };
                // SAFETY: the first fold slot, as below.
                let first = unsafe { self.blob(folds[0], o.len * es) };
                if !sum_f32(self.dtype, acc, own, first) {
                    acc.copy_from_slice(own);
                    reduce_inplace(self.dtype, ReduceOp::Sum, acc, first)?;
                }
                folds = &folds[1..];
            }
            for &at in folds {
                // SAFETY: a fold slot, received in the previous step and not written again
                // before the next one.
                let theirs = unsafe { self.blob(at, o.len * es) };
                reduce_inplace(self.dtype, ReduceOp::Sum, acc, theirs)?;
            }
        }
        Ok(())
    }

    /// Staged form: compresses the other groups' sub-blocks of this rank's parts of piece `t`
    /// (with error feedback), each into the blob it sends them.
    ///
    /// # Safety
    /// As for [`Data::work`].
    unsafe fn compress_subs(&self, t: usize, k: &mut Kernels) -> Result<()> {
        let me = self.plan.group;
        for o in &self.plan.owned[t] {
            for sb in o
                .subs
                .iter()
                .enumerate()
                .filter(|&(q, _)| q != me)
                .map(|p| p.1)
            {
                // SAFETY: the blob this rank sends of the sub-block, inside the workspace; its
                // slot is not in flight during this step.
                let out = unsafe { self.blob_mut(sb.sent, sb.blob) };
                // SAFETY: forwarded; the sub-block lies inside the part.
                unsafe { self.compress_part(&sub_part(sb), out, k) }?;
            }
        }
        Ok(())
    }

    /// Staged form: for this rank's own group's sub-block of each of its parts of piece `t`,
    /// adds the other groups' blobs to its own values (own first, then group order) in f32,
    /// and compresses the sum into the blob every group decodes, keeping what that drops as
    /// error feedback.
    ///
    /// # Safety
    /// As for [`Data::work`].
    unsafe fn reduce(&self, t: usize, k: &mut Kernels) -> Result<()> {
        let Kernels { acc, scratch, .. } = k;
        let me = self.plan.group;
        for o in &self.plan.owned[t] {
            let sb = &o.subs[me];
            let part = sub_part(sb);
            let src = if self.plan.solo { self.send } else { self.recv };
            // SAFETY: the sub-block lies inside `src`, its level0 sum complete and untouched
            // until its decoding, steps later.
            unsafe { load(self.dtype, src, &part, acc) };
            // SAFETY: as in `compress`.
            let res = unsafe { self.residual_of(&part) };
            if let Some(res) = &res {
                for (x, r) in acc.iter_mut().zip(res.iter()) {
                    *x += *r;
                }
            }
            for g in (0..self.plan.groups).filter(|&g| g != me) {
                // SAFETY: group g's blob of the sub-block, received in an earlier step.
                let blob = unsafe { self.blob(o.gathered + g * sb.blob, sb.blob) };
                kernels::decompress_add(self.method, blob, acc)
                    .map_err(|e| e.context(format!("block of group {g}, piece {t}")))?;
            }
            // SAFETY: the reduced blob of this rank's sub-block; not in flight this step.
            let out = unsafe { self.blob_mut(sb.reduced, sb.blob) };
            kernels::compress(self.method, acc, out, scratch);
            if let Some(res) = res {
                kernels::residual(self.method, out, acc)?;
                res.copy_from_slice(acc);
            }
        }
        Ok(())
    }

    /// This rank's error-feedback values of `o`'s elements, if it keeps them.
    ///
    /// # Safety
    /// As for [`Data::work`]: nothing else touches them meanwhile.
    unsafe fn residual_of<'a>(&self, o: &Owned) -> Option<&'a mut [f32]> {
        // SAFETY: the caller's contract: `count` f32 values, exclusively ours for the call;
        // parts are disjoint.
        self.residual
            .map(|r| unsafe { std::slice::from_raw_parts_mut((r as *mut f32).add(o.first), o.len) })
    }

    /// `len` workspace bytes at `at`.
    ///
    /// # Safety
    /// Inside the workspace, and not written meanwhile.
    unsafe fn blob<'a>(&self, at: usize, len: usize) -> &'a [u8] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts((self.blobs + at) as *const u8, len) }
    }

    /// `len` workspace bytes at `at`, to write.
    ///
    /// # Safety
    /// Inside the workspace, and not accessed otherwise meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn blob_mut<'a>(&self, at: usize, len: usize) -> &'a mut [u8] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut((self.blobs + at) as *mut u8, len) }
    }

    /// Staged form: decodes every sub-block's reduced blob of this rank's parts of piece `t`
    /// into the output (its own group's included, so every owner writes the same bytes).
    ///
    /// # Safety
    /// As for [`Data::work`].
    unsafe fn decode_subs(&self, t: usize, k: &mut Kernels) -> Result<()> {
        for o in &self.plan.owned[t] {
            for (q, sb) in o.subs.iter().enumerate() {
                let part = sub_part(sb);
                // SAFETY: the reduced blob of sub-block q, written or received earlier.
                let blob = unsafe { self.blob(sb.reduced, sb.blob) };
                let ctx = |e: Error| e.context(format!("reduced block of group {q}, piece {t}"));
                // SAFETY: the sub-block lies inside `recv`, which nothing else touches
                // meanwhile.
                match unsafe { f32_shard(self.dtype, self.recv, &part) } {
                    Some(out) => kernels::decompress_set(self.method, blob, out).map_err(ctx)?,
                    None => {
                        k.acc.resize(part.len, 0.0);
                        kernels::decompress_set(self.method, blob, &mut k.acc[..part.len])
                            .map_err(ctx)?;
                        // SAFETY: as above.
                        unsafe { store(self.dtype, &k.acc[..part.len], self.recv, &part) };
                    }
                }
            }
        }
        Ok(())
    }

    /// Decodes every group's blob of `parts` of piece `t` (this rank's own, or in the
    /// forwarding form those its group peers forwarded), in group order, into the output.
    ///
    /// # Safety
    /// As for [`Data::work`].
    unsafe fn decode(&self, t: usize, parts: &[Owned], k: &mut Kernels) -> Result<()> {
        if self.plan.staged {
            // SAFETY: forwarded.
            return unsafe { self.decode_subs(t, k) };
        }
        for o in parts {
            // fp32 output is the accumulator itself; other types go through `acc`.
            // SAFETY: the piece lies inside `recv`, which nothing else touches meanwhile.
            let direct = unsafe { f32_shard(self.dtype, self.recv, o) };
            let is_direct = direct.is_some();
            let acc = match direct {
                Some(a) => a,
                None => {
                    k.acc.resize(o.len, 0.0);
                    &mut k.acc[..o.len]
                }
            };
            let blobs: Vec<&[u8]> = (0..self.plan.groups)
                // SAFETY: group gi's blob of the piece, received in an earlier step.
                .map(|gi| unsafe { self.blob(o.slot0 + gi * o.blob, o.blob) })
                .collect();
            let r = if is_direct {
                // Every group's blob, summed in group order, each output line written once.
                kernels::decompress_sum(self.method, &blobs, acc)
            } else {
                // The accumulator is read right back: ordinary stores keep it in cache.
                blobs.iter().enumerate().try_for_each(|(g, b)| match g {
                    0 => kernels::decompress_set(self.method, b, acc),
                    _ => kernels::decompress_add(self.method, b, acc),
                })
            };
            r.map_err(|e| e.context(format!("blocks of piece {t}")))?;
            if !is_direct {
                // SAFETY: the piece lies inside `recv`.
                unsafe { store(self.dtype, &k.acc[..o.len], self.recv, o) };
            }
        }
        Ok(())
    }
}

/// Runs one compressed AllReduce planned by [`prepare`] from `send` to `recv`, its messages
/// tagged with `tags` (see [`call_tag`]), appending a step trace to `log` when given; returns
/// the traffic it moved.
///
/// The pipeline's transfers run on the calling thread; with more than one piece the
/// compression and decoding run on a helper thread at the same time (see
/// [`crate::algo::compressed`]), step by step in lock-step with the transfers.
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
    ws.blobs.resize(plan.workspace, 0);
    let data = Data {
        plan,
        method: c.spec.method,
        dtype,
        send,
        recv,
        blobs: ws.blobs.as_mut_ptr() as usize,
        residual: c.residual,
    };
    let red = executor::reduce_fn(dtype, ReduceOp::Sum);
    let bufs = Buffers {
        send,
        recv,
        scratch: 0,
        ext: vec![data.blobs],
        send_hint: SendHint::default(),
    };
    let mut transfer = |i: usize| {
        // SAFETY: the step's spans lie inside `send`/`recv` (count elements) and the workspace
        // just sized to `plan.workspace`; the concurrent work of this step touches none of them.
        unsafe {
            executor::run_traced(
                ep,
                &plan.steps[i],
                &bufs,
                Some(red),
                deadline,
                tags,
                &[],
                log.as_deref_mut(),
            )
        }
    };
    let kern = &mut ws.kernels;
    let worked = if plan.owned.len() < 2 {
        (0..plan.steps.len()).try_for_each(|i| {
            transfer(i)?;
            // SAFETY: step i's transfers are complete; nothing else runs.
            unsafe { data.work(i, kern) }.map_err(Failure::Work)
        })
    } else {
        pipelined(&data, kern, &mut transfer)
    };
    match worked {
        Ok(()) => {}
        Err(Failure::Transfer(e)) => return Err(e),
        Err(Failure::Work(e)) => {
            // Peers must not finish with data this rank could not produce: breaking the links
            // makes every rank's call fail.
            let e = e.context(format!("rank {me}"));
            ep.abort(&e);
            return Err(e);
        }
    }
    Ok(plan
        .steps
        .iter()
        .map(|s| Traffic::of(s, me, topo))
        .fold(Traffic::default(), Traffic::plus))
}

/// Why a call stopped: its transfers failed (the executor aborted the links), or its own
/// decoding did (the links are still up).
enum Failure {
    Transfer(Error),
    Work(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Transfer(e)
    }
}

/// Runs the steps with their work on a helper thread: step i's transfers here while the helper
/// does step i's work, both finished before step i + 1.
fn pipelined(
    data: &Data,
    kern: &mut Kernels,
    transfer: &mut dyn FnMut(usize) -> Result<()>,
) -> std::result::Result<(), Failure> {
    use std::sync::mpsc;
    std::thread::scope(|s| {
        let (jobs, job_rx) = mpsc::channel::<usize>();
        let (done_tx, done) = mpsc::channel::<Result<()>>();
        let helper = std::thread::Builder::new()
            .name("hccl-compress".into())
            .spawn_scoped(s, move || {
                for i in job_rx {
                    // SAFETY: the plan keeps step i's work apart from step i's transfers, and
                    // the caller waits for this job before it starts step i + 1.
                    let r = unsafe { data.work(i, kern) };
                    let stop = r.is_err();
                    if done_tx.send(r).is_err() || stop {
                        break;
                    }
                }
            })
            .map_err(|e| {
                Failure::Work(Error::new(
                    ErrorKind::Syscall,
                    format!("cannot start the compression thread: {e}"),
                ))
            })?;
        let lost = || {
            Failure::Work(Error::new(
                ErrorKind::Internal,
                "the compression thread stopped unexpectedly",
            ))
        };
        let mut out = Ok(());
        for i in 0..data.plan.steps.len() {
            if jobs.send(i).is_err() {
                out = Err(lost());
                break;
            }
            let moved = transfer(i);
            // The helper's job must end before the buffers it uses can be reused or freed.
            let worked = done.recv();
            match (moved, worked) {
                (Err(e), _) => {
                    out = Err(Failure::Transfer(e));
                    break;
                }
                (Ok(()), Ok(Ok(()))) => {}
                (Ok(()), Ok(Err(e))) => {
                    out = Err(Failure::Work(e));
                    break;
                }
                (Ok(()), Err(_)) => {
                    out = Err(lost());
                    break;
                }
            }
        }
        drop(jobs);
        if helper.join().is_err() && out.is_ok() {
            out = Err(lost());
        }
        out
    })
}

/// `acc = a + b` as f32 values in one pass, when the data are fp32 and all three aligned;
/// false (nothing written) otherwise.
fn sum_f32(dtype: DataType, acc: &mut [u8], a: &[u8], b: &[u8]) -> bool {
    if dtype != DataType::Fp32 {
        return false;
    }
    // SAFETY: every bit pattern is an f32; `align_to` only hands out aligned middles.
    let (p, acc, q) = unsafe { acc.align_to_mut::<f32>() };
    // SAFETY: as above.
    let ((pa, a, qa), (pb, b, qb)) = unsafe { (a.align_to::<f32>(), b.align_to::<f32>()) };
    if [p.len(), q.len(), pa.len(), qa.len(), pb.len(), qb.len()] != [0; 6] {
        return false;
    }
    for ((d, x), y) in acc.iter_mut().zip(a).zip(b) {
        *d = x + y;
    }
    true
}

/// A sub-block as a part of its own (the accessors below take parts).
fn sub_part(sb: &Sub) -> Owned {
    Owned {
        first: sb.first,
        len: sb.len,
        blob: sb.blob,
        slot0: 0,
        bytes: 0,
        subs: Vec::new(),
        gathered: 0,
        folds: Vec::new(),
    }
}

/// Part `o` of `buf` as f32 values to read in place, when the data are fp32 and aligned.
///
/// # Safety
/// The part must lie inside `buf`, and nothing may write it while the slice lives.
unsafe fn f32_ref<'a>(dtype: DataType, buf: usize, o: &Owned) -> Option<&'a [f32]> {
    let at = buf + o.first * 4;
    if dtype != DataType::Fp32 || !at.is_multiple_of(std::mem::align_of::<f32>()) {
        return None;
    }
    // SAFETY: the caller's contract; aligned and inside the buffer.
    Some(unsafe { std::slice::from_raw_parts(at as *const f32, o.len) })
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

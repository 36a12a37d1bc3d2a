//! Schedules: an algorithm's plan for one rank, as plain data.
//!
//! A schedule is a list of steps. Within a step the local actions (copies, reductions) run
//! first, in order; then every send and receive of the step is posted and the step completes
//! when all of them have. Because schedules are data, the same plan runs over any link and can
//! be checked or costed without running it.

/// Which buffer a span lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The operation's input buffer.
    Send,
    /// The operation's output buffer.
    Recv,
    /// The communicator's scratch area.
    Scratch,
    /// An extra user buffer of the operation (point-to-point items), by index.
    Ext(u32),
}

/// A byte range within a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The buffer.
    pub buf: Buf,
    /// Offset in bytes.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Span {
    /// A span of `len` bytes at `off` in `buf`.
    pub fn new(buf: Buf, off: usize, len: usize) -> Span {
        Span { buf, off, len }
    }
}

/// One action of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `src` to `peer`.
    Send { peer: u32, src: Span },
    /// Receive from `peer` into `dst`.
    Recv { peer: u32, dst: Span },
    /// Receive from `peer` and combine: `dst = dst op incoming`.
    RecvReduce { peer: u32, dst: Span },
    /// Local copy (`src` and `dst` have the same length).
    Copy { src: Span, dst: Span },
    /// Local reduction `dst = dst op src`.
    Reduce { dst: Span, src: Span },
}

impl Action {
    /// Whether the action communicates with a peer.
    pub fn is_comm(&self) -> bool {
        matches!(
            self,
            Action::Send { .. } | Action::Recv { .. } | Action::RecvReduce { .. }
        )
    }
}

/// Appends the copy `src` → `dst` to `st`, extending the last action instead when it is a copy
/// between the same buffers that ends where this one starts on both sides: copying many
/// adjacent blocks stays one action, so a step does not grow with the rank count.
pub(crate) fn push_copy(st: &mut Vec<Action>, src: Span, dst: Span) {
    if let Some(Action::Copy { src: ps, dst: pd }) = st.last_mut() {
        if ps.buf == src.buf
            && pd.buf == dst.buf
            && ps.off + ps.len == src.off
            && pd.off + pd.len == dst.off
            && src.len == dst.len
        {
            ps.len += src.len;
            pd.len += dst.len;
            return;
        }
    }
    st.push(Action::Copy { src, dst });
}

/// A set of actions that complete together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Actions: local ones run first, in order, then the communication is posted.
    pub actions: Vec<Action>,
}

/// One rank's plan for one operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Algorithm name, for logs.
    pub algo: &'static str,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Scratch bytes the schedule uses.
    pub scratch: usize,
}

impl Schedule {
    /// An empty schedule for algorithm `algo`.
    pub fn new(algo: &'static str) -> Schedule {
        Schedule {
            algo,
            steps: Vec::new(),
            scratch: 0,
        }
    }

    /// Starts a new step and returns it for filling.
    pub fn step(&mut self) -> &mut Vec<Action> {
        self.steps.push(Step::default());
        &mut self.steps.last_mut().expect("just pushed").actions
    }

    /// Appends to the last step, starting one if there is none.
    pub fn current(&mut self) -> &mut Vec<Action> {
        if self.steps.is_empty() {
            self.steps.push(Step::default());
        }
        &mut self.steps.last_mut().expect("non-empty").actions
    }

    /// Reserves at least `bytes` of scratch.
    pub fn need_scratch(&mut self, bytes: usize) {
        self.scratch = self.scratch.max(bytes);
    }

    /// Drops empty steps.
    pub fn finish(mut self) -> Schedule {
        self.steps.retain(|s| !s.actions.is_empty());
        self
    }
}

/// Splits `count` elements into `n` near-equal consecutive blocks: `(first, len)` in elements.
pub fn even_blocks(count: usize, n: usize) -> Vec<(usize, usize)> {
    let base = count / n;
    let extra = count % n;
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        out.push((at, len));
        at += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_exactly() {
        for count in [0usize, 1, 7, 8, 4099] {
            for n in 1..=9 {
                let b = even_blocks(count, n);
                assert_eq!(b.len(), n);
                let mut at = 0;
                for &(f, l) in &b {
                    assert_eq!(f, at);
                    at += l;
                }
                assert_eq!(at, count);
                let max = b.iter().map(|x| x.1).max().unwrap();
                let min = b.iter().map(|x| x.1).min().unwrap();
                assert!(max - min <= 1);
            }
        }
    }
}

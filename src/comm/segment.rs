//! Cutting one large collective into segments that run one after another, so that the scratch
//! memory a communicator holds stays within its staging budget (`HCCL_BUFFSIZE`) whatever the
//! message size.
//!
//! Every segment is a collective of the same kind over a slice of each rank's data: a slice
//! `[first, first + len)` of every element-wise buffer, or of every rank's block for the
//! gathering and scattering forms. Equal-block forms keep their block stride by shifting the
//! buffer bases, so all full-sized segments share one schedule.

use crate::algo::schedule::even_blocks;
use crate::algo::Coll;

/// One segment: the collective to run and where its buffers start, in bytes from the
/// operation's send and receive buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The collective over this segment's slice.
    pub coll: Coll,
    /// Offset added to the send buffer.
    pub send_off: usize,
    /// Offset added to the receive buffer.
    pub recv_off: usize,
}

/// The most segments worth cutting `coll` into: one per element of the longest slice.
pub fn max_parts(coll: &Coll) -> usize {
    let n = match coll {
        Coll::AllReduce { count }
        | Coll::Broadcast { count, .. }
        | Coll::Reduce { count, .. }
        | Coll::AllGather { count }
        | Coll::ReduceScatter { count } => *count,
        Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => {
            counts.iter().copied().max().unwrap_or(0)
        }
        _ => 1,
    };
    n.max(1)
}

/// Splits `coll` (elements of `elem` bytes, on rank `me` of `n`) into `parts` segments; `None`
/// when the operation has no segmented form (it then runs whole).
pub fn split(coll: &Coll, elem: usize, me: u32, n: u32, parts: usize) -> Option<Vec<Segment>> {
    let me = me as usize;
    let flat = |count: usize, make: &dyn Fn(usize) -> Coll| {
        even_blocks(count, parts)
            .into_iter()
            .map(|(f, c)| Segment {
                coll: make(c),
                send_off: f * elem,
                recv_off: f * elem,
            })
            .collect()
    };
    // Piece i of every rank's block, for the forms with per-rank counts.
    let pieces = |counts: &[usize], i: usize| -> (Vec<usize>, Vec<usize>) {
        counts
            .iter()
            .map(|&c| {
                let (f, l) = even_blocks(c, parts)[i];
                (l, f)
            })
            .unzip()
    };
    Some(match coll {
        Coll::AllReduce { count } => flat(*count, &|c| Coll::AllReduce { count: c }),
        Coll::Broadcast { count, root } => flat(*count, &|c| Coll::Broadcast {
            count: c,
            root: *root,
        }),
        Coll::Reduce { count, root } => flat(*count, &|c| Coll::Reduce {
            count: c,
            root: *root,
        }),
        Coll::AllGather { count } | Coll::ReduceScatter { count } => {
            // Block r of the slice starts at r * count from the shifted base.
            let displs: Vec<usize> = (0..n as usize).map(|r| r * count).collect();
            let gather = matches!(coll, Coll::AllGather { .. });
            even_blocks(*count, parts)
                .into_iter()
                .map(|(f, c)| {
                    let (counts, displs) = (vec![c; n as usize], displs.clone());
                    Segment {
                        coll: if gather {
                            Coll::AllGatherV { counts, displs }
                        } else {
                            Coll::ReduceScatterV { counts, displs }
                        },
                        send_off: f * elem,
                        recv_off: f * elem,
                    }
                })
                .collect()
        }
        Coll::AllGatherV { counts, displs } | Coll::ReduceScatterV { counts, displs } => {
            // The gathering form slices this rank's input, the scattering form its output.
            let gather = matches!(coll, Coll::AllGatherV { .. });
            (0..parts)
                .map(|i| {
                    let (counts, f) = pieces(counts, i);
                    let displs = displs.iter().zip(&f).map(|(d, f)| d + f).collect();
                    let mine = f[me] * elem;
                    if gather {
                        Segment {
                            coll: Coll::AllGatherV { counts, displs },
                            send_off: mine,
                            recv_off: 0,
                        }
                    } else {
                        Segment {
                            coll: Coll::ReduceScatterV { counts, displs },
                            send_off: 0,
                            recv_off: mine,
                        }
                    }
                })
                .collect()
        }
        Coll::Scatter { .. } | Coll::AlltoAllV { .. } | Coll::P2p { .. } | Coll::Barrier => {
            return None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which (rank block, element) of the send and receive sides each segment touches, as
    /// absolute element indices; every index must be covered exactly once over all segments.
    fn covered(segs: &[Segment], n: u32, me: u32) -> (Vec<usize>, Vec<usize>) {
        let (mut send, mut recv) = (Vec::new(), Vec::new());
        for s in segs {
            let (so, ro) = (s.send_off / 4, s.recv_off / 4);
            match &s.coll {
                Coll::AllReduce { count }
                | Coll::Broadcast { count, .. }
                | Coll::Reduce { count, .. } => {
                    send.extend(so..so + count);
                    recv.extend(ro..ro + count);
                }
                Coll::AllGatherV { counts, displs } => {
                    send.extend(so..so + counts[me as usize]);
                    for r in 0..n as usize {
                        recv.extend(ro + displs[r]..ro + displs[r] + counts[r]);
                    }
                }
                Coll::ReduceScatterV { counts, displs } => {
                    for r in 0..n as usize {
                        send.extend(so + displs[r]..so + displs[r] + counts[r]);
                    }
                    recv.extend(ro..ro + counts[me as usize]);
                }
                other => panic!("unexpected segment {other:?}"),
            }
        }
        send.sort_unstable();
        recv.sort_unstable();
        (send, recv)
    }

    #[test]
    fn segments_cover_every_element_once() {
        let n = 3u32;
        for parts in [1usize, 2, 3, 7, 10] {
            for me in 0..n {
                let all = |k: usize| (0..k).collect::<Vec<_>>();
                let count = 10;
                let segs = split(&Coll::AllReduce { count }, 4, me, n, parts).unwrap();
                assert_eq!(covered(&segs, n, me), (all(count), all(count)));
                let segs = split(&Coll::AllGather { count }, 4, me, n, parts).unwrap();
                assert_eq!(covered(&segs, n, me), (all(count), all(3 * count)));
                let segs = split(&Coll::ReduceScatter { count }, 4, me, n, parts).unwrap();
                assert_eq!(covered(&segs, n, me), (all(3 * count), all(count)));
                // Per-rank blocks with gaps between them.
                let (counts, displs) = (vec![4, 0, 9], vec![2, 7, 20]);
                let coll = Coll::AllGatherV {
                    counts: counts.clone(),
                    displs: displs.clone(),
                };
                let (s, r) = covered(&split(&coll, 4, me, n, parts).unwrap(), n, me);
                assert_eq!(s, all(counts[me as usize]));
                let want: Vec<usize> = (2..6).chain(20..29).collect();
                assert_eq!(r, want);
                let coll = Coll::ReduceScatterV { counts, displs };
                let (s, r) = covered(&split(&coll, 4, me, n, parts).unwrap(), n, me);
                assert_eq!(s, want);
                assert_eq!(r, all([4, 0, 9][me as usize]));
            }
        }
        assert!(split(&Coll::Barrier, 4, 0, 1, 2).is_none());
    }
}

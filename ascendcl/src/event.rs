//! Events: markers recorded on a stream, completed (and timestamped) when the stream reaches them.
//!
//! Each record gets a generation number. Waiters (`aclrtStreamWaitEvent`, `aclrtSynchronizeEvent`)
//! capture the generation current at call time and wait until it has completed, so a later
//! re-record or reset never strands them.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::{fail, AclResult};
use crate::stream::Stream;

#[derive(Default)]
struct State {
    /// Records submitted so far.
    issued: u64,
    /// Highest record generation that has executed.
    done: u64,
    /// A record executed since creation or the last executed reset.
    recorded: bool,
    /// When the last record executed on its stream.
    stamp: Option<Instant>,
}

/// An event object.
pub struct Event {
    /// Handle given to C.
    pub handle: usize,
    state: Mutex<State>,
    changed: Condvar,
}

impl Event {
    /// A new, never-recorded event.
    pub fn new(handle: usize) -> Arc<Event> {
        Arc::new(Event {
            handle,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }

    /// Enqueues a record of this event on `stream`.
    pub fn record(self: &Arc<Self>, stream: &Stream) -> AclResult {
        // Hold the event lock across the enqueue so a failed enqueue can take its generation back
        // before any waiter can observe it.
        let mut st = self.state.lock();
        st.issued += 1;
        let gen = st.issued;
        let ev = Arc::clone(self);
        let res = stream.enqueue(Box::new(move || {
            ev.complete(gen);
            Ok(())
        }));
        if res.is_err() {
            st.issued -= 1;
        }
        res
    }

    /// Enqueues a reset of this event on `stream` (status back to "not ready").
    pub fn reset(self: &Arc<Self>, stream: &Stream) -> AclResult {
        let ev = Arc::clone(self);
        stream.enqueue(Box::new(move || {
            let mut st = ev.state.lock();
            st.recorded = false;
            st.stamp = None;
            Ok(())
        }))
    }

    fn complete(&self, gen: u64) {
        let mut st = self.state.lock();
        st.done = st.done.max(gen);
        st.recorded = true;
        st.stamp = Some(Instant::now());
        drop(st);
        self.changed.notify_all();
    }

    /// Generation a waiter arriving now must wait for (0: nothing recorded, no wait).
    pub fn pending_generation(&self) -> u64 {
        self.state.lock().issued
    }

    /// Blocks until record generation `gen` has executed.
    pub fn wait_for(&self, gen: u64) {
        let mut st = self.state.lock();
        while st.done < gen {
            self.changed.wait(&mut st);
        }
    }

    /// Blocks until every record submitted before the call has executed.
    pub fn synchronize(&self) {
        let gen = self.pending_generation();
        self.wait_for(gen);
    }

    /// True when a record has executed and none is pending.
    pub fn is_complete(&self) -> bool {
        let st = self.state.lock();
        st.recorded && st.done == st.issued
    }

    /// Milliseconds from `start`'s to `end`'s execution on their streams.
    pub fn elapsed_ms(start: &Event, end: &Event) -> AclResult<f32> {
        let stamp = |e: &Event| {
            let st = e.state.lock();
            if st.recorded && st.done == st.issued {
                st.stamp
            } else {
                None
            }
        };
        match (stamp(start), stamp(end)) {
            (Some(a), Some(b)) => {
                let ms = if b >= a {
                    b.duration_since(a).as_secs_f64() * 1e3
                } else {
                    -(a.duration_since(b).as_secs_f64() * 1e3)
                };
                Ok(ms as f32)
            }
            _ => Err(fail(
                ACL_ERROR_INVALID_PARAM,
                "both events must have completed a record before measuring elapsed time",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::new_handle;

    #[test]
    fn record_wait_and_reset() {
        let s = Stream::spawn(new_handle(), 0).unwrap();
        let e = Event::new(new_handle());
        assert!(!e.is_complete());
        e.synchronize(); // never recorded: returns at once
        e.record(&s).unwrap();
        e.synchronize();
        assert!(e.is_complete());
        e.reset(&s).unwrap();
        s.synchronize(None).unwrap();
        assert!(!e.is_complete());
        s.shutdown();
        assert!(e.record(&s).is_err());
        assert_eq!(
            e.pending_generation(),
            1,
            "failed record must not leave a generation behind"
        );
    }
}

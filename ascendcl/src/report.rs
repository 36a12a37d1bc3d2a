//! Callback delivery for `aclrtLaunchCallback` / `aclrtSubscribeReport` / `aclrtProcessReport`.
//!
//! When a callback reaches the head of its stream, it is handed to the thread subscribed to that
//! stream, which runs it inside `aclrtProcessReport`. With `ACL_CALLBACK_BLOCK` the stream waits
//! until the callback has run; with `ACL_CALLBACK_NO_BLOCK` it moves on at once. A stream nobody
//! subscribed to runs its callbacks on its own worker thread (the vendor rejects that case; running
//! them keeps simple programs working). Unsubscribing runs the stream's undelivered callbacks on
//! the unsubscribing thread so that no blocked stream is stranded.

use std::collections::{HashMap, VecDeque};
use std::os::raw::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::codes::{ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_REPORT_TIMEOUT};
use crate::error::{fail, AclResult};
use crate::send_ptr::SendPtr;

/// C callback type.
pub type CallbackFn = unsafe extern "C" fn(*mut c_void);

#[derive(Default)]
struct Completion {
    done: Mutex<bool>,
    cv: Condvar,
}

struct Report {
    stream: usize,
    func: CallbackFn,
    data: SendPtr,
    done: Option<Arc<Completion>>,
}

impl Report {
    fn run(self) {
        // SAFETY: the C caller supplied a valid callback and data for it.
        unsafe { (self.func)(self.data.get()) };
        if let Some(c) = self.done {
            *c.done.lock() = true;
            c.cv.notify_all();
        }
    }
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<Report>,
    closed: bool,
}

#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    cv: Condvar,
}

#[derive(Default)]
struct Inner {
    /// stream handle -> subscribed thread id
    subs: HashMap<usize, u64>,
    /// thread id -> its report queue
    queues: HashMap<u64, Arc<Queue>>,
}

/// Subscriptions and per-thread report queues.
#[derive(Default)]
pub struct ReportHub {
    inner: Mutex<Inner>,
}

/// Id that `aclrtSubscribeReport` expects for the calling thread (its `pthread_t`).
pub fn current_thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

impl ReportHub {
    /// Routes callbacks of `stream` to thread `thread`.
    pub fn subscribe(&self, thread: u64, stream: usize) -> AclResult {
        let mut inner = self.inner.lock();
        if let Some(t) = inner.subs.get(&stream) {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!("stream {stream:#x} is already subscribed by thread {t:#x}"),
            ));
        }
        inner.subs.insert(stream, thread);
        inner.queues.entry(thread).or_default();
        Ok(())
    }

    /// Removes the subscription; undelivered callbacks of the stream run on the calling thread.
    pub fn unsubscribe(&self, thread: u64, stream: usize) -> AclResult {
        let queue = {
            let mut inner = self.inner.lock();
            if inner.subs.get(&stream) != Some(&thread) {
                return Err(fail(
                    ACL_ERROR_INVALID_PARAM,
                    format!("stream {stream:#x} is not subscribed by thread {thread:#x}"),
                ));
            }
            inner.subs.remove(&stream);
            let last = !inner.subs.values().any(|&t| t == thread);
            let q = if last {
                inner.queues.remove(&thread)
            } else {
                inner.queues.get(&thread).cloned()
            };
            (q.expect("a subscribed thread has a queue"), last)
        };
        let (queue, last) = queue;
        let mut st = queue.state.lock();
        let (mine, others): (VecDeque<Report>, VecDeque<Report>) =
            st.items.drain(..).partition(|r| r.stream == stream);
        st.items = others;
        // A thread left without subscriptions gets its pending aclrtProcessReport woken with an error.
        st.closed = last;
        drop(st);
        queue.cv.notify_all();
        mine.into_iter().for_each(Report::run);
        Ok(())
    }

    /// Runs the callbacks queued for thread `thread`, waiting up to `timeout_ms` (-1: forever)
    /// for at least one.
    pub fn process(&self, thread: u64, timeout_ms: i32) -> AclResult {
        let queue = self
            .inner
            .lock()
            .queues
            .get(&thread)
            .cloned()
            .ok_or_else(|| {
                fail(
                    ACL_ERROR_INVALID_PARAM,
                    format!("thread {thread:#x} has no subscribed stream"),
                )
            })?;
        let deadline =
            (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        let mut st = queue.state.lock();
        while st.items.is_empty() && !st.closed {
            match deadline {
                None => queue.cv.wait(&mut st),
                Some(d) => {
                    if queue.cv.wait_until(&mut st, d).timed_out() && st.items.is_empty() {
                        return Err(fail(
                            ACL_ERROR_RT_REPORT_TIMEOUT,
                            format!("no callback arrived within {timeout_ms} ms"),
                        ));
                    }
                }
            }
        }
        let batch: Vec<Report> = st.items.drain(..).collect();
        let closed = st.closed;
        drop(st);
        if batch.is_empty() && closed {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!("thread {thread:#x} was unsubscribed"),
            ));
        }
        batch.into_iter().for_each(Report::run);
        Ok(())
    }

    /// Called on the stream worker when a callback reaches the head of `stream`.
    pub fn deliver(&self, stream: usize, func: CallbackFn, data: SendPtr, block: bool) {
        let queue = {
            let inner = self.inner.lock();
            inner
                .subs
                .get(&stream)
                .and_then(|t| inner.queues.get(t))
                .cloned()
        };
        let report = |done| Report {
            stream,
            func,
            data,
            done,
        };
        let Some(queue) = queue else {
            report(None).run();
            return;
        };
        let done = block.then(|| Arc::new(Completion::default()));
        {
            let mut st = queue.state.lock();
            if st.closed {
                drop(st);
                report(None).run();
                return;
            }
            st.items.push_back(report(done.clone()));
        }
        queue.cv.notify_all();
        if let Some(c) = done {
            let mut d = c.done.lock();
            while !*d {
                c.cv.wait(&mut d);
            }
        }
    }

    /// Drops every subscription (finalize): undelivered callbacks run on the calling thread and
    /// waiting `aclrtProcessReport` calls return.
    pub fn shutdown(&self) {
        let queues: Vec<Arc<Queue>> = {
            let mut inner = self.inner.lock();
            inner.subs.clear();
            inner.queues.drain().map(|(_, q)| q).collect()
        };
        for q in queues {
            let pending: Vec<Report> = {
                let mut st = q.state.lock();
                st.closed = true;
                st.items.drain(..).collect()
            };
            q.cv.notify_all();
            pending.into_iter().for_each(Report::run);
        }
    }
}

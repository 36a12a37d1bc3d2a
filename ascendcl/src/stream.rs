//! Streams: in-order work queues, each served by its own worker thread.
//!
//! Work runs in submission order. A failing task records the stream's first ("sticky") error,
//! which the next synchronisation reports and clears; later tasks still run. All waiting is on
//! condition variables.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::codes::{
    ACL_ERROR_INVALID_PARAM, ACL_ERROR_INVALID_RESOURCE_HANDLE, ACL_ERROR_RT_FAILURE,
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
};
use crate::error::{fail, AclResult};
use crate::ffi_macro::panic_text;

/// Why a task failed; kept as the stream's sticky error until the next synchronisation.
#[derive(Debug, Clone)]
pub struct TaskFailure {
    /// Description logged and reported by the synchronisation.
    pub message: String,
}

/// A unit of work run on the worker thread.
pub type Task = Box<dyn FnOnce() -> Result<(), TaskFailure> + Send>;

struct State {
    queue: VecDeque<Task>,
    submitted: u64,
    completed: u64,
    first_error: Option<TaskFailure>,
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    work_ready: Condvar,
    progress: Condvar,
}

/// Worker threads started and not yet finished.
static LIVE_WORKERS: AtomicUsize = AtomicUsize::new(0);

/// Number of stream worker threads currently alive in the process (lets tests prove that
/// teardown leaves no thread behind).
pub fn live_workers() -> usize {
    LIVE_WORKERS.load(Ordering::SeqCst)
}

thread_local! {
    /// Handle of the stream whose worker is this thread (0 elsewhere).
    static WORKER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Handle of the stream served by the calling thread, if it is a stream worker.
pub fn current_worker_stream() -> Option<usize> {
    Some(WORKER_OF.with(|w| w.get())).filter(|&h| h != 0)
}

/// A stream and its worker.
pub struct Stream {
    /// Handle given to C.
    pub handle: usize,
    /// Logical device the stream was created on.
    pub device: i32,
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
    worker_id: ThreadId,
}

impl Stream {
    /// Creates the stream and starts its worker.
    pub fn spawn(handle: usize, device: i32) -> AclResult<Arc<Stream>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                submitted: 0,
                completed: 0,
                first_error: None,
                closing: false,
            }),
            work_ready: Condvar::new(),
            progress: Condvar::new(),
        });
        let for_worker = Arc::clone(&shared);
        // Counted before the thread starts so the count is exact as soon as spawn returns.
        LIVE_WORKERS.fetch_add(1, Ordering::SeqCst);
        let join = std::thread::Builder::new()
            .name(format!("acl-stream-{handle:x}"))
            .spawn(move || {
                worker_loop(handle, &for_worker);
                LIVE_WORKERS.fetch_sub(1, Ordering::SeqCst);
            })
            .map_err(|e| {
                LIVE_WORKERS.fetch_sub(1, Ordering::SeqCst);
                fail(
                    crate::codes::ACL_ERROR_FAILURE,
                    format!("cannot start stream worker: {e}"),
                )
            })?;
        Ok(Arc::new(Stream {
            handle,
            device,
            shared,
            worker_id: join.thread().id(),
            worker: Mutex::new(Some(join)),
        }))
    }

    /// Appends a task; fails once the stream is being destroyed.
    pub fn enqueue(&self, task: Task) -> AclResult {
        let mut st = self.shared.state.lock();
        if st.closing {
            return Err(fail(
                ACL_ERROR_INVALID_RESOURCE_HANDLE,
                format!("stream {:#x} is destroyed", self.handle),
            ));
        }
        st.queue.push_back(task);
        st.submitted += 1;
        drop(st);
        self.shared.work_ready.notify_one();
        Ok(())
    }

    /// Waits until everything submitted before the call has run (or `timeout` passes), then
    /// reports and clears the sticky error.
    pub fn synchronize(&self, timeout: Option<Duration>) -> AclResult {
        if current_worker_stream() == Some(self.handle) {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "stream {:#x} synchronised from its own work: would deadlock",
                    self.handle
                ),
            ));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.shared.state.lock();
        let target = st.submitted;
        while st.completed < target {
            match deadline {
                None => self.shared.progress.wait(&mut st),
                Some(d) => {
                    if self.shared.progress.wait_until(&mut st, d).timed_out()
                        && st.completed < target
                    {
                        return Err(fail(
                            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
                            format!("stream {:#x}: synchronisation timed out", self.handle),
                        ));
                    }
                }
            }
        }
        match st.first_error.take() {
            None => Ok(()),
            Some(e) => Err(fail(
                ACL_ERROR_RT_FAILURE,
                format!(
                    "stream {:#x}: earlier work failed: {}",
                    self.handle, e.message
                ),
            )),
        }
    }

    /// True when all submitted work has run.
    pub fn is_idle(&self) -> bool {
        let st = self.shared.state.lock();
        st.completed == st.submitted
    }

    /// Refuses new work, lets the worker drain what is queued, and joins it. When called from the
    /// stream's own worker (a callback destroying its stream) the worker is left to exit by itself.
    pub fn shutdown(&self) {
        self.shared.state.lock().closing = true;
        self.shared.work_ready.notify_all();
        if std::thread::current().id() == self.worker_id {
            return;
        }
        if let Some(join) = self.worker.lock().take() {
            if join.join().is_err() {
                log::error!("stream {:#x}: worker thread panicked", self.handle);
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Registries normally call `shutdown`; this covers any path that forgot, so no thread leaks.
        self.shutdown();
    }
}

fn worker_loop(handle: usize, shared: &Shared) {
    WORKER_OF.with(|w| w.set(handle));
    loop {
        let task = {
            let mut st = shared.state.lock();
            loop {
                if let Some(t) = st.queue.pop_front() {
                    break t;
                }
                if st.closing {
                    return;
                }
                shared.work_ready.wait(&mut st);
            }
        };
        let outcome = match catch_unwind(AssertUnwindSafe(task)) {
            Ok(r) => r,
            Err(p) => Err(TaskFailure {
                message: format!("task panicked: {}", panic_text(&p)),
            }),
        };
        let mut st = shared.state.lock();
        st.completed += 1;
        if let Err(e) = outcome {
            log::error!("stream {handle:#x}: task failed: {}", e.message);
            if st.first_error.is_none() {
                st.first_error = Some(e);
            }
        }
        drop(st);
        shared.progress.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_in_order_and_reports_first_error_once() {
        let s = Stream::spawn(crate::handle::new_handle(), 0).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..50 {
            let log = Arc::clone(&log);
            s.enqueue(Box::new(move || {
                log.lock().push(i);
                if i == 10 || i == 20 {
                    Err(TaskFailure {
                        message: format!("task {i}"),
                    })
                } else {
                    Ok(())
                }
            }))
            .unwrap();
        }
        assert_eq!(
            s.synchronize(None).unwrap_err().code(),
            ACL_ERROR_RT_FAILURE
        );
        assert_eq!(*log.lock(), (0..50).collect::<Vec<_>>());
        assert!(s.synchronize(None).is_ok());
        s.shutdown();
    }

    #[test]
    fn timeout_and_drain_on_shutdown() {
        let s = Stream::spawn(crate::handle::new_handle(), 0).unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        s.enqueue(Box::new(move || {
            rx.recv().ok();
            Ok(())
        }))
        .unwrap();
        let err = s.synchronize(Some(Duration::from_millis(20))).unwrap_err();
        assert_eq!(err.code(), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
        assert!(!s.is_idle());
        let ran = Arc::new(Mutex::new(false));
        let r2 = Arc::clone(&ran);
        s.enqueue(Box::new(move || {
            *r2.lock() = true;
            Ok(())
        }))
        .unwrap();
        tx.send(()).unwrap();
        s.shutdown();
        assert!(*ran.lock());
        assert!(s.enqueue(Box::new(|| Ok(()))).is_err());
    }

    #[test]
    fn panicking_task_becomes_error() {
        let s = Stream::spawn(crate::handle::new_handle(), 0).unwrap();
        s.enqueue(Box::new(|| panic!("boom"))).unwrap();
        assert_eq!(
            s.synchronize(None).unwrap_err().code(),
            ACL_ERROR_RT_FAILURE
        );
    }
}

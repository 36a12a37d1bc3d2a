//! `hccl.Request`: the handle of a non-blocking operation.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::buffer::View;
use crate::core::{Core, Pending};
use crate::errors;

/// A non-blocking operation in progress. The operation runs without the calling thread;
/// ``wait()`` blocks (with the interpreter released) until it is over and raises its error,
/// ``test()`` only looks. The buffers stay referenced until the operation has finished, even
/// if the request is dropped first.
#[pyclass(module = "hccl", name = "Request", frozen)]
pub struct Request {
    core: Arc<Core>,
    state: Mutex<Pending>,
    views: Mutex<Vec<View>>,
}

impl Request {
    /// A request for `pending` that keeps `views` alive.
    pub fn new(core: Arc<Core>, pending: Pending, views: Vec<View>) -> Request {
        Request {
            core,
            state: Mutex::new(pending),
            views: Mutex::new(views),
        }
    }

    /// The queue request behind a pending operation, starting its batch if it is deferred.
    fn started(&self, py: Python<'_>) -> PyResult<Option<hccl::comm::queue::Request>> {
        let st = self.state.lock();
        match &*st {
            Pending::Done(_) => Ok(None),
            Pending::Queued(q) => Ok(Some(q.clone())),
            Pending::Deferred(cell) => {
                if cell.get().is_none() {
                    errors::check(py, self.core.flush())?;
                }
                Ok(cell.get().cloned())
            }
        }
    }

    fn finish(&self, r: hccl::base::error::Result<()>) {
        *self.state.lock() = Pending::Done(r);
        self.views.lock().clear();
    }

    fn outcome(&self) -> Option<hccl::base::error::Result<()>> {
        match &*self.state.lock() {
            Pending::Done(r) => Some(r.clone()),
            _ => None,
        }
    }
}

#[pymethods]
impl Request {
    /// Waits until the operation is over: True when it finished, False if ``timeout`` seconds
    /// passed first. Raises the operation's ``HcclError`` if it failed.
    #[pyo3(signature = (timeout=None))]
    pub(crate) fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let limit = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "argument 'timeout' must be a non-negative number of seconds, not {t}"
                )))
            }
        };
        if let Some(q) = self.started(py)? {
            match py.detach(|| q.wait(limit)) {
                None => return Ok(false),
                Some(r) => self.finish(r),
            }
        }
        self.core.sweep();
        match self.outcome() {
            Some(Err(e)) => Err(errors::to_py(py, &e)),
            _ => Ok(true),
        }
    }

    /// True once the operation is over (successfully or not); never blocks. Starts a deferred
    /// point-to-point batch.
    fn test(&self, py: Python<'_>) -> PyResult<bool> {
        if let Some(q) = self.started(py)? {
            match q.test() {
                None => return Ok(false),
                Some(r) => self.finish(r),
            }
        }
        Ok(true)
    }

    /// True once the operation is over (same as ``test()``).
    #[getter]
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        self.test(py)
    }

    /// The operation's error as an ``HcclError`` instance, or None (also while it runs).
    #[getter]
    fn error(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.test(py)?;
        Ok(match self.outcome() {
            Some(Err(e)) => Some(errors::to_py(py, &e).into_value(py).into_any()),
            _ => None,
        })
    }

    /// Calls ``callback(error_or_None)`` once the operation is over: at once if it is, else on
    /// the thread that completes it (with the interpreter attached).
    fn _on_done(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        match self.started(py)? {
            None => {
                let arg = match self.outcome() {
                    Some(Err(e)) => Some(errors::to_py(py, &e).into_value(py).into_any()),
                    _ => None,
                };
                callback.call1(py, (arg,))?;
            }
            Some(q) => q.on_done(Box::new(move |r| {
                Python::attach(move |py| {
                    let arg = r
                        .as_ref()
                        .err()
                        .map(|e| errors::to_py(py, e).into_value(py).into_any());
                    if let Err(e) = callback.call1(py, (arg,)) {
                        e.write_unraisable(py, None);
                    }
                })
            })),
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        let what = match &*self.state.lock() {
            Pending::Done(Ok(())) => "done".to_string(),
            Pending::Done(Err(e)) => format!("failed: {}", e.msg),
            Pending::Queued(q) if q.test().is_some() => "done".to_string(),
            Pending::Queued(_) => "running".to_string(),
            Pending::Deferred(_) => "pending".to_string(),
        };
        format!("<hccl.Request {what}>")
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        let st = std::mem::replace(&mut *self.state.lock(), Pending::Done(Ok(())));
        let views = std::mem::take(&mut *self.views.lock());
        if !crate::core::is_done(&st) && !views.is_empty() {
            self.core.adopt(st, views);
        }
    }
}

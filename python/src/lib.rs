//! `hccl._native`: the extension module of the `hccl` Python package. It wraps the library's
//! communicator directly (no C ABI in between) and releases the interpreter while the library
//! waits or moves data.
//!
//! The module-level operations (`hccl.allreduce(...)`) run on the default communicator set by
//! `hccl.init()`; they are native functions so that a call costs no Python frame.

mod buffer;
mod comm;
mod core;
mod errors;
mod request;

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::comm::Comm;
use crate::request::Request;

static DEFAULT: Mutex<Option<Py<Comm>>> = Mutex::new(None);

/// Sets (or with None clears) the communicator the module-level operations use.
#[pyfunction]
fn _set_default(comm: Option<Py<Comm>>) {
    *DEFAULT.lock() = comm;
}

/// The communicator the module-level operations use, or None before ``hccl.init()``.
#[pyfunction]
fn _get_default(py: Python<'_>) -> Option<Py<Comm>> {
    DEFAULT.lock().as_ref().map(|c| c.clone_ref(py))
}

fn default(py: Python<'_>) -> PyResult<Py<Comm>> {
    DEFAULT
        .lock()
        .as_ref()
        .map(|c| c.clone_ref(py))
        .ok_or_else(|| {
            PyRuntimeError::new_err(
                "hccl is not initialised: call hccl.init() first (or use a Communicator)",
            )
        })
}

type Ret = PyResult<Option<Py<Request>>>;

/// ``allreduce`` on the default communicator (see :meth:`Communicator.allreduce`).
#[pyfunction]
#[pyo3(signature = (buf, op=0, *, out=None, async_op=false, dtype=None, compression=None, residual=None, compress_level0=false))]
#[allow(clippy::too_many_arguments)]
fn allreduce(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    op: u32,
    out: Option<&Bound<'_, PyAny>>,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
    compression: Option<&str>,
    residual: Option<&Bound<'_, PyAny>>,
    compress_level0: bool,
) -> Ret {
    default(py)?.get().allreduce(
        py,
        buf,
        op,
        out,
        async_op,
        dtype,
        compression,
        residual,
        compress_level0,
    )
}

/// ``broadcast`` on the default communicator (see :meth:`Communicator.broadcast`).
#[pyfunction]
#[pyo3(signature = (buf, root=0, *, async_op=false, dtype=None))]
fn broadcast(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    root: i64,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?.get().broadcast(py, buf, root, async_op, dtype)
}

/// ``reduce`` on the default communicator (see :meth:`Communicator.reduce`).
#[pyfunction]
#[pyo3(signature = (buf, root=0, op=0, *, out=None, async_op=false, dtype=None))]
fn reduce(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    root: i64,
    op: u32,
    out: Option<&Bound<'_, PyAny>>,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?
        .get()
        .reduce(py, buf, root, op, out, async_op, dtype)
}

/// ``allgather`` on the default communicator (see :meth:`Communicator.allgather`).
#[pyfunction]
#[pyo3(signature = (buf, out, *, async_op=false, dtype=None))]
fn allgather(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?.get().allgather(py, buf, out, async_op, dtype)
}

/// ``reduce_scatter`` on the default communicator (see :meth:`Communicator.reduce_scatter`).
#[pyfunction]
#[pyo3(signature = (buf, out, op=0, *, async_op=false, dtype=None))]
fn reduce_scatter(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    op: u32,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?
        .get()
        .reduce_scatter(py, buf, out, op, async_op, dtype)
}

/// ``alltoall`` on the default communicator (see :meth:`Communicator.alltoall`).
#[pyfunction]
#[pyo3(signature = (buf, out, *, async_op=false, dtype=None))]
fn alltoall(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?.get().alltoall(py, buf, out, async_op, dtype)
}

/// ``alltoallv`` on the default communicator (see :meth:`Communicator.alltoallv`).
#[pyfunction]
#[pyo3(signature = (buf, send_counts, out, recv_counts, send_displs=None, recv_displs=None, *, async_op=false, dtype=None))]
#[allow(clippy::too_many_arguments)]
fn alltoallv(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    send_counts: Vec<usize>,
    out: &Bound<'_, PyAny>,
    recv_counts: Vec<usize>,
    send_displs: Option<Vec<usize>>,
    recv_displs: Option<Vec<usize>>,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?.get().alltoallv(
        py,
        buf,
        send_counts,
        out,
        recv_counts,
        send_displs,
        recv_displs,
        async_op,
        dtype,
    )
}

/// ``scatter`` on the default communicator (see :meth:`Communicator.scatter`).
#[pyfunction]
#[pyo3(signature = (buf, out, root=0, *, async_op=false, dtype=None))]
fn scatter(
    py: Python<'_>,
    buf: Option<&Bound<'_, PyAny>>,
    out: &Bound<'_, PyAny>,
    root: i64,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?
        .get()
        .scatter(py, buf, out, root, async_op, dtype)
}

/// ``gather`` on the default communicator (see :meth:`Communicator.gather`).
#[pyfunction]
#[pyo3(signature = (buf, out=None, root=0, *, async_op=false, dtype=None))]
fn gather(
    py: Python<'_>,
    buf: &Bound<'_, PyAny>,
    out: Option<&Bound<'_, PyAny>>,
    root: i64,
    async_op: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Ret {
    default(py)?
        .get()
        .gather(py, buf, out, root, async_op, dtype)
}

/// ``send`` on the default communicator (see :meth:`Communicator.send`).
#[pyfunction]
fn send(py: Python<'_>, buf: &Bound<'_, PyAny>, dest: i64) -> PyResult<()> {
    default(py)?.get().send(py, buf, dest)
}

/// ``recv`` on the default communicator (see :meth:`Communicator.recv`).
#[pyfunction]
fn recv(py: Python<'_>, buf: &Bound<'_, PyAny>, src: i64) -> PyResult<()> {
    default(py)?.get().recv(py, buf, src)
}

/// ``isend`` on the default communicator (see :meth:`Communicator.isend`).
#[pyfunction]
fn isend(py: Python<'_>, buf: &Bound<'_, PyAny>, dest: i64) -> PyResult<Py<Request>> {
    default(py)?.get().isend(py, buf, dest)
}

/// ``irecv`` on the default communicator (see :meth:`Communicator.irecv`).
#[pyfunction]
fn irecv(py: Python<'_>, buf: &Bound<'_, PyAny>, src: i64) -> PyResult<Py<Request>> {
    default(py)?.get().irecv(py, buf, src)
}

/// ``barrier`` on the default communicator (see :meth:`Communicator.barrier`).
#[pyfunction]
#[pyo3(signature = (*, async_op=false))]
fn barrier(py: Python<'_>, async_op: bool) -> Ret {
    default(py)?.get().barrier(py, async_op)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The library logs as the C entry points set it up (HCCL_LOG_LEVEL, ASCEND_GLOBAL_LOG_LEVEL).
    hccl::base::logging::init_from_env();
    m.add_class::<Comm>()?;
    m.add_class::<Request>()?;
    m.add("ROOT_INFO_BYTES", hccl::comm::root_info::ROOT_INFO_BYTES)?;
    m.add_function(wrap_pyfunction!(comm::get_root_info, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_register_errors, m)?)?;
    m.add_function(wrap_pyfunction!(_set_default, m)?)?;
    m.add_function(wrap_pyfunction!(_get_default, m)?)?;
    m.add_function(wrap_pyfunction!(allreduce, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(allgather, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_scatter, m)?)?;
    m.add_function(wrap_pyfunction!(alltoall, m)?)?;
    m.add_function(wrap_pyfunction!(alltoallv, m)?)?;
    m.add_function(wrap_pyfunction!(scatter, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(send, m)?)?;
    m.add_function(wrap_pyfunction!(recv, m)?)?;
    m.add_function(wrap_pyfunction!(isend, m)?)?;
    m.add_function(wrap_pyfunction!(irecv, m)?)?;
    m.add_function(wrap_pyfunction!(barrier, m)?)?;
    Ok(())
}

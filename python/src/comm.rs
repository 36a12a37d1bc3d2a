//! `hccl.Communicator` and its operations.

use std::sync::Arc;
use std::time::Duration;

use hccl::algo::{Coll, P2pItem};
use hccl::base::compress::{Method, Spec};
use hccl::base::dtype::{DataType, ReduceOp};
use hccl::base::env::EnvConfig;
use hccl::comm::communicator::create_root_info;
use hccl::comm::compressed::check_call;
use hccl::comm::config::{CommConfig, Overrides};
use hccl::comm::queue::Then;
use hccl::comm::root_info::{RootInfo, ROOT_INFO_BYTES};
use hccl::comm::world;
use hccl::comm::{Communicator, OpArgs};
use hccl::exec::reduce::check_reducible;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffer::{view, View};
use crate::core::{divide, Core, Pending};
use crate::errors::{self, check};
use crate::request::Request;

/// Reduce operator codes of the Python API (`hccl.SUM` ...); AVG is a sum, then a division.
const AVG: u32 = 4;

/// An operation's arguments without extra buffers or compression (what most operations
/// need; the others set `ext` or `compress` on top).
fn op_args(
    name: &'static str,
    coll: Coll,
    dtype: DataType,
    op: Option<ReduceOp>,
    send: usize,
    recv: usize,
) -> OpArgs {
    OpArgs {
        name,
        coll,
        dtype,
        op,
        send,
        recv,
        ext: Vec::new(),
        compress: None,
    }
}

fn reduce_op(op: u32) -> PyResult<(ReduceOp, bool)> {
    match op {
        AVG => Ok((ReduceOp::Sum, true)),
        _ => ReduceOp::from_raw(op).map(|o| (o, false)).ok_or_else(|| {
            PyValueError::new_err(format!(
                "argument 'op': {op} is not a reduce operator (hccl.SUM, PROD, MAX, MIN, AVG)"
            ))
        }),
    }
}

const DTYPE_NAMES: [(&str, DataType); 24] = [
    ("int8", DataType::Int8),
    ("int16", DataType::Int16),
    ("int32", DataType::Int32),
    ("int64", DataType::Int64),
    ("uint8", DataType::Uint8),
    ("uint16", DataType::Uint16),
    ("uint32", DataType::Uint32),
    ("uint64", DataType::Uint64),
    ("float16", DataType::Fp16),
    ("half", DataType::Fp16),
    ("fp16", DataType::Fp16),
    ("bfloat16", DataType::Bf16),
    ("bf16", DataType::Bf16),
    ("float32", DataType::Fp32),
    ("float", DataType::Fp32),
    ("fp32", DataType::Fp32),
    ("float64", DataType::Fp64),
    ("double", DataType::Fp64),
    ("fp64", DataType::Fp64),
    ("int128", DataType::Int128),
    ("float8_e4m3fn", DataType::Fp8E4M3),
    ("float8_e5m2", DataType::Fp8E5M2),
    ("bool", DataType::Uint8),
    ("long", DataType::Int64),
];

/// The name Python users know a type by (numpy's and torch's).
pub fn type_name(dt: DataType) -> &'static str {
    DTYPE_NAMES
        .iter()
        .find(|(_, d)| *d == dt)
        .map_or(dt.name(), |(n, _)| n)
}

/// `dtype=`: an `hccl.DataType` (or its HCCL code), a name, a numpy dtype or a torch dtype.
fn parse_dtype(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<DataType>> {
    let Some(o) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(code) = o.extract::<u32>() {
        return DataType::from_raw(code).map(Some).ok_or_else(|| {
            PyValueError::new_err(format!("argument 'dtype': {code} is not an HCCL data type"))
        });
    }
    let s = o.str()?.to_string();
    let name = s.strip_prefix("torch.").unwrap_or(&s).to_ascii_lowercase();
    DTYPE_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, d)| Some(*d))
        .ok_or_else(|| PyTypeError::new_err(format!("argument 'dtype': unknown data type {s}")))
}

/// The element type of `v` (argument `name`): `given` if set, else what the buffer says.
fn elem_type(v: &View, given: Option<DataType>, name: &str) -> PyResult<DataType> {
    given.or(v.dtype).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "argument '{name}': its element type is not one hccl knows; pass dtype="
        ))
    })
}

/// Checks that `v` (argument `name`) holds elements of `dt` (those of argument `other`).
fn same_type(v: &View, dt: DataType, name: &str, other: &str, given: bool) -> PyResult<()> {
    match v.dtype {
        Some(d) if d != dt && !given => Err(PyTypeError::new_err(format!(
            "argument '{name}' has element type {}, but '{other}' has {}",
            type_name(d),
            type_name(dt)
        ))),
        _ => Ok(()),
    }
}

fn need_bytes(v: &View, bytes: usize, name: &str, why: &str) -> PyResult<()> {
    if v.bytes != bytes {
        return Err(PyValueError::new_err(format!(
            "argument '{name}' has {} bytes, but {why} needs {bytes}",
            v.bytes
        )));
    }
    Ok(())
}

fn seconds(t: Option<f64>, name: &str) -> PyResult<Option<Duration>> {
    match t {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(PyValueError::new_err(format!(
            "argument '{name}' must be a positive number of seconds, not {s}"
        ))),
    }
}

/// The configuration of a new communicator: the environment, with `timeout` (seconds) as both
/// the time init waits for peers and the time an operation waits for them.
fn config(py: Python<'_>, timeout: Option<f64>, name: Option<String>) -> PyResult<CommConfig> {
    let t = seconds(timeout, "timeout")?;
    let env = check(py, EnvConfig::global())?;
    let ov = Overrides {
        name,
        ..Overrides::default()
    };
    let mut cfg = check(py, CommConfig::merge(&ov, &env))?;
    if let Some(t) = t {
        cfg.exec_timeout = Some(t);
        cfg.connect_timeout = t;
    }
    Ok(cfg)
}

/// Creates the rendezvous of a new communicator on this process and returns its root info
/// (4108 bytes) to hand to every rank, as `HcclGetRootInfo` does.
#[pyfunction]
pub fn get_root_info(py: Python<'_>) -> PyResult<Py<PyBytes>> {
    let env = check(py, EnvConfig::global())?;
    let info = check(py, py.detach(|| create_root_info(&env)))?;
    Ok(PyBytes::new(py, &info.encode()).unbind())
}

/// One rank's membership in a group of ranks, and the collective and point-to-point
/// operations among them. Operations take any C-contiguous buffer (numpy array, torch CPU
/// tensor, ``bytearray``, ``memoryview``, or an object with ``__dlpack__``) and work in place
/// unless ``out=`` is given; ``async_op=True`` returns a :class:`Request` instead of waiting.
#[pyclass(module = "hccl", name = "Communicator", frozen)]
pub struct Comm {
    pub(crate) core: Arc<Core>,
}

type Ret = PyResult<Option<Py<Request>>>;

impl Comm {
    fn wrap(c: Communicator) -> Comm {
        Comm {
            core: Arc::new(Core::new(c)),
        }
    }

    fn size_u32(&self) -> u32 {
        self.core.comm.size()
    }

    fn rank_arg(&self, r: i64, name: &str) -> PyResult<u32> {
        let n = self.size_u32();
        if r < 0 || r >= n as i64 {
            return Err(PyValueError::new_err(format!(
                "argument '{name}': rank {r} is out of range for {n} ranks"
            )));
        }
        Ok(r as u32)
    }

    fn launch(
        &self,
        py: Python<'_>,
        args: OpArgs,
        views: Vec<View>,
        then: Option<Then>,
        async_op: bool,
    ) -> Ret {
        self.core.sweep();
        check(py, self.core.alive())?;
        let core = &self.core;
        if async_op {
            let q = check(py, core.submit(args, then))?;
            let req = Request::new(Arc::clone(core), Pending::Queued(q), views);
            return Ok(Some(Py::new(py, req)?));
        }
        let r = py.detach(|| core.run_now(args, then));
        drop(views);
        check(py, r)?;
        Ok(None)
    }

    fn avg_then(&self, recv: usize, count: usize, dt: DataType) -> PyResult<Then> {
        if !matches!(
            dt,
            DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64
        ) {
            return Err(PyTypeError::new_err(format!(
                "AVG needs a floating-point element type, not {}",
                type_name(dt)
            )));
        }
        let n = self.size_u32();
        // SAFETY: runs after the operation, while the request keeps the output buffer alive.
        Ok(Box::new(move || unsafe { divide(recv, count, dt, n) }))
    }

    fn reducible(dt: DataType, op: ReduceOp) -> PyResult<()> {
        check_reducible(dt, op).map_err(|e| PyTypeError::new_err(e.into_msg()))
    }

    fn p2p(
        &self,
        py: Python<'_>,
        send: bool,
        buf: &Bound<'_, PyAny>,
        peer: i64,
        wait: bool,
    ) -> PyResult<Py<Request>> {
        self.core.sweep();
        check(py, self.core.alive())?;
        let (bname, pname) = if send {
            ("buf", "dest")
        } else {
            ("buf", "src")
        };
        let peer = self.rank_arg(peer, pname)?;
        let v = view(buf, bname, !send)?;
        let cell = self.core.defer_p2p(send, peer, v.ptr, v.bytes);
        let req = Py::new(
            py,
            Request::new(Arc::clone(&self.core), Pending::Deferred(cell), vec![v]),
        )?;
        if wait {
            req.get().wait(py, None)?;
        }
        Ok(req)
    }
}

#[pymethods]
impl Comm {
    /// Joins the communicator described by ``root_info`` (from :func:`get_root_info` on one
    /// rank, shipped to all) as ``rank`` of ``size``. ``timeout`` (seconds) bounds the wait for
    /// peers at init and in every operation (default: ``HCCL_CONNECT_TIMEOUT`` and
    /// ``HCCL_EXEC_TIMEOUT``).
    #[new]
    #[pyo3(signature = (size, rank, root_info, *, timeout=None, name=None))]
    fn py_new(
        py: Python<'_>,
        size: u32,
        rank: u32,
        root_info: &[u8],
        timeout: Option<f64>,
        name: Option<String>,
    ) -> PyResult<Comm> {
        if size == 0 || rank >= size {
            return Err(PyValueError::new_err(format!(
                "argument 'rank': {rank} is out of range for size {size}"
            )));
        }
        if root_info.len() != ROOT_INFO_BYTES {
            return Err(PyValueError::new_err(format!(
                "argument 'root_info' must be the {ROOT_INFO_BYTES} bytes of get_root_info(), \
                 not {} bytes",
                root_info.len()
            )));
        }
        let ri = check(py, RootInfo::decode(root_info))?;
        let cfg = config(py, timeout, name)?;
        let c = check(
            py,
            py.detach(|| Communicator::init_root_info(size, &ri, rank, cfg)),
        )?;
        Ok(Comm::wrap(c))
    }

    /// Joins the job's communicator from the launcher's environment (``hcclrun``, torchrun,
    /// Open MPI, MPICH: the variables the library's testers read); rank 0 serves the root info
    /// to the others. ``size``/``rank`` override the environment; with neither set and no
    /// launcher, a single-rank communicator.
    #[staticmethod]
    #[pyo3(signature = (size=None, rank=None, *, timeout=None))]
    fn from_env(
        py: Python<'_>,
        size: Option<u32>,
        rank: Option<u32>,
        timeout: Option<f64>,
    ) -> PyResult<Comm> {
        let (srank, ssize) = (rank.map(|r| r.to_string()), size.map(|s| s.to_string()));
        let lookup = |k: &str| match k {
            "HCCL_RANK" if srank.is_some() => srank.clone(),
            "HCCL_WORLD_SIZE" if ssize.is_some() => ssize.clone(),
            _ => world::process_env(k),
        };
        if size.is_some() != rank.is_some() {
            return Err(PyValueError::new_err(
                "give both size and rank, or neither (the launcher's variables then decide)",
            ));
        }
        let w = world::detect(&lookup).map_err(PyValueError::new_err)?;
        let cfg = config(py, timeout, None)?;
        let env = check(py, EnvConfig::global())?;
        let c = py.detach(move || -> Result<Communicator, String> {
            let Some(w) = w else {
                let ri = create_root_info(&env).map_err(|e| e.into_msg())?;
                return Communicator::init_root_info(1, &ri, 0, cfg).map_err(|e| e.into_msg());
            };
            let (ri, server) = if w.rank == 0 {
                let ri = create_root_info(&env).map_err(|e| e.into_msg())?;
                let server = if w.size > 1 {
                    Some(world::InfoServer::start(&w, ri.encode())?)
                } else {
                    None
                };
                (ri, server)
            } else {
                let blob = world::fetch(&w)?;
                (RootInfo::decode(&blob).map_err(|e| e.into_msg())?, None)
            };
            let c =
                Communicator::init_root_info(w.size, &ri, w.rank, cfg).map_err(|e| e.into_msg())?;
            if let Some(s) = server {
                s.join()?;
            }
            Ok(c)
        });
        let c = c.map_err(|m| errors::to_py(py, &errors::unavailable(m)))?;
        Ok(Comm::wrap(c))
    }

    /// Joins the communicator described by a rank table file (JSON, version 1.0) as ``rank``.
    #[staticmethod]
    #[pyo3(signature = (path, rank, *, timeout=None))]
    fn from_rank_table(
        py: Python<'_>,
        path: String,
        rank: u32,
        timeout: Option<f64>,
    ) -> PyResult<Comm> {
        let cfg = config(py, timeout, None)?;
        let c = check(
            py,
            py.detach(|| Communicator::init_cluster(&path, rank, cfg)),
        )?;
        Ok(Comm::wrap(c))
    }

    /// A sub-communicator of the ranks ``ranks`` (in that order; this rank must be one of
    /// them). Every listed rank calls it; no new rendezvous is needed.
    #[pyo3(signature = (ranks, *, timeout=None))]
    fn split(&self, py: Python<'_>, ranks: Vec<u32>, timeout: Option<f64>) -> PyResult<Comm> {
        check(py, self.core.alive())?;
        let me = self.core.comm.rank();
        let sub_rank = ranks.iter().position(|&r| r == me).ok_or_else(|| {
            PyValueError::new_err(format!(
                "argument 'ranks': this rank ({me}) is not in {ranks:?}"
            ))
        })? as u32;
        let mut cfg = self.core.comm.config().clone();
        cfg.name = None;
        if let Some(t) = seconds(timeout, "timeout")? {
            cfg.exec_timeout = Some(t);
            cfg.connect_timeout = t;
        }
        let id = {
            let mut s = self.core.splits.lock();
            let n = s.entry(ranks.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        check(py, self.core.flush())?;
        let parent = Arc::clone(&self.core.comm);
        let c = check(
            py,
            py.detach(move || parent.create_sub(&ranks, id, sub_rank, cfg)),
        )?;
        Ok(Comm::wrap(c))
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.core.comm.rank()
    }

    /// Number of ranks.
    #[getter]
    fn size(&self) -> u32 {
        self.core.comm.size()
    }

    /// The communicator's name (the same on every rank).
    #[getter]
    fn name(&self) -> String {
        self.core.comm.name().to_string()
    }

    /// Seconds an operation waits for peers (None: forever).
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.core
            .comm
            .config()
            .exec_timeout
            .map(|d| d.as_secs_f64())
    }

    /// Finishes outstanding operations and releases the communicator; later operations raise.
    /// Calling it again does nothing.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        if self.core.alive().is_err() {
            return Ok(());
        }
        let core = &self.core;
        let r = py.detach(|| core.shut_down());
        drop(self.core.drain_orphans());
        check(py, r)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.destroy(py)?;
        Ok(false)
    }

    /// This rank's counters since the communicator was created (or ``reset_stats()``):
    /// ``ops``, ``compressed_ops``, ``failed_ops``, ``level0_bytes_sent``/``_recv`` (links
    /// inside a host), ``level1_bytes_sent``/``_recv`` (links across hosts), ``time_s``.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let s = self.core.comm.stats();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("ops", s.ops)?;
        d.set_item("compressed_ops", s.compressed_ops)?;
        d.set_item("failed_ops", s.failed_ops)?;
        d.set_item("level0_bytes_sent", s.traffic.sent[0])?;
        d.set_item("level0_bytes_recv", s.traffic.recv[0])?;
        d.set_item("level1_bytes_sent", s.traffic.sent[1])?;
        d.set_item("level1_bytes_recv", s.traffic.recv[1])?;
        d.set_item("time_s", s.busy_ns as f64 * 1e-9)?;
        Ok(d)
    }

    /// Sets this rank's counters back to zero.
    fn reset_stats(&self) {
        self.core.comm.reset_stats();
    }

    fn __repr__(&self) -> String {
        format!(
            "<hccl.Communicator {} rank {} of {}>",
            self.core.comm.name(),
            self.core.comm.rank(),
            self.core.comm.size()
        )
    }

    /// Reduces ``buf`` over all ranks with ``op``; the result replaces ``buf`` (or goes to
    /// ``out``) on every rank.
    ///
    /// ``compression="fp16"|"bf16"|"int8[:BLOCK]"|"topk[:RATIO]"`` (SUM on float32, float16 or
    /// bfloat16) compresses what crosses hosts (between all ranks when the communicator has
    /// one host, or with ``compress_level0=True``): results are approximate and identical on
    /// every rank. ``residual`` (float32, as many elements as ``buf``, zeros at first, passed
    /// again on every call) turns on error feedback.
    #[pyo3(signature = (buf, op=0, *, out=None, async_op=false, dtype=None, compression=None, residual=None, compress_level0=false))]
    #[allow(clippy::too_many_arguments)]
    pub fn allreduce(
        &self,
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
        let (rop, avg) = reduce_op(op)?;
        let given = parse_dtype(dtype)?;
        let src = view(buf, "buf", out.is_none())?;
        let dt = elem_type(&src, given, "buf")?;
        let count = src.count(dt, "buf")?;
        Self::reducible(dt, rop)?;
        let mut views = vec![src];
        if let Some(o) = out {
            let d = view(o, "out", true)?;
            same_type(&d, dt, "out", "buf", given.is_some())?;
            need_bytes(&d, views[0].bytes, "out", "the result")?;
            views.push(d);
        }
        let recv = views.last().expect("one view").ptr;
        let then = if avg {
            Some(self.avg_then(recv, count, dt)?)
        } else {
            None
        };
        let compress = match compression.filter(|c| !c.eq_ignore_ascii_case("none")) {
            None if residual.is_some() => {
                return Err(PyValueError::new_err(
                    "argument 'residual' needs compression=",
                ))
            }
            None => None,
            Some(text) => {
                let method = Method::parse(text).map_err(|e| {
                    PyValueError::new_err(format!("argument 'compression': {}", e.msg))
                })?;
                let res = match residual {
                    None => None,
                    Some(r) => {
                        let v = view(r, "residual", true)?;
                        if v.dtype.is_some_and(|d| d != DataType::Fp32) {
                            return Err(PyTypeError::new_err(
                                "argument 'residual' must hold float32 elements",
                            ));
                        }
                        let at = (v.ptr, (v.bytes / 4) as u64);
                        need_bytes(&v, count * 4, "residual", "one float32 per element")?;
                        views.push(v);
                        Some(at)
                    }
                };
                let spec = Spec {
                    method,
                    level0: compress_level0,
                };
                let bytes = count * dt.size();
                let c = check_call(
                    dt,
                    rop,
                    count,
                    [(views[0].ptr, bytes), (recv, bytes)],
                    spec,
                    res,
                )
                .map_err(|e| PyValueError::new_err(format!("compressed allreduce: {}", e.msg)))?;
                Some(Box::new(c))
            }
        };
        if compress.is_some() && avg {
            return Err(PyValueError::new_err(
                "compression= works with op=hccl.SUM only",
            ));
        }
        let args = OpArgs {
            compress,
            ..op_args(
                "AllReduce",
                Coll::AllReduce { count },
                dt,
                Some(rop),
                views[0].ptr,
                recv,
            )
        };
        self.launch(py, args, views, then, async_op)
    }

    /// Copies ``buf`` of rank ``root`` into ``buf`` on every other rank.
    #[pyo3(signature = (buf, root=0, *, async_op=false, dtype=None))]
    pub fn broadcast(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        root: i64,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let root = self.rank_arg(root, "root")?;
        let given = parse_dtype(dtype)?;
        let v = view(buf, "buf", self.core.comm.rank() != root)?;
        let dt = elem_type(&v, given, "buf")?;
        let count = v.count(dt, "buf")?;
        let args = op_args(
            "Broadcast",
            Coll::Broadcast { count, root },
            dt,
            None,
            v.ptr,
            v.ptr,
        );
        self.launch(py, args, vec![v], None, async_op)
    }

    /// Reduces ``buf`` over all ranks into ``buf`` (or ``out``) of rank ``root``; other ranks'
    /// buffers are left as they were.
    #[pyo3(signature = (buf, root=0, op=0, *, out=None, async_op=false, dtype=None))]
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        root: i64,
        op: u32,
        out: Option<&Bound<'_, PyAny>>,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let root = self.rank_arg(root, "root")?;
        let (rop, avg) = reduce_op(op)?;
        let given = parse_dtype(dtype)?;
        let is_root = self.core.comm.rank() == root;
        let src = view(buf, "buf", out.is_none() && is_root)?;
        let dt = elem_type(&src, given, "buf")?;
        let count = src.count(dt, "buf")?;
        Self::reducible(dt, rop)?;
        let mut views = vec![src];
        if let Some(o) = out.filter(|o| !o.is_none()) {
            let d = view(o, "out", true)?;
            same_type(&d, dt, "out", "buf", given.is_some())?;
            need_bytes(&d, views[0].bytes, "out", "the result")?;
            views.push(d);
        }
        let recv = if is_root {
            views.last().expect("one view").ptr
        } else {
            0
        };
        let then = if avg && is_root {
            Some(self.avg_then(recv, count, dt)?)
        } else if avg {
            drop(self.avg_then(0, 0, dt)?);
            None
        } else {
            None
        };
        let args = op_args(
            "Reduce",
            Coll::Reduce { count, root },
            dt,
            Some(rop),
            views[0].ptr,
            recv,
        );
        self.launch(py, args, views, then, async_op)
    }

    /// Gathers ``buf`` of every rank into ``out`` (``size`` times as large), in rank order.
    #[pyo3(signature = (buf, out, *, async_op=false, dtype=None))]
    pub fn allgather(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let given = parse_dtype(dtype)?;
        let src = view(buf, "buf", false)?;
        let dt = elem_type(&src, given, "buf")?;
        let count = src.count(dt, "buf")?;
        let d = view(out, "out", true)?;
        same_type(&d, dt, "out", "buf", given.is_some())?;
        need_bytes(
            &d,
            src.bytes * self.size_u32() as usize,
            "out",
            "size × buf",
        )?;
        let args = op_args(
            "AllGather",
            Coll::AllGather { count },
            dt,
            None,
            src.ptr,
            d.ptr,
        );
        self.launch(py, args, vec![src, d], None, async_op)
    }

    /// Reduces ``buf`` (``size`` blocks) over all ranks and leaves block ``r`` in ``out`` of
    /// rank ``r``.
    #[pyo3(signature = (buf, out, op=0, *, async_op=false, dtype=None))]
    pub fn reduce_scatter(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        op: u32,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let (rop, avg) = reduce_op(op)?;
        let given = parse_dtype(dtype)?;
        let src = view(buf, "buf", false)?;
        let dt = elem_type(&src, given, "buf")?;
        Self::reducible(dt, rop)?;
        let d = view(out, "out", true)?;
        same_type(&d, dt, "out", "buf", given.is_some())?;
        let count = d.count(dt, "out")?;
        need_bytes(
            &src,
            d.bytes * self.size_u32() as usize,
            "buf",
            "size × out",
        )?;
        let then = if avg {
            Some(self.avg_then(d.ptr, count, dt)?)
        } else {
            None
        };
        let args = op_args(
            "ReduceScatter",
            Coll::ReduceScatter { count },
            dt,
            Some(rop),
            src.ptr,
            d.ptr,
        );
        self.launch(py, args, vec![src, d], then, async_op)
    }

    /// Sends block ``p`` of ``buf`` (``size`` equal blocks) to rank ``p``, receiving block
    /// ``p`` of ``out`` from rank ``p``.
    #[pyo3(signature = (buf, out, *, async_op=false, dtype=None))]
    pub fn alltoall(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let given = parse_dtype(dtype)?;
        let src = view(buf, "buf", false)?;
        let dt = elem_type(&src, given, "buf")?;
        let total = src.count(dt, "buf")?;
        let d = view(out, "out", true)?;
        same_type(&d, dt, "out", "buf", given.is_some())?;
        need_bytes(&d, src.bytes, "out", "buf's size")?;
        let n = self.size_u32() as usize;
        if total % n != 0 {
            return Err(PyValueError::new_err(format!(
                "argument 'buf': {total} elements do not split into {n} equal blocks"
            )));
        }
        let c = total / n;
        let counts = vec![c; n];
        let displs: Vec<usize> = (0..n).map(|i| i * c).collect();
        let args = op_args(
            "AlltoAll",
            Coll::AlltoAllV {
                send_counts: counts.clone(),
                send_displs: displs.clone(),
                recv_counts: counts,
                recv_displs: displs,
            },
            dt,
            None,
            src.ptr,
            d.ptr,
        );
        self.launch(py, args, vec![src, d], None, async_op)
    }

    /// AlltoAll with per-rank element counts (and displacements, packed in rank order when
    /// omitted): ``send_counts[p]`` elements at ``send_displs[p]`` of ``buf`` go to rank ``p``,
    /// ``recv_counts[p]`` from rank ``p`` land at ``recv_displs[p]`` of ``out``.
    #[pyo3(signature = (buf, send_counts, out, recv_counts, send_displs=None, recv_displs=None, *, async_op=false, dtype=None))]
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv(
        &self,
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
        let n = self.size_u32() as usize;
        let given = parse_dtype(dtype)?;
        let src = view(buf, "buf", false)?;
        let dt = elem_type(&src, given, "buf")?;
        let d = view(out, "out", true)?;
        same_type(&d, dt, "out", "buf", given.is_some())?;
        let layout = |counts: &[usize],
                      displs: Option<Vec<usize>>,
                      v: &View,
                      cname: &str,
                      dname: &str,
                      bname: &str|
         -> PyResult<Vec<usize>> {
            if counts.len() != n {
                return Err(PyValueError::new_err(format!(
                    "argument '{cname}' has {} entries, one per rank ({n}) is needed",
                    counts.len()
                )));
            }
            let displs = match displs {
                Some(d) => d,
                None => counts
                    .iter()
                    .scan(0usize, |at, &c| {
                        let here = *at;
                        *at += c;
                        Some(here)
                    })
                    .collect(),
            };
            if displs.len() != n {
                return Err(PyValueError::new_err(format!(
                    "argument '{dname}' has {} entries, one per rank ({n}) is needed",
                    displs.len()
                )));
            }
            let have = v.count(dt, bname)?;
            for p in 0..n {
                let end = displs[p].checked_add(counts[p]);
                if end.is_none_or(|e| e > have) {
                    return Err(PyValueError::new_err(format!(
                        "argument '{bname}': block {p} ({} elements at {}) lies beyond its {have} \
                         elements",
                        counts[p], displs[p]
                    )));
                }
            }
            Ok(displs)
        };
        let sd = layout(
            &send_counts,
            send_displs,
            &src,
            "send_counts",
            "send_displs",
            "buf",
        )?;
        let rd = layout(
            &recv_counts,
            recv_displs,
            &d,
            "recv_counts",
            "recv_displs",
            "out",
        )?;
        let args = op_args(
            "AlltoAllV",
            Coll::AlltoAllV {
                send_counts,
                send_displs: sd,
                recv_counts,
                recv_displs: rd,
            },
            dt,
            None,
            src.ptr,
            d.ptr,
        );
        self.launch(py, args, vec![src, d], None, async_op)
    }

    /// Sends block ``r`` of ``buf`` on rank ``root`` (``size`` blocks) to ``out`` of rank
    /// ``r``; ``buf`` is only read on the root (other ranks may pass None).
    #[pyo3(signature = (buf, out, root=0, *, async_op=false, dtype=None))]
    pub fn scatter(
        &self,
        py: Python<'_>,
        buf: Option<&Bound<'_, PyAny>>,
        out: &Bound<'_, PyAny>,
        root: i64,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let root = self.rank_arg(root, "root")?;
        let given = parse_dtype(dtype)?;
        let d = view(out, "out", true)?;
        let dt = elem_type(&d, given, "out")?;
        let count = d.count(dt, "out")?;
        let mut views = vec![d];
        let mut send = 0;
        if self.core.comm.rank() == root {
            let b =
                buf.ok_or_else(|| PyTypeError::new_err("argument 'buf' is required on the root"))?;
            let s = view(b, "buf", false)?;
            same_type(&s, dt, "buf", "out", given.is_some())?;
            need_bytes(
                &s,
                views[0].bytes * self.size_u32() as usize,
                "buf",
                "size × out",
            )?;
            send = s.ptr;
            views.push(s);
        }
        let args = op_args(
            "Scatter",
            Coll::Scatter { count, root },
            dt,
            None,
            send,
            views[0].ptr,
        );
        self.launch(py, args, views, None, async_op)
    }

    /// Gathers ``buf`` of every rank into ``out`` (``size`` times as large, rank order) on
    /// rank ``root`` only; ``out`` may be None elsewhere.
    #[pyo3(signature = (buf, out=None, root=0, *, async_op=false, dtype=None))]
    pub fn gather(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        out: Option<&Bound<'_, PyAny>>,
        root: i64,
        async_op: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> Ret {
        let root = self.rank_arg(root, "root")?;
        let given = parse_dtype(dtype)?;
        let src = view(buf, "buf", false)?;
        let dt = elem_type(&src, given, "buf")?;
        let me = self.core.comm.rank();
        let n = self.size_u32();
        let b = src.bytes;
        let mut views = vec![src];
        let mut items = Vec::new();
        let mut ext = Vec::new();
        if me == root {
            let o = out
                .filter(|o| !o.is_none())
                .ok_or_else(|| PyTypeError::new_err("argument 'out' is required on the root"))?;
            let d = view(o, "out", true)?;
            same_type(&d, dt, "out", "buf", given.is_some())?;
            need_bytes(&d, b * n as usize, "out", "size × buf")?;
            // SAFETY: both views are live, `out` has room for block `me`, and they are
            // distinct buffers unless the caller passed overlapping ones (copy handles it).
            unsafe {
                std::ptr::copy(
                    views[0].ptr as *const u8,
                    (d.ptr + me as usize * b) as *mut u8,
                    b,
                )
            };
            for p in (0..n).filter(|&p| p != me) {
                items.push(P2pItem {
                    send: false,
                    peer: p,
                    bytes: b,
                });
                ext.push(d.ptr + p as usize * b);
            }
            views.push(d);
        } else {
            items.push(P2pItem {
                send: true,
                peer: root,
                bytes: b,
            });
            ext.push(views[0].ptr);
        }
        let args = OpArgs {
            ext,
            ..op_args("Gather", Coll::P2p { items }, DataType::Uint8, None, 0, 0)
        };
        self.launch(py, args, views, None, async_op)
    }

    /// Sends ``buf`` to rank ``dest`` and waits until it has left.
    #[pyo3(signature = (buf, dest))]
    pub fn send(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, dest: i64) -> PyResult<()> {
        self.p2p(py, true, buf, dest, true).map(drop)
    }

    /// Receives into ``buf`` from rank ``src`` and waits for the data.
    #[pyo3(signature = (buf, src))]
    pub fn recv(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, src: i64) -> PyResult<()> {
        self.p2p(py, false, buf, src, true).map(drop)
    }

    /// Starts sending ``buf`` to rank ``dest``. Sends and receives issued back to back run
    /// together, as one batch, once the caller waits on or tests one of them or issues another
    /// operation; so any exchange pattern the ranks mirror completes.
    #[pyo3(signature = (buf, dest))]
    pub fn isend(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        dest: i64,
    ) -> PyResult<Py<Request>> {
        self.p2p(py, true, buf, dest, false)
    }

    /// Starts receiving into ``buf`` from rank ``src`` (see :meth:`isend`).
    #[pyo3(signature = (buf, src))]
    pub fn irecv(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, src: i64) -> PyResult<Py<Request>> {
        self.p2p(py, false, buf, src, false)
    }

    /// Starts the pending batch of ``isend``/``irecv`` operations now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        check(py, self.core.flush())
    }

    /// Returns once every rank has entered the barrier.
    #[pyo3(signature = (*, async_op=false))]
    pub fn barrier(&self, py: Python<'_>, async_op: bool) -> Ret {
        let args = op_args("Barrier", Coll::Barrier, DataType::Uint8, None, 0, 0);
        self.launch(py, args, Vec::new(), None, async_op)
    }
}

//! What a Python object passed as a buffer means to the library: its address, its size in
//! bytes and its element type, from the buffer protocol (numpy arrays, `bytearray`,
//! `memoryview`, `array.array`), from a torch CPU tensor, or from DLPack.
//!
//! A [`View`] keeps the object (and its buffer export) alive while an operation uses it, so a
//! `bytearray` cannot be resized under a running operation.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use hccl::base::dtype::DataType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyString};
use pyo3::{ffi, PyTypeInfo};

/// CPython's `Py_buffer`. Declared here because the limited API of CPython 3.9 and 3.10 does
/// not include it; the layout has not changed since 3.3 and became part of the stable ABI in
/// 3.11 exactly as it is.
#[repr(C)]
struct PyBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBuffer);
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;
const PYBUF_FULL_RO: c_int = 0x0100 | PYBUF_STRIDES | PYBUF_FORMAT;

/// A buffer export, released when dropped.
struct Export(Box<PyBuffer>);

// SAFETY: an export is only created and released with the interpreter attached (see `Drop`);
// the pointers it holds stay valid for as long as it exists, whichever thread holds it.
unsafe impl Send for Export {}
unsafe impl Sync for Export {}

impl Drop for Export {
    fn drop(&mut self) {
        Python::attach(|_| {
            // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released
            // exactly once, attached to the interpreter.
            unsafe { PyBuffer_Release(&mut *self.0) }
        })
    }
}

enum Hold {
    Export(#[allow(dead_code)] Export),
    Object(#[allow(dead_code)] Py<PyAny>),
}

/// A buffer an operation may read (and, if asked for writable, write).
pub struct View {
    /// Address of the first byte.
    pub ptr: usize,
    /// Size in bytes.
    pub bytes: usize,
    /// Element type, when the object says.
    pub dtype: Option<DataType>,
    _hold: Hold,
}

impl View {
    /// Number of `dt` elements in the buffer; an error naming `name` when the size is not a
    /// whole number of them.
    pub fn count(&self, dt: DataType, name: &str) -> PyResult<usize> {
        let sz = dt.size();
        if !self.bytes.is_multiple_of(sz) {
            return Err(PyValueError::new_err(format!(
                "argument '{name}': {} bytes is not a whole number of {} elements",
                self.bytes,
                crate::comm::type_name(dt)
            )));
        }
        Ok(self.bytes / sz)
    }
}

/// The element type of a buffer-protocol format string (native or little-endian only).
fn format_dtype(fmt: &[u8], itemsize: usize) -> Option<DataType> {
    let f = match fmt {
        [b'@' | b'=' | b'<', rest @ ..] => rest,
        other => other,
    };
    let dt = match f {
        b"b" => DataType::Int8,
        b"B" | b"c" | b"?" => DataType::Uint8,
        b"h" => DataType::Int16,
        b"H" => DataType::Uint16,
        b"i" => DataType::Int32,
        b"I" => DataType::Uint32,
        b"l" | b"q" | b"n" if itemsize == 8 => DataType::Int64,
        b"l" if itemsize == 4 => DataType::Int32,
        b"L" | b"Q" | b"N" if itemsize == 8 => DataType::Uint64,
        b"L" if itemsize == 4 => DataType::Uint32,
        b"e" => DataType::Fp16,
        b"f" => DataType::Fp32,
        b"d" => DataType::Fp64,
        _ => return None,
    };
    (dt.size() == itemsize).then_some(dt)
}

fn buffer_view(obj: &Bound<'_, PyAny>, name: &str, writable: bool) -> PyResult<Option<View>> {
    let flags = PYBUF_C_CONTIGUOUS | PYBUF_FORMAT | if writable { PYBUF_WRITABLE } else { 0 };
    let mut b: Box<PyBuffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `obj` is a live object and `b` a writable Py_buffer; attached to the interpreter.
    if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *b, flags) } != 0 {
        let py = obj.py();
        let first = PyErr::take(py);
        // Tell a buffer with the wrong layout or access from an object that is no buffer.
        let mut probe: Box<PyBuffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: as above.
        if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *probe, PYBUF_FULL_RO) } != 0 {
            drop(PyErr::take(py));
            return Ok(None);
        }
        let readonly = probe.readonly != 0;
        drop(Export(probe));
        let why = if writable && readonly {
            "is read-only, but the operation writes to it"
        } else {
            "is not C-contiguous"
        };
        let detail = first.map(|e| format!(" ({e})")).unwrap_or_default();
        return Err(PyValueError::new_err(format!(
            "argument '{name}' {why}{detail}"
        )));
    }
    let itemsize = b.itemsize.max(1) as usize;
    let dtype = if b.format.is_null() {
        Some(DataType::Uint8)
    } else {
        // SAFETY: a non-null format is a NUL-terminated string owned by the export.
        let f = unsafe { CStr::from_ptr(b.format) }.to_bytes();
        format_dtype(f, itemsize)
    };
    Ok(Some(View {
        ptr: b.buf as usize,
        bytes: b.len.max(0) as usize,
        dtype,
        _hold: Hold::Export(Export(b)),
    }))
}

/// torch's dtypes as library types, found by identity (torch dtypes are singletons).
struct TorchTypes {
    tensor: Py<PyAny>,
    dtypes: Vec<(Py<PyAny>, Option<DataType>)>,
}

static TORCH: OnceLock<TorchTypes> = OnceLock::new();

fn torch_types(py: Python<'_>) -> Option<&'static TorchTypes> {
    if let Some(t) = TORCH.get() {
        return Some(t);
    }
    // Only once torch has been imported by someone: `import hccl` must not import it.
    static MODULES: OnceLock<Py<PyAny>> = OnceLock::new();
    let modules = match MODULES.get() {
        Some(m) => m.bind(py),
        None => {
            let m = py.import("sys").ok()?.getattr("modules").ok()?.unbind();
            MODULES.get_or_init(|| m).bind(py)
        }
    };
    let torch = modules.get_item("torch").ok()?;
    let tensor = torch.getattr("Tensor").ok()?.unbind();
    let names: [(&str, Option<DataType>); 15] = [
        ("int8", Some(DataType::Int8)),
        ("int16", Some(DataType::Int16)),
        ("int32", Some(DataType::Int32)),
        ("int64", Some(DataType::Int64)),
        ("uint8", Some(DataType::Uint8)),
        ("uint16", Some(DataType::Uint16)),
        ("uint32", Some(DataType::Uint32)),
        ("uint64", Some(DataType::Uint64)),
        ("float16", Some(DataType::Fp16)),
        ("bfloat16", Some(DataType::Bf16)),
        ("float32", Some(DataType::Fp32)),
        ("float64", Some(DataType::Fp64)),
        ("bool", Some(DataType::Uint8)),
        ("float8_e4m3fn", Some(DataType::Fp8E4M3)),
        ("float8_e5m2", Some(DataType::Fp8E5M2)),
    ];
    let dtypes = names
        .iter()
        .filter_map(|(n, d)| torch.getattr(*n).ok().map(|o| (o.unbind(), *d)))
        .collect();
    let _ = TORCH.set(TorchTypes { tensor, dtypes });
    TORCH.get()
}

fn torch_view(obj: &Bound<'_, PyAny>, name: &str, t: &TorchTypes) -> PyResult<Option<View>> {
    let py = obj.py();
    if !obj.is_instance(t.tensor.bind(py))? {
        return Ok(None);
    }
    if !obj.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
        let dev = obj.getattr(intern!(py, "device"))?.str()?.to_string();
        return Err(PyValueError::new_err(format!(
            "argument '{name}' is a tensor on device '{dev}'; hccl works on CPU tensors only \
             (move it with .cpu())"
        )));
    }
    if obj.getattr(intern!(py, "is_sparse"))?.is_truthy()? {
        return Err(PyValueError::new_err(format!(
            "argument '{name}' is a sparse tensor; pass a dense CPU tensor"
        )));
    }
    if !obj
        .call_method0(intern!(py, "is_contiguous"))?
        .is_truthy()?
    {
        return Err(PyValueError::new_err(format!(
            "argument '{name}' is not contiguous (use .contiguous())"
        )));
    }
    let dt = obj.getattr(intern!(py, "dtype"))?;
    let dtype = match t.dtypes.iter().find(|(o, _)| o.bind(py).is(&dt)) {
        Some((_, d)) => *d,
        None => {
            return Err(PyTypeError::new_err(format!(
                "argument '{name}': tensor dtype {} is not supported by hccl",
                dt.str()?
            )))
        }
    };
    let ptr: usize = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let bytes: usize = obj.getattr(intern!(py, "nbytes"))?.extract()?;
    Ok(Some(View {
        ptr,
        bytes,
        dtype,
        _hold: Hold::Object(obj.clone().unbind()),
    }))
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    code: u8,
    bits: u8,
    lanes: u16,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

fn dlpack_view(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<View>> {
    let py = obj.py();
    if !obj.hasattr("__dlpack__")? {
        return Ok(None);
    }
    let cap = obj.call_method0("__dlpack__")?;
    let cap = cap.cast_into::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument '{name}': __dlpack__ did not return a capsule"
        ))
    })?;
    let p = cap.pointer_checked(Some(c"dltensor")).map_err(|_| {
        PyTypeError::new_err(format!(
            "argument '{name}': __dlpack__ returned a capsule that is not a DLPack tensor"
        ))
    })?;
    // SAFETY: a "dltensor" capsule points at a DLManagedTensor whose first member is the
    // DLTensor; the capsule (kept alive below) owns it.
    let t = unsafe { &*(p.as_ptr() as *const DlTensor) };
    if t.device_type != 1 {
        return Err(PyValueError::new_err(format!(
            "argument '{name}' lives on DLPack device type {} (id {}); hccl works on CPU \
             memory only",
            t.device_type, t.device_id
        )));
    }
    let dtype = match (t.code, t.bits, t.lanes) {
        (0, 8, 1) => DataType::Int8,
        (0, 16, 1) => DataType::Int16,
        (0, 32, 1) => DataType::Int32,
        (0, 64, 1) => DataType::Int64,
        (1, 8, 1) => DataType::Uint8,
        (1, 16, 1) => DataType::Uint16,
        (1, 32, 1) => DataType::Uint32,
        (1, 64, 1) => DataType::Uint64,
        (2, 16, 1) => DataType::Fp16,
        (2, 32, 1) => DataType::Fp32,
        (2, 64, 1) => DataType::Fp64,
        (4, 16, 1) => DataType::Bf16,
        (6, 8, 1) => DataType::Uint8,
        (c, b, l) => {
            return Err(PyTypeError::new_err(format!(
                "argument '{name}': DLPack type (code {c}, {b} bits, {l} lanes) is not \
                 supported by hccl"
            )))
        }
    };
    let ndim = t.ndim.max(0) as usize;
    // SAFETY: shape (and strides when non-null) have ndim entries.
    let shape = unsafe { std::slice::from_raw_parts(t.shape, ndim) };
    let elems: i64 = shape.iter().product();
    if !t.strides.is_null() {
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut want = 1i64;
        for d in (0..ndim).rev() {
            if shape[d] != 1 && strides[d] != want {
                return Err(PyValueError::new_err(format!(
                    "argument '{name}' is not C-contiguous"
                )));
            }
            want *= shape[d];
        }
    }
    let ptr = t.data as usize + t.byte_offset as usize;
    let _ = py;
    Ok(Some(View {
        ptr,
        bytes: elems.max(0) as usize * dtype.size(),
        dtype: Some(dtype),
        // The capsule's destructor frees the DLPack tensor; the object keeps the memory.
        _hold: Hold::Object(
            (cap.into_any(), obj.clone())
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        ),
    }))
}

/// The buffer of `obj` (argument `name` of the call); `writable` when the operation writes it.
pub fn view(obj: &Bound<'_, PyAny>, name: &str, writable: bool) -> PyResult<View> {
    if obj.is_none() {
        return Err(PyTypeError::new_err(format!(
            "argument '{name}' is None; a buffer is required"
        )));
    }
    if PyString::is_type_of(obj) {
        return Err(PyTypeError::new_err(format!(
            "argument '{name}' is a str; pass a buffer (numpy array, torch CPU tensor, \
             bytearray, memoryview)"
        )));
    }
    if let Some(t) = torch_types(obj.py()) {
        if let Some(v) = torch_view(obj, name, t)? {
            return Ok(v);
        }
    }
    if let Some(v) = buffer_view(obj, name, writable)? {
        return Ok(v);
    }
    if let Some(v) = dlpack_view(obj, name)? {
        return Ok(v);
    }
    Err(PyTypeError::new_err(format!(
        "argument '{name}' of type {} is not a buffer: pass a numpy array, a torch CPU tensor, \
         a bytearray or memoryview, or an object with the buffer protocol or __dlpack__",
        obj.get_type().name()?
    )))
}

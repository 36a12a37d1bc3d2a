//! Library errors as Python exceptions: the classes are defined in `hccl/errors.py` and handed
//! over once at import (`_register_errors`), so they can inherit from the right built-ins.

use std::sync::OnceLock;

use hccl::base::error::{Error, ErrorKind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

struct Classes {
    base: Py<PyAny>,
    by_code: Py<PyDict>,
}

static CLASSES: OnceLock<Classes> = OnceLock::new();

/// Registers the exception classes: `base` for any code, `by_code` maps an HcclResult code to
/// a subclass.
#[pyfunction]
pub fn _register_errors(base: Bound<'_, PyAny>, by_code: Bound<'_, PyDict>) {
    let _ = CLASSES.set(Classes {
        base: base.unbind(),
        by_code: by_code.unbind(),
    });
}

/// The Python exception for a library error.
pub fn to_py(py: Python<'_>, e: &Error) -> PyErr {
    let Some(c) = CLASSES.get() else {
        return PyRuntimeError::new_err(e.to_string());
    };
    let code = e.kind.code();
    let cls = c
        .by_code
        .bind(py)
        .get_item(code)
        .ok()
        .flatten()
        .unwrap_or_else(|| c.base.bind(py).clone());
    match cls.call1((e.msg.clone(), code, format!("{:?}", e.kind))) {
        Ok(inst) => PyErr::from_value(inst),
        Err(err) => err,
    }
}

/// `Err` of a library result as a Python exception.
pub fn check<T>(py: Python<'_>, r: hccl::base::error::Result<T>) -> PyResult<T> {
    r.map_err(|e| to_py(py, &e))
}

/// An error of the library's kind `Unavail` (for example a destroyed communicator).
pub fn unavailable(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Unavail, msg)
}

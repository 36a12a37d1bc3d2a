//! Host-runtime extensions (not part of vendor AscendCL), looked up with `dlsym` by libhccl.

use std::os::raw::c_void;

use crate::api::require_non_null;
use crate::codes::{ACL_ERROR_INVALID_PARAM, ACL_ERROR_INVALID_RESOURCE_HANDLE};
use crate::error::{fail, AclErr};
use crate::handle::from_ptr;
use crate::memory;
use crate::runtime;
use crate::send_ptr::SendPtr;
use crate::stream::TaskFailure;
use crate::types::{aclError, aclrtStream};

/// Host-runtime extension: enqueues `task(arg)` on `stream` (NULL: the current device's default
/// stream; `ACL_ERROR_INVALID_PARAM` if the thread has no current device). Unknown or destroyed
/// streams give `ACL_ERROR_INVALID_RESOURCE_HANDLE`. The task runs on the stream's worker in
/// submission order; a nonzero return value is logged and becomes the stream's first error,
/// reported by the next `aclrtSynchronizeStream` as `ACL_ERROR_RT_FAILURE`.
#[no_mangle]
pub extern "C" fn aclrtHostStreamEnqueue(
    stream: aclrtStream,
    task: Option<unsafe extern "C" fn(arg: *mut c_void) -> i32>,
    arg: *mut c_void,
) -> aclError {
    acl_api!("aclrtHostStreamEnqueue", {
        let rt = runtime::get()?;
        let task = task.ok_or_else(|| fail(ACL_ERROR_INVALID_PARAM, "task is NULL"))?;
        let s = rt.stream(from_ptr(stream))?;
        let data = SendPtr::new(arg);
        s.enqueue(Box::new(move || {
            // SAFETY: the caller supplied a valid task and argument for it.
            let rc = unsafe { task(data.get()) };
            if rc == 0 {
                Ok(())
            } else {
                Err(TaskFailure {
                    message: format!("host task returned {rc}"),
                })
            }
        }))
    })
}

/// Host-runtime extension: `ACL_SUCCESS` if `stream` is a live stream of this runtime (NULL
/// counts as live when the calling thread has a current device), else
/// `ACL_ERROR_INVALID_RESOURCE_HANDLE`. A negative answer is not logged as an error.
#[no_mangle]
pub extern "C" fn aclrtHostStreamIsValid(stream: aclrtStream) -> aclError {
    acl_api!("aclrtHostStreamIsValid", {
        let rt = runtime::get()?;
        let h = from_ptr(stream);
        let live = if h == 0 {
            rt.current_device().is_some()
        } else {
            rt.stream_is_live(h)
        };
        if live {
            Ok(())
        } else {
            log::debug!("stream handle {h:#x} is not live");
            Err(AclErr::quiet(ACL_ERROR_INVALID_RESOURCE_HANDLE))
        }
    })
}

/// Host-runtime extension: locates `ptr` inside memory from `aclrtMalloc`/`aclrtMallocHost` so
/// another process can map it. On success `*fd` is the backing memfd (valid in this process;
/// another process opens `/proc/<pid>/fd/<fd>` or receives it over a Unix socket), `*offset` is
/// the byte offset of `ptr` within that file and `*size` the number of bytes from `ptr` to the end
/// of its allocation. Map `[offset rounded down to the page size, offset + size)` of the file.
/// `ACL_ERROR_INVALID_PARAM` if `ptr` is in no live allocation (an expected answer for plain host
/// memory: not logged as an error). The file is sealed against shrinking (`F_GET_SEALS` shows
/// `F_SEAL_SHRINK`) unless sealing was unavailable.
#[no_mangle]
pub unsafe extern "C" fn aclrtHostMemGetShareInfo(
    ptr: *const c_void,
    fd: *mut i32,
    offset: *mut u64,
    size: *mut u64,
) -> aclError {
    acl_api!("aclrtHostMemGetShareInfo", {
        runtime::get()?;
        require_non_null(fd, "fd")?;
        require_non_null(offset, "offset")?;
        require_non_null(size, "size")?;
        if memory::lookup(ptr).is_none() {
            log::debug!("{ptr:p} is not inside a live allocation");
            return Err(AclErr::quiet(ACL_ERROR_INVALID_PARAM));
        }
        let info = memory::share_info(ptr)?;
        // SAFETY: all three checked non-NULL; the caller provides writable storage.
        unsafe {
            fd.write(info.fd);
            offset.write(info.offset);
            size.write(info.size);
        }
        Ok(())
    })
}

/// Host-runtime extension: a count that changes whenever memory is allocated or freed by
/// `aclrtMalloc`/`aclrtMallocHost` and their frees, so a caller may keep the answers of
/// `aclrtHostMemGetShareInfo` while the count stays the same (a freed block's descriptor number
/// and address may be reused by the next allocation).
#[no_mangle]
pub extern "C" fn aclrtHostMemShareEpoch() -> u64 {
    acl_api_value!("aclrtHostMemShareEpoch", 0, { memory::share_epoch() })
}

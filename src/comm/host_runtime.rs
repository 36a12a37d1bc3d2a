//! Finding the host ACL runtime at run time, so that operations can be ordered on its streams.
//!
//! libhccl.so has no link-time dependency on libascendcl.so. When an operation names a stream,
//! the runtime's extension `aclrtHostStreamEnqueue` is looked up among the symbols already loaded
//! in the process (`dlsym(RTLD_DEFAULT)`: a program linked with `-lascendcl`, or one that
//! `dlopen`ed it with `RTLD_GLOBAL`), then in a `libascendcl.so` loaded privately
//! (`dlopen(RTLD_NOLOAD)` finds it without loading anything). `HCCL_ACL_RUNTIME_LIB=<path>`
//! additionally asks this library to load the runtime itself. A vendor runtime exposes the ACL API
//! without the extension: operations then run synchronously, as they do when no runtime is
//! loaded at all. Rust programs that link both crates statically (whose symbols `dlsym` cannot
//! see) hand the runtime over with [`register`].
//!
//! A successful lookup is kept for the life of the process. A failed one is repeated only after
//! the process has loaded another shared object (glibc's `dlpi_adds` counter), so the common
//! "no runtime" case costs one `dl_iterate_phdr` step per call, not a symbol search.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// A stream task: returns 0 on success; anything else becomes the stream's error.
pub type HostTask = unsafe extern "C" fn(arg: *mut c_void) -> i32;

/// `aclrtHostStreamEnqueue(stream, task, arg)`: queues `task(arg)` on `stream`, returning an
/// `aclError` (0 on success).
pub type EnqueueFn =
    unsafe extern "C" fn(stream: *mut c_void, task: Option<HostTask>, arg: *mut c_void) -> i32;

/// The runtime entry points this library uses.
#[derive(Clone, Copy, Debug)]
pub struct HostRuntime {
    /// `aclrtHostStreamEnqueue`.
    pub enqueue: EnqueueFn,
}

const ENQUEUE: &CStr = c"aclrtHostStreamEnqueue";
/// Any core ACL runtime symbol: present means "an ACL runtime is loaded".
const ACL_MARKER: &CStr = c"aclrtSynchronizeStream";
const LIB_NAMES: [&CStr; 2] = [c"libascendcl.so", c"libascendcl.so.1"];
/// Env var naming a runtime library this library should load itself.
pub const RUNTIME_LIB_ENV: &str = "HCCL_ACL_RUNTIME_LIB";

static FOUND: OnceLock<HostRuntime> = OnceLock::new();
/// The `dlpi_adds` value at the last failed lookup (`u64::MAX`: none yet).
static MISSED_AT: Mutex<u64> = Mutex::new(u64::MAX);
static TOLD_ABSENT: AtomicBool = AtomicBool::new(false);

/// Uses `rt` for stream-ordered operations from now on (first registration wins; later ones
/// are ignored and return false). For programs whose runtime symbols `dlsym` cannot find.
pub fn register(rt: HostRuntime) -> bool {
    FOUND.set(rt).is_ok()
}

/// The host runtime's entry points, or `None` when no runtime with the host-stream extension is
/// loaded (logged once at INFO level).
pub fn get() -> Option<HostRuntime> {
    if let Some(rt) = FOUND.get() {
        return Some(*rt);
    }
    let adds = loaded_object_adds();
    let mut missed = MISSED_AT.lock();
    if *missed == adds && adds != u64::MAX {
        return None;
    }
    match lookup() {
        Some(rt) => {
            let rt = *FOUND.get_or_init(|| rt);
            log::info!("host ACL runtime found: operations on its streams run in stream order");
            Some(rt)
        }
        None => {
            *missed = adds;
            if !TOLD_ABSENT.swap(true, Ordering::Relaxed) {
                if sym(libc::RTLD_DEFAULT, ACL_MARKER).is_some() {
                    log::info!(
                        "the loaded ACL runtime has no aclrtHostStreamEnqueue (not the host \
                         runtime): HCCL operations run synchronously, ignoring their stream"
                    );
                } else {
                    log::info!(
                        "no host ACL runtime is loaded: HCCL operations run synchronously, \
                         ignoring their stream"
                    );
                }
            }
            None
        }
    }
}

fn lookup() -> Option<HostRuntime> {
    let direct = sym(libc::RTLD_DEFAULT, ENQUEUE);
    let enqueue = direct
        .or_else(|| {
            LIB_NAMES.iter().find_map(|name| {
                // SAFETY: RTLD_NOLOAD never loads or initialises anything; it only returns a
                // handle to an object already in the process (kept: the reference is leaked on
                // purpose so the functions stay mapped).
                let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
                (!h.is_null()).then(|| sym(h, ENQUEUE)).flatten()
            })
        })
        .or_else(load_requested)?;
    // SAFETY: the symbol is the runtime's `aclrtHostStreamEnqueue`, whose C signature is
    // `aclError (aclrtStream, int32_t (*)(void *), void *)`, matching `EnqueueFn`.
    let enqueue = unsafe { std::mem::transmute::<*mut c_void, EnqueueFn>(enqueue) };
    Some(HostRuntime { enqueue })
}

/// Loads the library named by `HCCL_ACL_RUNTIME_LIB`, once, and never unloads it.
fn load_requested() -> Option<*mut c_void> {
    static LOADED: OnceLock<Option<usize>> = OnceLock::new();
    let f = LOADED.get_or_init(|| {
        let path = std::env::var_os(RUNTIME_LIB_ENV)?;
        // SAFETY: loading a library runs its initialisers; the user asked for this one.
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(&path),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
            )
        };
        match lib {
            Ok(lib) => {
                // SAFETY: only the address is taken; its type is fixed by the caller.
                let f = unsafe { lib.get::<*mut c_void>(ENQUEUE.to_bytes_with_nul()) }
                    .ok()
                    .map(|s| *s as usize);
                if f.is_none() {
                    log::info!(
                        "{RUNTIME_LIB_ENV}={}: the library has no aclrtHostStreamEnqueue",
                        path.to_string_lossy()
                    );
                }
                // The functions must outlive every stream task: never unload.
                std::mem::forget(lib);
                f
            }
            Err(e) => {
                log::warn!(
                    "{RUNTIME_LIB_ENV}={}: cannot load it: {e}",
                    path.to_string_lossy()
                );
                None
            }
        }
    });
    f.map(|a| a as *mut c_void)
}

fn sym(handle: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; a valid handle or RTLD_DEFAULT is passed.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// glibc's count of shared objects ever loaded into the process (`u64::MAX` if unknown).
fn loaded_object_adds() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        out: *mut c_void,
    ) -> libc::c_int {
        // `dlpi_adds` exists only when the C library's struct is large enough to hold it.
        let need = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs);
        if size >= need {
            // SAFETY: glibc passes a valid record of `size` bytes and our output slot.
            unsafe { *(out as *mut u64) = (*info).dlpi_adds };
        }
        1
    }
    let mut adds = u64::MAX;
    // SAFETY: the callback only reads the record it is given and writes `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut adds as *mut u64 as *mut c_void) };
    adds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_counter_is_known() {
        assert_ne!(loaded_object_adds(), u64::MAX, "glibc reports dlpi_adds");
    }

    #[test]
    fn lookup_misses_in_a_binary_without_the_runtime() {
        // Unit tests of this crate do not link ascendcl, so nothing can be found.
        assert!(lookup().is_none());
        assert!(sym(libc::RTLD_DEFAULT, ENQUEUE).is_none());
        // The miss is remembered until another object is loaded.
        assert!(get().is_none());
        assert_eq!(*MISSED_AT.lock(), loaded_object_adds());
        assert!(get().is_none());
    }
}

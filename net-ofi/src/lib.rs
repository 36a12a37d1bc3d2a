//! `libhccl_net_ofi.so`: the libfabric net plugin of libhccl (interface `hccl/hccl_net.h`).
//!
//! Endpoints are reliable datagram (`FI_EP_RDM`, tagged messages and RMA writes with immediate
//! data) on verbs (through the rxm utility provider) and efa, and connected (`FI_EP_MSG`, one
//! connection per comm, plain messages matched in order) on the tcp provider, whose own endpoint
//! type that is: its `FI_EP_RDM` is rxm layered on it, which costs per message and (before
//! libfabric 1.18) caps message sizes. `HCCL_NET_OFI_ENDPOINT=msg|rdm` overrides the choice.
//! libfabric's object and data-path calls are inline functions in its headers; `csrc/shim.c`
//! expands them (see `build.rs`) and Rust sees only the shim's plain functions.
//!
//! Every entry point checks its arguments, runs inside a panic boundary and logs one line for
//! every error through the caller's callback.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
mod comm;
pub mod error;
mod fabric;
mod handles;
mod log;
mod mr;
mod sys;

use abi::{code, LogFn, MrDesc, NetConfig, NetHandle, NetProperties, PluginV1};
use comm::{Comm, ListenComm};
use error::{NetError, NetResult};
use fabric::Device;
use handles::Obj;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

/// The devices found by the first successful init (or why there are none).
static DEVICES: OnceLock<NetResult<Vec<Arc<Device>>>> = OnceLock::new();

/// Runs an entry point's body: panics become `E_INTERNAL`, errors are logged once.
fn boundary(call: &str, body: impl FnOnce() -> NetResult<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::SUCCESS,
        Ok(Err(NetError::Again)) => code::AGAIN,
        Ok(Err(e)) => {
            match e {
                NetError::Invalid(_) | NetError::NotInitialized | NetError::NotSupported(_) => {
                    log::warn(&format!("{call}: {e}"))
                }
                _ => log::error(&format!("{call}: {e}")),
            }
            e.code()
        }
        Err(_) => {
            log::error(&format!("{call}: internal error (panic)"));
            code::E_INTERNAL
        }
    }
}

/// Checks an out-pointer.
fn out<'a, T>(p: *mut T, what: &str) -> NetResult<&'a mut T> {
    // SAFETY: a non-null out-pointer from the caller points to a writable T (C contract).
    unsafe { p.as_mut() }.ok_or_else(|| NetError::Invalid(format!("{what} is NULL")))
}

fn devices() -> NetResult<&'static [Arc<Device>]> {
    match DEVICES.get() {
        None => Err(NetError::NotInitialized),
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(e.clone()),
    }
}

fn device(dev: c_int) -> NetResult<&'static Arc<Device>> {
    let all = devices()?;
    usize::try_from(dev)
        .ok()
        .and_then(|i| all.get(i))
        .ok_or_else(|| NetError::Invalid(format!("device {dev} outside 0..{}", all.len())))
}

unsafe extern "C" fn init(config: *const NetConfig, log_fn: LogFn, log_ctx: *mut c_void) -> c_int {
    log::install(log_fn, log_ctx);
    boundary("init", || {
        // SAFETY: a non-null config points to a hcclNetConfig_t (C contract).
        let cfg = unsafe { config.as_ref() }.copied().unwrap_or_default();
        fabric::check_config(&cfg)?;
        DEVICES
            .get_or_init(|| fabric::discover(&cfg))
            .clone()
            .map(|_| ())
    })
}

unsafe extern "C" fn devices_count(count: *mut c_int) -> c_int {
    boundary("devices", || {
        let count = out(count, "count")?;
        *count = devices()?.len() as c_int;
        Ok(())
    })
}

unsafe extern "C" fn get_properties(dev: c_int, props: *mut NetProperties) -> c_int {
    boundary("getProperties", || {
        let props = out(props, "props")?;
        *props = device(dev)?.properties();
        Ok(())
    })
}

unsafe extern "C" fn listen(
    dev: c_int,
    handle: *mut NetHandle,
    listen_comm: *mut *mut c_void,
) -> c_int {
    boundary("listen", || {
        let handle = out(handle, "handle")?;
        let listen_comm = out(listen_comm, "listenComm")?;
        let (l, h) = ListenComm::open(device(dev)?)?;
        *handle = h;
        *listen_comm = handles::insert(Obj::Listen(Arc::new(l)));
        Ok(())
    })
}

unsafe extern "C" fn accept(listen_comm: *mut c_void, comm: *mut *mut c_void) -> c_int {
    boundary("accept", || {
        let comm = out(comm, "comm")?;
        let l = handles::listen(listen_comm)?;
        *comm = match l.accept()? {
            Some(c) => {
                let c = Arc::new(c);
                comm::watch(&c);
                handles::insert(Obj::Comm(c))
            }
            None => std::ptr::null_mut(),
        };
        Ok(())
    })
}

unsafe extern "C" fn close_listen(listen_comm: *mut c_void) -> c_int {
    boundary("closeListen", || {
        let l = handles::listen(listen_comm)?;
        if !handles::remove_kind(listen_comm, |o| matches!(o, Obj::Listen(_))) {
            return Err(NetError::Invalid("listen comm closed concurrently".into()));
        }
        l.close()
    })
}

unsafe extern "C" fn connect(
    dev: c_int,
    handle: *const NetHandle,
    comm: *mut *mut c_void,
) -> c_int {
    boundary("connect", || {
        let comm = out(comm, "comm")?;
        // SAFETY: a non-null handle points to a hcclNetHandle_t (C contract).
        let handle =
            unsafe { handle.as_ref() }.ok_or_else(|| NetError::Invalid("handle is NULL".into()))?;
        let c = Arc::new(Comm::connect(device(dev)?, handle)?);
        comm::watch(&c);
        *comm = handles::insert(Obj::Comm(c));
        Ok(())
    })
}

unsafe extern "C" fn connect_test(comm: *mut c_void, connected: *mut c_int) -> c_int {
    boundary("connectTest", || {
        let connected = out(connected, "connected")?;
        *connected = handles::comm(comm)?.connect_test()? as c_int;
        Ok(())
    })
}

unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    mhandle: *mut *mut c_void,
) -> c_int {
    boundary("regMr", || {
        let mhandle = out(mhandle, "mhandle")?;
        let c = handles::comm(comm)?;
        let m = mr::Mr::register(&c.dev, data, size)?;
        *mhandle = handles::insert(Obj::Mr(Arc::new(m)));
        Ok(())
    })
}

unsafe extern "C" fn dereg_mr(mhandle: *mut c_void) -> c_int {
    boundary("deregMr", || {
        if handles::remove_kind(mhandle, |o| matches!(o, Obj::Mr(_))) {
            Ok(())
        } else {
            handles::mr_opt(mhandle).map(|_| ())?;
            Err(NetError::Invalid("memory handle is NULL".into()))
        }
    })
}

unsafe extern "C" fn get_mr_desc(mhandle: *mut c_void, desc: *mut MrDesc) -> c_int {
    boundary("getMrDesc", || {
        let desc = out(desc, "desc")?;
        let m = handles::mr_opt(mhandle)?
            .ok_or_else(|| NetError::Invalid("memory handle is NULL".into()))?;
        if !m.dev.rma {
            return Err(NetError::NotSupported(format!(
                "provider {} offers no RMA write",
                m.dev.provider
            )));
        }
        *desc = m.remote_desc();
        Ok(())
    })
}

unsafe extern "C" fn isend(
    comm: *mut c_void,
    data: *const c_void,
    size: usize,
    tag: u32,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> c_int {
    boundary("isend", || {
        let request = out(request, "request")?;
        let c = handles::comm(comm)?;
        *request = c.isend(data, size, tag, handles::mr_opt(mhandle)?)?;
        Ok(())
    })
}

unsafe extern "C" fn irecv(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: u32,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> c_int {
    boundary("irecv", || {
        let request = out(request, "request")?;
        let c = handles::comm(comm)?;
        *request = c.irecv(data, size, tag, handles::mr_opt(mhandle)?)?;
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iwrite(
    comm: *mut c_void,
    data: *const c_void,
    size: usize,
    mhandle: *mut c_void,
    remote: *const MrDesc,
    remote_offset: u64,
    imm: u32,
    request: *mut *mut c_void,
) -> c_int {
    boundary("iwrite", || {
        let request = out(request, "request")?;
        // SAFETY: a non-null remote points to a hcclNetMrDesc_t (C contract).
        let remote =
            unsafe { remote.as_ref() }.ok_or_else(|| NetError::Invalid("remote is NULL".into()))?;
        let c = handles::comm(comm)?;
        *request = c.iwrite(
            data,
            size,
            handles::mr_opt(mhandle)?,
            remote,
            remote_offset,
            imm,
        )?;
        Ok(())
    })
}

unsafe extern "C" fn poll_imm(comm: *mut c_void, imm: *mut u32, received: *mut c_int) -> c_int {
    boundary("pollImm", || {
        let imm = out(imm, "imm")?;
        let received = out(received, "received")?;
        match handles::comm(comm)?.poll_imm()? {
            Some(v) => {
                *imm = v;
                *received = 1;
            }
            None => *received = 0,
        }
        Ok(())
    })
}

unsafe extern "C" fn test(request: *mut c_void, done: *mut c_int, bytes: *mut usize) -> c_int {
    boundary("test", || {
        let done = out(done, "done")?;
        let r = handles::request(request)?;
        match r.comm.test(r.id)? {
            Some(n) => {
                *done = 1;
                // SAFETY: a non-null bytes points to a writable size_t (C contract).
                if let Some(b) = unsafe { bytes.as_mut() } {
                    *b = n;
                }
            }
            None => *done = 0,
        }
        Ok(())
    })
}

unsafe extern "C" fn close_comm(comm: *mut c_void) -> c_int {
    boundary("closeComm", || {
        let c = handles::comm(comm)?;
        if !handles::remove_kind(comm, |o| matches!(o, Obj::Comm(_))) {
            return Err(NetError::Invalid("comm closed concurrently".into()));
        }
        c.close()
    })
}

unsafe extern "C" fn wait_fd(comm: *mut c_void, fd: *mut c_int) -> c_int {
    let fd = match out(fd, "fd") {
        Ok(fd) => fd,
        Err(e) => return boundary("waitFd", || Err(e)),
    };
    // Not through `boundary` for the expected answers: AGAIN is the common case and
    // NOT_SUPPORTED is final for the comm; neither is worth a log line on every wait.
    match catch_unwind(AssertUnwindSafe(|| handles::comm(comm)?.wait_fd())) {
        Ok(Ok(d)) => {
            *fd = d;
            code::SUCCESS
        }
        Ok(Err(NetError::Again)) => code::AGAIN,
        Ok(Err(e @ NetError::NotSupported(_))) => {
            log::debug(&format!("waitFd: {e}"));
            e.code()
        }
        Ok(Err(e)) => boundary("waitFd", || Err(e)),
        Err(_) => boundary("waitFd", || Err(NetError::Internal("panic".into()))),
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn isend_head(
    comm: *mut c_void,
    head: *const c_void,
    head_size: usize,
    data: *const c_void,
    size: usize,
    tag: u32,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> c_int {
    boundary("isendHead", || {
        let request = out(request, "request")?;
        if head.is_null() || head_size == 0 || head_size > abi::HEAD_BYTES {
            return Err(NetError::Invalid(format!(
                "head {head:p} of {head_size} bytes: expected 1..{} bytes",
                abi::HEAD_BYTES
            )));
        }
        // SAFETY: the caller passes head_size readable bytes (C contract), read during the call.
        let head = unsafe { std::slice::from_raw_parts(head.cast::<u8>(), head_size) };
        let c = handles::comm(comm)?;
        *request = c.isend_head(head, data, size, tag, handles::mr_opt(mhandle)?)?;
        Ok(())
    })
}

static PLUGIN: PluginV1 = PluginV1 {
    version: abi::PLUGIN_VERSION,
    struct_size: std::mem::size_of::<PluginV1>() as u32,
    name: c"ofi".as_ptr(),
    init,
    devices: devices_count,
    get_properties,
    listen,
    accept,
    close_listen,
    connect,
    connect_test,
    reg_mr,
    dereg_mr,
    get_mr_desc,
    isend,
    irecv,
    iwrite,
    poll_imm,
    test,
    close_comm,
    wait_fd,
    isend_head,
};

/// The plugin's entry point (`HCCL_NET_PLUGIN_SYMBOL`).
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn hcclNetPluginV1() -> *const PluginV1 {
    &PLUGIN
}

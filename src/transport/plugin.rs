//! Net plugins: shared libraries that move bytes between hosts over an RDMA-class network
//! (`libhccl_net_ofi.so` does it through libfabric), loaded at run time so that `libhccl.so`
//! itself links no network library.
//!
//! A plugin exports one function, `hcclNetPluginV1`, returning a table of C functions; its
//! layout is the one of `include/hccl/hccl_net.h`, mirrored here. The table's `version` and
//! `structSize` are checked, and every entry must be present, before anything is called.
//!
//! Which plugin: `HCCL_NET_PLUGIN` names a file, or `none`; unset (or `auto`),
//! `libhccl_net_ofi.so` beside the object that holds this code (`libhccl.so`) is tried. A plugin
//! that is absent, fails to load or finds no usable device leaves the built-in TCP link in
//! charge, with one INFO line saying why; so does, when the plugin was not named and
//! `FI_PROVIDER` is unset, a device whose provider runs over kernel sockets (libfabric's `tcp`),
//! which the built-in TCP link outpaces; a named file that does not exist fails communicator
//! creation (`HCCL_E_PARA`). The
//! plugin is loaded and initialised once per process, the first time a communicator has peers on
//! other hosts.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};

/// File name of the plugin looked for beside `libhccl.so`.
pub const DEFAULT_FILE: &str = "libhccl_net_ofi.so";
/// Interface version this library speaks.
pub const VERSION: u32 = 1;
const SYMBOL: &[u8] = b"hcclNetPluginV1\0";
/// Size of a connection handle.
pub const HANDLE_BYTES: usize = 128;
const NAME_BYTES: usize = 64;
const UNSET: i32 = -1;
/// Result: success.
pub const SUCCESS: c_int = 0;
/// Result: not an error; make progress and post again.
pub const AGAIN: c_int = 1;
pub const E_NOT_SUPPORTED: c_int = 4;
const E_NO_DEVICE: c_int = 5;
/// A device needs every buffer inside a registration.
pub const FLAG_REG_REQUIRED: u32 = 0x2;

/// `hcclNetConfig_t`.
#[repr(C)]
struct NetConfig {
    traffic_class: i32,
    service_level: i32,
}

/// `hcclNetProperties_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Properties {
    name: [c_char; NAME_BYTES],
    provider: [c_char; NAME_BYTES],
    fabric: [c_char; NAME_BYTES],
    /// Link speed, 0 when unknown.
    pub speed_mbps: u64,
    /// Largest single message.
    pub max_message_bytes: u64,
    /// `HCCL_NET_FLAG_*`.
    pub flags: u32,
    reserved: u32,
    /// Traffic class in effect, -1 when not applied.
    pub traffic_class: i32,
    /// Service level in effect, -1 when not applied.
    pub service_level: i32,
}

fn text(b: &[c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Properties {
    /// The interface name.
    pub fn name(&self) -> String {
        text(&self.name)
    }
    /// The provider (e.g. `tcp;ofi_rxm`, `verbs;ofi_rxm`).
    pub fn provider(&self) -> String {
        text(&self.provider)
    }
    /// The fabric.
    pub fn fabric(&self) -> String {
        text(&self.fabric)
    }
}

/// `hcclNetHandle_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Handle {
    /// Opaque bytes.
    pub bytes: [u8; HANDLE_BYTES],
}

type LogFn = unsafe extern "C" fn(*mut c_void, c_int, *const c_char);
type Ptr = *mut c_void;

/// `hcclNetPlugin_v1_t`: every entry optional here, checked once at load.
#[repr(C)]
struct TableV1 {
    version: u32,
    struct_size: u32,
    name: *const c_char,
    init: Option<unsafe extern "C" fn(*const NetConfig, Option<LogFn>, Ptr) -> c_int>,
    devices: Option<unsafe extern "C" fn(*mut c_int) -> c_int>,
    get_properties: Option<unsafe extern "C" fn(c_int, *mut Properties) -> c_int>,
    listen: Option<unsafe extern "C" fn(c_int, *mut Handle, *mut Ptr) -> c_int>,
    accept: Option<unsafe extern "C" fn(Ptr, *mut Ptr) -> c_int>,
    close_listen: Option<unsafe extern "C" fn(Ptr) -> c_int>,
    connect: Option<unsafe extern "C" fn(c_int, *const Handle, *mut Ptr) -> c_int>,
    connect_test: Option<unsafe extern "C" fn(Ptr, *mut c_int) -> c_int>,
    reg_mr: Option<unsafe extern "C" fn(Ptr, Ptr, usize, *mut Ptr) -> c_int>,
    dereg_mr: Option<unsafe extern "C" fn(Ptr) -> c_int>,
    get_mr_desc: Option<unsafe extern "C" fn(Ptr, Ptr) -> c_int>,
    isend: Option<unsafe extern "C" fn(Ptr, *const c_void, usize, u32, Ptr, *mut Ptr) -> c_int>,
    irecv: Option<unsafe extern "C" fn(Ptr, Ptr, usize, u32, Ptr, *mut Ptr) -> c_int>,
    iwrite: Option<
        unsafe extern "C" fn(
            Ptr,
            *const c_void,
            usize,
            Ptr,
            *const c_void,
            u64,
            u32,
            *mut Ptr,
        ) -> c_int,
    >,
    poll_imm: Option<unsafe extern "C" fn(Ptr, *mut u32, *mut c_int) -> c_int>,
    test: Option<unsafe extern "C" fn(Ptr, *mut c_int, *mut usize) -> c_int>,
    close_comm: Option<unsafe extern "C" fn(Ptr) -> c_int>,
}

type WaitFdFn = unsafe extern "C" fn(Ptr, *mut c_int) -> c_int;
type IsendHeadFn = unsafe extern "C" fn(
    Ptr,
    *const c_void,
    usize,
    *const c_void,
    usize,
    u32,
    Ptr,
    *mut Ptr,
) -> c_int;

/// The optional `isendHead` entry of a table `size` bytes long: it follows `waitFd` when the
/// table is long enough to hold it.
///
/// # Safety
/// As for [`wait_fd_entry`].
unsafe fn isend_head_entry(table: *const TableV1, size: u32) -> Option<IsendHeadFn> {
    let at = std::mem::size_of::<TableV1>() + std::mem::size_of::<Option<WaitFdFn>>();
    if (size as usize) < at + std::mem::size_of::<Option<IsendHeadFn>>() {
        return None;
    }
    // SAFETY: the entry lies inside the table (size checked); it is a nullable function pointer.
    unsafe {
        table
            .cast::<u8>()
            .add(at)
            .cast::<Option<IsendHeadFn>>()
            .read_unaligned()
    }
}

/// The optional `waitFd` entry of a table `size` bytes long: it follows the required entries
/// (a multiple of 8 bytes) when the table is long enough to hold it.
///
/// # Safety
/// `table` must point to a table of at least `size` bytes, and of at least the required ones.
unsafe fn wait_fd_entry(table: *const TableV1, size: u32) -> Option<WaitFdFn> {
    if (size as usize) < std::mem::size_of::<TableV1>() + std::mem::size_of::<Option<WaitFdFn>>() {
        return None;
    }
    // SAFETY: the entry lies inside the table (size checked); it is a nullable function pointer.
    unsafe { table.add(1).cast::<Option<WaitFdFn>>().read_unaligned() }
}

/// The entries this library calls, all present.
#[derive(Clone, Copy)]
struct Calls {
    init: unsafe extern "C" fn(*const NetConfig, Option<LogFn>, Ptr) -> c_int,
    devices: unsafe extern "C" fn(*mut c_int) -> c_int,
    get_properties: unsafe extern "C" fn(c_int, *mut Properties) -> c_int,
    listen: unsafe extern "C" fn(c_int, *mut Handle, *mut Ptr) -> c_int,
    accept: unsafe extern "C" fn(Ptr, *mut Ptr) -> c_int,
    close_listen: unsafe extern "C" fn(Ptr) -> c_int,
    connect: unsafe extern "C" fn(c_int, *const Handle, *mut Ptr) -> c_int,
    connect_test: unsafe extern "C" fn(Ptr, *mut c_int) -> c_int,
    reg_mr: unsafe extern "C" fn(Ptr, Ptr, usize, *mut Ptr) -> c_int,
    dereg_mr: unsafe extern "C" fn(Ptr) -> c_int,
    isend: unsafe extern "C" fn(Ptr, *const c_void, usize, u32, Ptr, *mut Ptr) -> c_int,
    irecv: unsafe extern "C" fn(Ptr, Ptr, usize, u32, Ptr, *mut Ptr) -> c_int,
    test: unsafe extern "C" fn(Ptr, *mut c_int, *mut usize) -> c_int,
    close_comm: unsafe extern "C" fn(Ptr) -> c_int,
    /// `waitFd`: optional, and absent from tables built before it (which end after
    /// `closeComm`).
    wait_fd: Option<WaitFdFn>,
    /// `isendHead`: optional, absent from tables that end after `waitFd`.
    isend_head: Option<IsendHeadFn>,
}

/// A loaded, initialised plugin and the device this process uses (device 0).
pub struct NetPlugin {
    calls: Calls,
    path: PathBuf,
    name: String,
    /// The device used.
    dev: c_int,
    props: Properties,
    /// Keeps the code mapped for as long as the table is used.
    _lib: libloading::Library,
}

impl std::fmt::Debug for NetPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NetPlugin({})", self.describe())
    }
}

/// Forwards the plugin's log lines to this library's log.
unsafe extern "C" fn log_line(_ctx: Ptr, level: c_int, msg: *const c_char) {
    if msg.is_null() {
        return;
    }
    // SAFETY: the interface passes a NUL-terminated line, valid during the call.
    let line = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
    match level {
        1 => log::error!("net plugin: {line}"),
        2 => log::warn!("net plugin: {line}"),
        3 => log::info!("net plugin: {line}"),
        _ => log::debug!("net plugin: {line}"),
    }
}

impl NetPlugin {
    /// Loads the plugin at `path` and initialises it with the `HCCL_RDMA_*` settings of `env`;
    /// the error says why it cannot be used.
    fn load(path: &Path, env: &EnvConfig) -> std::result::Result<NetPlugin, String> {
        let shown = path.display();
        let fallback = |why: String| format!("net plugin {shown}: {why}");
        // SAFETY: loading runs the library's initialisers; a net plugin is code the user chose
        // (HCCL_NET_PLUGIN) or installed beside libhccl.so, as trusted as libhccl.so itself.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| fallback(format!("cannot be loaded: {e}")))?;
        // SAFETY: the symbol has the type the interface defines for it.
        let get: libloading::Symbol<unsafe extern "C" fn() -> *const TableV1> =
            unsafe { lib.get(SYMBOL) }
                .map_err(|e| fallback(format!("not a net plugin (no hcclNetPluginV1): {e}")))?;
        // SAFETY: the entry point takes no arguments and returns a static table (or NULL).
        let table = unsafe { get() };
        if table.is_null() {
            return Err(fallback("hcclNetPluginV1 returned no table".into()));
        }
        // SAFETY: the first two fields exist in every version of the table.
        let (version, size) = unsafe { ((*table).version, (*table).struct_size) };
        if version != VERSION || (size as usize) < std::mem::size_of::<TableV1>() {
            return Err(fallback(format!(
                "interface version {version} (size {size}); this library speaks version \
                 {VERSION} (size {} or more)",
                std::mem::size_of::<TableV1>()
            )));
        }
        // SAFETY: the table is at least as long as its required entries (checked above).
        let wait_fd = unsafe { wait_fd_entry(table, size) };
        // SAFETY: as above.
        let isend_head = unsafe { isend_head_entry(table, size) };
        // SAFETY: version and size checked: the table has this layout and lives as long as the
        // library stays loaded.
        let t = unsafe { &*table };
        let missing = || fallback("its function table has empty entries".into());
        let calls = Calls {
            init: t.init.ok_or_else(missing)?,
            devices: t.devices.ok_or_else(missing)?,
            get_properties: t.get_properties.ok_or_else(missing)?,
            listen: t.listen.ok_or_else(missing)?,
            accept: t.accept.ok_or_else(missing)?,
            close_listen: t.close_listen.ok_or_else(missing)?,
            connect: t.connect.ok_or_else(missing)?,
            connect_test: t.connect_test.ok_or_else(missing)?,
            reg_mr: t.reg_mr.ok_or_else(missing)?,
            dereg_mr: t.dereg_mr.ok_or_else(missing)?,
            isend: t.isend.ok_or_else(missing)?,
            irecv: t.irecv.ok_or_else(missing)?,
            test: t.test.ok_or_else(missing)?,
            close_comm: t.close_comm.ok_or_else(missing)?,
            wait_fd,
            isend_head,
        };
        let name = if t.name.is_null() {
            "?".to_string()
        } else {
            // SAFETY: a NUL-terminated static string of the plugin.
            unsafe { CStr::from_ptr(t.name) }
                .to_string_lossy()
                .into_owned()
        };
        let cfg = NetConfig {
            traffic_class: env.rdma.tc.map_or(UNSET, i32::from),
            service_level: env.rdma.sl.map_or(UNSET, i32::from),
        };
        // SAFETY: a valid config and a log function that only formats the line.
        let r = unsafe { (calls.init)(&cfg, Some(log_line), std::ptr::null_mut()) };
        if r == E_NO_DEVICE {
            let asked = std::env::var("FI_PROVIDER")
                .map_or(String::new(), |p| format!(", FI_PROVIDER={p}"));
            return Err(fallback(format!(
                "no usable network device (no provider works{asked})"
            )));
        }
        if r != SUCCESS {
            return Err(fallback(format!("initialisation failed (code {r})")));
        }
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { (calls.devices)(&mut n) };
        if r != SUCCESS || n < 1 {
            return Err(fallback("no network device".into()));
        }
        let mut devs = Vec::new();
        for d in 0..n {
            // SAFETY: an all-zero Properties is valid (integers and byte arrays).
            let mut props: Properties = unsafe { std::mem::zeroed() };
            // SAFETY: d < n is a device; writes one Properties.
            if unsafe { (calls.get_properties)(d, &mut props) } == SUCCESS {
                devs.push((d, props));
            }
        }
        let (dev, props) = choose_device(&devs, env)
            .ok_or_else(|| fallback("no device with readable properties".into()))?;
        let p = NetPlugin {
            calls,
            path: path.to_path_buf(),
            name,
            dev,
            props,
            _lib: lib,
        };
        p.report_knobs(env);
        Ok(p)
    }

    /// Says which `HCCL_RDMA_*` settings the device applies and which it ignores.
    fn report_knobs(&self, env: &EnvConfig) {
        let r = &env.rdma;
        if let Some(tc) = r.tc {
            if self.props.traffic_class == UNSET {
                log::info!(
                    "HCCL_RDMA_TC={tc} ignored: the {} provider does not apply a traffic class",
                    self.props.provider()
                );
            }
        }
        if let Some(sl) = r.sl {
            if self.props.service_level == UNSET {
                log::info!(
                    "HCCL_RDMA_SL={sl} ignored: the {} provider does not apply a service level",
                    self.props.provider()
                );
            }
        }
        if let Some(t) = r.timeout {
            log::info!("HCCL_RDMA_TIMEOUT={t} ignored: the net plugin interface leaves retransmission timing to the provider");
        }
        if let Some(c) = r.retry_cnt {
            log::info!("HCCL_RDMA_RETRY_CNT={c} ignored: the net plugin interface leaves retransmission to the provider");
        }
    }

    /// Whether the device's provider carries data over kernel sockets (libfabric's `tcp`,
    /// `sockets`, `udp`, alone or under `ofi_rxm`/`ofi_rxd`): no RDMA, nothing gained over the
    /// built-in TCP link.
    pub fn over_sockets(&self) -> bool {
        sockets_provider(&self.props.provider())
    }

    /// `plugin name (path): provider P, fabric F, device D`, for logs and diagnostics.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}): provider {}, fabric {}, device {}",
            self.name,
            self.path.display(),
            self.props.provider(),
            self.props.fabric(),
            self.props.name()
        )
    }

    /// The properties of the device in use.
    pub fn properties(&self) -> &Properties {
        &self.props
    }

    fn check(&self, what: &str, r: c_int) -> Result<()> {
        if r == SUCCESS {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::RoceConnect,
            format!("net plugin {}: {what} failed (code {r})", self.name),
        ))
    }

    /// Starts listening; returns the listen comm and the handle the peer connects to.
    pub(crate) fn listen(&self) -> Result<(Ptr, Handle)> {
        let mut h = Handle {
            bytes: [0; HANDLE_BYTES],
        };
        let mut lc: Ptr = std::ptr::null_mut();
        // SAFETY: the device exists; writes a handle and a pointer.
        self.check("listen", unsafe {
            (self.calls.listen)(self.dev, &mut h, &mut lc)
        })?;
        Ok((lc, h))
    }

    /// A comm accepted on `lc`, if a peer has arrived.
    pub(crate) fn accept(&self, lc: Ptr) -> Result<Option<Ptr>> {
        let mut c: Ptr = std::ptr::null_mut();
        // SAFETY: lc came from listen (the plugin checks it); writes one pointer.
        self.check("accept", unsafe { (self.calls.accept)(lc, &mut c) })?;
        Ok((!c.is_null()).then_some(c))
    }

    /// Closes a listen comm.
    pub(crate) fn close_listen(&self, lc: Ptr) {
        // SAFETY: the plugin checks the handle.
        unsafe { (self.calls.close_listen)(lc) };
    }

    /// Starts connecting to the listener behind `h`.
    pub(crate) fn connect(&self, h: &Handle) -> Result<Ptr> {
        let mut c: Ptr = std::ptr::null_mut();
        // SAFETY: reads one handle, writes one pointer.
        self.check("connect", unsafe {
            (self.calls.connect)(self.dev, h, &mut c)
        })?;
        Ok(c)
    }

    /// Whether a connecting comm is connected.
    pub(crate) fn connect_test(&self, c: Ptr) -> Result<bool> {
        let mut ok: c_int = 0;
        // SAFETY: the plugin checks the comm; writes one int.
        self.check("connect test", unsafe {
            (self.calls.connect_test)(c, &mut ok)
        })?;
        Ok(ok != 0)
    }

    /// Registers `len` bytes at `ptr` for use on comms of the device of `comm`.
    pub(crate) fn reg_mr(&self, comm: Ptr, ptr: *mut u8, len: usize) -> Result<Ptr> {
        let mut mh: Ptr = std::ptr::null_mut();
        // SAFETY: the plugin checks the comm; the region is the caller's, alive until dereg.
        self.check("memory registration", unsafe {
            (self.calls.reg_mr)(comm, ptr.cast(), len, &mut mh)
        })?;
        Ok(mh)
    }

    /// Ends a registration.
    pub(crate) fn dereg_mr(&self, mh: Ptr) {
        // SAFETY: the plugin checks the handle.
        unsafe { (self.calls.dereg_mr)(mh) };
    }

    /// Posts a tagged send; `Ok(None)` means "again later" (queue full).
    ///
    /// # Safety
    /// `data` must stay valid for `len` bytes until the request completes or the comm closes.
    pub(crate) unsafe fn isend(
        &self,
        comm: Ptr,
        data: *const u8,
        len: usize,
        tag: u32,
        mh: Ptr,
    ) -> std::result::Result<Option<Ptr>, c_int> {
        let mut req: Ptr = std::ptr::null_mut();
        // SAFETY: forwarded from the caller's contract.
        let r = unsafe { (self.calls.isend)(comm, data.cast(), len, tag, mh, &mut req) };
        match r {
            SUCCESS => Ok(Some(req)),
            AGAIN => Ok(None),
            e => Err(e),
        }
    }

    /// Whether [`NetPlugin::isend_head`] can send from unregistered memory here: the plugin has
    /// the entry and the device needs no registration.
    pub(crate) fn sends_head(&self) -> bool {
        self.calls.isend_head.is_some() && self.props.flags & FLAG_REG_REQUIRED == 0
    }

    /// Posts one tagged message of `head` (copied during the call) followed by `len` bytes at
    /// `data` (unregistered, used in place); `Ok(None)` means "again later".
    ///
    /// # Safety
    /// `data` must stay valid for `len` bytes until the request completes or the comm closes.
    pub(crate) unsafe fn isend_head(
        &self,
        comm: Ptr,
        head: &[u8],
        data: *const u8,
        len: usize,
        tag: u32,
    ) -> std::result::Result<Option<Ptr>, c_int> {
        let Some(f) = self.calls.isend_head else {
            return Err(E_NOT_SUPPORTED);
        };
        let mut req: Ptr = std::ptr::null_mut();
        // SAFETY: head is readable during the call; data forwarded from the caller's contract.
        let r = unsafe {
            f(
                comm,
                head.as_ptr().cast(),
                head.len(),
                data.cast(),
                len,
                tag,
                std::ptr::null_mut(),
                &mut req,
            )
        };
        match r {
            SUCCESS => Ok(Some(req)),
            AGAIN => Ok(None),
            e => Err(e),
        }
    }

    /// Posts a tagged receive; `Ok(None)` means "again later".
    ///
    /// # Safety
    /// `data` must stay valid for writes of `len` bytes until the request completes or the
    /// comm closes.
    pub(crate) unsafe fn irecv(
        &self,
        comm: Ptr,
        data: *mut u8,
        len: usize,
        tag: u32,
        mh: Ptr,
    ) -> std::result::Result<Option<Ptr>, c_int> {
        let mut req: Ptr = std::ptr::null_mut();
        // SAFETY: forwarded from the caller's contract.
        let r = unsafe { (self.calls.irecv)(comm, data.cast(), len, tag, mh, &mut req) };
        match r {
            SUCCESS => Ok(Some(req)),
            AGAIN => Ok(None),
            e => Err(e),
        }
    }

    /// Tests a request: `Ok(Some(bytes))` once complete (the request is freed then, as on an
    /// error), `Ok(None)` while pending.
    pub(crate) fn test(&self, req: Ptr) -> std::result::Result<Option<usize>, c_int> {
        let mut done: c_int = 0;
        let mut bytes: usize = 0;
        // SAFETY: the plugin checks the request; writes an int and a size.
        let r = unsafe { (self.calls.test)(req, &mut done, &mut bytes) };
        match r {
            SUCCESS if done != 0 => Ok(Some(bytes)),
            SUCCESS => Ok(None),
            e => Err(e),
        }
    }

    /// Prepares to sleep on `comm` (`waitFd`): `Ok(Some(fd))` when the caller may block until
    /// `fd` turns readable, `Ok(None)` when the comm may progress now; an error when the comm
    /// has nothing to sleep on (or the plugin no such entry).
    pub(crate) fn wait_fd(&self, comm: Ptr) -> std::result::Result<Option<RawFd>, c_int> {
        let Some(f) = self.calls.wait_fd else {
            return Err(E_NOT_SUPPORTED);
        };
        let mut fd: c_int = -1;
        // SAFETY: the plugin checks the comm; writes an int.
        match unsafe { f(comm, &mut fd) } {
            SUCCESS if fd >= 0 => Ok(Some(fd)),
            SUCCESS => Err(E_NOT_SUPPORTED),
            AGAIN => Ok(None),
            e => Err(e),
        }
    }

    /// Closes a comm, abandoning its requests.
    pub(crate) fn close_comm(&self, comm: Ptr) {
        // SAFETY: the plugin checks the handle.
        unsafe { (self.calls.close_comm)(comm) };
    }
}

// SAFETY: the interface requires every plugin function to be callable from any thread; the
// table and library handle are immutable after loading.
unsafe impl Send for NetPlugin {}
// SAFETY: as above.
unsafe impl Sync for NetPlugin {}

/// The device on the interface this process's bootstrap uses (`HCCL_IF_IP`,
/// `HCCL_SOCKET_IFNAME`, ...), preferring a routable fabric to an IPv6 link-local one; else the
/// plugin's first device.
fn choose_device(devs: &[(c_int, Properties)], env: &EnvConfig) -> Option<(c_int, Properties)> {
    let ifname = super::net::choose_local_addr(env).ok().and_then(|a| {
        if a.name != "HCCL_IF_IP" {
            return Some(a.name);
        }
        let all = super::net::list_interfaces().ok()?;
        all.into_iter().find(|i| i.addr == a.addr).map(|i| i.name)
    });
    let score = |p: &Properties| {
        let on_if = ifname.as_deref() == Some(p.name().as_str());
        (on_if, !p.fabric().starts_with("fe80"))
    };
    devs.iter()
        .enumerate()
        .max_by_key(|(i, (_, p))| (score(p), std::cmp::Reverse(*i)))
        .map(|(_, d)| *d)
}

/// Whether a libfabric provider name (`tcp;ofi_rxm`, `verbs;ofi_rxm`, `efa`, ...) is built on
/// kernel sockets.
fn sockets_provider(name: &str) -> bool {
    name.split(';')
        .next()
        .is_some_and(|core| matches!(core.trim(), "tcp" | "sockets" | "udp"))
}

/// Whether `HCCL_NET_PLUGIN` is unset or `auto`: the plugin beside this library, if there is one.
fn is_auto(env: &EnvConfig) -> bool {
    env.net_plugin
        .as_deref()
        .is_none_or(|v| v.eq_ignore_ascii_case("auto"))
}

/// Where the plugin is looked for when `HCCL_NET_PLUGIN` is unset or `auto`: beside the object
/// (shared library or executable) that contains this code.
fn beside_this_library() -> Option<PathBuf> {
    // SAFETY: an all-zero Dl_info is valid; dladdr fills it for an address of this object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = beside_this_library as *const c_void;
    // SAFETY: `here` is an address inside this object; info is writable.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
    let me = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    let me = std::fs::canonicalize(&*me).ok()?;
    Some(me.parent()?.join(DEFAULT_FILE))
}

/// The plugin this process uses for level1 links, or `None` (built-in TCP), loading it on the
/// first call. `HCCL_NET_PLUGIN` naming a file that does not exist is an error.
pub fn global(env: &EnvConfig) -> Result<Option<Arc<NetPlugin>>> {
    /// The setting a plugin was chosen for, and the choice.
    type Chosen = Option<(Option<String>, Option<Arc<NetPlugin>>)>;
    static LOADED: OnceLock<Mutex<Chosen>> = OnceLock::new();
    let path = match env.net_plugin.as_deref() {
        None => beside_this_library(),
        Some(v) if v.eq_ignore_ascii_case("none") => None,
        Some(v) if v.eq_ignore_ascii_case("auto") => beside_this_library(),
        Some(p) => {
            let path = PathBuf::from(p);
            if !path.is_file() {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("HCCL_NET_PLUGIN={p}: no such file"),
                ));
            }
            Some(path)
        }
    };
    let mut slot = LOADED.get_or_init(|| Mutex::new(None)).lock();
    if let Some((key, p)) = &*slot {
        if key == &env.net_plugin {
            return Ok(p.clone());
        }
    }
    let chosen = match path {
        None if is_auto(env) => {
            log::info!(
                "net plugin: none found (this library's location is unknown): level1 links use \
                 the built-in TCP"
            );
            None
        }
        None => {
            log::info!("net plugin: HCCL_NET_PLUGIN=none: level1 links use the built-in TCP");
            None
        }
        Some(path) if is_auto(env) && !path.is_file() => {
            log::info!(
                "net plugin: no {} beside this library ({}): level1 links use the built-in TCP",
                DEFAULT_FILE,
                path.parent()
                    .map_or(String::new(), |d| d.display().to_string())
            );
            None
        }
        Some(path) => match NetPlugin::load(&path, env) {
            Ok(p)
                if is_auto(env)
                    && std::env::var_os("FI_PROVIDER").is_none()
                    && p.over_sockets() =>
            {
                log::info!(
                    "net plugin: {}: its provider moves bytes through kernel sockets as the \
                     built-in TCP does, which is faster: level1 links use the built-in TCP \
                     (FI_PROVIDER or HCCL_NET_PLUGIN=<path> selects the plugin anyway)",
                    p.describe()
                );
                // Kept loaded: the plugin may run threads of its own from initialisation on.
                std::mem::forget(p);
                None
            }
            Ok(p) => {
                log::info!("net plugin: {}", p.describe());
                Some(Arc::new(p))
            }
            Err(why) => {
                log::info!("{why}: level1 links use the built-in TCP");
                None
            }
        },
    };
    *slot = Some((env.net_plugin.clone(), chosen.clone()));
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::{
        isend_head_entry, sockets_provider, wait_fd_entry, IsendHeadFn, TableV1, WaitFdFn,
    };
    use std::ffi::c_int;

    unsafe extern "C" fn fake_wait_fd(_comm: *mut std::ffi::c_void, fd: *mut c_int) -> c_int {
        // SAFETY: the test passes a valid out-pointer.
        unsafe { *fd = 42 };
        0
    }

    unsafe extern "C" fn fake_isend_head(
        _comm: *mut std::ffi::c_void,
        _head: *const std::ffi::c_void,
        head_size: usize,
        _data: *const std::ffi::c_void,
        _size: usize,
        _tag: u32,
        _mh: *mut std::ffi::c_void,
        _req: *mut *mut std::ffi::c_void,
    ) -> c_int {
        head_size as c_int
    }

    #[test]
    fn isend_head_is_read_only_from_tables_long_enough_to_hold_it() {
        #[repr(C)]
        struct Longer {
            base: TableV1,
            wait_fd: Option<WaitFdFn>,
            isend_head: Option<IsendHeadFn>,
        }
        // SAFETY: all-None entries and a null name are a valid (empty) table.
        let mut t: Longer = unsafe { std::mem::zeroed() };
        t.isend_head = Some(fake_isend_head);
        let full = std::mem::size_of::<Longer>() as u32;
        let p: *const TableV1 = &t.base;
        // SAFETY: p points to a table of `full` bytes.
        let f = unsafe { isend_head_entry(p, full) }.expect("a table with isendHead");
        let n = std::ptr::null_mut();
        // SAFETY: the fake entry touches no pointer.
        assert_eq!(unsafe { f(n, n, 7, n, 0, 0, n, std::ptr::null_mut()) }, 7);
        // A table that ends after waitFd (or inside isendHead) has none.
        for short in [full - 8, full - 1] {
            // SAFETY: as above.
            assert!(unsafe { isend_head_entry(p, short) }.is_none());
        }
    }

    #[test]
    fn wait_fd_is_read_only_from_tables_long_enough_to_hold_it() {
        #[repr(C)]
        struct Longer {
            base: TableV1,
            wait_fd: Option<WaitFdFn>,
        }
        // SAFETY: all-None entries and a null name are a valid (empty) table.
        let mut t: Longer = unsafe { std::mem::zeroed() };
        t.wait_fd = Some(fake_wait_fd);
        let full = std::mem::size_of::<Longer>() as u32;
        let short = std::mem::size_of::<TableV1>() as u32;
        let p: *const TableV1 = &t.base;
        // SAFETY: p points to a table of `full` bytes.
        let f = unsafe { wait_fd_entry(p, full) }.expect("a table with waitFd");
        let mut fd = -1;
        // SAFETY: the fake entry only writes the out-pointer.
        assert_eq!(unsafe { f(std::ptr::null_mut(), &mut fd) }, 0);
        assert_eq!(fd, 42);
        // SAFETY: as above; a table built before waitFd ends with the required entries.
        assert!(unsafe { wait_fd_entry(p, short) }.is_none());
        // SAFETY: as above.
        assert!(unsafe { wait_fd_entry(p, full - 1) }.is_none());
        t.wait_fd = None;
        let p: *const TableV1 = &t.base;
        // SAFETY: as above.
        assert!(unsafe { wait_fd_entry(p, full) }.is_none());
    }

    #[test]
    fn socket_providers_are_told_from_rdma_ones() {
        for p in [
            "tcp",
            "tcp;ofi_rxm",
            "sockets",
            "udp;ofi_rxd",
            " tcp ;ofi_rxm",
        ] {
            assert!(sockets_provider(p), "{p}");
        }
        for p in ["verbs;ofi_rxm", "verbs", "efa", "psm3", "cxi", "shm", ""] {
            assert!(!sockets_provider(p), "{p}");
        }
    }
}

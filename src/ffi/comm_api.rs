//! The communicator management functions of `hccl_comm.h`.
//!
//! This file is the source cbindgen reads for `include/hccl/hccl_comm.h`. Every body is one
//! `entry!` (see [`super::boundary`]).
//!
//! # Safety
//! These are C entry points with HCCL's contract: every pointer argument is either NULL
//! (rejected with `HCCL_E_PTR` where a value is required) or valid for the access the HCCL
//! documentation describes for that argument (buffers of `count` elements, arrays of
//! `rankSize` counts, writable output slots). Handles are never dereferenced: they are looked up.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::HashSet;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use super::boundary::{api_name, entry, not_supported};
use super::config_read;
use super::types::{
    HcclComm, HcclCommConfig, HcclCommStateCallback, HcclCommStatus, HcclCommSymWindow,
    HcclConfigRaw, HcclConfigValue, HcclResult, HcclResultRaw, HcclRootInfo,
};
use super::validate as v;
use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::{MAX_COMM_NAME_BYTES, MAX_PATH_BYTES};
use crate::comm::config::{CommConfig, Overrides};
use crate::comm::root_info::{RootInfo, ROOT_INFO_BYTES};
use crate::comm::{group, registry, Communicator};

/// Process-wide `HCCL_DETERMINISTIC` set through `HcclSetConfig` (-1: not set).
static DETERMINISTIC: AtomicI32 = AtomicI32::new(-1);

fn merged(ov: Overrides) -> Result<CommConfig> {
    let env = EnvConfig::global()?;
    let mut ov = ov;
    if ov.deterministic.is_none() {
        let d = DETERMINISTIC.load(Ordering::Relaxed);
        if d >= 0 {
            ov.deterministic = Some(d as u32);
        }
    }
    CommConfig::merge(&ov, &env)
}

/// The fields a caller's `HcclCommConfig` sets.
///
/// # Safety
/// `config`, when non-null, must point to a config written by `HcclCommConfigInit`.
unsafe fn overrides(config: *const HcclCommConfig) -> Result<Overrides> {
    let p = v::non_null(config, "config")?;
    // SAFETY: non-null, and valid per the caller's contract.
    unsafe { config_read::read(p) }
}

fn register(c: Communicator, out: *mut HcclComm) -> Result<()> {
    if let Some(name) = c.config().name.clone() {
        if registry::name_taken(&name, c.rank()) {
            return Err(Error::new(
                ErrorKind::Para,
                format!(
                    "a communicator named {name} with rank {} already exists",
                    c.rank()
                ),
            ));
        }
    }
    let h = registry::insert(c);
    // SAFETY: the caller checked `out` is non-null; C gave it as a writable handle slot.
    unsafe { out.write(h as HcclComm) };
    Ok(())
}

/// Creates the rendezvous of a new communicator and describes it in `rootInfo`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRootInfo(rootInfo: *mut HcclRootInfo) -> HcclResult {
    entry!(rootInfo; {
        let out = v::non_null_mut(rootInfo, "rootInfo")?;
        let env = EnvConfig::global()?;
        let info = crate::comm::communicator::create_root_info(&env)?;
        let bytes = info.encode();
        // SAFETY: `out` is non-null and points to a caller-owned HcclRootInfo of exactly
        // ROOT_INFO_BYTES bytes; the source is a local array, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, ROOT_INFO_BYTES) };
        Ok(())
    })
}

/// # Safety
/// `rootInfo` and `comm`, when non-null, must be valid for reading a root info and writing a
/// handle.
unsafe fn init_root(
    nRanks: u32,
    rootInfo: *const HcclRootInfo,
    rank: u32,
    ov: Overrides,
    comm: *mut HcclComm,
) -> Result<()> {
    let out = v::non_null_mut(comm, "comm")?;
    let info = v::non_null(rootInfo, "rootInfo")?;
    // The rank count's bound is checked by the communicator, which also tells the root so that
    // the other ranks fail at once instead of waiting for the connect timeout.
    if rank >= nRanks {
        return Err(Error::new(
            ErrorKind::Para,
            format!("rank {rank} is out of range for {nRanks} ranks"),
        ));
    }
    // SAFETY: non-null, and an HcclRootInfo is exactly ROOT_INFO_BYTES readable bytes.
    let blob = unsafe { std::slice::from_raw_parts(info as *const u8, ROOT_INFO_BYTES) };
    let ri = RootInfo::decode(blob)?;
    let cfg = merged(ov)?;
    let c = Communicator::init_root_info(nRanks, &ri, rank, cfg)?;
    register(c, out)
}

/// Joins the communicator of `rootInfo` as `rank` of `nRanks`.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfo(
    nRanks: u32,
    rootInfo: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    entry!(nRanks, rootInfo, rank, comm; {
        // SAFETY: the pointers come from C under this function's contract.
        unsafe { init_root(nRanks, rootInfo, rank, Overrides::default(), comm) }
    })
}

/// `HcclCommInitRootInfo` with a configuration (fields set there override the environment).
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitRootInfoConfig(
    nRanks: u32,
    rootInfo: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    entry!(nRanks, rootInfo, rank, config, comm; {
        // SAFETY: the pointers come from C under this function's contract.
        unsafe {
            let ov = overrides(config)?;
            init_root(nRanks, rootInfo, rank, ov, comm)
        }
    })
}

/// # Safety
/// `clusterInfo`, when non-null, must be a NUL-terminated string; `comm` valid for writing.
unsafe fn init_cluster(
    clusterInfo: *const c_char,
    rank: u32,
    ov: Overrides,
    comm: *mut HcclComm,
) -> Result<()> {
    let out = v::non_null_mut(comm, "comm")?;
    // SAFETY: a C string per the caller's contract; read up to the path bound only.
    let path = unsafe { v::c_str(clusterInfo, MAX_PATH_BYTES, "clusterInfo") }?;
    let cfg = merged(ov)?;
    let c = Communicator::init_cluster(path, rank, cfg)?;
    register(c, out)
}

/// Joins the communicator described by the rank table file `clusterInfo` as `rank`.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitClusterInfo(
    clusterInfo: *const c_char,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    entry!(clusterInfo, rank, comm; {
        // SAFETY: the pointers come from C under this function's contract.
        unsafe { init_cluster(clusterInfo, rank, Overrides::default(), comm) }
    })
}

/// `HcclCommInitClusterInfo` with a configuration.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitClusterInfoConfig(
    clusterInfo: *const c_char,
    rank: u32,
    config: *mut HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    entry!(clusterInfo, rank, config, comm; {
        // SAFETY: the pointers come from C under this function's contract.
        unsafe {
            let ov = overrides(config)?;
            init_cluster(clusterInfo, rank, ov, comm)
        }
    })
}

/// Creates a sub-communicator of the parent ranks `rankIds`; the caller is `subCommRankId` of it.
#[no_mangle]
pub unsafe extern "C" fn HcclCreateSubCommConfig(
    comm: *mut HcclComm,
    rankNum: u32,
    rankIds: *mut u32,
    subCommId: u64,
    subCommRankId: u32,
    config: *mut HcclCommConfig,
    subComm: *mut HcclComm,
) -> HcclResult {
    entry!(comm, rankNum, rankIds, subCommId, subCommRankId, config, subComm; {
        let handle = v::non_null_mut(comm, "comm")?;
        // SAFETY: non-null; C passes the address of its parent handle.
        let parent = v::comm(unsafe { handle.read() })?;
        let out = v::non_null_mut(subComm, "subComm")?;
        if rankNum == 0 || rankNum > parent.size() {
            return Err(Error::new(
                ErrorKind::Para,
                format!("rankNum {rankNum} must be in 1..={}", parent.size()),
            ));
        }
        let ids = v::non_null_mut(rankIds, "rankIds")?;
        // SAFETY: non-null, and per the contract an array of `rankNum` rank ids; rankNum is at
        // most the parent's size, itself bounded by MAX_RANKS.
        let ids = unsafe { std::slice::from_raw_parts(ids, rankNum as usize) };
        let ov = if config.is_null() {
            Overrides::default()
        } else {
            // SAFETY: non-null, and a config from HcclCommConfigInit per the contract.
            unsafe { overrides(config) }?
        };
        let cfg = merged(ov)?;
        let c = parent.create_sub(ids, subCommId, subCommRankId, cfg)?;
        register(c, out)
    })
}

/// Creates `ndev` ranks in this process, one per entry of `devices`.
#[no_mangle]
pub unsafe extern "C" fn HcclCommInitAll(
    ndev: u32,
    devices: *mut i32,
    comms: *mut HcclComm,
) -> HcclResult {
    entry!(ndev, devices, comms; {
        let out = v::non_null_mut(comms, "comms")?;
        let devs = v::non_null_mut(devices, "devices")?;
        v::rank_count(ndev, "ndev")?;
        // SAFETY: non-null, and per the contract an array of `ndev` device ids (bounded above).
        let devs = unsafe { std::slice::from_raw_parts(devs, ndev as usize) };
        let mut seen = HashSet::with_capacity(devs.len());
        for (i, d) in devs.iter().enumerate() {
            if *d < 0 || !seen.insert(*d) {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("devices[{i}] = {d} is negative or repeated"),
                ));
            }
        }
        let cfg = merged(Overrides::default())?;
        let all = Communicator::init_all(devs, cfg)?;
        for (i, c) in all.into_iter().enumerate() {
            // SAFETY: `comms` is non-null and per the contract has room for `ndev` handles;
            // init_all returns exactly one communicator per device.
            unsafe { out.add(i).write(registry::insert(c) as HcclComm) };
        }
        Ok(())
    })
}

/// Destroys a communicator handle and frees everything it holds.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    // Not pinned like the other entry points: a destroy waits for no thread to be inside.
    entry!(unpinned(comm => _c); {
        let c = registry::remove(comm as usize)?;
        log::info!("comm {} rank {} destroyed", c.name(), c.rank());
        Ok(())
    })
}

/// Writes `value` to a non-null C out-parameter.
///
/// # Safety
/// `out`, when non-null, must be valid for writing a `T`.
unsafe fn write_out<T>(out: *mut T, what: &str, value: T) -> Result<()> {
    let out = v::non_null_mut(out, what)?;
    // SAFETY: non-null and writable per the caller's contract; C pointers need not be aligned
    // for Rust's rules, so write without assuming it.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Number of ranks of `comm`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRankSize(comm: HcclComm, rankSize: *mut u32) -> HcclResult {
    entry!(comm(comm => c), rankSize; {
        // SAFETY: an out-parameter from C.
        unsafe { write_out(rankSize, "rankSize", c.size()) }
    })
}

/// This rank's id in `comm`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclResult {
    entry!(comm(comm => c), rank; {
        // SAFETY: an out-parameter from C.
        unsafe { write_out(rank, "rank", c.rank()) }
    })
}

/// Writes the communicator's name (NUL-terminated, at most 128 bytes) to `commName`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetCommName(comm: HcclComm, commName: *mut c_char) -> HcclResult {
    entry!(comm(comm => c), commName; {
        let out = v::non_null_mut(commName, "commName")?;
        let name = c.name().as_bytes();
        let n = name.len().min(MAX_COMM_NAME_BYTES);
        // SAFETY: the caller's buffer holds COMM_NAME_MAX_LENGTH (128) bytes: n + 1 ≤ 128
        // are written, from a Rust string that cannot overlap it.
        unsafe {
            std::ptr::copy_nonoverlapping(name.as_ptr(), out as *mut u8, n);
            out.add(n).write(0);
        }
        Ok(())
    })
}

/// The live communicator of this process named by the C string `name`.
///
/// # Safety
/// `name`, when non-null, must be a NUL-terminated string.
unsafe fn by_name(name: *const c_char, what: &str) -> Result<(usize, Arc<Communicator>)> {
    // SAFETY: a C string per the caller's contract; read up to the name bound only.
    let name = unsafe { v::c_str(name, MAX_COMM_NAME_BYTES, what) }?;
    let h = registry::find_by_name(name)
        .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no communicator named {name}")))?;
    Ok((h, registry::get(h)?))
}

/// Finds a communicator of this process by name.
#[no_mangle]
pub unsafe extern "C" fn HcclCommGetHandleWithName(
    commName: *const c_char,
    comm: *mut HcclComm,
) -> HcclResult {
    entry!(commName, comm; {
        v::non_null_mut(comm, "comm")?;
        // SAFETY: C string and out-parameter from C.
        unsafe {
            let (h, _) = by_name(commName, "commName")?;
            write_out(comm, "comm", h as HcclComm)
        }
    })
}

/// A static description of a result code.
#[no_mangle]
pub extern "C" fn HcclGetErrorString(code: HcclResultRaw) -> *const c_char {
    entry!(value c"unknown error code".as_ptr(); code; {
        HcclResult::from_raw(code)
            .map_or(c"unknown error code", HcclResult::describe)
            .as_ptr()
    })
}

/// Sets a process-wide option (only `HCCL_DETERMINISTIC`: 0 off, 1 on, 2 strict) for
/// communicators created afterwards.
#[no_mangle]
pub extern "C" fn HcclSetConfig(config: HcclConfigRaw, configValue: HcclConfigValue) -> HcclResult {
    entry!(config, configValue; {
        let val = configValue.get();
        match config {
            0 if (0..=2).contains(&val) => {
                DETERMINISTIC.store(val, Ordering::Relaxed);
                Ok(())
            }
            0 => Err(Error::new(
                ErrorKind::Para,
                format!("HCCL_DETERMINISTIC value {val} must be 0, 1 or 2"),
            )),
            c => Err(Error::new(
                ErrorKind::Para,
                format!("unknown HcclConfig {c}"),
            )),
        }
    })
}

/// Reads a process-wide option.
#[no_mangle]
pub unsafe extern "C" fn HcclGetConfig(
    config: HcclConfigRaw,
    configValue: *mut HcclConfigValue,
) -> HcclResult {
    entry!(config, configValue; {
        v::non_null_mut(configValue, "configValue")?;
        match config {
            0 => {
                let d = DETERMINISTIC.load(Ordering::Relaxed);
                let value = if d >= 0 {
                    d
                } else {
                    match EnvConfig::global()?.deterministic {
                        crate::base::env::Deterministic::Off => 0,
                        crate::base::env::Deterministic::On => 1,
                        crate::base::env::Deterministic::Strict => 2,
                    }
                };
                // SAFETY: an out-parameter from C.
                unsafe { write_out(configValue, "configValue", HcclConfigValue { value }) }
            }
            c => Err(Error::new(
                ErrorKind::Para,
                format!("unknown HcclConfig {c}"),
            )),
        }
    })
}

/// The first `HcclCommConfigCapability` this library does not support (all smaller ones are).
#[no_mangle]
pub extern "C" fn HcclGetCommConfigCapability() -> u32 {
    // Buffer size, determinism, name, expansion mode (host only), init by env, world rank id,
    // job id, graph zero-copy (no graphs: nothing to copy), exec timeout and algorithm are
    // honoured; retry is not.
    entry!(value 10; ; { 10 })
}

/// The first error of an operation that failed on `comm` (HCCL_SUCCESS if none).
#[no_mangle]
pub unsafe extern "C" fn HcclGetCommAsyncError(
    comm: HcclComm,
    asyncError: *mut HcclResult,
) -> HcclResult {
    entry!(comm(comm => c), asyncError; {
        let code = c
            .async_error()
            .map_or(HcclResult::HCCL_SUCCESS, |e| e.kind.result());
        // SAFETY: an out-parameter from C.
        unsafe { write_out(asyncError, "asyncError", code) }
    })
}

/// Suspending a communicator needs the vendor's fault-recovery support.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSuspend(comm: HcclComm) -> HcclResult {
    entry!(comm(comm => _c); {
        Err(not_supported(
            api_name!(),
            "communicator suspension needs NPU fault recovery",
        ))
    })
}

/// Resuming a communicator needs the vendor's fault-recovery support.
#[no_mangle]
pub unsafe extern "C" fn HcclCommResume(comm: HcclComm) -> HcclResult {
    entry!(comm(comm => _c); {
        Err(not_supported(
            api_name!(),
            "communicator suspension needs NPU fault recovery",
        ))
    })
}

/// Status of the communicator named `commId` in this process.
#[no_mangle]
pub unsafe extern "C" fn HcclCommGetStatus(
    commId: *const c_char,
    status: *mut HcclCommStatus,
) -> HcclResult {
    entry!(commId, status; {
        v::non_null_mut(status, "status")?;
        // SAFETY: C string and out-parameter from C.
        unsafe {
            let (_, c) = by_name(commId, "commId")?;
            let s = if c.async_error().is_some() {
                HcclCommStatus::HCCL_COMM_STATUS_INVALID
            } else {
                HcclCommStatus::HCCL_COMM_STATUS_READY
            };
            write_out(status, "status", s)
        }
    })
}

/// State callbacks belong to the vendor's suspend/resume machinery.
#[no_mangle]
pub unsafe extern "C" fn HcclCommRegCommStateCallback(
    regName: *const c_char,
    cb: HcclCommStateCallback,
    args: *mut c_void,
) -> HcclResult {
    entry!(regName, cb, args; {
        Err(not_supported(
            api_name!(),
            "communicator state callbacks need NPU fault recovery",
        ))
    })
}

/// Opens a group: operations issued until the matching `HcclGroupEnd` launch together.
#[no_mangle]
pub extern "C" fn HcclGroupStart() -> HcclResult {
    entry!(; {
        group::start();
        Ok(())
    })
}

/// Closes a group; the outermost end launches the recorded operations.
#[no_mangle]
pub extern "C" fn HcclGroupEnd() -> HcclResult {
    entry!(; { group::end() })
}

/// Whether the calling thread is inside a group.
#[no_mangle]
pub unsafe extern "C" fn HcclGroupStatusGet(isGroupEnabled: *mut bool) -> HcclResult {
    entry!(isGroupEnabled; {
        // SAFETY: an out-parameter from C.
        unsafe { write_out(isGroupEnabled, "isGroupEnabled", group::active()) }
    })
}

/// The answer of every entry point that needs NPU device memory.
fn npu_memory(api: &str) -> Result<()> {
    Err(not_supported(
        api,
        "device virtual memory management needs NPU hardware",
    ))
}

/// Needs NPU virtual memory management.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSetMemoryRange(
    comm: HcclComm,
    baseVirPtr: *mut c_void,
    size: usize,
    alignment: usize,
    flags: u64,
) -> HcclResult {
    entry!(comm(comm => _c), baseVirPtr, size, alignment, flags; { npu_memory(api_name!()) })
}

/// Needs NPU virtual memory management.
#[no_mangle]
pub unsafe extern "C" fn HcclCommUnsetMemoryRange(
    comm: HcclComm,
    baseVirPtr: *mut c_void,
) -> HcclResult {
    entry!(comm(comm => _c), baseVirPtr; { npu_memory(api_name!()) })
}

/// Needs NPU virtual memory management.
#[no_mangle]
pub unsafe extern "C" fn HcclCommActivateCommMemory(
    comm: HcclComm,
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> HcclResult {
    entry!(comm(comm => _c), virPtr, size, offset, handle, flags; { npu_memory(api_name!()) })
}

/// Needs NPU virtual memory management.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDeactivateCommMemory(
    comm: HcclComm,
    virPtr: *mut c_void,
) -> HcclResult {
    entry!(comm(comm => _c), virPtr; { npu_memory(api_name!()) })
}

/// Switching to backup device NICs needs NPU NICs.
#[no_mangle]
pub unsafe extern "C" fn HcclCommWorkingDevNicSet(
    comm: HcclComm,
    ranks: *mut u32,
    useBackup: *mut bool,
    nRanks: u32,
) -> HcclResult {
    entry!(comm(comm => _c), ranks, useBackup, nRanks; {
        Err(not_supported(api_name!(), "device NIC switching needs NPU NICs"))
    })
}

/// Symmetric windows need NPU memory mapped across devices.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSymWinRegister(
    comm: HcclComm,
    addr: *mut c_void,
    size: u64,
    win: *mut HcclCommSymWindow,
    flag: u32,
) -> HcclResult {
    entry!(comm(comm => _c), addr, size, win, flag; { npu_memory(api_name!()) })
}

/// Symmetric windows need NPU memory mapped across devices.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSymWinDeregister(win: HcclCommSymWindow) -> HcclResult {
    entry!(win; {
        Err(not_supported(api_name!(), "symmetric windows need NPU hardware"))
    })
}

/// Symmetric windows need NPU memory mapped across devices.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSymWinGet(
    comm: HcclComm,
    ptr: *mut c_void,
    size: usize,
    win: *mut HcclCommSymWindow,
    offset: *mut usize,
) -> HcclResult {
    entry!(comm(comm => _c), ptr, size, win, offset; { npu_memory(api_name!()) })
}

/// Device-side configuration queries need NPU hardware.
#[no_mangle]
pub unsafe extern "C" fn HcclConfigGetInfo(
    comm: HcclComm,
    cfgType: c_int,
    infoLen: u32,
    info: *mut c_void,
) -> HcclResult {
    entry!(comm(comm => _c), cfgType, infoLen, info; {
        Err(not_supported(api_name!(), "device configuration queries need NPU hardware"))
    })
}

/// Registering memory windows needs NPU memory.
#[no_mangle]
pub unsafe extern "C" fn HcclCommRegister(
    comm: HcclComm,
    addr: *mut c_void,
    size: u64,
    handle: *mut *mut c_void,
    flag: u32,
) -> HcclResult {
    entry!(comm(comm => _c), addr, size, handle, flag; { npu_memory(api_name!()) })
}

/// Registering memory windows needs NPU memory.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDeregister(comm: HcclComm, handle: *mut c_void) -> HcclResult {
    entry!(comm(comm => _c), handle; { npu_memory(api_name!()) })
}

/// Exchanging memory windows needs NPU memory.
#[no_mangle]
pub unsafe extern "C" fn HcclCommExchangeMem(
    comm: HcclComm,
    windowHandle: *mut c_void,
    peerRanks: *mut u32,
    peerRankNum: u32,
) -> HcclResult {
    entry!(comm(comm => _c), windowHandle, peerRanks, peerRankNum; { npu_memory(api_name!()) })
}

//! The communicator management functions of `hccl_comm.h`.
//!
//! This file is the source cbindgen reads for `include/hccl/hccl_comm.h`.
//!
//! # Safety
//! These are C entry points with HCCL's contract: every pointer argument is either NULL
//! (rejected with `HCCL_E_PTR` where a value is required) or valid for the access the HCCL
//! documentation describes for that argument (buffers of `count` elements, arrays of
//! `rankSize` counts, writable output slots). Handles are never dereferenced: they are looked up.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use super::boundary::{call, not_supported, result_of};
use super::config_read;
use super::types::{
    HcclComm, HcclCommConfig, HcclCommStateCallback, HcclCommStatus, HcclCommSymWindow,
    HcclConfigRaw, HcclConfigValue, HcclResult, HcclResultRaw, HcclRootInfo,
};
use super::validate as v;
use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};
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

unsafe fn overrides(config: *const HcclCommConfig) -> Result<Overrides> {
    config_read::read(v::non_null(config, "config")?)
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
    // SAFETY: the caller checked `out` is non-null.
    unsafe { *out = h as HcclComm };
    Ok(())
}

/// Creates the rendezvous of a new communicator and describes it in `rootInfo`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRootInfo(rootInfo: *mut HcclRootInfo) -> HcclResult {
    call("HcclGetRootInfo", || {
        let out = v::non_null_mut(rootInfo, "rootInfo")?;
        let env = EnvConfig::global()?;
        let info = crate::comm::communicator::create_root_info(&env)?;
        let bytes = info.encode();
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, ROOT_INFO_BYTES);
        Ok(())
    })
}

unsafe fn init_root(
    nRanks: u32,
    rootInfo: *const HcclRootInfo,
    rank: u32,
    ov: Overrides,
    comm: *mut HcclComm,
) -> Result<()> {
    let out = v::non_null_mut(comm, "comm")?;
    let info = v::non_null(rootInfo, "rootInfo")?;
    if nRanks == 0 || rank >= nRanks {
        return Err(Error::new(
            ErrorKind::Para,
            format!("rank {rank} is out of range for {nRanks} ranks"),
        ));
    }
    let blob = std::slice::from_raw_parts(info as *const u8, ROOT_INFO_BYTES);
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
    call("HcclCommInitRootInfo", || {
        init_root(nRanks, rootInfo, rank, Overrides::default(), comm)
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
    call("HcclCommInitRootInfoConfig", || {
        let ov = overrides(config)?;
        init_root(nRanks, rootInfo, rank, ov, comm)
    })
}

unsafe fn init_cluster(
    clusterInfo: *const c_char,
    rank: u32,
    ov: Overrides,
    comm: *mut HcclComm,
) -> Result<()> {
    let out = v::non_null_mut(comm, "comm")?;
    let path = CStr::from_ptr(v::non_null(clusterInfo, "clusterInfo")?)
        .to_str()
        .map_err(|_| Error::new(ErrorKind::Para, "clusterInfo path is not UTF-8"))?;
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
    call("HcclCommInitClusterInfo", || {
        init_cluster(clusterInfo, rank, Overrides::default(), comm)
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
    call("HcclCommInitClusterInfoConfig", || {
        let ov = overrides(config)?;
        init_cluster(clusterInfo, rank, ov, comm)
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
    call("HcclCreateSubCommConfig", || {
        let parent_h = *v::non_null_mut(comm, "comm")?;
        let out = v::non_null_mut(subComm, "subComm")?;
        let parent = v::comm(parent_h)?;
        if rankNum == 0 || rankNum > parent.size() {
            return Err(Error::new(
                ErrorKind::Para,
                format!("rankNum {rankNum} must be in 1..={}", parent.size()),
            ));
        }
        let ids =
            std::slice::from_raw_parts(v::non_null_mut(rankIds, "rankIds")?, rankNum as usize);
        let ov = if config.is_null() {
            Overrides::default()
        } else {
            overrides(config)?
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
    call("HcclCommInitAll", || {
        let out = v::non_null_mut(comms, "comms")?;
        let devs = std::slice::from_raw_parts(v::non_null_mut(devices, "devices")?, ndev as usize);
        if ndev == 0 {
            return Err(Error::new(ErrorKind::Para, "ndev must be at least 1"));
        }
        for (i, d) in devs.iter().enumerate() {
            if *d < 0 || devs[..i].contains(d) {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("devices[{i}] = {d} is negative or repeated"),
                ));
            }
        }
        let cfg = merged(Overrides::default())?;
        let all = Communicator::init_all(devs, cfg)?;
        for (i, c) in all.into_iter().enumerate() {
            *out.add(i) = registry::insert(c) as HcclComm;
        }
        Ok(())
    })
}

/// Destroys a communicator handle and frees everything it holds.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    call("HcclCommDestroy", || {
        if comm.is_null() {
            return Err(Error::new(ErrorKind::Ptr, "comm is NULL"));
        }
        let c = registry::remove(comm as usize)?;
        log::info!("comm {} rank {} destroyed", c.name(), c.rank());
        Ok(())
    })
}

/// Number of ranks of `comm`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRankSize(comm: HcclComm, rankSize: *mut u32) -> HcclResult {
    call("HcclGetRankSize", || {
        let out = v::non_null_mut(rankSize, "rankSize")?;
        *out = v::comm(comm)?.size();
        Ok(())
    })
}

/// This rank's id in `comm`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclResult {
    call("HcclGetRankId", || {
        let out = v::non_null_mut(rank, "rank")?;
        *out = v::comm(comm)?.rank();
        Ok(())
    })
}

/// Writes the communicator's name (NUL-terminated, at most 128 bytes) to `commName`.
#[no_mangle]
pub unsafe extern "C" fn HcclGetCommName(comm: HcclComm, commName: *mut c_char) -> HcclResult {
    call("HcclGetCommName", || {
        let out = v::non_null_mut(commName, "commName")?;
        let c = v::comm(comm)?;
        let name = c.name().as_bytes();
        let n = name.len().min(127);
        std::ptr::copy_nonoverlapping(name.as_ptr(), out as *mut u8, n);
        *out.add(n) = 0;
        Ok(())
    })
}

/// Finds a communicator of this process by name.
#[no_mangle]
pub unsafe extern "C" fn HcclCommGetHandleWithName(
    commName: *const c_char,
    comm: *mut HcclComm,
) -> HcclResult {
    call("HcclCommGetHandleWithName", || {
        let out = v::non_null_mut(comm, "comm")?;
        let name = CStr::from_ptr(v::non_null(commName, "commName")?).to_string_lossy();
        let h = registry::find_by_name(&name).ok_or_else(|| {
            Error::new(ErrorKind::NotFound, format!("no communicator named {name}"))
        })?;
        *out = h as HcclComm;
        Ok(())
    })
}

/// A static description of a result code.
#[no_mangle]
pub extern "C" fn HcclGetErrorString(code: HcclResultRaw) -> *const c_char {
    let s: &'static [u8] = match code {
        0 => b"success\0",
        1 => b"parameter error\0",
        2 => b"empty pointer\0",
        3 => b"memory error\0",
        4 => b"internal error\0",
        5 => b"not supported\0",
        6 => b"resource not found\0",
        7 => b"resource unavailable\0",
        8 => b"system call error\0",
        9 => b"timeout\0",
        10 => b"open file failure\0",
        11 => b"tcp connect failure\0",
        12 => b"roce connect failure\0",
        13 => b"tcp transfer failure\0",
        14 => b"roce transfer failure\0",
        15 => b"runtime error\0",
        16 => b"driver error\0",
        17 => b"profiling error\0",
        18 => b"cce error\0",
        19 => b"network error\0",
        20 => b"try again\0",
        21 => b"error on a remote rank\0",
        22 => b"communicator suspending\0",
        23 => b"operation retry failed\0",
        24 => b"out of memory\0",
        1041 => b"error in communicator status\0",
        _ => b"unknown error code\0",
    };
    s.as_ptr() as *const c_char
}

/// Sets a process-wide option (only `HCCL_DETERMINISTIC`: 0 off, 1 on, 2 strict) for
/// communicators created afterwards.
#[no_mangle]
pub extern "C" fn HcclSetConfig(config: HcclConfigRaw, configValue: HcclConfigValue) -> HcclResult {
    call("HcclSetConfig", || {
        // SAFETY: the union has a single i32 member.
        let val = unsafe { configValue.value };
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
    call("HcclGetConfig", || {
        let out = v::non_null_mut(configValue, "configValue")?;
        match config {
            0 => {
                let d = DETERMINISTIC.load(Ordering::Relaxed);
                let val = if d >= 0 {
                    d
                } else {
                    match EnvConfig::global()?.deterministic {
                        crate::base::env::Deterministic::Off => 0,
                        crate::base::env::Deterministic::On => 1,
                        crate::base::env::Deterministic::Strict => 2,
                    }
                };
                (*out).value = val;
                Ok(())
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
    10
}

/// The first error of an operation that failed on `comm` (HCCL_SUCCESS if none).
#[no_mangle]
pub unsafe extern "C" fn HcclGetCommAsyncError(
    comm: HcclComm,
    asyncError: *mut HcclResult,
) -> HcclResult {
    call("HcclGetCommAsyncError", || {
        let out = v::non_null_mut(asyncError, "asyncError")?;
        let c = v::comm(comm)?;
        *out = c
            .async_error()
            .map_or(HcclResult::HCCL_SUCCESS, |e| result_of(e.kind));
        Ok(())
    })
}

/// Suspending a communicator needs the vendor's fault-recovery support.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSuspend(comm: HcclComm) -> HcclResult {
    call("HcclCommSuspend", || {
        v::comm(comm)?;
        Err(not_supported(
            "HcclCommSuspend",
            "communicator suspension needs NPU fault recovery",
        ))
    })
}

/// Resuming a communicator needs the vendor's fault-recovery support.
#[no_mangle]
pub unsafe extern "C" fn HcclCommResume(comm: HcclComm) -> HcclResult {
    call("HcclCommResume", || {
        v::comm(comm)?;
        Err(not_supported(
            "HcclCommResume",
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
    call("HcclCommGetStatus", || {
        let out = v::non_null_mut(status, "status")?;
        let name = CStr::from_ptr(v::non_null(commId, "commId")?).to_string_lossy();
        let h = registry::find_by_name(&name).ok_or_else(|| {
            Error::new(ErrorKind::NotFound, format!("no communicator named {name}"))
        })?;
        let c = registry::get(h)?;
        *out = if c.async_error().is_some() {
            HcclCommStatus::HCCL_COMM_STATUS_INVALID
        } else {
            HcclCommStatus::HCCL_COMM_STATUS_READY
        };
        Ok(())
    })
}

/// State callbacks belong to the vendor's suspend/resume machinery.
#[no_mangle]
pub unsafe extern "C" fn HcclCommRegCommStateCallback(
    regName: *const c_char,
    cb: HcclCommStateCallback,
    args: *mut c_void,
) -> HcclResult {
    let _ = (regName, cb, args);
    call("HcclCommRegCommStateCallback", || {
        Err(not_supported(
            "HcclCommRegCommStateCallback",
            "communicator state callbacks need NPU fault recovery",
        ))
    })
}

/// Opens a group: operations issued until the matching `HcclGroupEnd` launch together.
#[no_mangle]
pub extern "C" fn HcclGroupStart() -> HcclResult {
    call("HcclGroupStart", || {
        group::start();
        Ok(())
    })
}

/// Closes a group; the outermost end launches the recorded operations.
#[no_mangle]
pub extern "C" fn HcclGroupEnd() -> HcclResult {
    call("HcclGroupEnd", group::end)
}

/// Whether the calling thread is inside a group.
#[no_mangle]
pub unsafe extern "C" fn HcclGroupStatusGet(isGroupEnabled: *mut bool) -> HcclResult {
    call("HcclGroupStatusGet", || {
        *v::non_null_mut(isGroupEnabled, "isGroupEnabled")? = group::active();
        Ok(())
    })
}

fn npu_only(api: &'static str, comm: HcclComm) -> HcclResult {
    call(api, || {
        v::comm(comm)?;
        Err(not_supported(
            api,
            "device virtual memory management needs NPU hardware",
        ))
    })
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
    let _ = (baseVirPtr, size, alignment, flags);
    npu_only("HcclCommSetMemoryRange", comm)
}

/// Needs NPU virtual memory management.
#[no_mangle]
pub unsafe extern "C" fn HcclCommUnsetMemoryRange(
    comm: HcclComm,
    baseVirPtr: *mut c_void,
) -> HcclResult {
    let _ = baseVirPtr;
    npu_only("HcclCommUnsetMemoryRange", comm)
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
    let _ = (virPtr, size, offset, handle, flags);
    npu_only("HcclCommActivateCommMemory", comm)
}

/// Needs NPU virtual memory management.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDeactivateCommMemory(
    comm: HcclComm,
    virPtr: *mut c_void,
) -> HcclResult {
    let _ = virPtr;
    npu_only("HcclCommDeactivateCommMemory", comm)
}

/// Switching to backup device NICs needs NPU NICs.
#[no_mangle]
pub unsafe extern "C" fn HcclCommWorkingDevNicSet(
    comm: HcclComm,
    ranks: *mut u32,
    useBackup: *mut bool,
    nRanks: u32,
) -> HcclResult {
    let _ = (ranks, useBackup, nRanks);
    call("HcclCommWorkingDevNicSet", || {
        v::comm(comm)?;
        Err(not_supported(
            "HcclCommWorkingDevNicSet",
            "device NIC switching needs NPU NICs",
        ))
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
    let _ = (addr, size, win, flag);
    npu_only("HcclCommSymWinRegister", comm)
}

/// Symmetric windows need NPU memory mapped across devices.
#[no_mangle]
pub unsafe extern "C" fn HcclCommSymWinDeregister(win: HcclCommSymWindow) -> HcclResult {
    let _ = win;
    call("HcclCommSymWinDeregister", || {
        Err(not_supported(
            "HcclCommSymWinDeregister",
            "symmetric windows need NPU hardware",
        ))
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
    let _ = (ptr, size, win, offset);
    npu_only("HcclCommSymWinGet", comm)
}

/// Device-side configuration queries need NPU hardware.
#[no_mangle]
pub unsafe extern "C" fn HcclConfigGetInfo(
    comm: HcclComm,
    cfgType: c_int,
    infoLen: u32,
    info: *mut c_void,
) -> HcclResult {
    let _ = (cfgType, infoLen, info);
    call("HcclConfigGetInfo", || {
        v::comm(comm)?;
        Err(not_supported(
            "HcclConfigGetInfo",
            "device configuration queries need NPU hardware",
        ))
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
    let _ = (addr, size, handle, flag);
    npu_only("HcclCommRegister", comm)
}

/// Registering memory windows needs NPU memory.
#[no_mangle]
pub unsafe extern "C" fn HcclCommDeregister(comm: HcclComm, handle: *mut c_void) -> HcclResult {
    let _ = handle;
    npu_only("HcclCommDeregister", comm)
}

/// Exchanging memory windows needs NPU memory.
#[no_mangle]
pub unsafe extern "C" fn HcclCommExchangeMem(
    comm: HcclComm,
    windowHandle: *mut c_void,
    peerRanks: *mut u32,
    peerRankNum: u32,
) -> HcclResult {
    let _ = (windowHandle, peerRanks, peerRankNum);
    npu_only("HcclCommExchangeMem", comm)
}

//! Process-wide runtime state: lifecycle, thread binding, and the stream/event/context registries.
//!
//! Locks are never held while waiting for stream work (a stream task may call back into the API),
//! and a device slot lock is only ever taken before, never after, a registry lock.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::codes::*;
use crate::device::{parse_device_count, DeviceSlot, DEVICE_COUNT_ENV};
use crate::error::{fail, AclResult};
use crate::event::Event;
use crate::handle::new_handle;
use crate::report::ReportHub;
use crate::stream::Stream;

enum Phase {
    Never,
    Running(Arc<Runtime>),
    Finalized,
}

static PHASE: Mutex<Phase> = Mutex::new(Phase::Never);
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The calling thread's current device and context.
#[derive(Clone, Copy)]
struct Binding {
    generation: u64,
    device: i32,
    epoch: u64,
    context: usize,
}

thread_local! {
    static BINDING: Cell<Option<Binding>> = const { Cell::new(None) };
}

struct ContextInfo {
    device: i32,
    is_default: bool,
}

/// An initialised runtime (one per `aclInit` .. `aclFinalize`).
pub struct Runtime {
    generation: u64,
    /// Number of logical devices.
    pub device_count: u32,
    devices: Vec<Mutex<DeviceSlot>>,
    streams: Mutex<HashMap<usize, Arc<Stream>>>,
    events: Mutex<HashMap<usize, Arc<Event>>>,
    contexts: Mutex<HashMap<usize, ContextInfo>>,
    /// Callback subscriptions.
    pub reports: ReportHub,
}

/// `aclInit`: reads the device count and starts a runtime.
pub fn init() -> AclResult {
    let mut phase = PHASE.lock();
    if matches!(*phase, Phase::Running(_)) {
        return Err(fail(
            ACL_ERROR_REPEAT_INITIALIZE,
            "runtime is already initialised",
        ));
    }
    let count = parse_device_count(std::env::var(DEVICE_COUNT_ENV).ok().as_deref())
        .map_err(|m| fail(ACL_ERROR_INVALID_PARAM, m))?;
    let rt = Runtime {
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        device_count: count,
        devices: (0..count)
            .map(|_| Mutex::new(DeviceSlot::default()))
            .collect(),
        streams: Mutex::default(),
        events: Mutex::default(),
        contexts: Mutex::default(),
        reports: ReportHub::default(),
    };
    log::info!("runtime initialised with {count} logical devices");
    *phase = Phase::Running(Arc::new(rt));
    Ok(())
}

/// `aclFinalize`: tears down every device (draining and joining all stream workers).
pub fn finalize() -> AclResult {
    let rt = {
        let mut phase = PHASE.lock();
        match std::mem::replace(&mut *phase, Phase::Finalized) {
            Phase::Running(rt) => rt,
            Phase::Finalized => {
                return Err(fail(
                    ACL_ERROR_REPEAT_FINALIZE,
                    "runtime is already finalized",
                ))
            }
            Phase::Never => {
                *phase = Phase::Never;
                return Err(fail(
                    ACL_ERROR_REPEAT_FINALIZE,
                    "runtime was never initialised",
                ));
            }
        }
    };
    rt.teardown();
    BINDING.with(|b| b.set(None));
    Ok(())
}

/// The running runtime, or `ACL_ERROR_UNINITIALIZE`.
pub fn get() -> AclResult<Arc<Runtime>> {
    match &*PHASE.lock() {
        Phase::Running(rt) => Ok(Arc::clone(rt)),
        _ => Err(fail(
            ACL_ERROR_UNINITIALIZE,
            "runtime is not initialised: call aclInit first",
        )),
    }
}

impl Runtime {
    fn slot(&self, device: i32) -> AclResult<&Mutex<DeviceSlot>> {
        usize::try_from(device)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or_else(|| {
                fail(
                    ACL_ERROR_INVALID_DEVICE,
                    format!(
                        "device id {device} is out of range 0..{}",
                        self.device_count
                    ),
                )
            })
    }

    fn bind(&self, device: i32, epoch: u64, context: usize) {
        let b = Binding {
            generation: self.generation,
            device,
            epoch,
            context,
        };
        BINDING.with(|c| c.set(Some(b)));
    }

    /// The calling thread's binding if it is still valid (same runtime, device not torn down).
    fn binding(&self) -> Option<Binding> {
        let b = BINDING.with(|c| c.get())?;
        let live = b.generation == self.generation
            && self
                .devices
                .get(b.device as usize)
                .is_some_and(|s| s.lock().epoch == b.epoch);
        live.then_some(b)
    }

    /// The calling thread's current device.
    pub fn current_device(&self) -> Option<i32> {
        self.binding().map(|b| b.device)
    }

    /// The calling thread's current device, or `ACL_ERROR_INVALID_PARAM`.
    pub fn require_device(&self) -> AclResult<i32> {
        self.current_device().ok_or_else(|| {
            fail(
                ACL_ERROR_INVALID_PARAM,
                "the calling thread has no current device: call aclrtSetDevice first",
            )
        })
    }

    /// `aclrtSetDevice`: opens a reference on the device and binds the calling thread to it.
    pub fn set_device(&self, device: i32) -> AclResult {
        let mut slot = self.slot(device)?.lock();
        slot.refcount += 1;
        let ctx = match slot.default_context {
            Some(c) => c,
            None => {
                let c = new_handle();
                self.contexts.lock().insert(
                    c,
                    ContextInfo {
                        device,
                        is_default: true,
                    },
                );
                slot.default_context = Some(c);
                c
            }
        };
        self.bind(device, slot.epoch, ctx);
        Ok(())
    }

    /// `aclrtResetDevice`: releases one reference; the last one tears the device down.
    pub fn reset_device(&self, device: i32) -> AclResult {
        self.slot(device)?;
        if self.binding().is_some_and(|b| b.device == device) {
            BINDING.with(|c| c.set(None));
        }
        self.release_device(device);
        Ok(())
    }

    fn release_device(&self, device: i32) {
        let Ok(slot) = self.slot(device) else { return };
        let mut slot = slot.lock();
        if slot.refcount == 0 {
            log::debug!("device {device} reset without being set; nothing to release");
            return;
        }
        slot.refcount -= 1;
        if slot.refcount > 0 {
            return;
        }
        let doomed = self.take_device_resources(device, &mut slot);
        drop(slot);
        shutdown_all(doomed);
    }

    /// Detaches every stream and the default context of `device` (caller holds its slot lock).
    fn take_device_resources(&self, device: i32, slot: &mut DeviceSlot) -> Vec<Arc<Stream>> {
        slot.epoch += 1;
        slot.refcount = 0;
        if let Some(c) = slot.default_context.take() {
            self.contexts.lock().remove(&c);
        }
        let mut doomed: Vec<Arc<Stream>> = slot.default_stream.take().into_iter().collect();
        self.streams.lock().retain(|_, s| {
            if s.device == device {
                doomed.push(Arc::clone(s));
                false
            } else {
                true
            }
        });
        doomed
    }

    fn teardown(&self) {
        self.reports.shutdown();
        let mut doomed = Vec::new();
        for (i, slot) in self.devices.iter().enumerate() {
            let mut slot = slot.lock();
            doomed.extend(self.take_device_resources(i as i32, &mut slot));
        }
        // Streams whose device slot no longer matches (none expected) are drained as well.
        doomed.extend(self.streams.lock().drain().map(|(_, s)| s));
        self.events.lock().clear();
        self.contexts.lock().clear();
        shutdown_all(doomed);
    }

    /// `aclrtCreateContext`: a new context on `device`, made current for the calling thread.
    pub fn create_context(&self, device: i32) -> AclResult<usize> {
        let mut slot = self.slot(device)?.lock();
        slot.refcount += 1;
        let c = new_handle();
        self.contexts.lock().insert(
            c,
            ContextInfo {
                device,
                is_default: false,
            },
        );
        self.bind(device, slot.epoch, c);
        Ok(c)
    }

    /// `aclrtDestroyContext`.
    pub fn destroy_context(&self, ctx: usize) -> AclResult {
        let device = {
            let mut contexts = self.contexts.lock();
            match contexts.get(&ctx) {
                None => return Err(unknown("context", ctx)),
                Some(c) if c.is_default => {
                    return Err(fail(
                        ACL_ERROR_INVALID_PARAM,
                        "the default context of a device is released by aclrtResetDevice",
                    ))
                }
                Some(c) => {
                    let d = c.device;
                    contexts.remove(&ctx);
                    d
                }
            }
        };
        if self.binding().is_some_and(|b| b.context == ctx) {
            BINDING.with(|c| c.set(None));
        }
        self.release_device(device);
        Ok(())
    }

    /// `aclrtSetCurrentContext`.
    pub fn set_current_context(&self, ctx: usize) -> AclResult {
        let device = self
            .contexts
            .lock()
            .get(&ctx)
            .map(|c| c.device)
            .ok_or_else(|| unknown("context", ctx))?;
        let epoch = self.slot(device)?.lock().epoch;
        self.bind(device, epoch, ctx);
        Ok(())
    }

    /// `aclrtGetCurrentContext`.
    pub fn current_context(&self) -> AclResult<usize> {
        self.binding()
            .map(|b| b.context)
            .filter(|c| self.contexts.lock().contains_key(c))
            .ok_or_else(|| {
                fail(
                    ACL_ERROR_INVALID_PARAM,
                    "the calling thread has no current context",
                )
            })
    }

    /// `aclrtCreateStream`: a new stream on the current device.
    pub fn create_stream(&self) -> AclResult<usize> {
        let device = self.require_device()?;
        let h = new_handle();
        let s = Stream::spawn(h, device)?;
        self.streams.lock().insert(h, s);
        Ok(h)
    }

    /// `aclrtDestroyStream`: drains pending work, then joins the worker.
    pub fn destroy_stream(&self, h: usize) -> AclResult {
        if h == 0 {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                "the default stream (NULL) cannot be destroyed",
            ));
        }
        let s = self
            .streams
            .lock()
            .remove(&h)
            .ok_or_else(|| unknown("stream", h))?;
        s.shutdown();
        Ok(())
    }

    /// Resolves a stream handle; 0 (NULL) is the current device's default stream.
    pub fn stream(&self, h: usize) -> AclResult<Arc<Stream>> {
        if h != 0 {
            return self
                .streams
                .lock()
                .get(&h)
                .cloned()
                .ok_or_else(|| unknown("stream", h));
        }
        let device = self.require_device()?;
        let mut slot = self.slot(device)?.lock();
        if let Some(s) = &slot.default_stream {
            return Ok(Arc::clone(s));
        }
        let s = Stream::spawn(new_handle(), device)?;
        slot.default_stream = Some(Arc::clone(&s));
        Ok(s)
    }

    /// True if `h` is a live stream created by `aclrtCreateStream`.
    pub fn stream_is_live(&self, h: usize) -> bool {
        self.streams.lock().contains_key(&h)
    }

    /// All streams of `device`, default stream first.
    pub fn device_streams(&self, device: i32) -> AclResult<Vec<Arc<Stream>>> {
        let mut all: Vec<Arc<Stream>> = self
            .slot(device)?
            .lock()
            .default_stream
            .iter()
            .cloned()
            .collect();
        all.extend(
            self.streams
                .lock()
                .values()
                .filter(|s| s.device == device)
                .cloned(),
        );
        Ok(all)
    }

    /// `aclrtCreateEvent`.
    pub fn create_event(&self) -> usize {
        let h = new_handle();
        self.events.lock().insert(h, Event::new(h));
        h
    }

    /// `aclrtDestroyEvent`. Work already queued that refers to the event still completes.
    pub fn destroy_event(&self, h: usize) -> AclResult {
        self.events
            .lock()
            .remove(&h)
            .map(|_| ())
            .ok_or_else(|| unknown("event", h))
    }

    /// Resolves an event handle.
    pub fn event(&self, h: usize) -> AclResult<Arc<Event>> {
        self.events
            .lock()
            .get(&h)
            .cloned()
            .ok_or_else(|| unknown("event", h))
    }
}

fn unknown(what: &str, h: usize) -> crate::error::AclErr {
    if h == 0 {
        fail(ACL_ERROR_INVALID_PARAM, format!("{what} handle is NULL"))
    } else {
        fail(
            ACL_ERROR_INVALID_RESOURCE_HANDLE,
            format!("{what} handle {h:#x} is unknown or destroyed"),
        )
    }
}

fn shutdown_all(streams: Vec<Arc<Stream>>) {
    for s in streams {
        s.shutdown();
    }
}

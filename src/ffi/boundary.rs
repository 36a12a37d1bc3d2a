//! The edge between C and Rust. Every C entry point's body is one `entry!` invocation, which
//! gives it, uniformly:
//!
//! - its name, taken from the enclosing function (so it is written once, in the signature);
//! - the communicator check: with `comm(handle => c)` the handle is looked up before anything
//!   else (NULL → `HCCL_E_PTR`, unknown or destroyed → `HCCL_E_PARA`) and the body gets `c`,
//!   pinned: counted inside the communicator for the call, so that no destroy frees it
//!   meanwhile (`unpinned(handle => c)`, for the destroy itself, only references it);
//! - the `HCCL_ENTRY_LOG_ENABLE` line, naming the API, its communicator and every argument;
//! - the panic boundary (a panic becomes `HCCL_E_INTERNAL`; no unwind ever reaches C);
//! - the result mapping (`ErrorKind` → `HcclResult`, both from the one result-code table) and
//!   one error line naming the API, the communicator and its rank.
//!
//! The remaining argument checks (enums, ranks, sizes, strings) are the functions of
//! [`super::validate`], each bounded by [`crate::base::limits`].

use std::fmt::{self, Write as _};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use super::types::{HcclComm, HcclResult};
use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::logging::ENTRY_LOG_TARGET;
use crate::comm::Communicator;

/// The body of a C entry point.
///
/// ```text
/// entry!(comm(comm => c), sendBuf, count, stream; { ...; dispatch(c, args, stream as usize) })
/// entry!(nRanks, rootInfo, rank, comm; { ... })         // no communicator to check
/// entry!(value FALLBACK; code; { ... })                 // returns a plain value, FALLBACK on panic
/// ```
/// The listed arguments are logged (with `{:?}`) when `HCCL_ENTRY_LOG_ENABLE=1`; list them all.
/// The body returns `Result<()>` (`T` for the `value` form).
macro_rules! entry {
    (comm($handle:ident => $c:ident) $(, $arg:ident)* ; $body:block) => {
        $crate::ffi::boundary::enter_comm(
            $crate::ffi::boundary::api_name!(),
            $handle,
            $crate::ffi::validate::comm,
            move |_out: &mut ::std::string::String| {
                $( $crate::ffi::boundary::push_arg(_out, stringify!($arg), &$arg); )*
            },
            |$c: &$crate::comm::registry::Pinned| -> $crate::base::error::Result<()> {
                $body
            },
        )
    };
    (unpinned($handle:ident => $c:ident) $(, $arg:ident)* ; $body:block) => {
        $crate::ffi::boundary::enter_comm(
            $crate::ffi::boundary::api_name!(),
            $handle,
            $crate::ffi::validate::comm_unpinned,
            move |_out: &mut ::std::string::String| {
                $( $crate::ffi::boundary::push_arg(_out, stringify!($arg), &$arg); )*
            },
            |$c: &::std::sync::Arc<$crate::comm::Communicator>| -> $crate::base::error::Result<()> {
                $body
            },
        )
    };
    (value $fallback:expr; $($arg:ident),* ; $body:block) => {
        $crate::ffi::boundary::enter_value(
            $crate::ffi::boundary::api_name!(),
            move |_out: &mut ::std::string::String| {
                $( $crate::ffi::boundary::push_arg(_out, stringify!($arg), &$arg); )*
            },
            $fallback,
            || $body,
        )
    };
    ($($arg:ident),* ; $body:block) => {
        $crate::ffi::boundary::enter(
            $crate::ffi::boundary::api_name!(),
            move |_out: &mut ::std::string::String| {
                $( $crate::ffi::boundary::push_arg(_out, stringify!($arg), &$arg); )*
            },
            || -> $crate::base::error::Result<()> { $body },
        )
    };
}

/// The name of the function this macro is expanded in (closures included), e.g. `HcclAllReduce`.
/// Worked out from the type path once per expansion site: every call pays one atomic load, not
/// a string search (which cost about a fifth of a small collective's instructions).
macro_rules! api_name {
    () => {{
        fn site() {}
        static NAME: ::std::sync::OnceLock<&'static str> = ::std::sync::OnceLock::new();
        *NAME.get_or_init(|| {
            $crate::ffi::boundary::api_from_path(::std::any::type_name_of_val(&site))
        })
    }};
}

/// The operation name of the enclosing entry point: its name without the `Hccl` prefix
/// (`HcclAllReduce` → `AllReduce`).
macro_rules! op_name {
    () => {{
        let api: &'static str = $crate::ffi::boundary::api_name!();
        api.strip_prefix("Hccl").unwrap_or(api)
    }};
}

pub(crate) use {api_name, entry, op_name};

/// The function name in the type path of an item declared inside it:
/// `hccl::ffi::coll_api::HcclAllReduce::{{closure}}::site` → `HcclAllReduce`.
pub fn api_from_path(path: &'static str) -> &'static str {
    let mut p = path.strip_suffix("::site").unwrap_or(path);
    while let Some(outer) = p.strip_suffix("::{{closure}}") {
        p = outer;
    }
    p.rsplit("::").next().unwrap_or(p)
}

/// Appends ` name=value` to an entry line.
pub fn push_arg(out: &mut String, name: &str, value: &dyn fmt::Debug) {
    let _ = write!(out, " {name}={value:?}");
}

/// Whether `HCCL_ENTRY_LOG_ENABLE` asks for a log line at every API entry (read once).
#[inline]
pub fn entry_log() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| EnvConfig::global().map(|c| c.entry_log).unwrap_or(false))
}

/// What a line of an entry point names besides the API: ` comm <name> rank <r>/<n>` for a
/// communicator's entry points. Rendered only when a line is written: the steady-state path of
/// a collective must not allocate.
enum Context<'a> {
    None,
    Comm(&'a Communicator),
    Handle(HcclComm),
}

impl fmt::Display for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Context::None => Ok(()),
            Context::Comm(c) => write!(f, " comm {} rank {}/{}", c.name(), c.rank(), c.size()),
            Context::Handle(h) => write!(f, " comm {h:?}"),
        }
    }
}

/// Every call checks the switch inline; only a written line leaves the hot path.
#[inline(always)]
fn log_entry(api: &str, context: &Context<'_>, args: impl FnOnce(&mut String)) {
    if entry_log() {
        write_entry(api, context, args);
    }
}

#[cold]
#[inline(never)]
fn write_entry(api: &str, context: &Context<'_>, args: impl FnOnce(&mut String)) {
    let mut line = format!("entry {api}{context}");
    args(&mut line);
    log::info!(target: ENTRY_LOG_TARGET, "{line}");
}

/// Runs a body, mapping its outcome and any panic to a result code; logs failures once.
fn guarded(api: &str, context: &Context<'_>, body: impl FnOnce() -> Result<()>) -> HcclResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => HcclResult::HCCL_SUCCESS,
        Ok(Err(e)) => {
            log::error!("{api}{context}: {}", e.msg);
            e.kind.result()
        }
        Err(p) => {
            log::error!(
                "{api}{context}: internal error (panic caught at the API boundary): {}",
                panic_text(p.as_ref())
            );
            HcclResult::HCCL_E_INTERNAL
        }
    }
}

/// Implementation of `entry!` without a communicator.
pub fn enter(
    api: &'static str,
    args: impl FnOnce(&mut String),
    body: impl FnOnce() -> Result<()>,
) -> HcclResult {
    crate::base::logging::init_from_env();
    log_entry(api, &Context::None, args);
    guarded(api, &Context::None, body)
}

/// Implementation of `entry!` with `comm(handle => c)` (`lookup` pins the communicator) and
/// `unpinned(handle => c)` (`lookup` only references it, so that the body may destroy it:
/// `HcclCommDestroy`, which is refused while any thread is inside).
pub fn enter_comm<C: AsRef<Communicator>>(
    api: &'static str,
    handle: HcclComm,
    lookup: fn(HcclComm) -> Result<C>,
    args: impl FnOnce(&mut String),
    body: impl FnOnce(&C) -> Result<()>,
) -> HcclResult {
    crate::base::logging::init_from_env();
    // The lookup may take a lock: inside the boundary like everything else. What it returns
    // keeps the communicator alive for the body and the lines written after it; what outlives
    // the call (a grouped or queued operation) clones its `Arc`.
    let found = catch_unwind(AssertUnwindSafe(|| lookup(handle))).unwrap_or_else(|_| {
        Err(Error::new(
            ErrorKind::Internal,
            "communicator lookup panicked",
        ))
    });
    match found {
        Ok(c) => {
            let context = Context::Comm(c.as_ref());
            log_entry(api, &context, args);
            guarded(api, &context, || body(&c))
        }
        Err(e) => {
            log_entry(api, &Context::Handle(handle), args);
            guarded(api, &Context::None, || Err(e))
        }
    }
}

/// Implementation of `entry!`'s `value` form.
pub fn enter_value<T>(
    api: &'static str,
    args: impl FnOnce(&mut String),
    fallback: T,
    body: impl FnOnce() -> T,
) -> T {
    crate::base::logging::init_from_env();
    log_entry(api, &Context::None, args);
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|p| {
        log::error!(
            "{api}: internal error (panic caught at the API boundary): {}",
            panic_text(p.as_ref())
        );
        fallback
    })
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// An error for an API that needs NPU hardware or a feature this library does not offer.
pub fn not_supported(api: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::NotSupport,
        format!("{api} is not supported: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fails_with(kind: ErrorKind) -> HcclResult {
        let k = kind;
        entry!(k; { Err(Error::new(k, "deliberate")) })
    }

    fn panics(index: usize) -> HcclResult {
        entry!(index; {
            let v: Vec<u8> = Vec::new();
            // An out-of-bounds index panics inside the boundary.
            let _ = v[std::hint::black_box(index)];
            Ok(())
        })
    }

    #[test]
    fn panics_become_internal_errors() {
        assert_eq!(panics(3), HcclResult::HCCL_E_INTERNAL);
        let r = enter("test_api", |_| {}, || panic!("deliberate"));
        assert_eq!(r, HcclResult::HCCL_E_INTERNAL);
        let v = enter_value("test_api", |_| {}, 7u32, || panic!("deliberate"));
        assert_eq!(v, 7);
    }

    #[test]
    fn errors_map_to_their_codes() {
        for k in ErrorKind::ALL {
            assert_eq!(fails_with(k) as u32, k.code(), "{k:?}");
        }
        assert_eq!(
            enter("test_api", |_| {}, || Ok(())),
            HcclResult::HCCL_SUCCESS
        );
    }

    #[test]
    fn a_bad_handle_is_refused_before_the_body_runs() {
        let ran = std::cell::Cell::new(false);
        let null: HcclComm = std::ptr::null_mut();
        let r = enter_comm(
            "test_api",
            null,
            crate::ffi::validate::comm,
            |_| {},
            |_| {
                ran.set(true);
                Ok(())
            },
        );
        assert_eq!((r, ran.get()), (HcclResult::HCCL_E_PTR, false));
        let forged = 0x5a5a_0000usize as HcclComm;
        let r = enter_comm(
            "test_api",
            forged,
            crate::ffi::validate::comm,
            |_| {},
            |_| {
                ran.set(true);
                Ok(())
            },
        );
        assert_eq!((r, ran.get()), (HcclResult::HCCL_E_PARA, false));
    }

    #[allow(non_snake_case)]
    fn HcclSomething() -> (&'static str, &'static str, &'static str) {
        let in_closure = || api_name!();
        let inner = in_closure();
        (api_name!(), inner, op_name!())
    }

    #[test]
    fn names_come_from_the_enclosing_function() {
        assert_eq!(
            HcclSomething(),
            ("HcclSomething", "HcclSomething", "Something")
        );
        assert_eq!(
            api_from_path("hccl::ffi::coll_api::HcclAllReduce::{{closure}}::{{closure}}::site"),
            "HcclAllReduce"
        );
    }

    #[test]
    fn entry_arguments_render_with_their_names() {
        let mut s = String::new();
        let (count, buf) = (5u64, std::ptr::null::<u8>());
        push_arg(&mut s, "count", &count);
        push_arg(&mut s, "buf", &buf);
        assert_eq!(s, " count=5 buf=0x0");
    }
}

//! The link of a rank to itself: a receive copies (or reduces) straight from the send posted
//! before it, at once.

use std::collections::VecDeque;

use super::link::{Link, LinkInfo, Reach, Shared, Wake};
use super::tag::Tag;
use super::ReduceFn;
use crate::base::error::{Error, ErrorKind, Result};

/// Sends to this rank itself, waiting for the receives that take them.
#[derive(Debug, Default)]
pub struct LocalLink {
    sends: VecDeque<(usize, usize)>,
}

impl LocalLink {
    /// A link with nothing posted.
    pub fn new() -> LocalLink {
        LocalLink::default()
    }
}

impl Link for LocalLink {
    fn info(&self) -> LinkInfo {
        LinkInfo {
            name: "self",
            reach: Reach::Itself,
            single_copy: true,
        }
    }

    unsafe fn post_send(&mut self, ptr: *const u8, len: usize, _tag: Tag) -> Result<()> {
        self.sends.push_back((ptr as usize, len));
        Ok(())
    }

    unsafe fn post_recv(
        &mut self,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        _tag: Tag,
        _shared: &mut Shared,
    ) -> Result<()> {
        let Some((src, slen)) = self.sends.pop_front() else {
            return Err(Error::new(
                ErrorKind::Internal,
                "self-receive posted before the matching self-send",
            ));
        };
        if slen != len {
            return Err(Error::new(
                ErrorKind::Para,
                format!("self send/receive size mismatch: {slen} vs {len} bytes"),
            ));
        }
        if len > 0 {
            let src = src as *const u8;
            // SAFETY: the send's buffer is readable for `len` bytes (post_send's contract) and
            // the receive's writable (this function's); `copy` allows them to overlap.
            unsafe {
                match reduce {
                    None => std::ptr::copy(src, ptr, len),
                    Some(r) => r.apply(ptr, src, len),
                }
            }
        }
        Ok(())
    }

    /// Every self-send is taken by a receive posted in the same step, before the wait.
    fn progress(&mut self, _shared: &mut Shared) -> Result<bool> {
        if self.sends.is_empty() {
            return Ok(false);
        }
        self.sends.clear();
        Err(Error::new(
            ErrorKind::Internal,
            "self-send without a matching self-receive",
        ))
    }

    fn idle(&self) -> bool {
        self.sends.is_empty()
    }

    fn wake(&self) -> Wake {
        Wake::Doorbell
    }

    fn stray_tag(&self) -> Option<Tag> {
        None
    }

    fn abort(&mut self, _why: &Error) {
        self.sends.clear();
    }
}

//! Logical devices: how many there are, and the per-device state.

use std::sync::Arc;

use crate::stream::Stream;

/// Environment variable giving the number of logical devices (`1..=MAX_DEVICE_COUNT`, default
/// [`DEFAULT_DEVICE_COUNT`]). Read by `aclInit`; a malformed value makes `aclInit` fail with
/// `ACL_ERROR_INVALID_PARAM`.
pub const DEVICE_COUNT_ENV: &str = "ASCEND_HOST_DEVICE_COUNT";
/// Device count when [`DEVICE_COUNT_ENV`] is unset or empty.
pub const DEFAULT_DEVICE_COUNT: u32 = 8;
/// Largest accepted device count.
pub const MAX_DEVICE_COUNT: u32 = 1024;

/// Parses the value of [`DEVICE_COUNT_ENV`].
pub fn parse_device_count(value: Option<&str>) -> Result<u32, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_DEVICE_COUNT);
    };
    match v.parse::<u32>() {
        Ok(n) if (1..=MAX_DEVICE_COUNT).contains(&n) => Ok(n),
        _ => Err(format!(
            "{DEVICE_COUNT_ENV}={v:?} is not a device count in 1..={MAX_DEVICE_COUNT}"
        )),
    }
}

/// State of one logical device.
#[derive(Default)]
pub struct DeviceSlot {
    /// Open references: `aclrtSetDevice` calls and live user contexts not yet released.
    pub refcount: u32,
    /// Bumped whenever the device is torn down, invalidating thread bindings made before.
    pub epoch: u64,
    /// The stream NULL stands for, created on first use.
    pub default_stream: Option<Arc<Stream>>,
    /// The context `aclrtSetDevice` binds, created on first use.
    pub default_context: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_count_parsing() {
        assert_eq!(parse_device_count(None), Ok(8));
        assert_eq!(parse_device_count(Some("")), Ok(8));
        assert_eq!(parse_device_count(Some(" 4 ")), Ok(4));
        assert!(parse_device_count(Some("0")).is_err());
        assert!(parse_device_count(Some("-1")).is_err());
        assert!(parse_device_count(Some("four")).is_err());
        assert!(parse_device_count(Some("1025")).is_err());
    }
}

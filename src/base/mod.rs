//! Plain data shared by every layer: data types, errors, configuration from the environment,
//! logging, JSON, where ranks live (topology), copies that bypass the cache (stream) and copies
//! of a few bytes without a `memcpy` call (short_copy).

pub mod compress;
pub mod dtype;
pub mod env;
pub mod error;
pub mod limits;
pub mod logging;
pub mod short_copy;
pub mod stream;
pub mod strict_json;
pub mod topology;

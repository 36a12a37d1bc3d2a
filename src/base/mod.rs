//! Plain data shared by every layer: data types, errors, configuration from the environment,
//! logging, JSON, where ranks live (topology), and copies that bypass the cache (stream).

pub mod compress;
pub mod dtype;
pub mod env;
pub mod error;
pub mod limits;
pub mod logging;
pub mod stream;
pub mod strict_json;
pub mod topology;

//! Plain data shared by every layer: data types, errors, configuration from the environment,
//! logging, JSON, and where ranks live (topology).

pub mod compress;
pub mod dtype;
pub mod env;
pub mod error;
pub mod limits;
pub mod logging;
pub mod strict_json;
pub mod topology;

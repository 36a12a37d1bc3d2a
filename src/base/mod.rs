//! Plain data shared by every layer: data types, errors, configuration from the environment,
//! logging, JSON, where ranks live (topology), copies that bypass the cache (stream) and copies
//! of a few bytes without a `memcpy` call (short_copy), fences whose cost one side of a pairing
//! bears alone (fence), a mutex its one usual thread takes without them (biased_mutex) and the
//! length of a spin-wait hint (pause).

pub mod biased_mutex;
pub mod compress;
pub mod dtype;
pub mod env;
pub mod error;
pub mod fence;
pub mod limits;
pub mod logging;
pub mod pause;
pub mod short_copy;
pub mod stream;
pub mod strict_json;
pub mod topology;

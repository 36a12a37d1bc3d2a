//! The C entry points. Nothing below this layer sees a raw C argument: every function checks
//! its pointers, enums, ranks and sizes, runs inside the panic boundary, and maps errors to
//! `HcclResult`.

pub mod boundary;
pub mod coll_api;
pub mod comm_api;
pub mod config_read;
pub mod ext_api;
pub mod types;
pub mod validate;

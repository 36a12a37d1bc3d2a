//! One-time logger set-up from `ASCEND_GLOBAL_LOG_LEVEL` (0 debug, 1 info, 2 warning, 3 error,
//! 4 off; default 3), the variable the vendor runtime reads.

use std::sync::Once;

use log::LevelFilter;

/// Maps the vendor's numeric level to a filter; unknown values fall back to errors only.
pub fn level_from_env(value: Option<&str>) -> LevelFilter {
    match value.map(str::trim) {
        Some("0") => LevelFilter::Debug,
        Some("1") => LevelFilter::Info,
        Some("2") => LevelFilter::Warn,
        Some("4") => LevelFilter::Off,
        _ => LevelFilter::Error,
    }
}

/// Installs env_logger once. If the host program (or libhccl) already installed a logger, that
/// one is kept: `try_init` failing is expected then.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let level = level_from_env(std::env::var("ASCEND_GLOBAL_LOG_LEVEL").ok().as_deref());
        let _ = env_logger::Builder::new().filter_level(level).try_init();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(level_from_env(None), LevelFilter::Error);
        assert_eq!(level_from_env(Some("0")), LevelFilter::Debug);
        assert_eq!(level_from_env(Some("4")), LevelFilter::Off);
        assert_eq!(level_from_env(Some("x")), LevelFilter::Error);
    }
}

//! Humane durations for configs and the command line: `500ms`, `10s`, `2m`,
//! `1h`, `1m30s`, `1.5s`; a bare number is seconds (as in `etcdctl --ttl 10`).

use std::time::Duration;

use distlock_core::{Error, Result};

pub use distlock_core::raw::{format_duration, human_duration};

/// Parses a humane duration such as `500ms`, `10s`, `2m`, `1h30m`, `1.5s` or `10` (seconds).
///
/// The parser is [`distlock_core::raw::parse_duration`]; this wrapper
/// reports a bad duration as an `InvalidConfig` [`Error`] naming the input.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(distlock::parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(distlock::parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// assert_eq!(distlock::parse_duration("10").unwrap(), Duration::from_secs(10));
/// assert!(distlock::parse_duration("ten seconds").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    distlock_core::raw::parse_duration(text).map_err(Error::invalid_config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonsense_is_invalid_config_naming_the_input() {
        for bad in ["", "s", "10x", "-1s", "1.2.3s", "ms10", "NaN"] {
            let err = parse_duration(bad).unwrap_err();
            assert_eq!(err.kind(), distlock_core::ErrorKind::InvalidConfig, "{bad}");
            assert!(err.message().contains(&format!("{bad:?}")), "{err}");
        }
    }
}

//! Durations written as text (`250ms`, `2s`, `1m`), for URLs and config files.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// Parses a duration with a unit (`250ms`, `2s`, `1m`, `1h30m`; see
/// [`lock_core::raw::parse_duration`]).
///
/// Unlike the shared parser, a bare number is refused here: in a config file
/// a plain number means milliseconds (see [`text`]), so as text it would be
/// ambiguous.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("{text:?} has no unit; write e.g. 500ms, 2s or 1m"));
    }
    lock_core::raw::parse_duration(text)
}

/// Serde support: a duration is a string with a unit or a number of milliseconds.
pub(crate) mod text {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"500ms\" or \"2s\", or a number of milliseconds")
        }

        fn visit_u64<E: de::Error>(self, millis: u64) -> Result<Duration, E> {
            Ok(Duration::from_millis(millis))
        }

        fn visit_i64<E: de::Error>(self, millis: i64) -> Result<Duration, E> {
            u64::try_from(millis)
                .map(Duration::from_millis)
                .map_err(|_| E::custom("a duration cannot be negative"))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            parse(text).map_err(E::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_rejects_the_rest() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert!(parse("2").unwrap_err().contains("no unit"));
        assert!(parse("2 days").unwrap_err().contains("unknown unit"));
        assert!(parse("1.5").unwrap_err().contains("no unit"));
        assert!(parse("s").is_err());
    }
}

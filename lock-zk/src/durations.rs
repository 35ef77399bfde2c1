//! Durations written as text (`250ms`, `2s`, `1m`), for URLs and config files.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// Parses `<integer><unit>` with unit `ms`, `s`, `m` or `h`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit; write e.g. 500ms, 2s or 1m"))?;
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let millis = match unit {
        "ms" => Some(value),
        "s" => value.checked_mul(1_000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "{text:?} has unknown unit {unit:?}; use ms, s, m or h"
            ));
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
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
        assert!(parse("s").is_err());
    }
}

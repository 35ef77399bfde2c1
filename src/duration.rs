//! Humane durations for configs and the command line: `500ms`, `10s`, `2m`,
//! `1h`, `1m30s`, `1.5s`; a bare number is seconds (as in `etcdctl --ttl 10`).

use std::time::Duration;

use lock_core::{Error, Result};

/// Parses a humane duration such as `500ms`, `10s`, `2m`, `1h30m`, `1.5s` or `10` (seconds).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(distlock::parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(distlock::parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// assert_eq!(distlock::parse_duration("10").unwrap(), Duration::from_secs(10));
/// assert!(distlock::parse_duration("ten seconds").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = |why: &str| {
        Error::invalid_config(format!(
            "invalid duration {text:?}: {why}; use forms like 500ms, 10s, 2m, 1h30m or 1.5s"
        ))
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    if let Ok(secs) = s.parse::<f64>() {
        return seconds(secs).ok_or_else(|| bad("not a finite, non-negative number"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a number needs a unit (ms, s, m, h)"))?;
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let number: f64 = rest[..digits].parse().map_err(|_| bad("bad number"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match rest[..unit_len].trim() {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hours" => 3600.0,
            "d" | "days" => 86400.0,
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        total += seconds(number * scale).ok_or_else(|| bad("out of range"))?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && (0.0..1e15).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// Formats a duration the way [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}us", d.as_micros())
    } else if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format!("{}s", d.as_secs())
    }
}

/// Serde for `Option<Duration>` as a humane string (or a number of seconds).
pub(crate) mod serde_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Seconds(f64),
    }

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = match Option::<Raw>::deserialize(d)? {
            None => return Ok(None),
            Some(Raw::Text(text)) => text,
            Some(Raw::Seconds(secs)) => secs.to_string(),
        };
        super::parse_duration(&text)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(e.message()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humane_forms_parse() {
        for (text, want) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            ("0", Duration::ZERO),
            ("3", Duration::from_secs(3)),
            ("750us", Duration::from_micros(750)),
        ] {
            assert_eq!(parse_duration(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn nonsense_is_invalid_config_naming_the_input() {
        for bad in ["", "s", "10x", "-1s", "1.2.3s", "ms10", "NaN"] {
            let err = parse_duration(bad).unwrap_err();
            assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{bad}");
            assert!(err.message().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for d in [
            Duration::from_millis(1500),
            Duration::from_secs(3),
            Duration::from_micros(5),
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }
}

//! Humane durations, the one format of every distlock URL, config file,
//! environment variable and command-line flag: `500ms`, `10s`, `2m`,
//! `1h30m`, `1.5s`; a bare number is seconds (as in `etcdctl --ttl 10`).

use std::time::Duration;

const DURATION_FORMS: &str = "use forms like 500ms, 10s, 2m, 1h30m or 1.5s";

/// Parses a humane duration such as `500ms`, `10s`, `2m`, `1h30m`, `1.5s` or
/// `10` (a bare number is seconds).
///
/// Units: `ns`, `us`/`µs`, `ms`, `s`/`sec`/`secs`, `m`/`min`/`mins`,
/// `h`/`hr`/`hours`, `d`/`days`. Decimal fractions are exact (no floating
/// point). The error quotes the input and says what is wrong.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::raw::parse_duration;
/// assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
/// assert!(parse_duration("ten seconds").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {text:?}: {why}; {DURATION_FORMS}");
    // Spaces are ignored, so `0.75 s` as printed by [`human_duration`]
    // reads back.
    let compact: String = text.split_whitespace().collect();
    let s = compact.as_str();
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    if s.chars().all(is_number) {
        return nanos(s, NANOS_PER_SEC)
            .and_then(to_duration)
            .map_err(|why| bad(&why));
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !is_number(c))
            .ok_or_else(|| bad("a number needs a unit (ms, s, m, h)"))?;
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let number = &rest[..digits];
        rest = &rest[digits..];
        let unit_len = rest.find(is_number).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" | "sec" | "secs" => NANOS_PER_SEC,
            "m" | "min" | "mins" => 60 * NANOS_PER_SEC,
            "h" | "hr" | "hours" => 3_600 * NANOS_PER_SEC,
            "d" | "days" => 86_400 * NANOS_PER_SEC,
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        total = total
            .checked_add(nanos(number, scale).map_err(|why| bad(&why))?)
            .ok_or_else(|| bad("out of range"))?;
        rest = &rest[unit_len..];
    }
    to_duration(total).map_err(|why| bad(&why))
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// `number` (digits with at most one `.`) times `scale` nanoseconds, exactly
/// (fractions of a nanosecond are dropped).
fn nanos(number: &str, scale: u128) -> Result<u128, String> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!("bad number {number:?}"));
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| "out of range".to_owned())?
    };
    // Digits beyond 18 are far below a nanosecond for every unit.
    let frac = &frac[..frac.len().min(18)];
    let frac_nanos = if frac.is_empty() {
        0
    } else {
        let digits: u128 = frac.parse().map_err(|_| format!("bad number {number:?}"))?;
        digits * scale / 10u128.pow(frac.len() as u32)
    };
    whole
        .checked_mul(scale)
        .and_then(|n| n.checked_add(frac_nanos))
        .ok_or_else(|| "out of range".to_owned())
}

fn to_duration(nanos: u128) -> Result<Duration, String> {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| "out of range".to_owned())?;
    Ok(Duration::new(secs, (nanos % NANOS_PER_SEC) as u32))
}

/// `d` in whole milliseconds, rounded up so that a server never holds a
/// lease for less than the client thinks, and at least 1 (servers reject a
/// zero TTL).
pub fn lease_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Formats a duration the way [`parse_duration`] reads it back: whole
/// seconds as `3s`, whole milliseconds as `1500ms`, otherwise microseconds.
///
/// It is exact, for configs and serialized settings that are read back.
/// For a duration shown to a person, use [`human_duration`].
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

/// Formats a duration for a person: seconds with three significant digits
/// and the unit after a space, `0.75 s`, `27.8 s`, `2 s`, `120 s`.
///
/// One unit for every duration, so that a lease left on one backend reads
/// like one on another and two values compare at a glance. It rounds (a
/// lease of `748847us` shows as `0.749 s`), so it is for messages and
/// tables, not for values read back; [`parse_duration`] still accepts it.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::raw::human_duration;
/// assert_eq!(human_duration(Duration::from_millis(750)), "0.75 s");
/// assert_eq!(human_duration(Duration::from_millis(27_767)), "27.8 s");
/// assert_eq!(human_duration(Duration::from_secs(2)), "2 s");
/// ```
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if d.is_zero() {
        return "0 s".to_owned();
    }
    // Digits after the point for three significant ones; none from 100 s.
    let magnitude = secs.log10().floor() as i32;
    let decimals = usize::try_from((2 - magnitude).clamp(0, 9)).unwrap_or(0);
    let mut text = format!("{secs:.decimals$}");
    if text.contains('.') {
        text.truncate(text.trim_end_matches('0').trim_end_matches('.').len());
    }
    format!("{text} s")
}

/// Serde for a [`Duration`] written as a humane string (`"10s"`), the form
/// [`format_duration`] writes. A number, or text without a unit, is
/// seconds, as everywhere else. Use with `#[serde(with = "...")]`.
pub mod serde_humane {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Deserializer, Visitor};
    use serde::{Deserialize, Serializer};

    /// Writes `d` as a humane string.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    /// Reads a humane string or a number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(Humane)
    }

    struct Humane;

    impl Visitor<'_> for Humane {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"500ms\" or \"10s\", or a number of seconds")
        }

        fn visit_u64<E: de::Error>(self, secs: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(secs))
        }

        fn visit_i64<E: de::Error>(self, secs: i64) -> Result<Duration, E> {
            u64::try_from(secs)
                .map(Duration::from_secs)
                .map_err(|_| E::custom("a duration cannot be negative"))
        }

        fn visit_f64<E: de::Error>(self, secs: f64) -> Result<Duration, E> {
            Duration::try_from_secs_f64(secs)
                .map_err(|e| E::custom(format!("duration {secs}: {e}")))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            super::parse_duration(text).map_err(E::custom)
        }
    }

    /// The same for `Option<Duration>`; `None` is left out or null.
    pub mod optional {
        use super::*;

        /// Writes `Some(d)` as a humane string, `None` as none.
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        /// Reads an optional humane string or number of seconds.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            #[derive(Deserialize)]
            struct Wrapped(#[serde(with = "super")] Duration);
            Ok(Option::<Wrapped>::deserialize(d)?.map(|Wrapped(d)| d))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_millis_rounds_up_and_is_never_zero() {
        assert_eq!(lease_millis(Duration::ZERO), 1);
        assert_eq!(lease_millis(Duration::from_micros(1)), 1);
        assert_eq!(lease_millis(Duration::from_micros(1500)), 2);
        assert_eq!(lease_millis(Duration::from_secs(3)), 3000);
    }

    #[test]
    fn human_durations_are_seconds_with_three_significant_digits() {
        for (d, want) in [
            (Duration::ZERO, "0 s"),
            (Duration::from_millis(750), "0.75 s"),
            (Duration::from_micros(748_847), "0.749 s"),
            (Duration::from_millis(27_767), "27.8 s"),
            (Duration::from_secs(7), "7 s"),
            (Duration::from_secs(2), "2 s"),
            (Duration::from_millis(1500), "1.5 s"),
            (Duration::from_secs(120), "120 s"),
            (Duration::from_millis(99_960), "100 s"),
            (Duration::from_micros(250), "0.00025 s"),
        ] {
            assert_eq!(human_duration(d), want, "{d:?}");
            // It reads back, within its rounding.
            let back = parse_duration(&human_duration(d)).unwrap();
            assert!(back.abs_diff(d) <= d / 100, "{d:?} read back as {back:?}");
        }
    }

    #[test]
    fn humane_durations_parse() {
        for (text, want) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.1s", Duration::from_millis(100)),
            (".5s", Duration::from_millis(500)),
            ("0", Duration::ZERO),
            ("3", Duration::from_secs(3)),
            ("2.5", Duration::from_millis(2500)),
            (" 250ms ", Duration::from_millis(250)),
            ("0.75 s", Duration::from_millis(750)),
            ("3 hours", Duration::from_secs(10_800)),
            ("1 m 30 s", Duration::from_secs(90)),
            ("750us", Duration::from_micros(750)),
            ("7ns", Duration::from_nanos(7)),
            ("1d", Duration::from_secs(86_400)),
        ] {
            assert_eq!(parse_duration(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn bad_durations_quote_the_input_and_name_the_problem() {
        for (text, needle) in [
            ("", "empty"),
            ("s", "expected a number"),
            ("10x", "unknown unit"),
            ("-1s", "expected a number"),
            ("1.2.3s", "bad number"),
            ("ms10", "expected a number"),
            ("NaN", "expected a number"),
            ("3 weeks", "unknown unit"),
            ("10s5", "needs a unit"),
            ("99999999999999999999999d", "out of range"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(&format!("{text:?}")), "{text}: {err}");
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for (d, text) in [
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(3), "3s"),
            (Duration::from_micros(5), "5us"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Settings {
        #[serde(with = "serde_humane")]
        ttl: Duration,
        #[serde(with = "serde_humane::optional", default)]
        timeout: Option<Duration>,
    }

    #[test]
    fn serde_writes_text_and_reads_text_or_seconds() {
        let settings = Settings {
            ttl: Duration::from_millis(1500),
            timeout: None,
        };
        let json = serde_json::to_string(&settings).unwrap();
        assert_eq!(json, r#"{"ttl":"1500ms","timeout":null}"#);
        assert_eq!(serde_json::from_str::<Settings>(&json).unwrap(), settings);
        let read: Settings = serde_json::from_str(r#"{"ttl":10,"timeout":"2s"}"#).unwrap();
        assert_eq!(read.ttl, Duration::from_secs(10));
        assert_eq!(read.timeout, Some(Duration::from_secs(2)));
        let err = serde_json::from_str::<Settings>(r#"{"ttl":"soon"}"#).unwrap_err();
        assert!(err.to_string().contains("\"soon\""), "{err}");
    }
}

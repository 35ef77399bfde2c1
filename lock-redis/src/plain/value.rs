//! Reading back a plain-layout value: `<id>.<token>.<description>` when a
//! distlock client wrote it (see `scripts/plain.rs`), anything else when
//! another client did.

use std::time::{Duration, SystemTime};

use distlock_core::{FencingToken, HolderInfo};

/// The parts of a value distlock wrote.
#[derive(Debug, PartialEq, Eq)]
struct Ours<'a> {
    /// Server microseconds since the epoch when the key was set.
    token: u64,
    description: &'a str,
}

/// The token and description of `value`, if distlock wrote it.
fn parse(value: &str) -> Option<Ours<'_>> {
    let mut parts = value.splitn(3, '.');
    let (id, token, description) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !(hex && digits) {
        return None;
    }
    Some(Ours {
        token: token.parse().ok()?,
        description,
    })
}

/// The fencing token in a value distlock wrote.
pub(super) fn token_of(value: &str) -> Option<u64> {
    parse(value).map(|ours| ours.token)
}

/// What an operator can know of the holder of `key`, whose value is
/// `value` with `left_ms` of lease left (negative: no expiry). Another
/// client's holder shows token 0 and no description or grant time.
pub(super) fn holder_info(key: &str, value: &str, left_ms: i64) -> HolderInfo {
    let ours = parse(value);
    HolderInfo {
        key: key.to_owned(),
        token: FencingToken(ours.as_ref().map_or(0, |o| o.token)),
        description: ours.as_ref().map(|o| o.description.to_owned()),
        acquired_at: ours.map(|o| SystemTime::UNIX_EPOCH + Duration::from_micros(o.token)),
        lease_left: u64::try_from(left_ms).ok().map(Duration::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn our_values_give_back_token_description_and_grant_time() {
        let value = format!("{ID}.1716400000123456.host:42.with.dots");
        assert_eq!(token_of(&value), Some(1_716_400_000_123_456));
        let shown = holder_info("jobs", &value, 900);
        assert_eq!(shown.description.as_deref(), Some("host:42.with.dots"));
        assert_eq!(shown.lease_left, Some(Duration::from_millis(900)));
        assert_eq!(
            shown.acquired_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_micros(1_716_400_000_123_456))
        );
    }

    #[test]
    fn other_clients_values_show_no_token() {
        for theirs in [
            "3f2a9c0e1b7d4e5f8a6b2c1d0e9f8a7b",
            "c29tZSByYW5kb20gYnl0ZXM=",
            "1.2.3",
            &format!("{ID}.notanumber.x"),
            &format!("{ID}.123"),
        ] {
            assert_eq!(token_of(theirs), None, "{theirs}");
            let shown = holder_info("jobs", theirs, -1);
            assert_eq!(
                (shown.token, shown.description, shown.lease_left),
                (FencingToken(0), None, None)
            );
        }
    }
}

//! What the key of a semaphore or read-write lock entry holds: its access,
//! then its holder's description.
//!
//! A waiter decides whom it waits for from the entries ahead of it
//! ([`distlock_core::raw::blockers`]), so each value starts with what its
//! entry asks for: `permit <limit> <description>`, `read <description>` or
//! `write <description>` (`permit 3 build-7:4121`). Anything else is not an
//! entry this crate wrote, and counts as what excludes the most: a writer in
//! a read-write lock, one more holder in a semaphore.

use distlock_core::Access;
use distlock_core::raw::parse_permits;

/// The value of our entry: `access`, then `description`.
pub(crate) fn value(access: Access, description: &str) -> Vec<u8> {
    let head = match access {
        Access::Permit(limit) => format!("{} {limit}", access.as_str()),
        other => other.as_str().to_owned(),
    };
    format!("{head} {description}").into_bytes()
}

/// The access stored in an entry's `value`, read by an entry asking for
/// `mine` (same space). A value this crate did not write is a writer of a
/// read-write lock, or a permit of `mine`'s semaphore: it holds a place,
/// and never lets in more than it should.
pub(crate) fn access_of(value: &[u8], mine: Access) -> Access {
    let text = String::from_utf8_lossy(value);
    let mut words = text.split(' ');
    let stored = match (words.next(), mine) {
        (Some("permit"), Access::Permit(_)) => {
            words.next().and_then(parse_permits).map(Access::Permit)
        }
        (Some("read"), Access::Read | Access::Write) => Some(Access::Read),
        (Some("write"), Access::Read | Access::Write) => Some(Access::Write),
        _ => None,
    };
    stored.unwrap_or(match mine {
        Access::Permit(_) => mine,
        _ => Access::Write,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_accesses_read_back() {
        let three = Access::permit(3).unwrap();
        let two = Access::permit(2).unwrap();
        for access in [three, Access::Read, Access::Write] {
            let stored = value(access, "build-7:4121 (nightly)");
            assert_eq!(access_of(&stored, access), access);
        }
        assert_eq!(value(three, "h:1"), b"permit 3 h:1");
        // Another semaphore's limit is read as it is, to be refused.
        assert_eq!(access_of(b"permit 2 h:1", three), two);
    }

    #[test]
    fn foreign_values_exclude_the_most() {
        let three = Access::permit(3).unwrap();
        for junk in [&b""[..], b"permit", b"permit 0 h", b"writer h", b"\xff"] {
            assert_eq!(access_of(junk, Access::Read), Access::Write, "{junk:?}");
            assert_eq!(access_of(junk, three), three, "{junk:?}");
        }
    }
}

//! Lock and election names, validated before any I/O.

use std::fmt;

use crate::error::{Error, Result};

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// A validated lock or election name.
///
/// A name is a non-empty UTF-8 string of at most [`MAX_NAME_LEN`] bytes with no
/// NUL and no control characters. Backends map it into their own key space under
/// a configurable prefix, escaping as they need to.
///
/// ```
/// use distlock_core::LockName;
/// assert!(LockName::new("jobs/nightly-report").is_ok());
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("bad\nname").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(String);

impl LockName {
    /// Validates `name`, returning [`ErrorKind::InvalidName`](crate::ErrorKind::InvalidName)
    /// with the reason if it is not acceptable.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::invalid_name("lock name is empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::invalid_name(format!(
                "lock name is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
            let what = if c == '\0' {
                "NUL"
            } else {
                "a control character"
            };
            return Err(Error::invalid_name(format!(
                "lock name {:?} contains {what} ({:?}) at byte {at}",
                name, c
            )));
        }
        Ok(LockName(name))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        LockName::new(value)
    }
}

impl TryFrom<String> for LockName {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        LockName::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn rejects_empty_control_and_long_names() {
        for bad in ["", "a\0b", "tab\there", "\u{7f}", &"x".repeat(513)] {
            let err = LockName::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
    }

    #[test]
    fn accepts_unicode_slashes_and_the_longest_name() {
        for good in ["a", "jobs/nightly", "ünïcödé 名前", &"x".repeat(512)] {
            assert_eq!(LockName::new(good).unwrap().as_str(), good);
        }
    }
}

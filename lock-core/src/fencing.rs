//! Fencing tokens: the number a protected resource uses to reject stale holders.

use std::fmt;

/// A number handed out with every successful acquisition.
///
/// # Contract
///
/// For one lock name, tokens strictly increase across all holders over time:
/// if acquisition B starts after acquisition A was granted, then
/// `B.token() > A.token()`. This holds across lease expiry and takeover by
/// another client, which is exactly when a paused former holder may still try
/// to write.
///
/// A resource protected by the lock should remember the highest token it has
/// seen and reject writes that carry a lower one; an equal token is the same
/// holder, and is accepted. That is what makes a lock safe against process
/// pauses and network delays; the lease alone is not. Tokens of different
/// lock services (etcd and Redis, say) are not comparable: the facade's
/// `distlock::fence` keeps their scope beside them.
///
/// How strong the guarantee is depends on the backend
/// ([`Capabilities::fencing`](crate::Capabilities::fencing)): etcd and
/// ZooKeeper derive tokens from their replicated log and never go back; Redis
/// can go back if it loses data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The token as an `i64`, for a signed column such as SQL's `BIGINT`
    /// (which is what `tokio-postgres` and `sqlx` bind an `i64` to).
    ///
    /// Every backend's tokens fit: etcd revisions, ZooKeeper zxids and
    /// Redis counters are themselves signed 64-bit. The check is there so
    /// that a token past `i64::MAX` fails, naming itself, instead of
    /// wrapping to a negative number that every stale holder would beat.
    ///
    /// ```
    /// use distlock_core::FencingToken;
    /// assert_eq!(FencingToken(42).to_i64(), Ok(42));
    /// assert!(FencingToken(u64::MAX).to_i64().is_err());
    /// ```
    pub fn to_i64(self) -> Result<i64, TokenRangeError> {
        i64::try_from(self.0).map_err(|_| TokenRangeError { token: self })
    }
}

/// A [`FencingToken`] too large for an `i64`: see [`FencingToken::to_i64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenRangeError {
    token: FencingToken,
}

impl TokenRangeError {
    /// The token that did not fit.
    pub fn token(&self) -> FencingToken {
        self.token
    }
}

impl fmt::Display for TokenRangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing token {} does not fit in an i64 (at most {}); store it in an unsigned \
             or wider column",
            self.token,
            i64::MAX
        )
    }
}

// No `From<TokenRangeError> for Error`: a second `From` impl on `Error`
// would break type inference of `?` in callers' async blocks.
impl std::error::Error for TokenRangeError {}

impl TryFrom<FencingToken> for i64 {
    type Error = TokenRangeError;

    /// See [`FencingToken::to_i64`].
    fn try_from(token: FencingToken) -> Result<i64, TokenRangeError> {
        token.to_i64()
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_convert_to_i64_when_they_fit_and_name_themselves_when_not() {
        assert_eq!(i64::try_from(FencingToken(7)), Ok(7));
        assert_eq!(FencingToken(i64::MAX as u64).to_i64(), Ok(i64::MAX));
        let too_big = FencingToken(i64::MAX as u64 + 1);
        let err = i64::try_from(too_big).unwrap_err();
        assert_eq!(err.token(), too_big);
        assert!(err.to_string().contains("9223372036854775808"), "{err}");
    }
}

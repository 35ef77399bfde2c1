//! What an application using locks and elections imports: `use distlock::prelude::*;`.
//!
//! It brings [`ElectionBackendExt`] rather than [`ElectionBackend`](crate::ElectionBackend):
//! their methods share names, and the string-named forms are the ones for
//! applications. Import `ElectionBackend` yourself to call the
//! [`LockName`]-taking forms (then without this prelude's trait in scope).

pub use crate::{
    AcquireOptions, Backend, ElectionBackendExt, Error, ErrorKind, FencingToken, LeaderInfo,
    Leaders, Leadership, LockBackend, LockBackendExt, LockGuard, LockName, LostReason, Owner,
    Result, Wait,
};

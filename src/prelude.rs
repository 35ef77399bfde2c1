//! What an application using locks and elections imports: `use distlock::prelude::*;`.
//!
//! Both halves of each service come in: the traits that take [`LockName`]s
//! ([`LockBackend`], [`ElectionBackend`]) and their string-named forms
//! ([`LockBackendExt`], [`ElectionBackendExt`]), whose method names differ.

pub use crate::{
    Access, AcquireOptions, Backend, Candidacy, Capabilities, Config, ElectionBackend,
    ElectionBackendExt, Error, ErrorKind, FencingToken, LeaderInfo, Leaders, Leadership,
    ListOptions, LockBackend, LockBackendExt, LockGuard, LockName, LostReason, MultiLockGuard,
    Owner, Result, Wait,
};

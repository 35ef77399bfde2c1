//! Fault proxy (in progress).

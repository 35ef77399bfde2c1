//! distlock backend for one machine (work in progress).

//! distlock backend for zk (work in progress).

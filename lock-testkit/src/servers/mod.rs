//! Real-server launchers (in progress).

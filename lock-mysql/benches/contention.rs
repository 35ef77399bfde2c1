//! Contention benchmark (filled in below).

fn main() {}

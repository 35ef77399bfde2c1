//! The command-line errors of the runner and its client: both exit alike.

/// The arguments `parsed` holds, or, when they did not parse, the error
/// printed as `program: error` and an exit with status 2 (a usage error).
pub fn args_or_exit<T>(program: &str, parsed: Result<T, String>) -> T {
    parsed.unwrap_or_else(|e| {
        eprintln!("{program}: {e}");
        std::process::exit(2)
    })
}

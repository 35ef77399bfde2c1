//! Booleans, in the one spelling every distlock URL option, config-file
//! value and environment variable takes.

/// Parses the value of the boolean setting `name`: `true`, `1` or `yes`;
/// `false`, `0` or `no`.
///
/// An empty value is refused rather than read as either: `?tls` alone is
/// more likely a slip than a choice, and a setting never guesses.
///
/// ```
/// use distlock_core::raw::parse_flag;
/// assert_eq!(parse_flag("fsync", "yes"), Ok(true));
/// assert_eq!(parse_flag("fair", "0"), Ok(false));
/// assert!(parse_flag("tls", "").unwrap_err().contains("tls"));
/// ```
pub fn parse_flag(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(format!(
            "option {name}: {other:?} is not a boolean (true or false)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_flag;

    #[test]
    fn every_spelling_reads_and_nothing_else_does() {
        for yes in ["true", "1", "yes"] {
            assert_eq!(parse_flag("x", yes), Ok(true));
        }
        for no in ["false", "0", "no"] {
            assert_eq!(parse_flag("x", no), Ok(false));
        }
        for bad in ["", "TRUE", "on", "2"] {
            let why = parse_flag("fair", bad).unwrap_err();
            assert!(
                why.contains("fair") && why.contains("not a boolean"),
                "{why}"
            );
        }
    }
}

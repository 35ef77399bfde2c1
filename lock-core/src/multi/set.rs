//! The set of names to lock: checked and put in canonical order before any I/O.

use crate::error::{Error, Result};
use crate::name::LockName;

/// Parses `names` into a non-empty set of distinct [`LockName`]s, sorted:
/// the one order every client takes them in.
pub(crate) fn parse(names: &[&str]) -> Result<Vec<LockName>> {
    let names = names
        .iter()
        .map(|name| LockName::new(*name))
        .collect::<Result<Vec<_>>>()?;
    canonical(names)
}

/// Sorts `names` and rejects an empty set or a name given twice.
pub(crate) fn canonical(mut names: Vec<LockName>) -> Result<Vec<LockName>> {
    if names.is_empty() {
        return Err(Error::invalid_config(
            "a multi-lock needs at least one lock name; the set is empty",
        ));
    }
    names.sort();
    if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid_config(format!(
            "lock name {:?} appears twice in the multi-lock; each member must be a different lock",
            twice[0].as_str()
        )));
    }
    Ok(names)
}

/// The set as the error messages show it: `[a, b]`.
pub(crate) fn describe(names: &[LockName]) -> String {
    let names: Vec<&str> = names.iter().map(LockName::as_str).collect();
    format!("[{}]", names.join(", "))
}

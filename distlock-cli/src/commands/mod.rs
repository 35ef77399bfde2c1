//! One module per subcommand; each exposes the async function `main.rs`
//! dispatches to.

pub(crate) mod bench;
pub(crate) mod breaking;
pub(crate) mod elect;
pub(crate) mod ls;
pub(crate) mod run;
pub(crate) mod status;

//! The session monitor: one task per session that, on every client tick and
//! every session state change, vouches for the held locks or gives them up.

use std::sync::Weak;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use zookeeper_client as zk;

use crate::session::Session;

/// Starts the monitor. It holds the session weakly, so it never keeps a
/// session (and its ephemeral nodes) alive, and stops when the session ends.
pub(crate) fn spawn(
    session: Weak<Session>,
    mut states: zk::StateWatcher,
    tick: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                state = states.changed() => {
                    tracing::debug!(%state, "zk session state changed");
                }
                _ = ticker.tick() => {}
            }
            let Some(session) = session.upgrade() else {
                return;
            };
            if !session.check_holds() {
                return;
            }
        }
    })
}

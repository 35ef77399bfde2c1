//! The group's lost signal: fires when any member's fires, with its reason.

use std::sync::{Arc, OnceLock};

use futures::future::select_all;
use tokio::sync::oneshot;

use crate::lost::{LossNotifier, LostSignal};
use crate::name::LockName;

/// Fans the members' lost signals into one.
///
/// A task waits on every member's signal; the first to fire fires the
/// group's notifier and records which member it was. Dropping the
/// `Watch` stops the task, so it never outlives the guard.
#[derive(Debug)]
pub(crate) struct Watch {
    pub(crate) notifier: LossNotifier,
    pub(crate) lost_member: Arc<OnceLock<LockName>>,
    _stop: oneshot::Sender<()>,
}

impl Watch {
    /// Starts watching `members` on the current Tokio runtime.
    pub(crate) fn start(members: Vec<(LockName, LostSignal)>) -> Self {
        let notifier = LossNotifier::new();
        let lost_member = Arc::new(OnceLock::new());
        let (stop_tx, stop_rx) = oneshot::channel();
        let (group, who) = (notifier.clone(), lost_member.clone());
        tokio::spawn(async move {
            let any = select_all(members.iter().map(|(_, signal)| Box::pin(signal.lost())));
            tokio::select! {
                (reason, index, _) = any => {
                    if !group.is_fired() {
                        let _ = who.set(members[index].0.clone());
                        group.fire(reason);
                    }
                }
                _ = stop_rx => {}
            }
        });
        Watch {
            notifier,
            lost_member,
            _stop: stop_tx,
        }
    }
}

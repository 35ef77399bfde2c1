//! Evidence that the ZooKeeper leader, not just the server we talk to, still
//! keeps our session alive: periodic `sync` round trips.
//!
//! Only the leader expires sessions. A follower cut off from the leader
//! keeps answering our pings and reads until its own link times out
//! (`syncLimit × tickTime`, possibly longer than the session timeout) while
//! the leader expires our session and lets the next holder in, so a live
//! connection proves nothing. A `sync` is answered only after the follower
//! heard back from the leader, so its answer proves that the follower's
//! link to the leader was up after the `sync` was sent.
//!
//! Followers pass our activity on to the leader in their answers to the
//! leader's pings, sent every `tickTime / 2`. That is at most a quarter of
//! the session timeout (ZooKeeper grants at least `2 × tickTime`), so the
//! answer to a `sync` sent at `s` proves that everything our server heard
//! from us a quarter of the session timeout before `s` reached the leader.
//! A `sync` answered by then, and sent at `e`, reached our server after
//! `e`: the leader has seen our session active after `e`, and cannot expire
//! it before `e` plus the session timeout. That `e` is the evidence.

use std::collections::VecDeque;
use std::sync::Weak;
use std::time::Duration;

use distlock_core::raw::SentAt;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use zookeeper_client as zk;

use crate::errors::session_over;
use crate::session::Session;

/// How often the session syncs: a sixteenth of the session timeout. The
/// evidence is then never older than 3/8 of it (the report delay and two
/// periods) plus four round trips.
pub(crate) fn period(session: Duration) -> Duration {
    (session / 16).max(Duration::from_millis(1))
}

/// How long a follower may take to pass our activity on to the leader: a
/// quarter of the session timeout (half a `tickTime` at most).
pub(crate) fn report_delay(session: Duration) -> Duration {
    session / 4
}

/// The leader-ordered round trips of one session, and what they prove.
///
/// Times are stamps on the lease clock, taken when each request went out:
/// validity counted from them keeps counting through a suspend, which
/// Tokio's clock does not.
#[derive(Debug)]
pub(crate) struct Evidence {
    /// Answered syncs, `(sent, answered)`, oldest first, not yet usable.
    answered: VecDeque<(SentAt, SentAt)>,
    /// The leader has seen our session active after this moment.
    seen: SentAt,
}

impl Evidence {
    /// Evidence for a session whose creation was requested at `connecting`:
    /// the leader created it after that, with a full session timeout ahead.
    pub(crate) fn new(connecting: SentAt) -> Self {
        Evidence {
            answered: VecDeque::new(),
            seen: connecting,
        }
    }

    /// The leader has seen our session active after this moment.
    pub(crate) fn seen(&self) -> SentAt {
        self.seen.clone()
    }

    /// Records a sync sent at `sent` and answered at `answered`; returns the
    /// evidence it leads to.
    pub(crate) fn synced(&mut self, sent: SentAt, answered: SentAt, delay: Duration) -> SentAt {
        if let Some(cutoff) = sent.at().checked_sub(delay) {
            while let Some((earlier_sent, earlier_answered)) = self.answered.front() {
                if earlier_answered.at() > cutoff {
                    break;
                }
                if earlier_sent.at() > self.seen.at() {
                    self.seen = earlier_sent.clone();
                }
                self.answered.pop_front();
            }
        }
        self.answered.push_back((sent, answered));
        self.seen.clone()
    }
}

/// Starts the sync loop of a session. It holds the session weakly, and the
/// client only while a sync is in flight.
pub(crate) fn spawn(session: Weak<Session>, path: String) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(strong) = session.upgrade() else {
                return;
            };
            let (client, timing) = (strong.client.clone(), strong.timing);
            drop(strong);
            tokio::time::sleep(period(timing.session)).await;
            let sent = SentAt::now();
            let result = timeout(timing.request, client.sync(&path)).await;
            let answered = SentAt::now();
            drop(client);
            match result {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                    let Some(strong) = session.upgrade() else {
                        return;
                    };
                    strong.synced(sent, answered);
                }
                Ok(Err(e)) if session_over(&e) => return,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "zk sync failed; no new evidence");
                    let Some(strong) = session.upgrade() else {
                        return;
                    };
                    strong.sync_failed(&format!("zk sync failed: {e}"));
                }
                Err(_) => {
                    tracing::debug!("zk sync unanswered; no new evidence");
                    let Some(strong) = session.upgrade() else {
                        return;
                    };
                    strong.sync_failed(&format!(
                        "zk sync unanswered within {}",
                        distlock_core::raw::human_duration(timing.request)
                    ));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use distlock_core::raw::{LeaseClock, ManualClock};

    use super::*;

    #[test]
    fn a_sync_vouches_for_what_was_sent_a_report_delay_before_it() {
        let clock = Arc::new(ManualClock::new());
        let ms = Duration::from_millis;
        // A stamp `at` after the clock's origin (stamps are taken in order).
        let stamp = |at: Duration| {
            clock.advance(at.saturating_sub(clock.now()));
            SentAt::now_on(clock.clone())
        };
        let mut evidence = Evidence::new(stamp(ms(0)));
        let delay = ms(250);
        // Answered syncs every 100 ms, each answered after 10 ms.
        let mut synced = |at: u64| {
            let sent = stamp(ms(at));
            let answered = stamp(ms(at + 10));
            evidence.synced(sent, answered, delay).at()
        };
        for k in 1..=3u64 {
            assert_eq!(synced(100 * k), ms(0));
        }
        // The sync sent at 400 ms proves what the one sent at 100 ms (and
        // answered at 110 ms, before 400 - 250 ms) carried.
        assert_eq!(synced(400), ms(100));
        assert_eq!(synced(700), ms(400), "the latest usable sync wins");
        // No answered sync: no new evidence, however long we wait.
        assert_eq!(evidence.seen().at(), ms(400));
    }
}

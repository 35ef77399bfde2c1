//! Fault 13: a waiter paused while a grant to it is in flight.
//!
//! Pausing the holder (fault 2) never tests the hand-over itself: the
//! moment a backend gives the lock to the next waiter, by granting its
//! queue entry and telling it so (PostgreSQL's table layout, Redis in fair
//! mode), or by deleting the key or node it watches (etcd, ZooKeeper). So
//! the runner keeps one client inside its section, which makes the others
//! queue behind it, stops a waiter, and only then lets the holder release.
//! The grant now goes to a process that cannot answer: at once, or after
//! the waiters queued ahead of it, which queue again behind it. The pause
//! outlasts the TTL, so that grant runs out and another client takes over
//! before the waiter resumes and reads the news it missed.

use nix::sys::signal::Signal;

use super::{Target, Timeline, Victim, signal, sleep};
use crate::clock::now_ns;

impl Target<'_> {
    /// Keeps the client after the victim inside its section, with the
    /// victim waiting behind it: its number and section. Caught only after
    /// its section has lasted a hold time and more, so every other client
    /// has had that long to queue behind it.
    pub(super) async fn hold_the_next(&self) -> Result<(u32, Victim), String> {
        let clients = u32::try_from(self.pids.len()).map_err(|e| e.to_string())?;
        let holder = (self.victim + 1) % clients;
        let held = self.catch_holder(Some(holder)).await?;
        if self.resource.open_section(self.victim).is_some() {
            signal(self.pids[holder as usize], Signal::SIGUSR2);
            return Err(format!(
                "client {} was inside a section while client {holder} held the lock",
                self.victim
            ));
        }
        Ok((holder, held))
    }

    /// Keeps the client after the victim inside its section, pauses the
    /// victim while it waits, lets the holder go the trial's hand-over
    /// delay later, and resumes the victim once the span has passed.
    pub(super) async fn pause_waiter(&self, t: &mut Timeline) -> Result<(), String> {
        let (holder, _) = self.hold_the_next().await?;
        let let_holder_go = || signal(self.pids[holder as usize], Signal::SIGUSR2);
        let pid = self.pids[self.victim as usize];
        signal(pid, Signal::SIGSTOP);
        t.start_ns = now_ns();
        sleep(self.handover).await;
        let_holder_go();
        let released_ns = now_ns();
        sleep(self.span.saturating_sub(self.handover)).await;
        signal(pid, Signal::SIGCONT);
        t.heal_ns = now_ns();
        t.victim = Some(Victim {
            client: self.victim,
            token: 0,
            release_ns: None,
        });
        t.notes.push(format!(
            "client {} paused while it waited, for {} ms; client {holder}, the holder, \
             released {} ms into the pause",
            self.victim,
            (t.heal_ns - t.start_ns) / 1_000_000,
            (released_ns - t.start_ns) / 1_000_000
        ));
        Ok(())
    }
}

//! The keys and leases a client's own backend ended: etcd reports each
//! release's delete and each revocation as a tracing event (target
//! [`distlock_etcd::ENDS_TARGET`]), which the client captures here and
//! sends with its history, so the runner can tell them from the server's
//! own ends (see [`revocation`](super::revocation)).

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};

use super::protocol::End;

/// The ends captured and not yet sent.
#[derive(Debug, Clone, Default)]
pub struct OwnEnds(Arc<Mutex<Vec<End>>>);

impl OwnEnds {
    /// Captures the backend's end events from now on, as the process's
    /// tracing subscriber (it has no other).
    pub fn install() -> OwnEnds {
        let ends = OwnEnds::default();
        let filter = Targets::new().with_target(distlock_etcd::ENDS_TARGET, Level::DEBUG);
        let subscriber =
            tracing_subscriber::registry().with(Capture(ends.clone()).with_filter(filter));
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            eprintln!(
                "fault-matrix client: a tracing subscriber was already set; ends go unreported"
            );
        }
        ends
    }

    /// The ends captured since the last call.
    pub fn take(&self) -> Vec<End> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, end: End) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(end);
    }
}

/// The layer that turns each end event into an [`End`].
struct Capture(OwnEnds);

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut end = End {
            client: 0,
            key: None,
            lease: None,
            revision: None,
        };
        event.record(&mut Fields(&mut end));
        self.0.push(end);
    }
}

/// Reads an end event's fields: `key` or `lease`, and `revision` (negative
/// when not known).
struct Fields<'a>(&'a mut End);

impl Visit for Fields<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "lease" => self.0.lease = Some(value),
            "revision" => self.0.revision = (value >= 0).then_some(value),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "key" {
            self.0.key = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An end event as etcd's backend words it becomes an `End`; other
    /// events are not captured.
    #[test]
    fn captures_end_events_alone() {
        let ends = OwnEnds::default();
        let filter = Targets::new().with_target(distlock_etcd::ENDS_TARGET, Level::DEBUG);
        let subscriber =
            tracing_subscriber::registry().with(Capture(ends.clone()).with_filter(filter));
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: distlock_etcd::ENDS_TARGET, key = "k", revision = 7_i64, "key deleted");
            tracing::debug!(target: distlock_etcd::ENDS_TARGET, lease = 9_i64, revision = -1_i64, "lease revoked");
            tracing::debug!(target: "elsewhere", lease = 1_i64, "not an end");
        });
        let got = ends.take();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].key.as_deref(), got[0].revision),
            (Some("k"), Some(7))
        );
        assert_eq!((got[1].lease, got[1].revision), (Some(9), None));
        assert!(ends.take().is_empty());
    }
}

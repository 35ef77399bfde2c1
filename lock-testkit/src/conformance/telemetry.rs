//! Metrics and spans are recorded the same way on every backend, because
//! distlock-core records them (see `distlock_core::telemetry`).
//!
//! The test binary gets a process-wide metrics recorder and tracing
//! subscriber, installed once; counters only grow, so tests running beside
//! this one cannot make it fail, only add to what it sees.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use distlock_core::telemetry::{ACQUISITIONS, HELD, HOLD_TIME, RENEWALS};
use distlock_core::{ErrorKind, LockBackendExt};
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use super::Target;

/// What the process has recorded so far.
struct Recorded {
    metrics: Snapshotter,
    /// (span name, its `backend` field) of every span opened.
    spans: &'static Mutex<BTreeSet<(String, String)>>,
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let metrics = recorder.snapshotter();
        recorder
            .install()
            .expect("no other metrics recorder in a conformance test binary");
        let spans: &'static Mutex<BTreeSet<(String, String)>> =
            Box::leak(Box::new(Mutex::new(BTreeSet::new())));
        let subscriber = tracing_subscriber::registry().with(SpanNames(spans));
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other tracing subscriber in a conformance test binary");
        Recorded { metrics, spans }
    })
}

/// A metric's kind, name and sorted labels.
type SeriesKey = (String, String, Vec<(String, String)>);

/// Every counter's total and every metric seen, accumulated over the
/// recorder's snapshots (each snapshot drains what it reports).
#[derive(Default)]
struct Totals {
    /// (kind, name, sorted labels) → counter total (0 for other kinds).
    seen: std::collections::BTreeMap<SeriesKey, u64>,
}

fn totals() -> std::sync::MutexGuard<'static, Totals> {
    static TOTALS: OnceLock<Mutex<Totals>> = OnceLock::new();
    let mut totals = TOTALS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for (key, _, _, value) in recorded().metrics.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let entry = totals
            .seen
            .entry((format!("{kind:?}"), key.name().to_owned(), labels))
            .or_default();
        if let DebugValue::Counter(n) = value {
            *entry += n;
        }
    }
    totals
}

fn has_metric(kind: MetricKind, name: &str, backend: &str) -> bool {
    let kind = format!("{kind:?}");
    totals().seen.keys().any(|(k, n, labels)| {
        *k == kind && n == name && labels.iter().any(|(l, v)| l == "backend" && v == backend)
    })
}

/// The total of counter `name` for `backend` whose label `by` is `value`.
fn count_of(name: &str, backend: &str, by: &str, value: &str) -> u64 {
    let kind = format!("{:?}", MetricKind::Counter);
    let has = |labels: &[(String, String)], key: &str, wanted: &str| {
        labels.iter().any(|(l, v)| l == key && v == wanted)
    };
    totals()
        .seen
        .iter()
        .filter(|((k, n, labels), _)| {
            *k == kind && n == name && has(labels, "backend", backend) && has(labels, by, value)
        })
        .map(|(_, total)| total)
        .sum()
}

/// An acquisition, a refused attempt, a renewal and a release are recorded
/// under the backend's name with distlock-core's metric names and span names.
pub async fn metrics_and_spans_are_the_same_on_every_backend(target: &dyn Target) {
    let recorded = recorded();
    let (a, b) = (target.client().await, target.client().await);
    let backend = a.capabilities().backend;
    let acquired = count_of(ACQUISITIONS, backend, "result", "acquired");
    let refused = count_of(ACQUISITIONS, backend, "result", "would_block");
    let renewed = count_of(RENEWALS, backend, "result", "ok");

    let guard = a.lock("conformance/telemetry").await.expect("lock");
    let err = b.try_lock("conformance/telemetry").await.expect_err("held");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let renews_per_lock = a.capabilities().per_lock_lease;
    if renews_per_lock {
        guard.renew().await.expect("renew");
    }
    guard.release().await.expect("release");

    assert!(
        count_of(ACQUISITIONS, backend, "result", "acquired") > acquired,
        "{backend}: no acquisition counted in {ACQUISITIONS}"
    );
    assert!(
        count_of(ACQUISITIONS, backend, "result", "would_block") > refused,
        "{backend}: no refused attempt counted in {ACQUISITIONS}"
    );
    if renews_per_lock {
        assert!(
            count_of(RENEWALS, backend, "result", "ok") > renewed,
            "{backend}: no renewal counted in {RENEWALS}"
        );
    }
    assert!(
        has_metric(MetricKind::Gauge, HELD, backend),
        "{backend}: no {HELD} gauge"
    );
    assert!(
        has_metric(MetricKind::Histogram, HOLD_TIME, backend),
        "{backend}: no {HOLD_TIME} histogram"
    );
    let spans = recorded.spans.lock().unwrap().clone();
    let mut wanted = vec!["distlock.acquire", "distlock.release"];
    if renews_per_lock {
        wanted.push("distlock.renew");
    }
    for span in wanted {
        assert!(
            spans.contains(&(span.to_owned(), backend.to_owned())),
            "{backend}: no {span} span with backend = {backend:?}; spans seen: {spans:?}"
        );
    }
}

/// Records the name and `backend` field of every new span.
struct SpanNames(&'static Mutex<BTreeSet<(String, String)>>);

impl<S: tracing::Subscriber> Layer<S> for SpanNames {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut backend = BackendField(String::new());
        attrs.record(&mut backend);
        self.0
            .lock()
            .unwrap()
            .insert((attrs.metadata().name().to_owned(), backend.0));
    }
}

struct BackendField(String);

impl Visit for BackendField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "backend" {
            self.0 = value.to_owned();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "backend" {
            self.0 = format!("{value:?}");
        }
    }
}

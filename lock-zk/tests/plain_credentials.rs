//! Digest credentials cross a plain connection (this client has no TLS):
//! a backend given them says so once, and one without them says nothing.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_zk::{ClientConfig, ZkBackend};
use support::{config, standalone};
use tracing_subscriber::layer::SubscriberExt;

const SESSION: Duration = Duration::from_secs(2);

/// The messages of the warnings logged while it is the subscriber.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

/// Picks the `message` field out of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }
}

/// On the current thread only, so that the subscriber sees every event.
#[tokio::test(flavor = "current_thread")]
async fn credentials_over_a_plain_connection_are_warned_about_once() {
    let warnings = Warnings::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let server = standalone().await;
    let plain = |w: &Warnings| {
        w.0.lock()
            .unwrap()
            .iter()
            .filter(|m| m.contains("plain connection"))
            .count()
    };
    let anonymous = ZkBackend::connect(config(&server.addrs, "/anonymous", SESSION))
        .await
        .expect("connect");
    assert_eq!(plain(&warnings), 0, "a backend without credentials warned");
    let with_password = ZkBackend::connect(
        config(&server.addrs, "/private", SESSION).with_credentials("alice", "secret"),
    )
    .await
    .expect("connect");
    let lock = distlock_core::LockBackendExt::lock(&with_password, "warned")
        .await
        .expect("lock");
    lock.release().await.expect("release");
    assert_eq!(plain(&warnings), 1, "{:?}", warnings.0.lock().unwrap());
    assert!(
        warnings
            .0
            .lock()
            .unwrap()
            .iter()
            .all(|m| !m.contains("secret")),
        "the password was logged"
    );
    drop((anonymous, with_password));
}

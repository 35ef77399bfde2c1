//! Prometheus metrics from a real exporter while workers contend for a lock.
//!
//! ```text
//! cargo run --example metrics                      # http://127.0.0.1:9464/metrics
//! cargo run --example metrics -- 127.0.0.1:0       # any free port; the address is printed
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example metrics --features redis
//! ```
//!
//! distlock records its metrics through the `metrics` facade, the same way
//! on every backend (see `distlock::telemetry` for the names). Install the
//! exporter you already run, here `metrics-exporter-prometheus`, and they
//! appear beside your own. The example serves the text format with a tiny
//! HTTP responder so it needs no web framework.

use std::time::Duration;

use distlock::prelude::*;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WORKERS: usize = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9464".to_owned());
    let config = Config::from_url("memory://").overlay(Config::from_env()?);

    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let backend = distlock::connect_with(&config).await?;
    for worker in 0..WORKERS {
        let backend = backend.clone();
        tokio::spawn(async move {
            loop {
                let work = backend.with_lock("metrics/demo", |_held| async {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                });
                if let Err(e) = work.await {
                    eprintln!("worker {worker}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }

    let listener = TcpListener::bind(&addr).await?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(respond(stream, prometheus.clone()));
    }
}

/// Answers one request with the current metrics, whatever its path.
async fn respond(mut stream: TcpStream, prometheus: PrometheusHandle) {
    let mut request = [0u8; 1024];
    if stream.read(&mut request).await.is_err() {
        return;
    }
    let body = prometheus.render();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

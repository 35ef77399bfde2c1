//! Opening a checked connection: endpoints, TLS, credentials, and a probe
//! request, all within the connect timeout.
//!
//! `etcd-client` connects lazily, so a client that "connected" may still
//! point at nothing. A read of the key prefix proves that a member answers,
//! that the cluster has a leader, and that the credentials may read our keys.
//! In the `distlock` layout the probe reads `<prefix>/`, the range every
//! key of ours lies in, so a role granted exactly that range
//! (`grant-permission --prefix <prefix>/`) passes it. In the `concurrency`
//! layout names are raw key prefixes, which a role may grant one by one:
//! there the probe reads a range no name uses and takes a refusal as an
//! answer too (etcd refuses only after the quorum read).

use std::io;
use std::time::Duration;

use distlock_core::{Error, ErrorKind, Result};
use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout_at};

use crate::config::{DEFAULT_KEEPALIVE_INTERVAL, EtcdConfig};
use crate::errors::{EtcdSite, classify, is_tls_handshake_eof, site};
use crate::keys::KeySpace;

/// Pause between connection attempts while the connect timeout lasts.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// TLS handshakes the server closed in a row before it counts as plaintext.
const PLAINTEXT_AFTER: u32 = 3;

/// Connects to the configured cluster and checks that it answers.
pub(crate) async fn connect(config: &EtcdConfig) -> Result<Client> {
    config.validate()?;
    let options = options(config)?;
    let endpoints = endpoint_urls(config);
    let listed = config.endpoint_list();
    let probe = KeySpace::new(&config.prefix, config.layout).probe();
    let op = format!("connect (key prefix {:?})", probe.range);
    let ctx = site(&op, &listed);
    let deadline = Instant::now() + config.connect_timeout;
    let mut last_error = None;
    let mut handshakes_closed = 0;
    loop {
        let attempt = async {
            let client = Client::connect(&endpoints, Some(options.clone())).await?;
            let count = GetOptions::new().with_prefix().with_count_only();
            match client
                .kv_client()
                .get(probe.range.clone(), Some(count))
                .await
            {
                Err(err) if !probe.must_be_readable && is_permission_denied(&err) => {}
                answer => {
                    answer?;
                }
            }
            Ok::<_, etcd_client::Error>(client)
        };
        match timeout_at(deadline, attempt).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(err)) if classify(&err) == ErrorKind::InvalidConfig && config.uses_tls() => {
                return Err(tls_refused(config, &listed, err));
            }
            Ok(Err(err)) if is_tls_handshake_eof(&err) => {
                // A server without TLS hangs up on our hello. Once could be a
                // member going down; every time, it speaks plaintext.
                handshakes_closed += 1;
                if handshakes_closed >= PLAINTEXT_AFTER {
                    return Err(Error::invalid_config(format!(
                        "etcd at {listed}: the server closed every TLS handshake; it probably serves \
                         plaintext: use etcd:// (no TLS), or enable TLS on the server"
                    ))
                    .with_source(err));
                }
                last_error = Some(err);
            }
            Ok(Err(err)) if classify(&err) == ErrorKind::Unavailable => {
                if let Some(refusals) = refused_everywhere(config, deadline).await {
                    return Err(Error::unavailable(format!(
                        "etcd at {listed}: connection refused ({refusals}); is etcd running there?"
                    ))
                    .with_source(err));
                }
                tracing::debug!(endpoints = %listed, error = %err, "etcd not reachable yet; retrying");
                last_error = Some(err);
            }
            Ok(Err(err)) => return Err(ctx.client_error(err)),
            Err(_) => break,
        }
        if Instant::now() + RETRY_PAUSE >= deadline {
            break;
        }
        sleep(RETRY_PAUSE).await;
    }
    let why = match last_error {
        Some(err) => format!("last error: {}", crate::errors::detail(&err)),
        None => "no answer".to_owned(),
    };
    Err(Error::unavailable(format!(
        "etcd at {listed}: could not connect within the connect timeout of {:?} ({why}); is etcd \
         running there and does it have quorum?",
        config.connect_timeout
    )))
}

/// When every endpoint refuses a TCP connection, what each said: nothing
/// listens there, and waiting out the connect timeout would not change
/// that (a member that is merely slow accepts the connection). `None` when
/// any endpoint accepts, or does not answer before `deadline`.
async fn refused_everywhere(config: &EtcdConfig, deadline: Instant) -> Option<String> {
    let mut refusals = Vec::new();
    for endpoint in &config.endpoints {
        let address = bare_endpoint(endpoint);
        match timeout_at(deadline, TcpStream::connect(address)).await {
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                refusals.push(format!("{address}: connection refused"));
            }
            _ => return None,
        }
    }
    Some(refusals.join(", "))
}

/// etcd's `permission denied`: the credentials are good, the range is not theirs.
fn is_permission_denied(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::PermissionDenied)
}

/// A refused server certificate, said in terms of the configuration.
fn tls_refused(config: &EtcdConfig, listed: &str, err: etcd_client::Error) -> Error {
    let ca = config
        .tls_files
        .ca
        .as_ref()
        .map_or_else(|| "?".to_owned(), |p| p.display().to_string());
    Error::invalid_config(format!(
        "etcd at {listed}: TLS: the server's certificate was refused ({}); check that tls.ca \
         {ca} is the CA that signed it, and that it is valid for the endpoint's host name",
        crate::errors::detail(&err)
    ))
    .with_source(err)
}

fn options(config: &EtcdConfig) -> Result<ConnectOptions> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(config.connect_timeout)
        // Members without a leader cancel our watches instead of leaving
        // them silent, so waiters re-check elsewhere.
        .with_require_leader(true);
    // Pings only while streams are open: those are what a silent connection
    // would stall (requests have their own timeouts), and etcd answers
    // pings on an idle connection with GOAWAY.
    let interval = config
        .keepalive_interval
        .unwrap_or(DEFAULT_KEEPALIVE_INTERVAL);
    options = options
        .with_keep_alive(interval, interval)
        .with_keep_alive_while_idle(false);
    if let (Some(user), Some(password)) = (&config.username, &config.password) {
        options = options.with_user(user.clone(), password.clone());
    }
    if config.uses_tls() {
        options = with_tls(options, config)?;
    }
    Ok(options)
}

#[cfg(feature = "tls")]
fn with_tls(options: ConnectOptions, config: &EtcdConfig) -> Result<ConnectOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};

    let read = |what: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            Error::invalid_config(format!(
                "etcd TLS {what} {}: cannot be read: {e}",
                path.display()
            ))
        })
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &config.tls_files.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read("tls.ca", ca)?));
    }
    if let (Some(cert), Some(key)) = (&config.tls_files.cert, &config.tls_files.key) {
        tls = tls.identity(Identity::from_pem(
            read("tls.cert", cert)?,
            read("tls.key", key)?,
        ));
    }
    Ok(options.with_tls(tls))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_options: ConnectOptions, _config: &EtcdConfig) -> Result<ConnectOptions> {
    Err(Error::unsupported(
        "etcd TLS was asked for, but distlock-etcd was built without its `tls` feature",
    ))
}

/// Endpoints as `etcd-client` wants them: with `https://` under TLS.
fn endpoint_urls(config: &EtcdConfig) -> Vec<String> {
    config
        .endpoints
        .iter()
        .map(|endpoint| {
            let scheme = if config.uses_tls() { "https" } else { "http" };
            format!("{scheme}://{}", bare_endpoint(endpoint))
        })
        .collect()
}

/// `host:port` of an endpoint given with or without `http(s)://`.
fn bare_endpoint(endpoint: &str) -> &str {
    endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint)
}

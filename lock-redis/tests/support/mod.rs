//! Shared helpers of the distlock-redis tests: real servers from the test kit
//! and backends pointed at them.

#![allow(dead_code, unreachable_pub)]

pub mod cluster;
pub mod target;

use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_core::raw::Settings;
use distlock_redis::{RedisBackend, RedisConfig, RedlockBackend, RedlockConfig, ServerAddr};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{RedisServer, RedisServers};

/// The lease TTL of the tests: short, so expiry tests are quick.
pub const TTL: Duration = Duration::from_millis(600);

/// Starts one Redis; a missing binary fails naming scripts/install-servers.sh.
pub async fn start_redis() -> RedisServer {
    RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

/// Starts `n` independent Redis servers.
pub async fn start_redises(n: usize) -> RedisServers {
    RedisServers::start(n)
        .await
        .unwrap_or_else(|e| panic!("cannot start {n} redis-servers: {e}"))
}

/// The tests' TTL and connect timeout, and `request` as the bound on each
/// command.
pub fn test_settings(request: Duration) -> Settings {
    Settings {
        ttl: Some(TTL),
        connect_timeout: Some(Duration::from_secs(3)),
        request_timeout: Some(request),
        ..Settings::default()
    }
}

/// The config of a test client of `server`.
pub fn config_for(server: &RedisServer) -> RedisConfig {
    RedisConfig::new("127.0.0.1", server.port())
        .with_settings(&test_settings(Duration::from_secs(1)))
        .expect("the tests' settings")
}

/// A new, independent client of `server`.
pub async fn client(server: &RedisServer) -> RedisBackend {
    connect(config_for(server)).await
}

/// A new, independent non-fair (`fair=false`) client of `server`.
pub async fn nonfair_client(server: &RedisServer) -> RedisBackend {
    connect(config_for(server).with_fair(false)).await
}

/// A new, independent plain-layout (`layout=plain`) client of `server`,
/// its keys the bare lock names.
pub async fn plain_client(server: &RedisServer) -> RedisBackend {
    connect(config_for(server).with_layout(distlock_redis::Layout::Plain)).await
}

/// A new client with `config`.
pub async fn connect(config: RedisConfig) -> RedisBackend {
    RedisBackend::connect(config)
        .await
        .expect("connect to redis")
}

/// The config of a Redlock test client of `servers`.
pub fn redlock_config_for(servers: &RedisServers) -> RedlockConfig {
    RedlockConfig::new(
        servers
            .servers()
            .iter()
            .map(|s| ServerAddr::new("127.0.0.1", s.port())),
    )
    .with_settings(&test_settings(Duration::from_millis(500)))
    .expect("the tests' settings")
}

/// A new, independent Redlock client of `servers`.
pub async fn redlock_client(servers: &RedisServers) -> RedlockBackend {
    RedlockBackend::connect(redlock_config_for(servers))
        .await
        .expect("connect to redlock servers")
}

/// Takes `name` and gives it back: proves the client works end to end.
pub async fn lock_and_release(backend: &impl LockBackendExt, name: &str) {
    backend
        .lock(name)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
}

/// Takes `name` without waiting and gives it back: proves it is free now;
/// `why` says why it must be.
pub async fn free_now(backend: &impl LockBackendExt, name: &str, why: &str) {
    let guard = backend.try_lock(name).await.expect(why);
    guard.release().await.expect("release");
}

/// A loopback port that is free now: bound, then let go, so nothing
/// listens on it until someone binds it again.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// A fault proxy in front of `server`, to silence or slow one client's link.
pub async fn proxy_to(server: &RedisServer) -> FaultProxy {
    FaultProxy::start(server.addr().parse().expect("server address"))
        .await
        .expect("start fault proxy")
}

/// `config` with Redlock member `index` reached through `proxy` instead.
pub fn through_proxy(mut config: RedlockConfig, index: usize, proxy: &FaultProxy) -> RedlockConfig {
    config.servers[index] = ServerAddr::new("127.0.0.1", proxy.addr().port());
    config
}

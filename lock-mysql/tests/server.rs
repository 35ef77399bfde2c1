//! The test kit's MariaDB launcher: a server on a loopback port with the
//! test user and database, that survives a restart with its data, and
//! whose missing binaries would name the install script.

use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_mysql::MysqlBackend;
use distlock_testkit::servers::MariadbServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_starts_serves_the_test_user_and_keeps_its_data_across_a_restart() {
    let server = MariadbServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start mariadb: {e}"));
    assert!(server.addr().starts_with("127.0.0.1:"));
    assert!(!format!("{server:?}").contains(server.password()));
    // The test user logs in over TCP with its password, from a client process.
    let output = server
        .client()
        .args(["-e", "SELECT CURRENT_USER(), DATABASE()"])
        .output()
        .expect("run the mariadb client");
    assert!(output.status.success(), "{output:?}");
    let seen = String::from_utf8_lossy(&output.stdout);
    assert!(
        seen.contains("distlock@") && seen.contains("distlock_test"),
        "{seen}"
    );
    let backend = MysqlBackend::connect_url(&server.url())
        .await
        .expect("connect");
    let first = backend.try_lock("kept").await.expect("lock");
    let token = first.token();
    first.release().await.expect("release");
    drop(backend);
    server.restart().await.expect("restart");
    let backend = MysqlBackend::connect_url(&server.url())
        .await
        .expect("connect again");
    let again = tokio::time::timeout(Duration::from_secs(10), backend.try_lock("kept"))
        .await
        .expect("in time")
        .expect("lock");
    assert!(
        again.token() > token,
        "the token counter survives the restart"
    );
    again.release().await.expect("release");
}

#[test]
fn a_missing_binary_names_the_install_script() {
    let message = distlock_testkit::servers::LaunchError::Missing {
        program: "mariadbd".into(),
        location: "on PATH".into(),
        package: "mariadb-server",
    }
    .to_string();
    assert!(message.contains("scripts/install-servers.sh"), "{message}");
    assert!(message.contains("mariadb-server"), "{message}");
}

//! A real Apache Curator client for the interop tests: `CuratorPeer.java`,
//! compiled once per test binary against Debian's Curator jars, driven over
//! its stdin/stdout line protocol (see the Java file for the commands).

#![allow(dead_code, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::time::timeout;

/// What to install when the JDK or the Curator jars are missing.
const INSTALL: &str = "apt-get install default-jdk-headless libcurator-recipes-java";
/// Where Debian puts the jars.
const JAR_DIR: &str = "/usr/share/java";
/// Curator 5.4's recipes and everything they load at run time; slf4j-nop
/// keeps the peer's stdout for the protocol.
const JARS: [&str; 8] = [
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
];
/// Small heap, fast start: the JVM shares two cores with ZooKeeper.
const JVM_FLAGS: [&str; 4] = [
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
];
/// How long the JVM may take to start and connect.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an answer may take beyond the wait the command itself asks for.
const ANSWER_SLACK: Duration = Duration::from_secs(10);

/// A running peer JVM; killed when dropped.
pub(crate) struct CuratorPeer {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl CuratorPeer {
    /// Starts a peer connected to `connect` (`host:port,...`) and waits
    /// until its Curator client is connected.
    pub(crate) async fn start(connect: &str) -> Self {
        // javac takes seconds: off the runtime's threads.
        let classes = tokio::task::spawn_blocking(classes)
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let mut child = tokio::process::Command::new("java")
            .args(JVM_FLAGS)
            .arg("-cp")
            .arg(classpath(Some(classes)))
            .arg("CuratorPeer")
            .arg(connect)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run java ({e}); install it: {INSTALL}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut peer = CuratorPeer {
            child,
            stdin,
            lines,
        };
        let ready = peer.answer(START_TIMEOUT, "start").await;
        assert_eq!(ready, "ready", "the Curator peer did not connect");
        peer
    }

    /// Sends one command and returns its answer line. `wait` is how long
    /// the command itself may block (a mutex or latch wait).
    pub(crate) async fn ask(&mut self, command: &str, wait: Duration) -> String {
        self.send(command).await;
        self.answer(wait + ANSWER_SLACK, command).await
    }

    /// Sends one command without reading its answer (for a command that
    /// blocks until something else happens); read it with [`Self::answer`].
    pub(crate) async fn send(&mut self, command: &str) {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("write to the Curator peer");
        self.stdin.flush().await.expect("flush to the Curator peer");
    }

    /// The next answer line, within `within`.
    pub(crate) async fn answer(&mut self, within: Duration, what: &str) -> String {
        let line = timeout(within, self.lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!("the Curator peer did not answer {what:?} within {within:?}")
            })
            .expect("read from the Curator peer");
        match line {
            Some(line) => line,
            None => {
                let status = self.child.try_wait().ok().flatten();
                panic!("the Curator peer exited ({status:?}) instead of answering {what:?}")
            }
        }
    }
}

/// The directory holding the compiled peer; compiled on first use.
fn classes() -> &'static Path {
    static CLASSES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match CLASSES.get_or_init(compile) {
        Ok(dir) => dir,
        Err(e) => panic!("{e}"),
    }
}

/// The jars, then `classes` if given, as a `-cp` value; panics naming the
/// package if a jar is missing.
fn classpath(classes: Option<&Path>) -> String {
    let mut entries: Vec<String> = JARS
        .iter()
        .map(|jar| {
            let path = Path::new(JAR_DIR).join(jar);
            assert!(
                path.is_file(),
                "{} is missing; install the Curator jars: {INSTALL}",
                path.display()
            );
            path.display().to_string()
        })
        .collect();
    if let Some(classes) = classes {
        entries.insert(0, classes.display().to_string());
    }
    entries.join(":")
}

fn compile() -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/curator/CuratorPeer.java");
    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("curator-peer-{}", std::process::id()));
    std::fs::create_dir_all(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let output = Command::new("javac")
        .args(["-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-nowarn"])
        .arg("-d")
        .arg(&out)
        .arg("-cp")
        .arg(classpath(None))
        .arg(&source)
        .output()
        .map_err(|e| format!("cannot run javac ({e}); install the JDK: {INSTALL}"))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed to compile {} ({}):\n{}",
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(out)
}

//! The file backend on a real case-insensitive filesystem: a FAT image made
//! by `mkfs.vfat` and mounted with FUSE (`fusefat`), since the kernels this
//! runs on have no vfat or casefold support. FAT also lacks hard links, has
//! its own rename, fsync and timestamp semantics, forbids `\:*?"<>|` in file
//! names and keeps an 8.3 alias of each long name; the backend must work
//! there all the same.
//!
//! Every test uses the mount one file handle at a time: `fusefat`'s
//! read-write mode returns wrong data to concurrent handles on one file and
//! corrupts a file replaced while open (see docs.md, Failure behaviour).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_file::{FileBackend, FileConfig};

mod support;

/// A FAT filesystem image mounted with FUSE in a temporary directory.
mod fat {
    use std::fs::File;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    const INSTALL: &str = "apt-get install dosfstools fusefat";
    /// Size of the image: FAT16 with 32 KiB clusters (5116 of them), made
    /// as a sparse file, so it takes 128 KiB on disk.
    const IMAGE_BYTES: u64 = 160 << 20;
    /// How long mounting or unmounting may take before the test fails.
    const MOUNT_WAIT: Duration = Duration::from_secs(10);

    /// A mounted FAT image; unmounted when dropped, also on a panic.
    pub(crate) struct FatMount {
        mountpoint: PathBuf,
        log: PathBuf,
        daemon: Child,
        // Dropped after the filesystem is unmounted.
        _dir: tempfile::TempDir,
    }

    /// The full path of tool `name`, searched in `PATH` and the `sbin`
    /// directories (`mkfs.vfat` lives there, often outside a user's `PATH`).
    fn tool(name: &str) -> PathBuf {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
            .unwrap_or_else(|| {
                panic!("this test needs `{name}` to make and mount a FAT filesystem: {INSTALL}")
            })
    }

    impl FatMount {
        /// Formats a new image and mounts it read-write.
        pub(crate) fn new() -> FatMount {
            let (mkfs, fusefat) = (tool("mkfs.vfat"), tool("fusefat"));
            tool("fusermount");
            assert!(
                Path::new("/dev/fuse").exists(),
                "this test mounts a FAT image with FUSE, but there is no /dev/fuse (in a \
                 container, pass the device through); the tools come from {INSTALL}"
            );
            let dir = tempfile::tempdir().expect("temp dir");
            let image = dir.path().join("fat.img");
            File::create(&image)
                .and_then(|f| f.set_len(IMAGE_BYTES))
                .expect("create the image file");
            // No volume label: FAT keeps it as an entry of the root
            // directory, and fusefat shows it as a file there. Clusters of
            // 32 KiB hold 1024 directory entries: fusefat 0.1a loses a file
            // renamed to a name whose entries straddle a directory cluster
            // boundary (at 64 entries with the default 2 KiB clusters), a
            // defect of that driver that no lock directory of these tests
            // comes near with the larger clusters.
            let formatted = Command::new(&mkfs)
                .args(["-F", "16", "-s", "64"])
                .arg(&image)
                .output()
                .expect("run mkfs.vfat");
            assert!(
                formatted.status.success(),
                "mkfs.vfat failed: {}",
                String::from_utf8_lossy(&formatted.stderr)
            );
            let mountpoint = dir.path().join("mnt");
            std::fs::create_dir(&mountpoint).expect("create the mount point");
            let log = dir.path().join("fusefat.log");
            let out = File::create(&log).expect("create the fusefat log");
            // In the foreground (`-f`), so that the daemon is our child and
            // its exit is seen.
            let daemon = Command::new(&fusefat)
                .arg("-f")
                .args(["-o", "rw+"])
                .arg(&image)
                .arg(&mountpoint)
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("log handle"))
                .stderr(out)
                .spawn()
                .expect("start fusefat");
            let mut mount = FatMount {
                mountpoint,
                log,
                daemon,
                _dir: dir,
            };
            mount.wait_until_mounted();
            mount
        }

        /// The root of the mounted filesystem.
        pub(crate) fn path(&self) -> &Path {
            &self.mountpoint
        }

        fn wait_until_mounted(&mut self) {
            let start = Instant::now();
            while !is_mounted(&self.mountpoint) {
                if let Ok(Some(status)) = self.daemon.try_wait() {
                    panic!(
                        "fusefat exited ({status}) before the image was mounted: {}",
                        self.log()
                    );
                }
                assert!(
                    start.elapsed() < MOUNT_WAIT,
                    "the FAT image was not mounted at {} within {MOUNT_WAIT:?}: {}",
                    self.mountpoint.display(),
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }

        fn log(&self) -> String {
            std::fs::read_to_string(&self.log).unwrap_or_default()
        }
    }

    impl Drop for FatMount {
        fn drop(&mut self) {
            let fusermount = tool("fusermount");
            let start = Instant::now();
            // A file that was open a moment ago (a background release) can
            // keep the mount busy for a short while.
            while is_mounted(&self.mountpoint) {
                let lazy = start.elapsed() > MOUNT_WAIT / 2;
                let mut unmount = Command::new(&fusermount);
                unmount.arg(if lazy { "-uz" } else { "-u" });
                let _ = unmount.arg(&self.mountpoint).stderr(Stdio::null()).status();
                if start.elapsed() > MOUNT_WAIT {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            while start.elapsed() < MOUNT_WAIT {
                if let Ok(Some(_)) = self.daemon.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.daemon.kill();
            let _ = self.daemon.wait();
        }
    }

    /// Whether a FUSE filesystem is mounted at `mountpoint`, as this process
    /// sees it in `/proc/self/mountinfo`.
    fn is_mounted(mountpoint: &Path) -> bool {
        let table = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
        table.lines().any(|line| {
            let Some((left, right)) = line.split_once(" - ") else {
                return false;
            };
            let point = left.split(' ').nth(4).map(unescape);
            point.as_deref() == Some(mountpoint.to_string_lossy().as_ref())
                && right.starts_with("fuse")
        })
    }

    /// Undoes mountinfo's octal escapes (`\040` for a space).
    fn unescape(field: &str) -> String {
        let mut out = Vec::new();
        let bytes = field.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
                std::str::from_utf8(digits)
                    .ok()
                    .and_then(|s| u8::from_str_radix(s, 8).ok())
            });
            match (bytes[i], octal) {
                (b'\\', Some(byte)) => {
                    out.push(byte);
                    i += 4;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

use fat::FatMount;

/// Lease TTL: long, since fusefat takes seconds for some operations on
/// long names (see docs.md); no test here waits for a lease to run out.
const TTL: Duration = Duration::from_secs(30);

/// The runtime of a test. Create it before the [`FatMount`], so that the
/// mount goes first: a daemon killed on a hang fails the file operations
/// still stuck in it, and the runtime can then stop.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// One client of the lock directory `dir`, as a separate process would be;
/// `fsync` on, as by default.
async fn client(dir: &Path) -> FileBackend {
    support::client(dir, Some(TTL)).await
}

/// Fails unless the mounted filesystem really treats `Ab` and `aB` as one file.
fn assert_folds_case(root: &Path) {
    std::fs::write(root.join("Ab"), b"x").expect("create Ab");
    let read = std::fs::read(root.join("aB"));
    assert_eq!(
        read.as_deref().ok(),
        Some(&b"x"[..]),
        "the FAT mount does not fold case ({read:?}), so it cannot test case folding"
    );
    std::fs::remove_file(root.join("aB")).expect("remove Ab through aB");
}

/// The file names under `dir`, relative to it, recursively.
fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// `Orders` and `orders` are two locks on FAT, held at the same time by two
/// clients, each with its own token sequence; releasing one leaves the
/// other held.
#[test]
fn names_differing_only_in_case_are_separate_locks_on_fat() {
    let runtime = runtime();
    let fat = FatMount::new();
    assert_folds_case(fat.path());
    let dir = fat.path().join("distlock");
    runtime.block_on(async {
        let (a, b) = (client(&dir).await, client(&dir).await);
        let upper = a.try_lock("Orders").await.expect("Orders is free");
        let lower = b
            .try_lock("orders")
            .await
            .expect("orders must not be blocked by Orders");
        assert!(upper.is_held() && lower.is_held());
        assert_eq!((upper.token().0, lower.token().0), (1, 1));

        // Each name counts its own tokens.
        upper.release().await.unwrap();
        assert!(lower.is_held(), "releasing Orders ended orders");
        let err = a.try_lock("orders").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
        let mut tokens = Vec::new();
        for _ in 0..3 {
            let again = a.try_lock("Orders").await.expect("Orders was released");
            tokens.push(again.token().0);
            again.release().await.unwrap();
        }
        assert_eq!(tokens, [2, 3, 4]);
        assert!(lower.is_held(), "taking Orders again ended orders");
        lower.release().await.unwrap();
        let next = b.try_lock("orders").await.expect("orders was released");
        assert_eq!(next.token().0, 2);
        next.release().await.unwrap();

        // Two records on disk, under names that do not fold into each other.
        let records: Vec<_> = files_under(&dir.join("locks"))
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rec"))
            .collect();
        assert_eq!(
            records.len(),
            2,
            "expected one record per name: {records:?}"
        );
    });
}

/// Names with characters FAT forbids in file names (`\:*?"<>|`), with
/// trailing dots and spaces (which FAT drops), with `~` (as in 8.3
/// aliases), non-ASCII or so long they need directory levels: each is
/// its own lock, all held at once, and none is in the way of another.
#[test]
fn names_fat_cannot_store_as_they_are_are_separate_locks_on_fat() {
    let runtime = runtime();
    let fat = FatMount::new();
    let dir = fat.path().join("distlock");
    let long_upper = "N".repeat(300);
    let long_lower = "n".repeat(300);
    let long_accents = "é".repeat(200);
    let mut names = vec![
        r"back\slash",
        "co:lon",
        "st*r",
        "what?",
        "\"quoted\"",
        "<angle>",
        "pi|pe",
        "trailing.",
        "trailing ",
        " leading",
        "dots...",
        "..",
        ".hidden",
        "orders~1",
        "ORDERS~1",
        "ordersandmore",
        "ORDERS~1.REC",
        "orders.rec",
        "con",
        "NUL",
        "aux.txt",
        "jobs/nightly",
        "jobs/Nightly",
        "Ünïcödé",
        "ünïcödé",
        "%4Frders",
        "Orders",
        "orders",
    ];
    names.extend([&long_upper, &long_lower, &long_accents].map(String::as_str));
    runtime.block_on(async {
        let (a, b) = (client(&dir).await, client(&dir).await);
        let mut held = Vec::new();
        for name in &names {
            let guard = a
                .try_lock(name)
                .await
                .unwrap_or_else(|e| panic!("{name:?} must be free: {e}"));
            held.push(guard);
        }
        for name in &names {
            let err = b
                .try_lock(name)
                .await
                .expect_err(&format!("{name:?} is held"));
            assert_eq!(err.kind(), ErrorKind::WouldBlock, "{name:?}: {err}");
        }
        let mut first = Vec::new();
        for guard in held {
            first.push(guard.token().0);
            guard.release().await.unwrap();
        }
        // A name with upper-case letters may start from the counter of the
        // file it shared before they were escaped; from there, each counts
        // on its own.
        for (name, token) in names.iter().zip(first) {
            let guard = b
                .try_lock(name)
                .await
                .unwrap_or_else(|e| panic!("{name:?} was released: {e}"));
            assert_eq!(guard.token().0, token + 1, "{name:?}");
            guard.release().await.unwrap();
        }
    });
}

/// A scratch record left behind by a crash, longer than the record that
/// is written next, does not corrupt the lock (fusefat ignores `O_TRUNC`).
#[test]
fn a_scratch_record_left_by_a_crash_does_not_corrupt_the_lock_on_fat() {
    let runtime = runtime();
    let fat = FatMount::new();
    let dir = fat.path().join("distlock");
    runtime.block_on(async {
        let a = client(&dir).await;
        let scratch = dir.join("locks").join("crashed.rec.tmp");
        std::fs::write(&scratch, vec![b'#'; 4096]).unwrap();
        let first = a.lock("crashed").await.expect("lock");
        let token = first.token().0;
        first
            .release()
            .await
            .expect("the record written over the old scratch file is whole");
        let second = a.lock("crashed").await.expect("lock again");
        assert_eq!(second.token().0, token + 1);
        second.release().await.unwrap();
    });
}

/// The waiters in the queue file, if it parses.
fn queued(queue: &Path) -> Option<usize> {
    let bytes = std::fs::read(queue).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value["waiters"].as_array().map(Vec::len)
}

/// The waiters' queue, rewritten in place, shrinks when a waiter leaves:
/// fusefat ignores `O_TRUNC`, and a queue left with the old tail reads as
/// empty, so the waiters still in it would lose their turns.
///
/// One file handle at a time: the holder's TTL is long, so nothing but the
/// one waiter touches the lock's files while it waits (fusefat returns
/// wrong data to concurrent handles on one file, see docs.md).
#[test]
fn the_waiters_queue_shrinks_when_a_waiter_leaves_on_fat() {
    let runtime = runtime();
    let fat = FatMount::new();
    let dir = fat.path().join("distlock");
    let queue = dir.join("locks").join("turns.queue");
    runtime.block_on(async {
        let config = FileConfig::new(&dir).with_default_ttl(Duration::from_secs(60));
        let a = FileBackend::connect(config).await.expect("connect");
        let b = client(&dir).await;
        let holder = a.lock("turns").await.unwrap();
        // A waiter enrolls, gives up and leaves.
        let err = b
            .lock_timeout("turns", Duration::from_millis(300))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert_eq!(
            queued(&queue),
            Some(0),
            "the queue should be empty: {:?}",
            std::fs::read_to_string(&queue)
        );
        holder.release().await.unwrap();
    });
}

//! The one line that says what `distlock` is waiting for, on a terminal:
//! a silent wait looks like a hang.

use std::future::Future;
use std::time::Duration;

/// How long an acquisition may take before it counts as waiting: longer
/// than a few round trips to a free lock.
const NOTICE_AFTER: Duration = Duration::from_millis(300);

/// The line to print while waiting for `what` (`lock NAME`, `the leadership
/// of NAME`) on `url`, if stderr is a terminal and `wait` allows waiting.
pub(crate) fn notice(
    is_terminal: bool,
    what: &str,
    url: &str,
    wait: Option<Duration>,
) -> Option<String> {
    if !is_terminal || wait.is_some_and(|d| d.is_zero()) {
        return None;
    }
    let limit = match wait {
        Some(d) => format!(" for up to {}", distlock::human_duration(d)),
        None => String::new(),
    };
    Some(format!(
        "distlock: waiting for {what} on {}{limit} (Ctrl-C to give up)",
        distlock::redact_url(url)
    ))
}

/// Runs `future`, printing `line` on stderr once it has been pending for
/// [`NOTICE_AFTER`].
///
/// # Cancel safety
///
/// As `future`: dropping this drops it.
pub(crate) async fn noting<F: Future>(future: F, line: Option<String>) -> F::Output {
    let Some(line) = line else {
        return future.await;
    };
    tokio::pin!(future);
    tokio::select! {
        done = &mut future => return done,
        () = tokio::time::sleep(NOTICE_AFTER) => eprintln!("{line}"),
    }
    future.await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_is_told_what_is_awaited_without_the_password() {
        let line = notice(
            true,
            "lock jobs/x",
            "redis://app:s3cret@127.0.0.1:6379",
            Some(Duration::from_secs(5)),
        )
        .unwrap();
        assert!(line.contains("lock jobs/x"), "{line}");
        assert!(
            line.contains("127.0.0.1:6379") && !line.contains("s3cret"),
            "{line}"
        );
        assert!(line.contains("for up to 5 s"), "{line}");
        assert_eq!(line.lines().count(), 1);
    }

    #[test]
    fn nothing_is_printed_off_a_terminal_or_without_waiting() {
        assert_eq!(notice(false, "lock a", "file:///tmp/x", None), None);
        assert_eq!(
            notice(true, "lock a", "file:///tmp/x", Some(Duration::ZERO)),
            None
        );
    }
}

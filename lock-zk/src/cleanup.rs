//! Deleting nodes left behind by a cancelled, timed-out or unconfirmed
//! operation, as soon as the connection allows.
//!
//! A leftover is retried until its delete succeeds, the node is found gone,
//! or the session ends (the server then deletes every ephemeral node of the
//! session anyway). The client gives up on a silent connection after 7/5 of
//! the session timeout, so this never runs forever.

use std::time::Duration;

use tokio::time::{Instant, timeout};
use zookeeper_client as zk;

use crate::errors::{in_doubt, session_over};
use crate::session::wait_connected;

/// A node an acquisition left behind, to delete: an attempt that was
/// abandoned (cancelled, timed out, in doubt), or a hold given up.
#[derive(Debug, Clone)]
pub(crate) enum AcquireCleanup {
    /// A node whose path we know.
    Node(String),
    /// Every node of one acquisition whose `create` was in doubt: found by
    /// its GUID marker among the children of `dir` (after a `sync`, so that
    /// the server we ask has applied what the leader committed).
    Guid {
        /// The directory it would be in.
        dir: String,
        /// `_c_{guid}-`.
        marker: String,
    },
}

/// How a removal ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The node is gone (deleted now, found gone, or never created).
    Deleted,
    /// The session ended; the server deletes its ephemeral nodes.
    SessionEnded,
    /// The server refused the delete for good (for example `NoAuth`).
    Failed(zk::Error),
}

/// Deletes `leftover`, retrying through connection losses.
pub(crate) async fn remove(
    client: zk::Client,
    request: Duration,
    leftover: AcquireCleanup,
) -> Outcome {
    loop {
        match wait_connected(&client, Instant::now() + Duration::from_secs(3600)).await {
            Ok(()) => {}
            Err(e) if session_over(&e) => return Outcome::SessionEnded,
            Err(_) => continue,
        }
        let outcome = match &leftover {
            AcquireCleanup::Node(path) => match timeout(request, client.delete(path, None)).await {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                    tracing::debug!(%path, "zk leftover node deleted");
                    return Outcome::Deleted;
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Err(zk::Error::Timeout),
            },
            AcquireCleanup::Guid { dir, marker } => {
                let listing = async {
                    client.sync(dir).await?;
                    client.list_children(dir).await
                };
                match timeout(request, listing).await {
                    Ok(Ok(children)) => {
                        let ours: Vec<String> = children
                            .into_iter()
                            .filter(|c| c.starts_with(marker.as_str()))
                            .map(|c| format!("{dir}/{c}"))
                            .collect();
                        if ours.is_empty() {
                            return Outcome::Deleted;
                        }
                        Ok(ours)
                    }
                    Ok(Err(zk::Error::NoNode)) => return Outcome::Deleted,
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(zk::Error::Timeout),
                }
            }
        };
        match outcome {
            Ok(paths) => {
                // Deleted one by one; the listing is repeated until none is left.
                for path in paths {
                    match timeout(request, client.delete(&path, None)).await {
                        Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                            tracing::debug!(%path, "zk leftover node deleted");
                        }
                        Ok(Err(e)) if session_over(&e) => return Outcome::SessionEnded,
                        Ok(Err(e)) if !in_doubt(&e) => {
                            tracing::warn!(%path, error = %e, "zk could not delete a leftover node");
                            return Outcome::Failed(e);
                        }
                        _ => break,
                    }
                }
            }
            Err(e) if session_over(&e) => return Outcome::SessionEnded,
            Err(e) if in_doubt(&e) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => {
                tracing::warn!(?leftover, error = %e, "zk could not delete a leftover node");
                return Outcome::Failed(e);
            }
        }
    }
}

//! Listing the locks and elections that exist under a name prefix.
//!
//! A name exists while its queue holds a key. In the `distlock` layout
//! every queue of a space lies in one key range and a name's keys are
//! next to each other (escaped names contain no `/`), so a page is read
//! from where the last one stopped, a batch of keys at a time, at one
//! store revision, and names come in the order of their keys. In the
//! `concurrency` layout names nest (the keys of `a/b` sit among those of
//! `a`), so a page is cut from all the keys under the prefix, in name
//! order, and every queue is listed as a lock: there locks and elections
//! share their queues.

use std::collections::BTreeMap;

use distlock_core::{FencingToken, ListOptions, ListPage, ListedLock, LockName, Primitive, Result};
use etcd_client::{GetOptions, GetResponse, SortOrder, SortTarget};

use crate::backend::Inner;
use crate::keys::{KeyLayout, Space, range_end};
use crate::rpc::Retry;

/// Most keys read by one range request.
const MAX_BATCH: usize = 1000;

/// One page of the names under `options.prefix`.
pub(crate) async fn list(inner: &Inner, options: &ListOptions) -> Result<ListPage> {
    match inner.keys.layout() {
        KeyLayout::Distlock => distlock_page(inner, options).await,
        KeyLayout::Concurrency => concurrency_page(inner, options).await,
    }
}

/// A name being counted: its oldest key's revision and its number of keys.
struct Tally {
    name: LockName,
    oldest: i64,
    keys: usize,
}

impl Tally {
    fn new(name: LockName, rev: i64) -> Self {
        Tally {
            name,
            oldest: rev,
            keys: 1,
        }
    }

    fn add(&mut self, rev: i64) {
        self.oldest = self.oldest.min(rev);
        self.keys += 1;
    }

    fn listed(self, primitive: Primitive) -> ListedLock {
        ListedLock {
            name: self.name,
            primitive,
            holder_token: Some(FencingToken(u64::try_from(self.oldest).unwrap_or(0))),
            waiting: self.keys - 1,
        }
    }
}

/// Locks, then elections, from where `options.after` stopped, until
/// `limit` names are complete and the next one has started.
async fn distlock_page(inner: &Inner, options: &ListOptions) -> Result<ListPage> {
    let mut reader = Reader::new(inner, options);
    let mut found: Vec<ListedLock> = Vec::new();
    let mut more = false;
    'spaces: for (space, primitive) in [
        (Space::Lock, Primitive::Lock),
        (Space::Election, Primitive::Election),
    ] {
        let from = inner.keys.names_from(space, &options.prefix);
        let end = range_end(from.as_bytes());
        let mut start = from.into_bytes();
        match &options.after {
            Some((after, _)) if *after > primitive => continue,
            Some((after, name)) if *after == primitive => {
                // Past every key of `name`: its queue, then the next byte.
                let past = range_end(inner.keys.queue(space, name).as_bytes());
                start = start.max(past);
            }
            _ => {}
        }
        let mut current: Option<Tally> = None;
        loop {
            let Some(resp) = reader.read(&start, &end).await? else {
                break;
            };
            for kv in resp.kvs() {
                let Some(name) = inner.keys.name_of_entry(space, kv.key(), kv.lease()) else {
                    continue;
                };
                match current.as_mut() {
                    Some(tally) if tally.name == name => tally.add(kv.create_revision()),
                    _ => {
                        found.extend(current.take().map(|t| t.listed(primitive)));
                        if found.len() == options.limit {
                            more = true;
                            break 'spaces;
                        }
                        current = Some(Tally::new(name, kv.create_revision()));
                    }
                }
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        found.extend(current.map(|t| t.listed(primitive)));
    }
    let next = more
        .then(|| found.last().map(|l| (l.primitive, l.name.clone())))
        .flatten();
    Ok(ListPage { locks: found, next })
}

/// Every queue under the prefix, cut to the page by [`ListOptions::page`].
async fn concurrency_page(inner: &Inner, options: &ListOptions) -> Result<ListPage> {
    let mut reader = Reader::new(inner, options);
    let from = inner.keys.names_from(Space::Lock, &options.prefix);
    let end = range_end(from.as_bytes());
    let mut start = from.into_bytes();
    let mut tallies: BTreeMap<LockName, Tally> = BTreeMap::new();
    while let Some(resp) = reader.read(&start, &end).await? {
        for kv in resp.kvs() {
            let Some(name) = inner.keys.name_of_entry(Space::Lock, kv.key(), kv.lease()) else {
                continue;
            };
            match tallies.get_mut(&name) {
                Some(tally) => tally.add(kv.create_revision()),
                None => {
                    tallies.insert(name.clone(), Tally::new(name, kv.create_revision()));
                }
            }
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                start = last.key().to_vec();
                start.push(0);
            }
            _ => break,
        }
    }
    Ok(options.page(tallies.into_values().map(|t| t.listed(Primitive::Lock))))
}

/// Range reads of one page, all at the revision of the first.
struct Reader<'a> {
    inner: &'a Inner,
    op: String,
    batch: i64,
    revision: Option<i64>,
}

impl<'a> Reader<'a> {
    fn new(inner: &'a Inner, options: &ListOptions) -> Self {
        Reader {
            inner,
            op: format!("list the locks under {:?}", options.prefix),
            batch: i64::try_from(options.limit.saturating_add(1).clamp(16, MAX_BATCH))
                .unwrap_or(16),
            revision: None,
        }
    }

    /// The keys in `[start, end)`, in key order, a batch at most (without
    /// values); `None` once `start` has passed `end`.
    async fn read(&mut self, start: &[u8], end: &[u8]) -> Result<Option<GetResponse>> {
        if end != [0] && start >= end {
            return Ok(None);
        }
        let start = if start.is_empty() {
            vec![0]
        } else {
            start.to_vec()
        };
        let mut options = GetOptions::new()
            .with_range(end.to_vec())
            .with_keys_only()
            .with_sort(SortTarget::Key, SortOrder::Ascend)
            .with_limit(self.batch);
        if let Some(revision) = self.revision {
            options = options.with_revision(revision);
        }
        let resp = self
            .inner
            .rpc
            .call(&self.op, Retry::Idempotent, |client, _| {
                let (start, options) = (start.clone(), options.clone());
                async move { client.kv_client().get(start, Some(options)).await }
            })
            .await?;
        self.revision = self
            .revision
            .or_else(|| resp.header().map(|h| h.revision()));
        Ok(Some(resp))
    }
}

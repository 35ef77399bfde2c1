//! The columns of the matrix: what goes wrong, where it applies, and how
//! the runner makes it happen.

use std::fmt;
use std::time::Duration;

use super::row::Row;

/// A fault, numbered as in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// 1: none, a baseline under contention.
    None,
    /// 2: the holder's process is paused (`SIGSTOP`) past its TTL.
    PauseHolder,
    /// 3: the holder is cut off from its servers past its TTL.
    PartitionHolder,
    /// 4: latency with jitter of about TTL/4 on every client.
    SlowNetwork,
    /// 5: every server is killed (`SIGKILL`) and restarted on its data;
    /// on a Redis Cluster, the master of the lock's slot is killed and its
    /// replica takes over.
    KillServer,
    /// 6: the cluster leader (one Redlock server) is killed, later restarted.
    KillLeader,
    /// 7: one member (the leader; one Redlock server) is frozen for 3×TTL.
    FreezeMember,
    /// 8: a follower is cut off from its peers while clients use it.
    IsolateFollower,
    /// 9: someone else ends the holder's lock.
    BreakLock,
    /// 10: a client process is killed (`SIGKILL`): inside its section, as
    /// it releases, or while it waits to acquire.
    KillClient,
    /// 11: the server the victim talks to is paused (`SIGSTOP`) past its
    /// TTL, then resumed: the one server, or on etcd and ZooKeeper
    /// clusters a follower that the victim alone among the members uses.
    PauseServer,
    /// 12: every server is killed (`SIGKILL`) and restarted on its data
    /// after less than a TTL; Redis restarts empty while the holder still
    /// vouches.
    BriefOutage,
    /// 13: a client waiting to acquire is paused (`SIGSTOP`), the holder
    /// releases so that a hand-over to it may be in flight, and the pause
    /// outlasts the TTL: resumed, it must not act on that stale grant.
    PauseWaiter,
    /// 14: a waiter's only member applies its predecessor's release and is
    /// cut off from its peers before the waiter hears of it, and the
    /// majority ends the waiter's lease: the turn the waiter then reads
    /// from that member is no longer its own (etcd's revision queue).
    StaleTurn,
}

impl Fault {
    /// Every fault, in column order.
    pub const ALL: [Fault; 14] = [
        Fault::None,
        Fault::PauseHolder,
        Fault::PartitionHolder,
        Fault::SlowNetwork,
        Fault::KillServer,
        Fault::KillLeader,
        Fault::FreezeMember,
        Fault::IsolateFollower,
        Fault::BreakLock,
        Fault::KillClient,
        Fault::PauseServer,
        Fault::BriefOutage,
        Fault::PauseWaiter,
        Fault::StaleTurn,
    ];

    /// The faults the full run runs on `row`: every fault, except that the
    /// broken row runs at rest and each mutant at rest and under the fault
    /// that shows its broken promise (the other cells could only repeat
    /// what the real backend's row measures).
    pub fn full(row: Row) -> Vec<Fault> {
        use super::mutant::Mutant;
        match row {
            Row::Broken | Row::Mutant(Mutant::NoExclusion) => vec![Fault::None],
            Row::Mutant(Mutant::SilentLoss) => vec![Fault::None, Fault::PauseHolder],
            Row::Mutant(Mutant::LongValidity) => vec![Fault::None, Fault::PartitionHolder],
            Row::Mutant(Mutant::UnconfirmedTurn) => vec![Fault::None, Fault::StaleTurn],
            _ => Fault::ALL.to_vec(),
        }
    }

    /// The faults `--quick` runs on `row`: none and a paused holder
    /// everywhere; on the three-member etcd and ZooKeeper also a
    /// partitioned holder and a follower cut off, whose verdicts can fail,
    /// and on etcd's a turn read from a member cut off; on PostgreSQL (both layouts) a paused waiter, whose grant is handed
    /// over in the releaser's transaction, and on MySQL, whose waiters
    /// grant themselves in a look of their own; on each mutant the fault
    /// that shows its broken promise.
    pub fn quick(row: Row) -> Vec<Fault> {
        use super::mutant::Mutant;
        match row {
            Row::Etcd3 => vec![
                Fault::None,
                Fault::PauseHolder,
                Fault::PartitionHolder,
                Fault::IsolateFollower,
                Fault::StaleTurn,
            ],
            Row::Zk3 => vec![
                Fault::None,
                Fault::PauseHolder,
                Fault::PartitionHolder,
                Fault::IsolateFollower,
            ],
            Row::Postgres | Row::PostgresAdvisory | Row::Mysql => {
                vec![Fault::None, Fault::PauseHolder, Fault::PauseWaiter]
            }
            Row::Broken | Row::Mutant(Mutant::NoExclusion) => vec![Fault::None],
            Row::Mutant(Mutant::SilentLoss) => vec![Fault::PauseHolder],
            Row::Mutant(Mutant::LongValidity) => vec![Fault::PartitionHolder],
            Row::Mutant(Mutant::UnconfirmedTurn) => vec![Fault::StaleTurn],
            _ => vec![Fault::None, Fault::PauseHolder],
        }
    }

    /// Its column number, 1 to 14.
    pub fn number(self) -> u8 {
        Fault::ALL
            .iter()
            .position(|f| *f == self)
            .map_or(0, |i| i as u8 + 1)
    }

    /// Parses a `--faults` entry: its number.
    pub fn parse(text: &str) -> Option<Fault> {
        let n: usize = text.trim().parse().ok()?;
        Fault::ALL.get(n.checked_sub(1)?).copied()
    }

    /// The short name used in the JSON.
    pub fn id(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::PauseHolder => "pause-holder",
            Fault::PartitionHolder => "partition-holder",
            Fault::SlowNetwork => "slow-network",
            Fault::KillServer => "kill-server",
            Fault::KillLeader => "kill-leader",
            Fault::FreezeMember => "freeze-member",
            Fault::IsolateFollower => "isolate-follower",
            Fault::BreakLock => "break-lock",
            Fault::KillClient => "kill-client",
            Fault::PauseServer => "pause-server",
            Fault::BriefOutage => "brief-outage",
            Fault::PauseWaiter => "pause-waiter",
            Fault::StaleTurn => "stale-turn",
        }
    }

    /// What happens, for the table.
    pub fn title(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::PauseHolder => "holder paused",
            Fault::PartitionHolder => "holder partitioned",
            Fault::SlowNetwork => "slow network",
            Fault::KillServer => "server killed",
            Fault::KillLeader => "leader killed",
            Fault::FreezeMember => "member frozen",
            Fault::IsolateFollower => "follower cut off",
            Fault::BreakLock => "lock broken",
            Fault::KillClient => "client killed",
            Fault::PauseServer => "server paused",
            Fault::BriefOutage => "all servers down < TTL",
            Fault::PauseWaiter => "waiter paused, grant in flight",
            Fault::StaleTurn => "turn read on a cut-off member",
        }
    }

    /// Whether the fault takes one holder away (it is the victim) rather
    /// than the service.
    pub fn targets_holder(self) -> bool {
        matches!(
            self,
            Fault::PauseHolder | Fault::PartitionHolder | Fault::BreakLock | Fault::KillClient
        )
    }

    /// Why the fault does not apply to `row`, or `None` when it does.
    pub fn inapplicable(self, row: Row) -> Option<&'static str> {
        if self == Fault::KillClient && row.must_be_caught() {
            return Some(
                "a killed client breaks no promise of a lock private to a process or a mutant's",
            );
        }
        if self == Fault::PauseWaiter {
            match row {
                Row::Broken => {
                    return Some("memory:// locks are private to each process: nobody waits");
                }
                Row::Mutant(_) => {
                    return Some(
                        "each mutant breaks a holder's promise; a waiter paused before its \
                         grant holds nothing to break it with",
                    );
                }
                _ => {}
            }
        }
        if self == Fault::StaleTurn {
            return stale_turn_inapplicable(row);
        }
        if row == Row::Mutant(super::mutant::Mutant::UnconfirmedTurn) && self != Fault::None {
            return Some("the mutant breaks only a turn read on a lagging member: fault 14");
        }
        let row = row.service_row();
        let no_network = "the file backend has no network: clients reach a local directory";
        let no_process = "no server process";
        let single = "a single server has no members to lose one of (fault 5 kills it)";
        if row == Row::RedisCluster {
            return self.inapplicable_to_cluster();
        }
        match (self, row) {
            (Fault::PartitionHolder | Fault::SlowNetwork, Row::File) => Some(no_network),
            (Fault::PartitionHolder | Fault::SlowNetwork, Row::Broken) => {
                Some("memory:// has no network")
            }
            (Fault::PauseServer | Fault::BriefOutage, Row::File) => Some(no_process),
            (Fault::PauseServer | Fault::BriefOutage, Row::Broken) => {
                Some("memory:// has no server")
            }
            (Fault::PauseServer, Row::Redlock) => {
                Some("every Redlock client talks to every server: fault 7 freezes one of them")
            }
            (Fault::KillServer, Row::File) => {
                Some("the file backend has no server process: the directory is the service")
            }
            (Fault::KillServer | Fault::KillLeader | Fault::FreezeMember, Row::Broken) => {
                Some("memory:// has no server")
            }
            (Fault::KillLeader | Fault::FreezeMember, Row::File) => Some(no_process),
            (
                Fault::KillLeader | Fault::FreezeMember,
                Row::Etcd
                | Row::Redis
                | Row::Zk
                | Row::Postgres
                | Row::PostgresAdvisory
                | Row::Mysql
                | Row::MysqlNamed,
            ) => Some(single),
            (Fault::IsolateFollower, Row::Etcd3 | Row::Zk3) => None,
            (Fault::IsolateFollower, Row::Redlock) => {
                Some("Redlock servers are independent: they have no peer traffic to cut")
            }
            (Fault::IsolateFollower, _) => Some("no followers: a single server or none"),
            (Fault::BreakLock, Row::Broken) => Some("memory:// locks are private to each process"),
            _ => None,
        }
    }

    /// Why the fault does not apply to the Redis Cluster row. Its clients
    /// follow the node addresses the cluster announces, so they cannot be
    /// given fault proxies of their own; its fault 5 is the failover.
    fn inapplicable_to_cluster(self) -> Option<&'static str> {
        let announced = "cluster clients connect to the node addresses CLUSTER SLOTS announces, \
                         not through fault proxies of their own";
        match self {
            Fault::PartitionHolder | Fault::SlowNetwork => Some(announced),
            Fault::KillLeader => Some(
                "the lock's keys live on one master, the leader of its slot: fault 5 kills it \
                 and its replica takes over",
            ),
            Fault::FreezeMember => Some(
                "a master frozen past the 1 s node timeout is failed over, as fault 5 measures, \
                 and then rejoins as a replica; the freeze itself is not measured",
            ),
            Fault::IsolateFollower => Some(
                "clients use only masters (replicas serve no lock traffic), and a node's \
                 cluster bus runs without a proxy to cut",
            ),
            Fault::PauseServer => {
                Some("a node paused past the 1 s node timeout is failed over, as fault 5 measures")
            }
            Fault::BriefOutage => Some(
                "every node killed at once leaves no replica to take over; fault 5 measures \
                 the failover of the lock's master",
            ),
            _ => None,
        }
    }

    /// The moment the server could have ended the victim's lease, as an
    /// offset from the fault's start: a TTL after it for faults that stop
    /// renewals (a paused waiter's too: it can no more keep its place or
    /// its grant), at once for faults that drop the lease (a broken lock, a
    /// Redis restarted empty, a PostgreSQL or MariaDB restart ending the
    /// session that holds an advisory or named lock).
    pub fn lease_end_offset(self, row: Row, ttl: Duration) -> Duration {
        match (self, row.service_row()) {
            // The majority revokes the waiting victim's lease at once.
            (Fault::BreakLock | Fault::StaleTurn, _) => Duration::ZERO,
            (
                Fault::KillServer | Fault::BriefOutage,
                Row::Redis | Row::Redlock | Row::PostgresAdvisory | Row::MysqlNamed,
            ) => Duration::ZERO,
            _ => ttl,
        }
    }
}

/// Why fault 14 does not apply to `row`: it is built from etcd's parts (a
/// follower still answering its clients, a lease revoked on the majority).
fn stale_turn_inapplicable(row: Row) -> Option<&'static str> {
    match row.service_row() {
        Row::Etcd3 => None,
        Row::Zk3 => Some(
            "built for etcd's revision queue; ZooKeeper's form (a session expired by the \
             leader while a cut-off follower still answers its client) is not built here",
        ),
        Row::Broken => Some("memory:// locks are private to each process: nobody waits"),
        Row::RedisCluster | Row::Redlock => {
            Some("no member serves a waiter a view of a queue: Redis waiters poll their servers")
        }
        _ => Some("no followers: a single server or none"),
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contended::Contended;
    use crate::run::can_flip;

    #[test]
    fn fault_thirteen_is_a_paused_waiter_on_every_row_with_waiters() {
        let fault = Fault::PauseWaiter;
        assert_eq!(Fault::parse("13"), Some(fault));
        assert_eq!((fault.number(), fault.id()), (13, "pause-waiter"));
        assert_eq!(Fault::ALL[12], fault);
        assert!(!fault.targets_holder(), "the victim holds nothing");
        for row in Row::ALL {
            assert_eq!(fault.inapplicable(row), None, "{row:?}");
            assert!(Fault::full(row).contains(&fault), "{row:?}");
            assert_eq!(can_flip(row, fault), row.strong_tokens(), "{row:?}");
        }
        for row in std::iter::once(Row::Broken).chain(Row::MUTANTS) {
            assert!(fault.inapplicable(row).is_some(), "{row:?}");
            assert!(!Fault::full(row).contains(&fault), "{row:?}");
        }
    }

    #[test]
    fn quick_pauses_a_waiter_on_the_strong_sql_rows_alone() {
        for row in Row::every() {
            let quick = Fault::quick(row);
            let sql = matches!(row, Row::Postgres | Row::PostgresAdvisory | Row::Mysql);
            assert_eq!(quick.contains(&Fault::PauseWaiter), sql, "{row:?}");
        }
    }

    /// The faults that need several members.
    const NEED_MEMBERS: [Fault; 4] = [
        Fault::KillLeader,
        Fault::FreezeMember,
        Fault::IsolateFollower,
        Fault::StaleTurn,
    ];

    #[test]
    fn fault_fourteen_runs_on_the_etcd_cluster_and_its_mutant_alone() {
        use crate::mutant::Mutant;
        let fault = Fault::StaleTurn;
        assert_eq!((fault.number(), fault.id()), (14, "stale-turn"));
        let mutant = Row::Mutant(Mutant::UnconfirmedTurn);
        for row in Row::every() {
            let applies = matches!(row, Row::Etcd3) || row == mutant;
            assert_eq!(fault.inapplicable(row).is_none(), applies, "{row:?}");
            assert_eq!(Fault::quick(row).contains(&fault), applies, "{row:?}");
            // The real rows' tables show it, inapplicable where it does not apply.
            let in_full = !row.must_be_caught() || row == mutant;
            assert_eq!(Fault::full(row).contains(&fault), in_full, "{row:?}");
        }
        assert_eq!(Fault::full(mutant), [Fault::None, fault]);
        assert_eq!(mutant.service_row(), Row::Etcd3);
        assert!(mutant.must_be_caught());
        assert_eq!(Contended::Lock.inapplicable(fault, Row::Etcd3), None);
        for primitive in [Contended::Permit, Contended::Many] {
            assert!(primitive.inapplicable(fault, Row::Etcd3).is_some());
        }
        assert_eq!(
            fault.lease_end_offset(Row::Etcd3, Duration::from_secs(1)),
            Duration::ZERO
        );
    }

    /// The real row `id`, after checking that it is one strong-token server.
    fn single_strong_row(id: &str) -> Row {
        let row = Row::parse(id).unwrap_or_else(|| panic!("no row {id}"));
        assert!(Row::ALL.contains(&row) && row.strong_tokens(), "{row:?}");
        assert_eq!(row.members(), 1, "{row:?}");
        row
    }

    #[test]
    fn the_mysql_row_is_strong_single_and_keeps_its_leases_across_a_restart() {
        let row = single_strong_row("mysql");
        assert_eq!(row, Row::Mysql);
        for fault in Fault::ALL {
            let applies = fault.inapplicable(row).is_none();
            assert_eq!(applies, !NEED_MEMBERS.contains(&fault), "{fault:?}");
        }
        assert_eq!(
            Fault::quick(row),
            [Fault::None, Fault::PauseHolder, Fault::PauseWaiter]
        );
        let ttl = Duration::from_secs(1);
        for fault in [Fault::KillServer, Fault::BriefOutage, Fault::PauseServer] {
            assert_eq!(fault.lease_end_offset(row, ttl), ttl, "{fault:?}");
        }
        assert_eq!(Fault::BreakLock.lease_end_offset(row, ttl), Duration::ZERO);
        for primitive in [Contended::Write, Contended::Permit] {
            assert_eq!(primitive.inapplicable(Fault::None, row), None);
        }
    }

    #[test]
    fn the_mysql_named_row_is_weak_and_loses_its_lock_with_its_session() {
        let row = Row::MysqlNamed;
        assert_eq!(Row::parse("mysql-named"), Some(row));
        assert!(Row::ALL.contains(&row) && !row.strong_tokens());
        for fault in Fault::ALL {
            let applies = fault.inapplicable(row).is_none();
            assert_eq!(applies, !NEED_MEMBERS.contains(&fault), "{fault:?}");
        }
        assert_eq!(Fault::quick(row), [Fault::None, Fault::PauseHolder]);
        assert_the_session_is_the_lease(row);
    }

    /// A row whose lock lives in a server session: a restart or a break
    /// ends its lease at once, a stall a TTL later, and it has plain locks
    /// only.
    fn assert_the_session_is_the_lease(row: Row) {
        let ttl = Duration::from_secs(1);
        for fault in [Fault::KillServer, Fault::BriefOutage, Fault::BreakLock] {
            let end = fault.lease_end_offset(row, ttl);
            assert_eq!(end, Duration::ZERO, "{row:?} {fault:?}");
        }
        for fault in [Fault::PauseServer, Fault::PauseWaiter] {
            assert_eq!(fault.lease_end_offset(row, ttl), ttl, "{row:?} {fault:?}");
        }
        for primitive in [Contended::Write, Contended::Permit] {
            assert!(
                primitive.inapplicable(Fault::None, row).is_some(),
                "{row:?}"
            );
        }
        assert_eq!(Contended::Lock.inapplicable(Fault::None, row), None);
    }

    #[test]
    fn the_advisory_row_is_strong_single_and_loses_its_lock_with_its_session() {
        let row = single_strong_row("postgres-advisory");
        assert_eq!(row, Row::PostgresAdvisory);
        for fault in NEED_MEMBERS {
            assert!(fault.inapplicable(row).is_some(), "{fault:?}");
        }
        assert_the_session_is_the_lease(row);
        let ttl = Duration::from_secs(1);
        for fault in [Fault::KillServer, Fault::BriefOutage, Fault::BreakLock] {
            assert_eq!(
                fault.lease_end_offset(Row::Postgres, ttl) == ttl,
                fault != Fault::BreakLock
            );
        }
    }
}

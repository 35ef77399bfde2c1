//! A trial's shape, drawn from a seed: when the fault strikes, whom it
//! takes, how long it lasts and how long the victim lingers after it. The
//! run's seed and a cell's row, primitive and fault give the cell's seed, which with
//! the trial's number gives the trial's: `--seed` replays any of them.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::contended::Contended;
use super::faults::Fault;
use super::row::Row;

/// SplitMix64: one well-mixed step, so that nearby inputs give unrelated
/// seeds.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The seed of `row` × `fault` in a run seeded with `run`, the clients
/// contending on `contended`: each primitive's row draws its own timings
/// (the lock's seed is the row's alone).
pub fn cell_seed(run: u64, row: Row, contended: Contended, fault: Fault) -> u64 {
    let label = contended.label(row);
    let name = label.bytes().fold(0u64, |h, b| mix(h ^ u64::from(b)));
    mix(run ^ mix(name ^ u64::from(fault.number())))
}

/// The seed of trial `index` of a cell.
pub fn trial_seed(cell: u64, index: u32) -> u64 {
    mix(cell ^ mix(u64::from(index) + 1))
}

/// What a trial draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The trial's seed, which drew everything below.
    pub seed: u64,
    /// Contention between the clients' warm-up and the fault.
    pub lead: Duration,
    /// The client to keep inside its section through the fault.
    pub victim: u32,
    /// How long a pause, partition, freeze or cut-off lasts.
    pub span: Duration,
    /// How long a paused or partitioned victim stays in its section after
    /// the heal, writing while its guard says held.
    pub linger: Duration,
    /// Fault 10: when the victim is killed.
    pub kill: KillAt,
    /// Fault 13: how long after the waiting victim is paused the holder
    /// releases, short of the TTL, so that a grant to the victim is sent
    /// while its queue entry still lives.
    pub handover: Duration,
}

/// When fault 10 kills its victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillAt {
    /// Inside its critical section.
    InSection,
    /// As it leaves its section and releases.
    AtRelease,
    /// While it waits to acquire, another client holding.
    Waiting,
}

impl Shape {
    /// Draws the shape of a trial of `fault` from `seed`, for `clients`
    /// clients with leases of `ttl`, after at least `before` of contention;
    /// `span` is the length of faults whose length is not drawn.
    pub fn draw(
        seed: u64,
        fault: Fault,
        clients: u32,
        ttl: Duration,
        before: Duration,
        span: Duration,
    ) -> Shape {
        let mut rng = StdRng::seed_from_u64(seed);
        let lead = before + before.mul_f64(rng.random_range(0.0..1.0));
        // Under faults 8 and 11 the victim must be one of the clients of
        // the follower that is cut off or paused: the even ones (with one
        // server, every client uses it).
        let victim = if matches!(fault, Fault::IsolateFollower | Fault::PauseServer) {
            2 * rng.random_range(0..clients.div_ceil(2))
        } else {
            rng.random_range(0..clients)
        };
        let span = match fault {
            Fault::PauseHolder
            | Fault::PartitionHolder
            | Fault::FreezeMember
            | Fault::IsolateFollower
            | Fault::PauseServer
            | Fault::PauseWaiter
            | Fault::StaleTurn => ttl.mul_f64(rng.random_range(1.2..2.5)),
            // Down for less than a TTL before the restart begins.
            Fault::BriefOutage => ttl.mul_f64(rng.random_range(0.2..0.7)),
            _ => span,
        };
        let linger = Duration::from_millis(rng.random_range(100..400));
        let kill = match rng.random_range(0..3) {
            0 => KillAt::InSection,
            1 => KillAt::AtRelease,
            _ => KillAt::Waiting,
        };
        // Drawn last, so that the other faults' shapes are those of
        // earlier runs of the same seed.
        let handover = ttl.mul_f64(rng.random_range(0.005..0.06));
        Shape {
            seed,
            lead,
            victim,
            span,
            linger,
            kill,
            handover,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_shape_and_cells_get_different_seeds() {
        let ttl = Duration::from_secs(1);
        let before = Duration::from_millis(300);
        let draw = |seed| Shape::draw(seed, Fault::IsolateFollower, 4, ttl, before, ttl);
        assert_eq!(draw(7), draw(7));
        for seed in 0..50 {
            let shape = draw(seed);
            assert_eq!(shape.victim % 2, 0, "{shape:?}");
            assert!(shape.span >= ttl.mul_f64(1.2) && shape.span < ttl.mul_f64(2.5));
        }
        let lock = Contended::Lock;
        let a = cell_seed(1, Row::Etcd, lock, Fault::PauseHolder);
        assert_ne!(a, cell_seed(1, Row::Etcd3, lock, Fault::PauseHolder));
        assert_ne!(a, cell_seed(1, Row::Etcd, lock, Fault::PartitionHolder));
        let seeds: Vec<u64> = Contended::ALL
            .into_iter()
            .map(|c| cell_seed(1, Row::Etcd3, c, Fault::FreezeMember))
            .collect();
        for (i, s) in seeds.iter().enumerate() {
            assert!(
                !seeds[i + 1..].contains(s),
                "{seeds:?}: primitives share a seed"
            );
        }
        assert_ne!(trial_seed(a, 0), trial_seed(a, 1));
    }

    #[test]
    fn a_paused_server_outlasts_the_ttl_and_a_brief_outage_does_not() {
        let ttl = Duration::from_secs(1);
        let before = Duration::from_millis(300);
        for seed in 0..50 {
            let paused = Shape::draw(seed, Fault::PauseServer, 4, ttl, before, ttl);
            assert_eq!(paused.victim % 2, 0, "{paused:?}");
            assert!(paused.span > ttl, "{paused:?}");
            let outage = Shape::draw(seed, Fault::BriefOutage, 4, ttl, before, ttl);
            assert!(outage.span < ttl, "{outage:?}");
        }
    }

    #[test]
    fn faults_eleven_and_twelve_parse_and_apply_where_there_is_a_server() {
        assert_eq!(Fault::parse("11"), Some(Fault::PauseServer));
        assert_eq!(Fault::parse("12"), Some(Fault::BriefOutage));
        assert_eq!(Fault::parse("13"), Some(Fault::PauseWaiter));
        assert_eq!(Fault::parse("14"), Some(Fault::StaleTurn));
        assert_eq!(Fault::parse("15"), None);
        for row in [
            Row::Etcd,
            Row::Etcd3,
            Row::Redis,
            Row::Zk,
            Row::Zk3,
            Row::Postgres,
            Row::PostgresAdvisory,
            Row::Mysql,
            Row::MysqlNamed,
        ] {
            assert_eq!(Fault::PauseServer.inapplicable(row), None, "{row:?}");
            assert_eq!(Fault::BriefOutage.inapplicable(row), None, "{row:?}");
        }
        assert_eq!(Fault::BriefOutage.inapplicable(Row::Redlock), None);
        for row in [Row::Redlock, Row::RedisCluster, Row::File, Row::Broken] {
            assert!(Fault::PauseServer.inapplicable(row).is_some(), "{row:?}");
        }
        assert!(Fault::BriefOutage.inapplicable(Row::RedisCluster).is_some());
    }

    #[test]
    fn a_paused_waiter_outlasts_the_ttl_and_its_holder_releases_well_before() {
        let ttl = Duration::from_secs(1);
        let before = Duration::from_millis(300);
        for seed in 0..50 {
            let shape = Shape::draw(seed, Fault::PauseWaiter, 4, ttl, before, ttl);
            assert!(shape.span > ttl, "{shape:?}");
            assert!(shape.handover < ttl / 10, "{shape:?}");
            assert!(shape.victim < 4, "{shape:?}");
        }
        // The hand-over delay is drawn last: the other draws are unchanged.
        let paused = Shape::draw(3, Fault::PauseWaiter, 4, ttl, before, ttl);
        let holder = Shape::draw(3, Fault::PauseHolder, 4, ttl, before, ttl);
        assert_eq!((paused.lead, paused.victim), (holder.lead, holder.victim));
        assert_eq!(paused.span, holder.span);
    }
}

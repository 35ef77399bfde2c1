//! The generated part of `docs/safety.md`: where the run came from, a
//! headline per token strength (what was shown and what was not), and the
//! tables. Every figure comes from the JSON document, so the page can be
//! regenerated from `docs/safety.json` and never drifts from it.

use std::fmt::Write as _;

use super::cell::Cell;
use super::report::{Document, table};
use super::row::Row;

/// Where the generated part of a page begins.
pub const BEGIN: &str = "<!-- fault-matrix:begin (generated from docs/safety.json by `fault-matrix --from-json docs/safety.json --splice docs/safety.md`; do not edit) -->";
/// Where it ends.
pub const END: &str = "<!-- fault-matrix:end -->";

/// The verdicts that can catch a broken promise, as `problems` name them.
const CATCHES: [(&str, &str); 6] = [
    ("history not linearizable", "non-linearizable history"),
    ("with no fault: two clients inside", "overlap with no fault"),
    ("vouched stale write", "vouched stale write"),
    ("fired only after another client", "late lost signal"),
    ("fenced violation", "fenced violation"),
    ("token regression", "token regression"),
];

/// Sums over the measured cells of one group of rows.
#[derive(Debug, Default)]
struct Sums {
    cells: usize,
    trials: u64,
    failures: u64,
    known: u64,
    overlaps_at_rest: u64,
    overlaps_under_faults: u64,
    vouched: u64,
    vouched_broken_from_outside: u64,
    fenced_violations: u64,
    token_regressions: u64,
    histories_bad: u64,
    histories_undecided: u64,
    rows: Vec<String>,
}

impl Sums {
    fn of<'a>(cells: impl Iterator<Item = &'a Cell>) -> Sums {
        let mut s = Sums::default();
        for c in cells.filter(|c| c.status == "measured") {
            s.cells += 1;
            s.trials += u64::from(c.trials);
            s.failures += u64::from(c.failures);
            s.known += u64::from(c.known_failures);
            if c.fault == 1 {
                s.overlaps_at_rest += c.overlaps;
            } else {
                s.overlaps_under_faults += c.overlaps;
            }
            if c.fault == 9 {
                s.vouched_broken_from_outside += c.vouched_stale_writes;
            } else {
                s.vouched += c.vouched_stale_writes;
            }
            s.fenced_violations += c.fenced_violations;
            s.histories_bad += u64::from(c.history_not_linearizable);
            s.histories_undecided += u64::from(c.history_unknown);
            s.token_regressions += c.token_regressions;
            if !s.rows.contains(&c.backend) {
                s.rows.push(c.backend.clone());
            }
        }
        s
    }
}

fn row_of(cell: &Cell) -> Option<Row> {
    let id = cell.backend.split('/').next().unwrap_or_default();
    Row::parse(id)
}

/// The headline: per token strength, what the run showed and what it did
/// not; then what caught each broken and mutant row.
pub fn headline(doc: &Document) -> String {
    if doc.schema < 2 {
        return format!(
            "- **Not judged:** this run (schema {}) predates trials, verdicts and mutants; the \
             tables show its measurements only. Rerun the matrix to judge them.\n",
            doc.schema
        );
    }
    let cells = &doc.cells;
    let real = |strong: bool| {
        cells.iter().filter(move |c| {
            row_of(c).is_some_and(|r| !r.must_be_caught() && r.strong_tokens() == strong)
        })
    };
    let mut out = String::new();
    let strong = Sums::of(real(true));
    if strong.cells > 0 {
        let verdict = if strong.failures == 0 {
            "held"
        } else {
            "**failed**"
        };
        let _ = writeln!(
            out,
            "- **Strong tokens ({}): the promise {verdict}.** In {} over {}: {}, {} with no \
             fault, {}, {}, {} (a guard saying held after another client was granted a higher \
             token) outside a lock broken from outside ({} there, where no client can know in \
             time), {} with a history not linearizable ({} undecided); {} only on the known etcd \
             server bug (shown by the server, reported as known failures, not passes). Not \
             shown: faults this table does not make (clock jumps, disk loss, a server's own data \
             corrupted), and timings beyond the trials drawn.",
            strong.rows.join(", "),
            count(strong.trials, "trial", "trials"),
            count(strong.cells as u64, "cell", "cells"),
            count(strong.failures, "failing trial", "failing trials"),
            count(strong.overlaps_at_rest, "overlap", "overlaps"),
            count(
                strong.fenced_violations,
                "fenced violation",
                "fenced violations"
            ),
            count(
                strong.token_regressions,
                "token regression",
                "token regressions"
            ),
            count(
                strong.vouched,
                "vouched stale write",
                "vouched stale writes"
            ),
            strong.vouched_broken_from_outside,
            count(strong.histories_bad, "trial", "trials"),
            strong.histories_undecided,
            count(strong.known, "trial failed", "trials failed"),
        );
    }
    let weak = Sums::of(real(false));
    if weak.cells > 0 {
        let verdict = if weak.failures == 0 {
            "held"
        } else {
            "**failed**"
        };
        let _ = writeln!(
            out,
            "- **Best-effort tokens ({}): exclusion at rest {verdict}.** In {} over {}: {}, {} \
             with no fault. Under faults the run reports, and does not judge, {} with a history \
             not linearizable, {}, {}, {} and {}. Not shown: the ways best-effort tokens break \
             (a replica promoted without the last grant, a server clock going back, a counter \
             re-seeded below a live token) are not exercised by any fault here.",
            weak.rows.join(", "),
            count(weak.trials, "trial", "trials"),
            count(weak.cells as u64, "cell", "cells"),
            count(weak.failures, "failing trial", "failing trials"),
            count(weak.overlaps_at_rest, "overlap", "overlaps"),
            count(weak.histories_bad, "trial", "trials"),
            count(weak.overlaps_under_faults, "overlap", "overlaps"),
            count(
                weak.vouched + weak.vouched_broken_from_outside,
                "vouched stale write",
                "vouched stale writes"
            ),
            count(
                weak.fenced_violations,
                "fenced violation",
                "fenced violations"
            ),
            count(
                weak.token_regressions,
                "token regression",
                "token regressions"
            ),
        );
    }
    out.push_str(&second_checker(cells));
    let caught: Vec<Row> = Row::every().filter(|r| r.must_be_caught()).collect();
    let mut lines = Vec::new();
    for row in caught {
        let of_row: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.backend == row.id() && c.status == "measured")
            .collect();
        if of_row.is_empty() {
            continue;
        }
        let mut by = Vec::new();
        for c in of_row.iter().filter(|c| c.detected == Some(true)) {
            let names: Vec<&str> = CATCHES
                .iter()
                .filter(|(needle, _)| c.problems.iter().any(|p| p.contains(needle)))
                .map(|(_, name)| *name)
                .collect();
            by.push(format!("fault {}: {}", c.fault, names.join(", ")));
        }
        let trials: u32 = of_row.iter().map(|c| c.trials).sum();
        let second: u32 = of_row.iter().map(|c| c.second_not_linearizable).sum();
        let second = if of_row.iter().any(|c| c.second_verdict.is_some()) {
            format!(" (second checker: not linearizable in {second} of {trials} trials)")
        } else {
            String::new()
        };
        lines.push(if by.is_empty() {
            format!("`{row}` **undetected**{second}")
        } else {
            format!("`{row}` caught by {}{second}", by.join("; "))
        });
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "- **The verdicts can fail:** {}.", lines.join("; "));
    }
    out
}

/// The second checker's line: how many histories it judged, what it found
/// next to the project's checker, and the disagreements (none when the run
/// passed). Empty for runs from before it.
fn second_checker(cells: &[Cell]) -> String {
    let measured: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.status == "measured" && c.second_verdict.is_some())
        .collect();
    if measured.is_empty() {
        return String::new();
    }
    let sum = |f: fn(&Cell) -> u64| measured.iter().map(|c| f(c)).sum::<u64>();
    let trials = sum(|c| u64::from(c.trials));
    let bad = sum(|c| u64::from(c.second_not_linearizable));
    let undecided = sum(|c| u64::from(c.second_unknown));
    let own = sum(|c| u64::from(c.history_not_linearizable));
    let disagreements = sum(|c| c.disagreements.len() as u64);
    format!(
        "- **A second checker ({}, porcupine's algorithm, with models of exclusion and of a \
         fenced register):** of {}, it found {} not linearizable (the project's checker: {}) and \
         left {} undecided; the two disagreed on {}.\n",
        super::second::CHECKER,
        count(trials, "history", "histories"),
        bad,
        own,
        undecided,
        count(disagreements, "history", "histories"),
    )
}

/// `n` and what it counts, `one` or `many` as `n` asks.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Where the run came from, in one paragraph.
pub fn provenance(doc: &Document) -> String {
    let dirty = if doc.dirty {
        " with uncommitted changes"
    } else {
        ""
    };
    format!(
        "Run `{}` on commit `{}`{dirty}, {}, seed `{:#x}`: {:.0} s on {} (load average {} at \
         the end).\n",
        doc.command,
        if doc.commit.is_empty() {
            "unknown"
        } else {
            &doc.commit
        },
        if doc.date.is_empty() {
            "date unknown"
        } else {
            &doc.date
        },
        doc.seed,
        doc.wall_s,
        count(doc.cores as u64, "core", "cores"),
        doc.load_average,
    )
}

/// The whole generated part: provenance, headline, tables.
pub fn markdown(doc: &Document) -> String {
    format!(
        "{}\n{}\n{}",
        provenance(doc),
        headline(doc),
        table(&doc.cells)
    )
}

/// `page` with the text between [`BEGIN`] and [`END`] replaced by
/// `generated`.
pub fn splice(page: &str, generated: &str) -> Result<String, String> {
    let begin = page
        .find(BEGIN)
        .ok_or_else(|| format!("no {BEGIN:?} marker in the page"))?;
    let end = page
        .find(END)
        .filter(|&e| e > begin)
        .ok_or_else(|| format!("no {END:?} marker after the begin marker"))?;
    Ok(format!(
        "{}{BEGIN}\n\n{}\n{}",
        &page[..begin],
        generated.trim_end(),
        &page[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splicing_replaces_only_between_the_markers_and_needs_both() {
        let page = format!("intro\n{BEGIN}\nold\n{END}\noutro\n");
        let spliced = splice(&page, "new\n").unwrap();
        assert_eq!(spliced, format!("intro\n{BEGIN}\n\nnew\n{END}\noutro\n"));
        assert_eq!(splice(&spliced, "new\n").unwrap(), spliced);
        assert!(splice("no markers", "x").is_err());
    }

    #[test]
    fn every_catch_is_named_in_the_singular_and_the_plural() {
        use crate::faults::Fault;
        use crate::mutant::Mutant;
        use crate::verdict::judge;
        let row = Row::Mutant(Mutant::SilentLoss);
        for n in [1, 2] {
            let mut texts = Vec::new();
            for fault in [Fault::None, Fault::PartitionHolder] {
                let mut cell = Cell::empty(row, fault, "measured", None);
                cell.overlaps = n;
                cell.fenced_violations = n;
                cell.token_regressions = n;
                cell.vouched_stale_writes = n;
                cell.late_lost_signals = n;
                cell.history_not_linearizable = 1;
                texts.extend(judge(row, fault, &cell, &[]).failing);
            }
            for (needle, name) in CATCHES {
                assert!(
                    texts.iter().any(|t| t.contains(needle)),
                    "{name} not found for {n}: {texts:?}"
                );
            }
        }
    }
}

//! The side-by-side table printed on stdout.

use std::fmt::Write as _;
use std::time::Duration;

use super::BenchOutput;

/// Milliseconds with two decimals from microseconds.
pub(super) fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// `value / baseline` for people: `1.00x`, `0.95x`, `12.3x`, `246x`; below
/// a tenth as a fraction, `1/246`, which reads at a glance where
/// `0.00406x` needs counting zeros.
pub(super) fn ratio(value: f64, baseline: f64) -> String {
    if baseline <= 0.0 {
        return "-".into();
    }
    let r = value / baseline;
    if r <= 0.0 {
        return "0x".into();
    }
    if r < 0.1 {
        return format!("1/{:.0}", 1.0 / r);
    }
    let decimals = (2 - r.log10().floor() as i32).clamp(0, 2) as usize;
    format!("{r:.decimals$}x")
}

/// The lines under the table that say what its less obvious columns mean.
pub(super) const LEGEND: &str = "\
vs first: acquisitions/s against the first row's (1/246: 246 times fewer)
fairness: the fewest acquisitions of any client divided by the most (1.00: all equal, 0: a client starved)
";

/// `figure`, or "-" where no hand-off was timed: they are timed for locks
/// under contention only, so a semaphore, a read-write lock or a lone
/// client has none.
fn if_handed_over(report: &distlock_workload::WorkloadReport, figure: String) -> String {
    if report.handoff.max_us == 0 {
        "-".into()
    } else {
        figure
    }
}

pub(super) fn render(output: &BenchOutput) -> String {
    let baseline = output
        .results
        .iter()
        .find_map(|r| r.report.as_ref().map(|rep| rep.per_second));
    let header = [
        "backend",
        "acq/s",
        "vs first",
        "p50 ms",
        "p99 ms",
        "max ms",
        "handoff p99 ms",
        "handoffs >50ms",
        "fairness",
        "violations",
        "errors",
        "url",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for result in &output.results {
        let row = match &result.report {
            Some(r) => vec![
                result.backend.clone(),
                format!("{:.0}", r.per_second),
                baseline.map_or("-".into(), |b| ratio(r.per_second, b)),
                ms(r.wait.p50_us),
                ms(r.wait.p99_us),
                ms(r.wait.max_us),
                if_handed_over(r, ms(r.handoff.p99_us)),
                if_handed_over(r, r.slow_handoffs.to_string()),
                format!("{:.2}", r.fairness),
                format!("{}", r.violations),
                format!("{}", r.errors),
                result.url.clone(),
            ],
            None => {
                let outcome = if result.applies { "failed" } else { "n/a" };
                let mut row = vec![result.backend.clone(), outcome.into()];
                row.extend(std::iter::repeat_n("-".to_owned(), 9));
                row.push(result.url.clone());
                row
            }
        };
        rows.push(row);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} clients, {} {}, {} per backend{}",
        output.clients,
        output.locks,
        super::load_of(output.primitive),
        human_ms(output.duration_ms),
        if output.hold_ms > 0 {
            format!(", {} hold", human_ms(output.hold_ms))
        } else {
            String::new()
        }
    );
    out.push_str(&aligned(&header, rows));
    out.push_str(LEGEND);
    out
}

/// Milliseconds as a person reads a duration (`2 s`, `0.3 s`).
pub(super) fn human_ms(ms: u128) -> String {
    distlock::human_duration(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
}

/// `rows` under `header` in columns as wide as their widest cell: the first
/// and last columns (names, URLs, notes) left-aligned, numbers right-aligned.
pub(super) fn aligned(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 || i == cells.len() - 1 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    );
    for row in rows {
        let _ = writeln!(out, "{}", line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_read_without_counting_zeros() {
        assert_eq!(ratio(1.0, 1.0), "1.00x");
        assert_eq!(ratio(0.95, 1.0), "0.95x");
        assert_eq!(ratio(12.34, 1.0), "12.3x");
        assert_eq!(ratio(246.0, 1.0), "246x");
        assert_eq!(ratio(0.00406, 1.0), "1/246");
        assert_eq!(ratio(0.0, 1.0), "0x");
        assert_eq!(ratio(1.0, 0.0), "-");
    }

    #[test]
    fn durations_in_the_title_are_for_people() {
        assert_eq!(human_ms(2000), "2 s");
        assert_eq!(human_ms(300), "0.3 s");
    }
}

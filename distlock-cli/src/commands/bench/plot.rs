//! The `--plot` chart: acquisitions/s, and p50/p99 wait, per backend, on log
//! scales (an in-memory backend is 100× faster than a networked one; a
//! linear scale would hide the networked ones).

use plotters::style::RGBColor;

use super::BenchOutput;
use super::chart::{Panel, Row, log_bar_panels};

const RATE: RGBColor = RGBColor(0x3b, 0x6f, 0xb6);
const P50: RGBColor = RGBColor(0xc0, 0x62, 0x2b);
const P99: RGBColor = RGBColor(0xf2, 0xb3, 0x6b);

/// The chart as an SVG document, or why plotters could not draw it.
pub(super) fn render(output: &BenchOutput) -> Result<String, String> {
    let row = |label: &str, bars, note| Row {
        label: label.to_owned(),
        bars,
        note,
    };
    let mut rates = Vec::new();
    let mut waits = Vec::new();
    for result in &output.results {
        let name = result.backend.as_str();
        let Some(report) = &result.report else {
            let outcome = if result.applies { "failed" } else { "n/a" };
            rates.push(row(name, Vec::new(), outcome.to_owned()));
            waits.push(row(name, Vec::new(), outcome.to_owned()));
            continue;
        };
        let rate = report.per_second;
        rates.push(row(name, vec![(rate, RATE)], format!("{rate:.0}/s")));
        let p50 = report.wait.p50_us as f64 / 1000.0;
        let p99 = report.wait.p99_us as f64 / 1000.0;
        waits.push(row(
            name,
            vec![(p99, P99), (p50, P50)],
            format!("{p50:.2} / {p99:.2}"),
        ));
    }
    let title = format!(
        "distlock bench: {} clients, {} {}, {} per backend",
        output.clients,
        output.locks,
        super::load_of(output.primitive),
        super::table::human_ms(output.duration_ms)
    );
    log_bar_panels(
        &title,
        &[
            Panel {
                caption: "acquisitions/s (log scale, higher is better)".to_owned(),
                rows: rates,
            },
            Panel {
                caption: "wait ms, p50 dark / p99 light (log scale, lower is better)".to_owned(),
                rows: waits,
            },
        ],
    )
}

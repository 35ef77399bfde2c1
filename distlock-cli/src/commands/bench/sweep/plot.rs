//! The sweep's `--plot` chart: the bench's log-scale bar panels, one row
//! per backend and point (`etcd 1000`), one colour per backend, so that each
//! backend's curve reads as a run of bars of its colour.

use plotters::style::RGBColor;

use super::super::chart::{Panel, Row, log_bar_panels};
use super::{Point, SweepOutput};
use crate::cli::Sweep;

/// One colour per backend, in URL order.
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x3b, 0x6f, 0xb6),
    RGBColor(0xc0, 0x62, 0x2b),
    RGBColor(0x4c, 0x9a, 0x4a),
    RGBColor(0x8e, 0x4a, 0x9e),
    RGBColor(0xb8, 0x9b, 0x2a),
    RGBColor(0x5a, 0x5a, 0x5a),
];

/// A value of a measured point, and its note; `None` if the point has none.
type Figure = fn(&Point) -> Option<(f64, String)>;

/// The chart as an SVG document, or why plotters could not draw it.
pub(super) fn render(output: &SweepOutput) -> Result<String, String> {
    let figures: Vec<(&str, Figure)> = if output.sweep == Sweep::Held {
        vec![
            ("server requests per held lock per TTL/3 (goal <= 1)", |p| {
                let r = p.held.as_ref()?.requests_per_lock_per_period()?;
                Some((r, format!("{r:.3}")))
            }),
            ("client CPU us per held lock per s", |p| {
                let c = p.held.as_ref()?.cpu_us_per_lock_second();
                Some((c, format!("{c:.1}")))
            }),
            ("client RSS bytes per held lock (goal <= 4096)", |p| {
                let b = p.held.as_ref()?.rss_per_lock();
                Some((b, format!("{b:.0}")))
            }),
            ("seconds to acquire them all", |p| {
                let s = p.held.as_ref()?.acquire_ms as f64 / 1000.0;
                Some((s, format!("{s:.2}")))
            }),
        ]
    } else {
        vec![
            ("acquisitions/s (higher is better)", |p| {
                let r = p.workload.as_ref()?.per_second;
                Some((r, format!("{r:.0}/s")))
            }),
            ("p99 wait ms (lower is better)", |p| {
                let ms = p.workload.as_ref()?.wait.p99_us as f64 / 1000.0;
                Some((ms, format!("{ms:.2}")))
            }),
        ]
    };
    let panels: Vec<Panel> = figures
        .iter()
        .map(|(caption, figure)| Panel {
            caption: format!("{caption}, log scale"),
            rows: rows(output, *figure),
        })
        .collect();
    let title = format!(
        "distlock bench --sweep {}: {}",
        output.sweep.as_str(),
        super::table::title(output)
    );
    log_bar_panels(&title, &panels)
}

/// A row per backend and point; a point without the figure gets a red note.
fn rows(output: &SweepOutput, figure: Figure) -> Vec<Row> {
    let mut rows = Vec::new();
    for (index, backend) in output.backends.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        for point in &backend.points {
            let label = format!("{} {}", backend.backend, point.at);
            rows.push(match figure(point) {
                Some((value, note)) => Row {
                    label,
                    bars: vec![(value, colour)],
                    note,
                },
                None => Row {
                    label,
                    bars: Vec::new(),
                    note: if point.error.is_some() {
                        "failed"
                    } else {
                        "n/a"
                    }
                    .to_owned(),
                },
            });
        }
    }
    rows
}

//! A hand-written SVG bar chart: acquisitions/s, and p50/p99 wait, per
//! backend, on log scales (an in-memory backend is 100× faster than a
//! networked one; a linear scale would hide the networked ones).

use std::fmt::Write as _;

use super::BenchOutput;

const ROW: f64 = 34.0;
const TOP: f64 = 70.0;
const LABEL: f64 = 90.0;
const PANEL: f64 = 300.0;
/// Room right of a panel for the value printed after the longest bar.
const VALUE_ROOM: f64 = 110.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A log10 axis spanning whole decades.
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    fn covering(min: f64, max: f64) -> Self {
        let lo = 10f64.powf(min.max(1e-3).log10().floor());
        let hi = 10f64.powf(max.max(lo * 10.0).log10().ceil());
        LogAxis { lo, hi }
    }

    fn x(&self, value: f64) -> f64 {
        let v = value.clamp(self.lo, self.hi);
        PANEL * (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
    }

    fn decades(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let mut d = self.lo;
        while d <= self.hi * 1.0001 {
            out.push(d);
            d *= 10.0;
        }
        out
    }
}

fn tick_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1000.0 {
        format!("{}k", v / 1000.0)
    } else {
        format!("{v}")
    }
}

pub(super) fn render(output: &BenchOutput) -> String {
    let rows: Vec<_> = output
        .results
        .iter()
        .map(|r| {
            let (rate, p50, p99) = r.report.as_ref().map_or((0.0, 0.0, 0.0), |rep| {
                (
                    rep.per_second,
                    rep.wait.p50_us as f64 / 1000.0,
                    rep.wait.p99_us as f64 / 1000.0,
                )
            });
            (r.backend.as_str(), rate, p50, p99, r.report.is_none())
        })
        .collect();
    let ok = || rows.iter().filter(|r| !r.4);
    let rates = LogAxis::covering(1.0, ok().map(|r| r.1).fold(1.0, f64::max));
    let waits = LogAxis::covering(
        ok().map(|r| r.2)
            .filter(|v| *v > 0.0)
            .fold(f64::MAX, f64::min)
            .min(1.0),
        ok().map(|r| r.3).fold(0.01, f64::max),
    );
    let left = LABEL;
    let right = LABEL + PANEL + VALUE_ROOM + LABEL;
    let width = right + PANEL + VALUE_ROOM;
    let bottom = TOP + ROW * rows.len() as f64;
    let height = bottom + 40.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">distlock bench: {} clients, {} lock(s), {} ms per backend</text>"#,
        output.clients, output.locks, output.duration_ms
    );
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="50">acquisitions/s (log scale, higher is better)</text><text x="{right}" y="50">wait ms, p50 dark / p99 light (log scale, lower is better)</text>"#
    );
    for (origin, axis) in [(left, &rates), (right, &waits)] {
        for decade in axis.decades() {
            let x = origin + axis.x(decade);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{bottom}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle" font-size="11" fill="#666">{}</text>"##,
                TOP - 4.0,
                bottom + 16.0,
                tick_label(decade)
            );
        }
    }
    for (i, (name, rate, p50, p99, failed)) in rows.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let name = escape(name);
        for x in [left, right] {
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="end">{name}</text>"#,
                x - 8.0,
                y + 17.0
            );
        }
        if *failed {
            let _ = writeln!(
                svg,
                r##"<text x="{left}" y="{}" fill="#b00">failed</text>"##,
                y + 17.0
            );
            continue;
        }
        let w = rates.x(*rate);
        let _ = writeln!(
            svg,
            r##"<rect x="{left}" y="{}" width="{w:.1}" height="22" fill="#3b6fb6"/><text x="{:.1}" y="{}">{rate:.0}/s</text>"##,
            y + 2.0,
            left + w + 5.0,
            y + 17.0
        );
        let (w50, w99) = (waits.x(*p50), waits.x(*p99));
        let _ = writeln!(
            svg,
            r##"<rect x="{right}" y="{}" width="{w99:.1}" height="22" fill="#f2b36b"/><rect x="{right}" y="{}" width="{w50:.1}" height="22" fill="#c0622b"/><text x="{:.1}" y="{}">{p50:.2} / {p99:.2}</text>"##,
            y + 2.0,
            y + 2.0,
            right + w99.max(w50) + 5.0,
            y + 17.0
        );
    }
    let _ = writeln!(svg, "</svg>");
    svg
}

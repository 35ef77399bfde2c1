//! Horizontal bar panels on log axes, as SVG, drawn with plotters: its SVG
//! backend writes text as `<text>` elements, so no font files are read.
//! Knows nothing of what is measured; callers map their data to rows.

use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One labelled row of a panel.
pub(super) struct Row {
    pub(super) label: String,
    /// Values and colours, drawn over each other from the axis start in
    /// this order: put the longest first. None at all is a missing
    /// measurement: the note is then shown in red where the bars would start.
    pub(super) bars: Vec<(f64, RGBColor)>,
    /// Printed right of the longest bar.
    pub(super) note: String,
}

/// A caption over rows sharing one log axis.
pub(super) struct Panel {
    pub(super) caption: String,
    pub(super) rows: Vec<Row>,
}

const FONT: &str = "sans-serif";
/// Pixels: per row, for the title and captions, for the row labels, per
/// panel (labels, axis and notes).
const ROW: u32 = 34;
const HEADER: u32 = 110;
const LABELS: u32 = 90;
const PANEL: u32 = 500;
/// Room right of a panel's axis for the note after the longest bar.
const NOTE_ROOM: u32 = 110;
const FAILED: RGBColor = RGBColor(0xbb, 0x00, 0x00);

/// The panels side by side under `title`, as an SVG document.
pub(super) fn log_bar_panels(title: &str, panels: &[Panel]) -> Result<String, String> {
    let rows = panels
        .iter()
        .map(|p| p.rows.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let size = (
        PANEL * panels.len().max(1) as u32,
        HEADER + ROW * rows as u32,
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let body = root
            .titled(title, (FONT, 19).into_font().style(FontStyle::Bold))
            .map_err(|e| e.to_string())?;
        for (area, panel) in body.split_evenly((1, panels.len())).iter().zip(panels) {
            draw_panel(area, panel).map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let n = panel.rows.len() as i32;
    // Segment i, counted from the bottom, holds row n-1-i: rows read top down.
    let segment = |row: usize| n - 1 - row as i32;
    let ticks = decades(panel.rows.iter().flat_map(|r| r.bars.iter().map(|b| b.0)));
    let (lo, hi) = (ticks[0], ticks[ticks.len() - 1]);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.caption, (FONT, 16))
        .margin_top(8)
        .margin_right(NOTE_ROOM)
        .x_label_area_size(22)
        .y_label_area_size(LABELS)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(ticks),
            (0..(n - 1).max(0)).into_segmented(),
        )?;
    let label_of = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) => usize::try_from(n - 1 - i)
            .ok()
            .and_then(|row| panel.rows.get(row))
            .map_or_else(String::new, |r| r.label.clone()),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .label_style((FONT, 16))
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&label_of)
        .draw()?;
    for (row_index, row) in panel.rows.iter().enumerate() {
        let y = segment(row_index);
        chart.draw_series(row.bars.iter().map(|&(value, color)| {
            let mut bar = Rectangle::new(
                [
                    (lo, SegmentValue::Exact(y)),
                    (value.clamp(lo, hi), SegmentValue::Exact(y + 1)),
                ],
                color.filled(),
            );
            bar.set_margin(6, 6, 0, 0);
            bar
        }))?;
        let end = row.bars.iter().map(|b| b.0).fold(lo, f64::max).min(hi);
        let color = if row.bars.is_empty() { FAILED } else { BLACK };
        let style = TextStyle::from((FONT, 16).into_font())
            .color(&color)
            .pos(Pos::new(HPos::Left, VPos::Center));
        chart.plotting_area().draw(
            &(EmptyElement::at((end, SegmentValue::CenterOf(y)))
                + Text::new(row.note.clone(), (5, 0), style)),
        )?;
    }
    Ok(())
}

/// Whole decades covering the positive values, at least two: the ticks.
fn decades(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let (min, max) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if max == 0.0 {
        return vec![1.0, 10.0];
    }
    // Rounded: log10 of an exact power of ten may come out a hair off.
    let decade = |v: f64| (v.log10() * 1e9).round() / 1e9;
    let lo = decade(min).floor() as i32;
    let hi = (decade(max).ceil() as i32).max(lo + 1);
    (lo..=hi).map(|e| 10f64.powi(e)).collect()
}

/// `1`, `0.01`, `20k`, `1M`: float noise from the log ticks rounded off.
fn tick_label(v: f64) -> String {
    let round = |x: f64| (x * 1e6).round() / 1e6;
    if v >= 1e6 {
        format!("{}M", round(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", round(v / 1e3))
    } else {
        format!("{}", round(v))
    }
}

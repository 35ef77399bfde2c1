//! An SVG timeline of a trial's history, for a person reading a failing
//! one: a lane per client with its holds (from the grant to the release or
//! the lost signal, labelled with the token), its writes (accepted,
//! rejected, unknown), its unknown calls and its lost signals.

use std::fmt::Write as _;

use distlock_testkit::history::Outcome;

use super::history::{Call, Op};
use super::history_file::HistoryFile;

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 90.0;
const LANE: f64 = 46.0;
const TOP: f64 = 70.0;

/// The timeline of `file` as an SVG document.
pub fn svg(file: &HistoryFile) -> String {
    let calls = file.calls();
    let end = calls
        .iter()
        .map(|c| c.complete_ns)
        .chain([file.cut_ns])
        .max()
        .unwrap_or(1)
        .max(1);
    let x = |ns: u64| LEFT + (WIDTH - LEFT - 20.0) * ns as f64 / end as f64;
    let lanes = file.clients.len().max(1) as f64;
    let height = TOP + lanes * LANE + 60.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    out.push_str(
        r##"<defs><pattern id="unknown" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#bbb"/></pattern></defs>"##,
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="18" font-size="13" font-weight="bold">{} fault {} ({}), seed {}, lock {}</text>"#,
        escape(&file.backend),
        file.fault,
        escape(&file.fault_id),
        escape(&file.seed),
        escape(&file.lock)
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="34">own checker: {}</text><text x="10" y="48">{}</text>"#,
        escape(&shorten(&file.own_verdict)),
        escape(&shorten(&file.second_verdict))
    );
    for (lane, client) in file.clients.iter().enumerate() {
        let y = TOP + lane as f64 * LANE;
        let _ = writeln!(
            out,
            r##"<text x="10" y="{}">client {}</text><line x1="{LEFT}" x2="{}" y1="{}" y2="{}" stroke="#ddd"/>"##,
            y + 22.0,
            client.client,
            WIDTH - 20.0,
            y + LANE - 2.0,
            y + LANE - 2.0
        );
        for hold in holds(&client.calls, file.cut_ns) {
            let (x0, x1) = (x(hold.from), x(hold.to).max(x(hold.from) + 1.0));
            let _ = writeln!(
                out,
                r##"<rect x="{x0:.1}" y="{}" width="{:.1}" height="16" fill="#9cc3e6" stroke="#2f6fa8"><title>{}</title></rect><text x="{:.1}" y="{}">{}</text>"##,
                y + 8.0,
                x1 - x0,
                escape(&hold.title),
                x0 + 2.0,
                y + 20.0,
                hold.label
            );
        }
        for call in &client.calls {
            mark(&mut out, call, y, &x);
        }
    }
    legend(&mut out, height - 30.0);
    out.push_str("</svg>\n");
    out
}

/// One hold of a client: from its grant to its release, its lost signal,
/// or the end of the history.
struct Hold {
    from: u64,
    to: u64,
    label: String,
    title: String,
}

fn holds(calls: &[Call], cut_ns: u64) -> Vec<Hold> {
    let mut out = Vec::new();
    let mut open: Option<&Call> = None;
    for call in calls {
        let ends = matches!(call.op, Op::Release | Op::Lost) && call.outcome != Outcome::Fail;
        if call.op == Op::Acquire && call.outcome == Outcome::Ok {
            open = Some(call);
        } else if ends && let Some(grant) = open.take() {
            out.push(hold(grant, call.complete_ns, call));
        }
    }
    if let Some(grant) = open {
        out.push(Hold {
            from: grant.complete_ns,
            to: cut_ns.max(grant.complete_ns),
            label: token_label(grant),
            title: format!("{} held to the end of the history", token_label(grant)),
        });
    }
    out
}

fn hold(grant: &Call, to: u64, end: &Call) -> Hold {
    let how = match end.op {
        Op::Lost => "until its lost signal",
        _ if end.outcome == Outcome::Info => "until a release of unknown outcome",
        _ => "until its release",
    };
    Hold {
        from: grant.complete_ns,
        to: to.max(grant.complete_ns),
        label: token_label(grant),
        title: format!(
            "{} granted at {}, held {how} at {}",
            token_label(grant),
            ms(grant.complete_ns),
            ms(to)
        ),
    }
}

/// A call drawn over its lane: writes as ticks, unknown calls hatched,
/// lost signals as a cross.
fn mark(out: &mut String, call: &Call, y: f64, x: &impl Fn(u64) -> f64) {
    let title = format!(
        "{:?} {} {} [{}, {}]",
        call.op,
        call.token.map_or(String::new(), |t| format!("token {t}")),
        call.outcome,
        ms(call.invoke_ns),
        ms(call.complete_ns)
    );
    let title = escape(&title);
    match (call.op, call.outcome) {
        (Op::Write, outcome) => {
            let colour = match outcome {
                Outcome::Ok => "#2a9d3a",
                Outcome::Fail => "#d62828",
                Outcome::Info => "#f4a100",
            };
            let _ = writeln!(
                out,
                r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="{colour}" stroke-width="2"><title>{title}</title></line>"#,
                x(call.invoke_ns),
                y + 4.0,
                y + 28.0
            );
        }
        (Op::Lost, _) => {
            let cx = x(call.complete_ns);
            let _ = writeln!(
                out,
                r#"<path d="M{:.1} {} l8 8 m0 -8 l-8 8" stroke="black" stroke-width="2"><title>{title}</title></path>"#,
                cx - 4.0,
                y + 30.0
            );
        }
        (_, Outcome::Info) => {
            let (x0, x1) = (x(call.invoke_ns), x(call.complete_ns));
            let _ = writeln!(
                out,
                r#"<rect x="{x0:.1}" y="{}" width="{:.1}" height="8" fill="url(#unknown)" stroke="gray"><title>{title} (unknown outcome)</title></rect>"#,
                y + 30.0,
                (x1 - x0).max(2.0)
            );
        }
        _ => {}
    }
}

fn legend(out: &mut String, y: f64) {
    let _ = writeln!(
        out,
        r##"<rect x="10" y="{y}" width="30" height="12" fill="#9cc3e6" stroke="#2f6fa8"/><text x="45" y="{0}">hold (token)</text>
<line x1="140" x2="140" y1="{y}" y2="{1}" stroke="#2a9d3a" stroke-width="2"/><text x="146" y="{0}">write accepted</text>
<line x1="250" x2="250" y1="{y}" y2="{1}" stroke="#d62828" stroke-width="2"/><text x="256" y="{0}">write rejected (stale)</text>
<line x1="390" x2="390" y1="{y}" y2="{1}" stroke="#f4a100" stroke-width="2"/><text x="396" y="{0}">write of unknown outcome</text>
<rect x="550" y="{y}" width="30" height="8" fill="url(#unknown)" stroke="gray"/><text x="585" y="{0}">acquire or release of unknown outcome</text>
<path d="M800 {y} l8 8 m0 -8 l-8 8" stroke="black" stroke-width="2"/><text x="814" y="{0}">lost signal; hover for times (ms since the trial's origin)</text>"##,
        y + 10.0,
        y + 12.0,
    );
}

fn token_label(grant: &Call) -> String {
    grant
        .token
        .map_or_else(|| "held".to_owned(), |t| format!("token {t}"))
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn shorten(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_file::FORMAT;
    use distlock_testkit::history::Mode;

    #[test]
    fn a_timeline_shows_each_clients_holds_writes_and_unknown_calls() {
        let call = crate::second::tests::call;
        let calls = vec![
            call(0, Op::Acquire, 7, (0, 1_000), Outcome::Ok),
            call(0, Op::Write, 7, (2_000, 3_000), Outcome::Fail),
            call(0, Op::Lost, 7, (4_000, 4_000), Outcome::Ok),
            call(1, Op::Acquire, 9, (500, 900), Outcome::Info),
        ];
        let file = HistoryFile {
            format: FORMAT.into(),
            backend: "etcd".into(),
            fault: 2,
            fault_id: "pause-holder".into(),
            seed: "0x1".into(),
            lock: "a<b".into(),
            mode: Mode::Exclusive,
            fencing: true,
            cut_ns: 5_000,
            killed: None,
            own_verdict: "lock l is not linearizable".into(),
            second_verdict: "porcupine-rs 0.3.0: not linearizable".into(),
            clients: HistoryFile::group(&calls),
        };
        let svg = svg(&file);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(
            svg.contains(">token 7<"),
            "the hold is labelled with its token"
        );
        assert!(svg.contains("#d62828"), "the rejected write is drawn");
        assert!(svg.contains("url(#unknown)\" stroke=\"gray\"><title>"));
        assert!(svg.contains("a&lt;b"), "text is escaped");
        assert_eq!(svg.matches(">client ").count(), 2);
    }
}

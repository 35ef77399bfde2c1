//! `distlock bench --plot`: the chart of a real run on two backends is a
//! well-formed SVG document naming each backend, with numeric axis labels.

mod support;

use std::time::Duration;

use support::{distlock, file_fixture, output_within, stderr, usage_error};

/// The text content of every `<text>` element, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|rest| {
            let body = &rest[rest.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_owned())
        })
        .collect()
}

/// Every start tag is closed, in order, and nothing follows the root.
fn assert_well_formed(svg: &str) {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = svg.trim();
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').expect("an unterminated tag") + start;
        let tag = &rest[start + 1..end];
        let name = tag.split_whitespace().next().unwrap_or("");
        if let Some(closing) = name.strip_prefix('/') {
            let expected = open.pop().unwrap_or_else(|| panic!("stray <{tag}>"));
            assert_eq!(expected, closing, "tags closed out of order");
        } else if !tag.ends_with('/') {
            assert!(!name.is_empty(), "an empty tag <{tag}>");
            open.push(name);
        }
        rest = &rest[end + 1..];
        if open.is_empty() {
            assert!(rest.trim().is_empty(), "content after the root: {rest:.80}");
        }
    }
    assert!(open.is_empty(), "unclosed tags: {open:?}");
}

/// `10`, `0.01`, `20k`, `1M`.
fn is_axis_number(text: &str) -> bool {
    let digits = text.trim_end_matches(['k', 'M']);
    !digits.is_empty() && digits.parse::<f64>().is_ok()
}

#[tokio::test]
async fn plot_is_an_svg_chart_of_every_backend() {
    let fixture = file_fixture();
    let work = tempfile::tempdir().unwrap();
    let svg = work.path().join("out.svg");
    let output = output_within(
        Duration::from_secs(30),
        distlock(None)
            .args(["bench", "--url", "memory://", "--url", &fixture.url])
            .args(["--clients", "2", "--locks", "1", "--duration", "300ms"])
            .arg("--plot")
            .arg(&svg),
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg"), "{svg:.200}");
    assert!(svg.trim_end().ends_with("</svg>"), "{svg:.200}");
    assert_well_formed(&svg);
    let texts = texts(&svg);
    assert!(
        texts
            .iter()
            .any(|t| t.contains("2 clients, 1 lock(s), 0.3 s per backend")),
        "no title with the run's shape: {texts:?}"
    );
    for backend in ["memory", "file"] {
        // A row label in each panel: rates and waits.
        let labels = texts.iter().filter(|t| *t == backend).count();
        assert_eq!(labels, 2, "{backend} labels: {texts:?}");
    }
    let numbers = texts.iter().filter(|t| is_axis_number(t)).count();
    assert!(
        numbers >= 4,
        "want at least two numeric axis labels per panel: {texts:?}"
    );
    assert!(
        texts.iter().filter(|t| t.ends_with("/s")).count() == 2,
        "a rate note per backend: {texts:?}"
    );
}

/// `--primitive semaphore` and `--primitive rwlock` load the primitive
/// itself: the JSON names it, the run made grants and its online checks
/// (permits within the limit, writers alone) found nothing.
#[tokio::test]
async fn bench_loads_semaphores_and_read_write_locks() {
    let work = tempfile::tempdir().unwrap();
    for (flags, kind) in [
        (
            vec!["--primitive", "semaphore", "--permits", "3"],
            "semaphore",
        ),
        (
            vec!["--primitive", "rwlock", "--read-ratio", "0.5"],
            "rwlock",
        ),
    ] {
        let json = work.path().join(format!("{kind}.json"));
        let output = output_within(
            Duration::from_secs(30),
            distlock(None)
                .args(["bench", "--url", "memory://", "--clients", "4"])
                .args(["--duration", "300ms", "--hold", "1ms"])
                .args(&flags)
                .arg("--json")
                .arg(&json),
        )
        .await;
        assert!(output.status.success(), "{kind}: {}", stderr(&output));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(report["primitive"]["kind"], kind, "{report}");
        let run = &report["results"][0]["report"];
        assert!(run["acquisitions"].as_u64().unwrap() > 0, "{kind}: {run}");
        assert_eq!(run["violations"], 0, "{kind}: {run}");
    }
}

/// A zero or misplaced --permits and an out-of-range --read-ratio are
/// usage errors, before any backend runs.
#[tokio::test]
async fn bench_primitive_flags_are_checked() {
    assert_usage_errors(&[
        "--primitive semaphore --permits 0",
        "--permits 2",
        "--primitive semaphore --read-ratio 0.5",
        "--primitive rwlock --read-ratio 1.5",
    ])
    .await;
}

/// Each of `flags` makes `distlock bench --url memory://` a usage error.
async fn assert_usage_errors(flags: &[&str]) {
    for words in flags {
        let output = output_within(
            Duration::from_secs(30),
            distlock(None)
                .args(["bench", "--url", "memory://", "--duration", "100ms"])
                .args(words.split(' ')),
        )
        .await;
        usage_error(&output, words);
    }
}

/// `--sweep` runs every point end to end on `memory://` with tiny sizes:
/// each point measured (locks held and none lost; acquisitions with no
/// violation), one table per backend, and an SVG chart.
#[tokio::test]
async fn every_sweep_runs_end_to_end_on_memory() {
    let work = tempfile::tempdir().unwrap();
    for (sweep, points) in [("held", "1,20"), ("names", "1,3"), ("clients", "1,3")] {
        let json = work.path().join(format!("{sweep}.json"));
        let svg = work.path().join(format!("{sweep}.svg"));
        let output = output_within(
            Duration::from_secs(30),
            distlock(None)
                .args(["bench", "--url", "memory://", "--sweep", sweep])
                .args(["--points", points, "--clients", "2", "--duration", "200ms"])
                .arg("--json")
                .arg(&json)
                .arg("--plot")
                .arg(&svg),
        )
        .await;
        assert!(output.status.success(), "{sweep}: {}", stderr(&output));
        let table = String::from_utf8_lossy(&output.stdout);
        assert!(table.contains("memory (memory://)"), "{sweep}: {table}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(report["sweep"], sweep, "{report}");
        let measured = report["backends"][0]["points"].as_array().unwrap();
        let at: Vec<u64> = measured.iter().map(|p| p["at"].as_u64().unwrap()).collect();
        let expected: Vec<u64> = points.split(',').map(|p| p.parse().unwrap()).collect();
        assert_eq!(at, expected, "{sweep}: {report}");
        for point in measured {
            assert!(point["error"].is_null(), "{sweep}: {point}");
            if sweep == "held" {
                assert_eq!(point["held"]["locks"], point["at"], "{point}");
                assert_eq!(point["held"]["lost"], 0, "{point}");
            } else {
                let run = &point["workload"];
                assert!(
                    run["acquisitions"].as_u64().unwrap() > 0,
                    "{sweep}: {point}"
                );
                assert_eq!(run["violations"], 0, "{sweep}: {point}");
            }
        }
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert_well_formed(&svg);
        assert!(
            texts(&svg)
                .iter()
                .any(|t| t == "memory 3" || t == "memory 20"),
            "{sweep}"
        );
    }
}

/// `--sweep` flags are checked before anything runs.
#[tokio::test]
async fn sweep_flags_are_checked() {
    assert_usage_errors(&[
        "--sweep held --points 0,10",
        "--sweep held --concurrency 0",
        "--sweep names --primitive semaphore",
        "--points 1,2",
    ])
    .await;
}

/// A backend that fails, even with an `Unsupported` error such as a
/// setting it does not have, fails the bench with 69 as `--help` says;
/// only a backend without the primitive under load is `n/a` and passes.
#[tokio::test]
async fn a_failed_backend_exits_69() {
    let fixture = file_fixture();
    let output = output_within(
        Duration::from_secs(30),
        distlock(None).env("DISTLOCK_PREFIX", "x").args([
            "bench",
            "--url",
            &fixture.url,
            "--duration",
            "200ms",
        ]),
    )
    .await;
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("failed"), "{table}");
    assert!(stderr(&output).contains("prefix"), "{}", stderr(&output));
}

/// `--prefix` chooses the lock names: the file backend's records are made
/// under it and nowhere else; a prefix that makes no valid name is a usage
/// error.
#[tokio::test]
async fn prefix_chooses_the_lock_names() {
    let fixture = file_fixture();
    let output = output_within(
        Duration::from_secs(30),
        distlock(None)
            .args(["bench", "--url", &fixture.url, "--duration", "200ms"])
            .args(["--clients", "2", "--prefix", "team-a/"]),
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let dir = fixture.url.strip_prefix("file://").unwrap();
    let mut paths = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(dir)];
    while let Some(at) = dirs.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path.clone());
            }
            paths.push(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    assert!(paths.iter().any(|p| p.contains("team-a")), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.contains("distlock-bench")),
        "{paths:?}"
    );
    assert_usage_errors(&["--prefix a\tb"]).await;
}

/// The table says durations as people read them and explains its ratio
/// and fairness columns.
#[tokio::test]
async fn the_table_is_for_people() {
    let output = output_within(
        Duration::from_secs(30),
        distlock(None).args([
            "bench",
            "--url",
            "memory://",
            "--url",
            "memory://",
            "--duration",
            "300ms",
        ]),
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains(", 0.3 s per backend"), "{table}");
    assert!(table.contains("\nfairness: "), "{table}");
    assert!(table.contains("\nvs first: "), "{table}");
}

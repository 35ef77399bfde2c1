//! docs/cli.md states what the command does: its "Exit codes" table lists
//! the rows of the code's one table as `distlock --help` prints them (code,
//! commands, meaning), in order; each command's `--help` lists exactly its
//! own rows; and every flag a `--help` shows is documented.

mod support;

use support::cli;

/// Every command, as `distlock --help` and docs/cli.md name them.
const COMMANDS: [&str; 6] = ["run", "elect", "bench", "status", "ls", "break"];

/// One row: the code, the commands that give it, what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    code: String,
    commands: Vec<String>,
    meaning: String,
}

/// Text compared without markdown backticks and with single spaces.
fn plain(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The entries of a help's "Exit codes:" section: a code, then its meaning,
/// continued on more deeply indented lines.
fn help_entries(help: &str) -> Vec<(String, String)> {
    let section = help
        .split("Exit codes:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no exit codes in:\n{help}"));
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in section.lines() {
        if line.starts_with("         ") {
            let (_, meaning) = entries.last_mut().expect("a continued entry");
            meaning.push(' ');
            meaning.push_str(line.trim());
        } else if let Some(entry) = line.strip_prefix("  ") {
            let (code, meaning) = entry.split_once(' ').expect("code and meaning");
            entries.push((code.to_owned(), meaning.trim().to_owned()));
        } else {
            break;
        }
    }
    entries
}

/// `distlock --help`'s rows: a meaning starts with the commands that give
/// it (`run, elect: …`) unless every command does.
fn top_level_rows(help: &str) -> Vec<Row> {
    help_entries(help)
        .into_iter()
        .map(|(code, text)| {
            let named = text.split_once(": ").and_then(|(head, rest)| {
                let names: Vec<String> = head.split(", ").map(str::to_owned).collect();
                names
                    .iter()
                    .all(|n| COMMANDS.contains(&n.as_str()))
                    .then_some((names, rest.to_owned()))
            });
            let (commands, meaning) = named.unwrap_or_else(|| (every_command(), text.clone()));
            Row {
                code,
                commands,
                meaning: plain(&meaning),
            }
        })
        .collect()
}

fn every_command() -> Vec<String> {
    COMMANDS.iter().map(|c| (*c).to_owned()).collect()
}

/// The rows of the table under docs/cli.md's "## Exit codes" heading
/// (`| code | commands | meaning |`; "every command" names all of them).
fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn doc_rows() -> Vec<Row> {
    let doc = doc();
    let section = doc
        .split("\n## Exit codes\n")
        .nth(1)
        .expect("docs/cli.md has an \"## Exit codes\" section");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 3, "docs/cli.md exit-code row: {line}");
            let commands = if cells[1] == "every command" {
                every_command()
            } else {
                cells[1].split(", ").map(plain).collect()
            };
            Row {
                code: cells[0].to_owned(),
                commands,
                meaning: plain(cells[2]),
            }
        })
        .collect()
}

#[tokio::test]
async fn the_doc_states_the_codes_table() {
    let output = cli(None, "--help").await;
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let code = top_level_rows(&help);
    assert!(code.len() > 10, "too few rows parsed from:\n{help}");
    let doc = doc_rows();
    for (i, (ours, theirs)) in code.iter().zip(&doc).enumerate() {
        assert_eq!(ours, theirs, "row {i}: `distlock --help` vs docs/cli.md");
    }
    assert_eq!(
        code.len(),
        doc.len(),
        "rows in `distlock --help` vs docs/cli.md"
    );
}

/// `distlock run --help` (and every other command's) lists exactly the
/// doc's rows for that command.
#[tokio::test]
async fn each_command_help_lists_the_docs_rows_for_it() {
    let doc = doc_rows();
    for command in COMMANDS {
        let output = cli(None, &format!("{command} --help")).await;
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        let listed: Vec<(String, String)> = help_entries(&help)
            .into_iter()
            .map(|(code, meaning)| (code, plain(&meaning)))
            .collect();
        let documented: Vec<(String, String)> = doc
            .iter()
            .filter(|row| row.commands.iter().any(|c| c == command))
            .map(|row| (row.code.clone(), row.meaning.clone()))
            .collect();
        assert_eq!(
            listed, documented,
            "`distlock {command} --help` vs docs/cli.md"
        );
    }
}

/// The flags of a help's option lines (`  -v, --verbose...`, `      --ttl <DURATION>`).
fn flags(help: &str) -> Vec<String> {
    let options = help
        .split("Options:\n")
        .nth(1)
        .and_then(|rest| rest.split("Exit codes:").next())
        .unwrap_or_else(|| panic!("no options in:\n{help}"));
    options
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| l.split([' ', ',']).filter(|w| w.starts_with("--")))
        .map(|w| w.trim_end_matches("...").to_owned())
        .collect()
}

#[tokio::test]
async fn every_flag_is_documented() {
    let doc = doc();
    for command in std::iter::once("").chain(COMMANDS) {
        let output = cli(None, &format!("{command} --help")).await;
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        let flags = flags(&help);
        assert!(flags.len() >= 3, "no flags parsed from:\n{help}");
        for flag in flags {
            assert!(
                doc.contains(&format!("`{flag}")),
                "docs/cli.md does not document {flag} of `distlock {command}`"
            );
        }
    }
}

//! A trial's history on disk (`--histories DIR`): one JSON file per
//! trial, named by row, fault and trial seed, that any checker can read
//! (the form is in `docs/safety.md`, "Reading a history file"), and an SVG
//! timeline beside it when a checker found it not linearizable.

use std::path::{Path, PathBuf};

use distlock_testkit::history::Mode;
use serde::{Deserialize, Serialize};

use super::history::Call;

/// What the `format` field of every history file says.
pub const FORMAT: &str = "distlock-fault-matrix-history/1";

/// One trial's history and both checkers' verdicts on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryFile {
    /// [`FORMAT`].
    pub format: String,
    /// The row, as the matrix names it (`etcd-3`, `etcd-3/many-names`).
    pub backend: String,
    /// The fault's number, 1 to 14.
    pub fault: u8,
    /// The fault's id (`pause-holder`).
    pub fault_id: String,
    /// The trial's seed, as `--seed` of the run replays it (hex).
    pub seed: String,
    /// The trial's lock name (calls may name others: `many-names`).
    pub lock: String,
    /// How every name was acquired: `exclusive`, `write`, or
    /// `{"permit": {"limit": 1}}`.
    pub mode: Mode,
    /// Whether token order was checked (strong-token rows and mutants).
    pub fencing: bool,
    /// Where the history was cut: every client's calls had arrived up to
    /// here (ns since the trial's origin); a call still open then is `info`.
    pub cut_ns: u64,
    /// The client fault 10 killed, which gets a lost signal at `cut_ns`.
    pub killed: Option<u32>,
    /// The project's checker's verdict.
    pub own_verdict: String,
    /// The second checker's verdict, naming it and its version.
    pub second_verdict: String,
    /// Each client's calls, in invocation order.
    pub clients: Vec<ClientCalls>,
}

/// One client's calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCalls {
    /// The client's number.
    pub client: u32,
    /// Its calls, in invocation order.
    pub calls: Vec<Call>,
}

impl HistoryFile {
    /// Every call of every client, in invocation order.
    pub fn calls(&self) -> Vec<Call> {
        let mut calls: Vec<Call> = self
            .clients
            .iter()
            .flat_map(|c| c.calls.iter().cloned())
            .collect();
        calls.sort_by_key(|c| (c.invoke_ns, c.complete_ns));
        calls
    }

    /// Groups `calls` by client.
    pub fn group(calls: &[Call]) -> Vec<ClientCalls> {
        let mut clients: Vec<ClientCalls> = Vec::new();
        for call in calls {
            match clients.iter_mut().find(|c| c.client == call.client) {
                Some(c) => c.calls.push(call.clone()),
                None => clients.push(ClientCalls {
                    client: call.client,
                    calls: vec![call.clone()],
                }),
            }
        }
        clients.sort_by_key(|c| c.client);
        clients
    }

    /// The file's name: row (a `/` as `+`), fault id and trial seed.
    pub fn file_name(&self) -> String {
        format!(
            "{}-{}-{}.json",
            self.backend.replace('/', "+"),
            self.fault_id,
            self.seed
        )
    }

    /// Writes the file into `dir` (created if missing), and, when `svg` is
    /// given, that timeline beside it with the same name; returns the
    /// JSON file's path.
    pub fn write(&self, dir: &Path, svg: Option<&str>) -> Result<PathBuf, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(self.file_name());
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())? + "\n";
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(svg) = svg {
            let image = path.with_extension("svg");
            std::fs::write(&image, svg).map_err(|e| format!("{}: {e}", image.display()))?;
        }
        Ok(path)
    }

    /// Reads a history file.
    pub fn read(path: &Path) -> Result<HistoryFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: HistoryFile =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if file.format != FORMAT {
            return Err(format!(
                "{}: format {:?}, not {FORMAT:?}",
                path.display(),
                file.format
            ));
        }
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Op;
    use distlock_testkit::history::Outcome;

    #[test]
    fn a_history_file_reads_back_as_written_and_names_row_fault_and_seed() {
        let call = |client, op, outcome| Call {
            client,
            op,
            name: "l".into(),
            token: Some(3),
            invoke_ns: 10,
            complete_ns: 20,
            outcome,
        };
        let calls = vec![
            call(1, Op::Acquire, Outcome::Ok),
            call(0, Op::Write, Outcome::Fail),
        ];
        let file = HistoryFile {
            format: FORMAT.into(),
            backend: "etcd-3/many-names".into(),
            fault: 2,
            fault_id: "pause-holder".into(),
            seed: "0x2a".into(),
            lock: "l".into(),
            mode: Mode::Permit { limit: 1 },
            fencing: true,
            cut_ns: 30,
            killed: None,
            own_verdict: "linearizable".into(),
            second_verdict: "porcupine-rs: linearizable".into(),
            clients: HistoryFile::group(&calls),
        };
        assert_eq!(file.clients[0].client, 0);
        let dir = tempfile::tempdir().unwrap();
        let path = file.write(dir.path(), Some("<svg/>")).unwrap();
        assert_eq!(
            path.file_name().unwrap(),
            "etcd-3+many-names-pause-holder-0x2a.json"
        );
        assert!(path.with_extension("svg").exists());
        let again = HistoryFile::read(&path).unwrap();
        assert_eq!(again, file);
        assert_eq!(again.calls().len(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""outcome": "fail""#), "{text}");
    }
}

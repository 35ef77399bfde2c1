//! The `--json` and `--plot` files, opened before the benchmark runs: a
//! path that cannot be written fails at once, not after minutes of work.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cli::BenchArgs;
use crate::exit::{CANNOT_CREATE, Failure};

/// The `--json` and `--plot` files a run was asked for.
#[derive(Debug)]
pub(super) struct Outputs {
    json: Option<Output>,
    plot: Option<Output>,
}

impl Outputs {
    /// Creates the files `args` name, before anything runs.
    pub(super) fn create(args: &BenchArgs) -> Result<Self, Failure> {
        let open = |flag, path: &Option<PathBuf>| {
            path.as_deref()
                .map(|path| Output::create(flag, path))
                .transpose()
        };
        Ok(Outputs {
            json: open("--json", &args.json)?,
            plot: open("--plot", &args.plot)?,
        })
    }

    /// Writes `output` as JSON and the chart `draw` makes of it, to the
    /// files that were asked for.
    pub(super) fn write<T: Serialize>(
        self,
        output: &T,
        draw: impl FnOnce(&T) -> Result<String, String>,
    ) -> Result<(), Failure> {
        if let Some(file) = self.json {
            let json = serde_json::to_string_pretty(output).expect("bench output serializes");
            file.write(&(json + "\n"))?;
        }
        if let Some(file) = self.plot {
            let svg = draw(output).map_err(|e| {
                Failure::new(CANNOT_CREATE, format!("cannot draw the --plot chart: {e}"))
            })?;
            file.write(&svg)?;
        }
        Ok(())
    }
}

/// An output file, created (and truncated) up front.
#[derive(Debug)]
pub(super) struct Output {
    flag: &'static str,
    path: PathBuf,
    file: File,
}

/// `--plot` must name an SVG file: that is the only format written.
pub(super) fn check_plot_name(path: &Path) -> Result<(), Failure> {
    let svg = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("svg"));
    if svg {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "--plot {}: the chart is written as SVG; give a file name ending in .svg",
            path.display()
        )))
    }
}

impl Output {
    pub(super) fn create(flag: &'static str, path: &Path) -> Result<Self, Failure> {
        let file = File::create(path).map_err(|e| {
            Failure::new(
                CANNOT_CREATE,
                format!("cannot create the {flag} file {}: {e}", path.display()),
            )
        })?;
        Ok(Output {
            flag,
            path: path.to_owned(),
            file,
        })
    }

    pub(super) fn write(mut self, contents: &str) -> Result<(), Failure> {
        self.file
            .write_all(contents.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| {
                Failure::new(
                    CANNOT_CREATE,
                    format!(
                        "cannot write the {} file {}: {e}",
                        self.flag,
                        self.path.display()
                    ),
                )
            })
    }
}

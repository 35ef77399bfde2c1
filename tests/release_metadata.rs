//! What a release relies on and nothing compiles: the README's stated
//! minimum Rust version is the manifest's `rust-version`, every
//! publishable crate carries the crates.io metadata, and the license files
//! hold the two license texts.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifest(dir: &Path) -> toml::Table {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// `table.key`, as a table, if present.
fn sub<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Table> {
    table.get(key).and_then(toml::Value::as_table)
}

/// The root manifest's `rust-version`: in `[workspace.package]` in the
/// repository, in `[package]` once `cargo package` has inlined it.
fn rust_version(root: &toml::Table) -> String {
    sub(root, "workspace")
        .and_then(|w| sub(w, "package"))
        .and_then(|p| p.get("rust-version"))
        .or_else(|| sub(root, "package").and_then(|p| p.get("rust-version")))
        .and_then(toml::Value::as_str)
        .expect("Cargo.toml sets rust-version")
        .to_owned()
}

#[test]
fn readme_states_the_msrv_of_the_manifest() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    const SAYS: &str = "needs Rust ";
    let at = readme
        .find(SAYS)
        .expect("README.md says \"needs Rust X.Y or newer\"");
    let stated: String = readme[at + SAYS.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let stated = stated.trim_end_matches('.');
    assert_eq!(
        stated,
        rust_version(&manifest(&root())),
        "README.md's minimum Rust version differs from rust-version in Cargo.toml"
    );
}

#[test]
fn publishable_crates_carry_crates_io_metadata() {
    let root_manifest = manifest(&root());
    // A packaged crate has no workspace to walk: nothing to check there.
    let Some(workspace) = sub(&root_manifest, "workspace") else {
        return;
    };
    let members = workspace
        .get("members")
        .and_then(toml::Value::as_array)
        .expect("[workspace] members");
    let dirs = std::iter::once(root()).chain(
        members
            .iter()
            .map(|m| root().join(m.as_str().expect("member path"))),
    );
    let mut problems = Vec::new();
    for dir in dirs {
        let table = manifest(&dir);
        let package = sub(&table, "package").expect("[package]");
        let name = package["name"].as_str().expect("package name");
        if package.get("publish").and_then(toml::Value::as_bool) == Some(false) {
            continue;
        }
        // A command has no API for docs.rs to show.
        let is_library = dir.join("src/lib.rs").is_file();
        let required: &[&str] = if is_library {
            &["description", "readme", "documentation"]
        } else {
            &["description", "readme"]
        };
        for &key in required {
            if package.get(key).and_then(toml::Value::as_str).is_none() {
                problems.push(format!("{name}: no {key}"));
            }
        }
        if let Some(readme) = package.get("readme").and_then(toml::Value::as_str)
            && !dir.join(readme).is_file()
        {
            problems.push(format!("{name}: readme {readme} does not exist"));
        }
        let docs = package.get("documentation").and_then(toml::Value::as_str);
        if docs.is_some_and(|d| d != format!("https://docs.rs/{name}")) {
            problems.push(format!("{name}: documentation is not its docs.rs page"));
        }
        let keywords = package.get("keywords").and_then(toml::Value::as_array);
        if !keywords.is_some_and(|k| (1..=5).contains(&k.len())) {
            problems.push(format!("{name}: keywords must be 1 to 5"));
        }
        let categories = package.get("categories").and_then(toml::Value::as_array);
        if !categories.is_some_and(|c| (1..=5).contains(&c.len())) {
            problems.push(format!("{name}: categories must be 1 to 5"));
        }
        let repository = package.get("repository").and_then(toml::Value::as_str);
        if repository.is_some_and(|r| r.contains("example.invalid")) {
            problems.push(format!("{name}: placeholder repository URL"));
        }
        for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
            if !dir.join(license).is_file() {
                problems.push(format!("{name}: no {license}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn license_files_hold_the_license_texts() {
    let read = |name: &str| {
        std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let mit = read("LICENSE-MIT");
    for phrase in [
        "MIT License",
        "Permission is hereby granted, free of charge",
        "THE SOFTWARE IS PROVIDED \"AS IS\"",
    ] {
        assert!(mit.contains(phrase), "LICENSE-MIT lacks {phrase:?}");
    }
    // The Apache text as published, from its title to its appendix.
    let apache = read("LICENSE-APACHE");
    assert!(
        apache.trim_start().starts_with("Apache License\n"),
        "LICENSE-APACHE does not start with the license's title"
    );
    for phrase in [
        "Version 2.0, January 2004",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ] {
        assert!(apache.contains(phrase), "LICENSE-APACHE lacks {phrase:?}");
    }
}

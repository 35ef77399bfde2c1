//! The README stays a front page: at most 250 lines. (Its Rust examples
//! are compiled as doctests of the facade; its minimum Rust version is
//! checked in `release_metadata`.)

#[test]
fn readme_is_at_most_250_lines() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; move detail to docs/"
    );
}

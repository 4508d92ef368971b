//! Walks a clap binary's whole command tree through its own `--help` and checks that every
//! page shows an example (issue 17.7). The crates' own tests use it with
//! `#[path = "../../tests/src/help_walk.rs"]` (std only, so any test crate can), and the walk
//! goes through the built binary, so it sees exactly what a user sees, subcommands added later
//! included.

use std::path::Path;
use std::process::Command;

/// Every command path of `bin` (the empty path first) with its `--help` text. The `help`
/// subcommand clap adds is skipped.
pub fn help_pages(bin: &Path) -> Vec<(Vec<String>, String)> {
    let mut pages = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let out = Command::new(bin)
            .args(&path)
            .arg("--help")
            .env_clear()
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {path:?} --help failed ({}):\n{}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            path.len() < 8,
            "command tree deeper than 8 levels: {path:?}"
        );
        for sub in subcommands(&text) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        pages.push((path, text));
    }
    pages
}

/// The names clap lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// Panics unless every help page of `bin` (at least `min_pages` of them) has an `Examples:`
/// block whose lines run the binary `name`.
pub fn assert_every_help_has_examples(bin: &Path, name: &str, min_pages: usize) {
    let pages = help_pages(bin);
    assert!(
        pages.len() >= min_pages,
        "walked only {} help pages of {name}, expected at least {min_pages}",
        pages.len()
    );
    let missing: Vec<String> = pages
        .iter()
        .filter(|(_, text)| {
            text.split_once("\nExamples:\n")
                .is_none_or(|(_, examples)| !examples.contains(name))
        })
        .map(|(path, _)| format!("{name} {}", path.join(" ")).trim_end().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "help without an `Examples:` block running {name}: {missing:#?}"
    );
}

/// `#[test] fn every_help_page_shows_an_example()` for the binary `$bin` of the crate under
/// test, with at least `$min` help pages.
#[macro_export]
macro_rules! help_examples_test {
    ($bin:literal, $min:expr) => {
        #[test]
        fn every_help_page_shows_an_example() {
            help_walk::assert_every_help_has_examples(
                std::path::Path::new(env!(concat!("CARGO_BIN_EXE_", $bin))),
                $bin,
                $min,
            );
        }
    };
}

//! Issue #17.7: the containerd guide (`containerd/README.md`) is what a newcomer types. Its install
//! step must build the binaries, and every `gpuhook` command and every configure flag it names
//! must exist (it once documented a `--drop-in-path` flag that did not).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use clap::Parser;
use gpuhook::cli::Cli;

fn guide() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../containerd/README.md"
    ))
    .unwrap()
}

/// The lines of the guide's ```sh blocks, comments cut off.
fn shell_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("```") {
            inside = line == "```sh";
            continue;
        }
        if inside {
            let code = line.split(" #").next().unwrap_or_default().trim();
            if !code.is_empty() && !code.starts_with('#') {
                out.push(code.to_string());
            }
        }
    }
    out
}

#[test]
fn every_gpuhook_command_of_the_guide_parses() {
    let lines = shell_lines(&guide());
    let commands: Vec<&String> = lines.iter().filter(|l| l.starts_with("gpuhook ")).collect();
    assert!(commands.len() >= 3, "{lines:?}");
    for c in commands {
        let argv: Vec<&str> = c.split_whitespace().collect();
        if let Err(e) = Cli::try_parse_from(&argv) {
            panic!("guide command {c:?} does not parse: {e}");
        }
    }
}

#[test]
fn install_step_builds_both_binaries_from_this_repository() {
    let lines = shell_lines(&guide());
    let installs: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("cargo install "))
        .collect();
    assert!(!installs.is_empty(), "the install step builds the binaries");
    let mut manifests = String::new();
    for install in installs {
        let words: Vec<&str> = install.split_whitespace().collect();
        let path = words[words.iter().position(|w| *w == "--path").unwrap() + 1];
        let root = words[words.iter().position(|w| *w == "--root").unwrap() + 1];
        assert_eq!(
            root, "/usr/local",
            "configure's default --binary is /usr/local/bin"
        );
        manifests += &std::fs::read_to_string(format!(
            "{}/../{path}/Cargo.toml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
    }
    for bin in ["name = \"gpuhook\"", "name = \"gpuhook-runtime\""] {
        assert!(manifests.contains(bin), "no install step builds {bin}");
    }
    assert!(
        gpuhook_containerd::DEFAULT_BINARY.starts_with("/usr/local/bin/"),
        "the installed wrapper is where configure points containerd"
    );
}

#[test]
fn every_configure_flag_the_guide_names_exists() {
    let text = guide();
    let start = text
        .find("## What `gpuhook runtime configure` does")
        .unwrap();
    let end = text[start..].find("## Check it").unwrap() + start;
    let mut flags: Vec<&str> = text[start..end]
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .collect();
    flags.sort_unstable();
    flags.dedup();
    assert!(flags.contains(&"--drop-in-config"), "{flags:?}");
    for flag in flags {
        let base = ["gpuhook", "runtime", "configure"];
        let bare = Cli::try_parse_from(base.iter().chain([&flag]));
        let valued = Cli::try_parse_from(base.iter().chain([&flag, &"/x.toml"]));
        assert!(
            bare.is_ok() || valued.is_ok(),
            "the guide names {flag}, which `gpuhook runtime configure` does not accept"
        );
    }
}

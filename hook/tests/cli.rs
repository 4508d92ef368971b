//! The `gpuhook` binary's surface: help texts, exit codes, one-line errors.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

#[path = "../../tests/src/help_walk.rs"]
mod help_walk;

fn gpuhook(args: &[&str], config: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuhook"));
    cmd.args(args).env_remove("GPUHOOK_CONFIG");
    if let Some(c) = config {
        cmd.env("GPUHOOK_CONFIG", c);
    }
    cmd.output().expect("run gpuhook")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Each command's `--help` and what its text must name (its subcommands and flags).
const HELP_CASES: &[(&[&str], &[&str])] = &[
    (
        &["--help"],
        &[
            "prestart", "cdi", "hook", "system", "runtime", "version", "--config",
        ],
    ),
    (&["prestart", "--help"], &["OCI prestart hook", "--state"]),
    (&["cdi", "--help"], &["generate", "list", "validate"]),
    (
        &["cdi", "generate", "--help"],
        &[
            "--driver-root",
            "--dev-root",
            "--nvml-lib",
            "--output",
            "--format",
            "--device-name-strategy",
            "--vendor",
            "--class",
            "type-index",
        ],
    ),
    (&["cdi", "list", "--help"], &["--spec-dir"]),
    (&["cdi", "validate", "--help"], &["<FILE>"]),
    (
        &["hook", "--help"],
        &[
            "setup",
            "create-symlinks",
            "update-ldcache",
            "disable-device-node-modification",
        ],
    ),
    (
        &["hook", "setup", "--help"],
        &[
            "--link <TARGET::LINK>",
            "--folder <DIR>",
            "--ldconfig-path <PATH>",
            "--disable-device-node-modification",
        ],
    ),
    (
        &["hook", "create-symlinks", "--help"],
        &["--link <TARGET::LINK>"],
    ),
    (
        &["hook", "update-ldcache", "--help"],
        &["--folder <DIR>", "--ldconfig-path <PATH>"],
    ),
    (
        &["hook", "disable-device-node-modification", "--help"],
        &["ModifyDeviceFiles"],
    ),
    (&["system", "--help"], &["create-dev-char-symlinks"]),
    (
        &["system", "create-dev-char-symlinks", "--help"],
        &["/dev/char", "--dry-run"],
    ),
    (&["runtime", "--help"], &["configure"]),
    (
        &["runtime", "configure", "--help"],
        &[
            "--containerd-config",
            "--drop-in",
            "--drop-in-config",
            "--privileged-host-devices",
            "--set-as-default",
            "--dry-run",
            "RuntimeClass",
        ],
    ),
    (&["version", "--help"], &["version"]),
];

#[test]
fn help_of_every_command() {
    for (args, needles) in HELP_CASES {
        let out = gpuhook(args, None);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("Usage:"), "{args:?}: {stdout}");
        for n in *needles {
            assert!(stdout.contains(n), "{args:?} lacks {n:?}:\n{stdout}");
        }
    }
}

#[test]
fn version_prints_on_stdout() {
    let out = gpuhook(&["version"], None);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("gpuhook {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = gpuhook(&["hook", "create-symlinks", "--link", "no-separator"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("TARGET::LINK"));
    assert_eq!(gpuhook(&["frobnicate"], None).status.code(), Some(2));
}

#[test]
fn failing_command_prints_one_error_line_and_nothing_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "log-level = \"warn\"\n").unwrap();
    let out = gpuhook(&["cdi", "validate", "/nonexistent.json"], Some(&cfg));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("gpuhook: error: "), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn config_errors_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "[runtime]\nmod = \"cdi\"\n").unwrap();
    let out = gpuhook(&["cdi", "list"], Some(&cfg));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(":2:1: key `runtime.mod`: unknown field `mod`"),
        "{stderr}"
    );

    let missing = dir.path().join("missing.toml");
    let out = gpuhook(
        &["--config", missing.to_str().unwrap(), "cdi", "list"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn log_file_gets_the_error_too() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gpuhook.log");
    let cfg = dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!("log-file = \"{}\"\nlog-format = \"json\"\n", log.display()),
    )
    .unwrap();
    let out = gpuhook(
        &["hook", "update-ldcache", "--folder", "/usr/lib64"],
        Some(&cfg),
    );
    assert_eq!(out.status.code(), Some(1));
    let line = std::fs::read_to_string(&log).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.lines().last().unwrap()).unwrap();
    assert_eq!(v["level"], "ERROR");
    assert!(
        v["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("invalid OCI state"),
        "{line}"
    );
}

/// Issue #17.7: every help page, walked through the whole command tree (so a subcommand added
/// later is checked too), has an `Examples:` block running gpuhook; and the walk reaches every
/// command of the table above.
#[test]
fn every_help_page_shows_an_example() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_gpuhook"));
    help_walk::assert_every_help_has_examples(bin, "gpuhook", HELP_CASES.len());
    let walked: Vec<Vec<String>> = help_walk::help_pages(bin)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    for (args, _) in HELP_CASES {
        let path: Vec<String> = args[..args.len() - 1]
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert!(
            walked.contains(&path),
            "the walk missed {path:?}: {walked:?}"
        );
    }
}

fn containerd_config(dir: &std::path::Path) -> std::path::PathBuf {
    let c = dir.join("config.toml");
    std::fs::write(&c, "version = 2\n").unwrap();
    c
}

/// Issue #17.6: `GPUHOOK_LOG_FORMAT=json` (or `--log-format json`) gives one JSON object per
/// stderr line, with the fields as keys; and no colour codes when stderr is not a terminal.
#[test]
fn log_format_json_from_env_and_flag_and_no_ansi_off_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let c = containerd_config(dir.path());
    let c = c.to_str().unwrap();
    let cfg = dir.path().join("gpuhook.toml");
    std::fs::write(&cfg, "log-format = \"text\"\n").unwrap();
    let args = [
        "runtime",
        "configure",
        "--containerd-config",
        c,
        "--dry-run",
    ];
    let via_env = Command::new(env!("CARGO_BIN_EXE_gpuhook"))
        .args(args)
        .env("GPUHOOK_CONFIG", &cfg)
        .env("GPUHOOK_LOG_FORMAT", "json")
        .output()
        .unwrap();
    let mut flag_args = vec!["--log-format", "json"];
    flag_args.extend(args);
    let via_flag = gpuhook(&flag_args, Some(&cfg));
    for out in [via_env, via_flag] {
        let stderr = text(&out.stderr);
        assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
        let line = stderr
            .lines()
            .find(|l| l.contains("runtime configure"))
            .unwrap_or_else(|| panic!("no log line: {stderr}"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["level"], "INFO");
        assert!(v["timestamp"].is_string(), "{v}");
        assert_eq!(v["fields"]["message"], "runtime configure");
        assert_eq!(v["fields"]["containerd_config"], c);
    }
    let plain = gpuhook(&args, Some(&cfg));
    let stderr = text(&plain.stderr);
    assert!(
        stderr.contains("INFO") && stderr.contains("containerd_config="),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert_eq!(
        gpuhook(&["--log-format", "yaml", "version"], None)
            .status
            .code(),
        Some(2)
    );
}

/// Issue #17.7: `runtime configure --config` (containerd's file) keeps working, with a warning:
/// everywhere else `--config` is gpuhook's own config.toml.
#[test]
fn runtime_configure_config_is_deprecated_but_works() {
    let dir = tempfile::tempdir().unwrap();
    let c = containerd_config(dir.path());
    let out = gpuhook(
        &["runtime", "configure", "--config", c.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&c)
        .unwrap()
        .contains("gpuhook-runtime"));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("deprecated") && stderr.contains("--containerd-config"),
        "{stderr}"
    );
}

/// Issue #17.7: `--set-as-default` would hide host devices from every privileged pod.
#[test]
fn set_as_default_needs_privileged_host_devices() {
    let dir = tempfile::tempdir().unwrap();
    let c = containerd_config(dir.path());
    let c = c.to_str().unwrap();
    let out = gpuhook(
        &[
            "runtime",
            "configure",
            "--containerd-config",
            c,
            "--set-as-default",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("privileged pod") && stderr.contains("--privileged-host-devices"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(c).unwrap(), "version = 2\n");
    let ok = [
        "runtime",
        "configure",
        "--containerd-config",
        c,
        "--set-as-default",
        "--privileged-host-devices",
    ];
    assert_eq!(gpuhook(&ok, None).status.code(), Some(0));
    let written = std::fs::read_to_string(c).unwrap();
    assert!(
        written.contains("privileged_without_host_devices = false"),
        "{written}"
    );
}

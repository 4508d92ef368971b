//! The `gpuhook` binary's surface: help texts, exit codes, one-line errors.

use std::process::{Command, Output};

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

#[test]
fn help_of_every_command() {
    let cases: &[(&[&str], &[&str])] = &[
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
                "--config",
                "--drop-in",
                "--set-as-default",
                "--dry-run",
                "RuntimeClass",
            ],
        ),
        (&["version", "--help"], &["version"]),
    ];
    for (args, needles) in cases {
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

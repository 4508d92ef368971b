//! A failing command prints one line naming the problem, each cause once (issue #15: a cause
//! that is both in an error's message and its `source` was printed twice by `main`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-mps-daemon"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_missing_config_file_is_named_with_its_cause_once() {
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("missing.yaml");
    let cfg = cfg.to_str().unwrap();
    for args in [
        vec!["check", "--config", cfg],
        vec!["status", "--config", cfg],
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!(
                "gpu-mps-daemon: error: cannot read config file {cfg}: "
            )),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_missing_status_file_is_named_with_its_cause_once() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().to_str().unwrap();
    let (code, err) = run(&["status", "--mps-root", root]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot read {root}/status.json: "))
            && err.contains("is gpu-mps-daemon running with this --mps-root?"),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_config_that_is_required_is_asked_for() {
    let (code, err) = run(&["check"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "gpu-mps-daemon: error: --config FILE is required"
    );
}

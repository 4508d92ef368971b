//! gpuhook-sim's errors name the problem with its cause once (issue #15: an I/O error that was
//! both in the message and the `source` was printed twice by `main`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuhook-sim"))
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_missing_profile_file_is_named_with_its_cause_once() {
    let t = tempfile::tempdir().unwrap();
    let profile = t.path().join("missing.toml");
    let profile = profile.to_str().unwrap();
    let (code, err) = run(&["check", profile]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "gpuhook-sim: error: cannot read node profile {profile}: No such file or directory (os error 2)"
        )
    );
}

#[test]
fn an_unwritable_node_root_is_named_with_its_cause_once() {
    let t = tempfile::tempdir().unwrap();
    // A file where the node's directory would be: creating anything under it fails.
    let blocker = t.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let root = blocker.join("node");
    let (code, err) = run(&["build", "t4", root.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("gpuhook-sim: error: building node t4 in "),
        "{err}"
    );
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
}

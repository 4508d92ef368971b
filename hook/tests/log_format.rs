//! Issue #17.6: an unknown `GPUHOOK_LOG_FORMAT` on the prestart fast path (the argv a runtime
//! passes, parsed without clap) is not silently dropped: one warning naming the value and the
//! accepted ones in the hook's log (stderr without a log-file), the hook still succeeds, and
//! nothing goes to stdout (hook rule).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// `gpuhook prestart` for a container without a GPU request, with `GPUHOOK_LOG_FORMAT=format`.
fn prestart(format: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(
        bundle.join("config.json"),
        r#"{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]},"root":{"path":"rootfs"}}"#,
    )
    .unwrap();
    let config = dir.path().join("gpuhook.toml");
    std::fs::write(&config, "").unwrap();
    let state = format!(
        r#"{{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1,"bundle":{:?}}}"#,
        bundle.to_str().unwrap()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuhook"))
        .arg("prestart")
        .env("GPUHOOK_CONFIG", &config)
        .env("GPUHOOK_LOG_FORMAT", format)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(state.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn prestart_warns_once_about_an_unknown_log_format_and_still_succeeds() {
    let out = prestart("xml");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("GPUHOOK_LOG_FORMAT=\"xml\"") && warnings[0].contains("json|text"),
        "{stderr}"
    );
    for known in ["json", "text", ""] {
        let out = prestart(known);
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("GPUHOOK_LOG_FORMAT"),
            "{known:?}: {stderr}"
        );
    }
}

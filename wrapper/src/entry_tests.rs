//! Tests of [`crate::entry`]: the exec, the exit status and the report of a failure, in a child
//! test process (the wrapper execs or exits).

use std::fs;

use std::process::Command;

use serde_json::json;

use super::*;
use crate::entry::{main_with, report_error};
use crate::error::EXIT_FAILURE;

#[test]
fn report_error_writes_runc_log_in_both_formats() {
    let f = fixture();
    let log = f.root.join("log.json");
    let argv = os(&[
        "x",
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "id",
    ]);
    report_error(&argv, &"unresolvable CDI devices nvidia.com/gpu=7");
    let line: Value = serde_json::from_str(fs::read_to_string(&log).unwrap().trim()).unwrap();
    assert_eq!(line["level"], "error");
    assert_eq!(
        line["msg"],
        "gpuhook-runtime: unresolvable CDI devices nvidia.com/gpu=7"
    );
    // Even when the command line itself was the problem.
    let text = f.root.join("log.txt");
    let argv = os(&[
        "x",
        "--weird",
        "v",
        "--log",
        text.to_str().unwrap(),
        "create",
    ]);
    report_error(&argv, &"boom");
    let t = fs::read_to_string(&text).unwrap();
    assert!(
        t.contains("level=error msg=\"gpuhook-runtime: boom\""),
        "{t}"
    );
}

const CHILD_ENV: &str = "GPUHOOK_RUNTIME_TEST_CHILD";

/// Runs in a child test process (see [`exec_replaces_the_process`]): runs the wrapper, which
/// execs the fake runtime or exits with an error.
#[test]
fn exec_child() {
    let Some(spec) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let spec: Value = serde_json::from_str(spec.to_str().unwrap()).unwrap();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let config = RuntimeConfig {
        runtimes: vec!["runc".into()],
        spec_dirs: strs(&spec["dirs"]).into_iter().map(PathBuf::from).collect(),
        path_env: Some(spec["path"].as_str().unwrap().into()),
        self_exe: None,
    };
    let argv: Vec<OsString> = strs(&spec["argv"])
        .into_iter()
        .map(OsString::from)
        .collect();
    main_with(&argv, &config, &env_request, &Extensions::default());
}

fn spawn_child(f: &Fixture, argv: &[OsString]) -> std::process::Output {
    let spec = json!({
        "dirs": f.config.spec_dirs,
        "path": f.config.path_env.as_ref().unwrap().to_str().unwrap(),
        "argv": argv.iter().map(|a| a.to_str().unwrap()).collect::<Vec<_>>(),
    });
    Command::new(std::env::current_exe().unwrap())
        .args([
            "run::tests::entry::exec_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec.to_string())
        .env("LD_LIBRARY_PATH", "/nonexistent-gpuhook-test")
        .output()
        .unwrap()
}

#[test]
fn exec_replaces_the_process_with_the_original_argv() {
    let f = fixture();
    let argv = create_argv(&f);
    let out = spawn_child(&f, &argv);
    assert!(out.status.success(), "{out:?}");
    let recorded = fs::read_to_string(f.root.join("record.argv")).unwrap();
    let want: Vec<&str> = argv[1..].iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(recorded.lines().collect::<Vec<_>>(), want);
    let env = fs::read_to_string(f.root.join("record.env")).unwrap();
    assert!(
        !env.contains("LD_LIBRARY_PATH"),
        "LD_LIBRARY_PATH passed on"
    );
    assert_eq!(read_spec(&f)["linux"]["devices"][0]["path"], "/dev/nvidia0");

    // Passthrough: `delete` execs with the same argv and no bundle needed.
    let argv = os(&[
        "gpuhook-runtime",
        "--root",
        "/r",
        "delete",
        "--force",
        "ctr1",
    ]);
    let out = spawn_child(&f, &argv);
    assert!(out.status.success(), "{out:?}");
    let recorded = fs::read_to_string(f.root.join("record.argv")).unwrap();
    assert_eq!(recorded, "--root\n/r\ndelete\n--force\nctr1\n");
}

#[test]
fn failure_exits_1_and_reaches_the_log_without_running_the_runtime() {
    let f = fixture();
    set_env(&f, "7");
    let log = f.root.join("log.json");
    let b = f.bundle.to_str().unwrap();
    let argv = os(&[
        "gpuhook-runtime",
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        b,
        "c",
    ]);
    let out = spawn_child(&f, &argv);
    assert_eq!(out.status.code(), Some(EXIT_FAILURE), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unresolvable CDI devices nvidia.com/gpu=7"),
        "{stderr}"
    );
    let log = fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("unresolvable CDI devices nvidia.com/gpu=7"),
        "{log}"
    );
    assert!(!f.root.join("record.argv").exists(), "runtime ran");
}

//! The `gpuhook-runtime` binary with a fake runc: pass-through, stdout untouched, config errors.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Fake {
    tmp: tempfile::TempDir,
}

impl Fake {
    /// A temp dir with `bin/runc` that records its argv and prints a marker on stdout.
    fn new() -> Fake {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let runc = bin.join("runc");
        gpuhook_fs::testing::write_executable(
            &runc,
            &format!(
                "#!/bin/sh\necho \"$@\" > {}\necho FAKE-RUNC-STDOUT\n",
                tmp.path().join("argv").display()
            ),
        )
        .unwrap();
        Fake { tmp }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.tmp.path().join(p)
    }

    fn run(&self, config: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gpuhook-runtime"))
            .args(args)
            .env("PATH", self.path("bin"))
            .env("GPUHOOK_CONFIG", config)
            .output()
            .unwrap()
    }

    fn argv(&self) -> Option<String> {
        std::fs::read_to_string(self.path("argv")).ok()
    }

    fn bundle(&self, env: &str) -> PathBuf {
        let b = self.path("bundle");
        std::fs::create_dir_all(&b).unwrap();
        let spec = format!(
            "{{\"ociVersion\":\"1.0.2\",\"process\":{{\"env\":[\"{env}\"]}},\"linux\":{{}}}}"
        );
        std::fs::write(b.join("config.json"), spec).unwrap();
        b
    }

    fn config(&self, text: &str) -> PathBuf {
        let c = self.path("gpuhook.toml");
        // Top-level keys first: `text` may open a table.
        let text = format!(
            "cdi-spec-dirs = [\"{}\"]\ninventory-cache = \"{}\"\n{text}\n",
            self.path("cdi").display(),
            self.path("inv.json").display()
        );
        std::fs::write(&c, text).unwrap();
        c
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn pass_through_keeps_stdout_and_argv() {
    let f = Fake::new();
    let c = f.config("");
    let out = f.run(
        &c,
        &["--root", "/r", "--log", "/dev/null", "state", "ctr-1"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "FAKE-RUNC-STDOUT\n");
    assert_eq!(f.argv().unwrap(), "--root /r --log /dev/null state ctr-1\n");
}

#[test]
fn non_gpu_create_leaves_the_bundle_untouched() {
    let f = Fake::new();
    let c = f.config("");
    let b = f.bundle("PATH=/bin");
    let before = std::fs::read(b.join("config.json")).unwrap();
    let out = f.run(&c, &["create", "--bundle", b.to_str().unwrap(), "ctr-2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "FAKE-RUNC-STDOUT\n");
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    assert!(f.argv().unwrap().starts_with("create --bundle"));
}

#[test]
fn unknown_device_fails_create_into_the_runc_log() {
    let f = Fake::new();
    let c = f.config("[runtime]\ngenerate-missing = false");
    let b = f.bundle("NVIDIA_VISIBLE_DEVICES=99");
    let log = f.path("log.json");
    let out = f.run(
        &c,
        &[
            "--log",
            log.to_str().unwrap(),
            "--log-format",
            "json",
            "create",
            "--bundle",
            b.to_str().unwrap(),
            "ctr-3",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(f.argv().is_none(), "runc must not run");
    // The shim shows the last `"level":"error"` line of the log; every line must be JSON.
    let lines = std::fs::read_to_string(&log).unwrap();
    let mut last_error = None;
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        if v["level"] == "error" {
            last_error = v["msg"].as_str().map(str::to_string);
        }
    }
    let msg = last_error.expect("an error line");
    assert!(
        msg.contains("unresolvable CDI devices nvidia.com/gpu=99"),
        "{msg}"
    );
}

#[test]
fn broken_config_refuses_create_but_passes_other_commands_through() {
    let f = Fake::new();
    let c = f.path("broken.toml");
    std::fs::write(&c, "log-level = \"loud\"\n").unwrap();
    let b = f.bundle("NVIDIA_VISIBLE_DEVICES=0");
    let out = f.run(&c, &["create", "--bundle", b.to_str().unwrap(), "ctr-4"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(c.to_str().unwrap()), "{stderr}");
    assert!(f.argv().is_none(), "runc must not run");

    let out = f.run(&c, &["delete", "--force", "ctr-4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "FAKE-RUNC-STDOUT\n");
    assert_eq!(f.argv().unwrap(), "delete --force ctr-4\n");
}

/// Issue #13.7: the wrapper reads NVIDIA's config file: its
/// `accept-nvidia-visible-devices-envvar-when-unprivileged = false` (toolkit
/// `internal/config/config.go`, `Config.AcceptEnvvarUnprivileged`) keeps an unprivileged
/// container's NVIDIA_VISIBLE_DEVICES out, and a key gpuhook does not know is a warning in the
/// log, not a refused container.
#[test]
fn nvidias_config_file_sets_the_policy_and_unknown_keys_only_warn() {
    let f = Fake::new();
    let c = f.config(
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\nbogus-key = 1\n\
         [nvidia-container-runtime]\nlog-level = \"debug\"\nruntimes = [\"runc\"]",
    );
    let b = f.bundle("NVIDIA_VISIBLE_DEVICES=0");
    let before = std::fs::read(b.join("config.json")).unwrap();
    let log = f.path("log.json");
    let args = [
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "ctr-5",
    ];
    let out = f.run(&c, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "FAKE-RUNC-STDOUT\n");
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines.contains("NVIDIA config key `bogus-key` has no meaning for gpuhook"),
        "{lines}"
    );
    // The decision says which source was ignored and why (issue #17.6), not an enum name.
    let skip = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["outcome"] == "skip")
        .expect("a skip decision");
    let reason = skip["reason"].as_str().unwrap();
    assert!(
        reason.contains("NVIDIA_VISIBLE_DEVICES of an unprivileged container ignored"),
        "{reason}"
    );
}

/// Issue #17.7: `gpuhook-runtime --version` used to be runc's answer alone; now it names us and
/// the runtime we wrap, then that runtime's own `--version` follows (as nvidia-container-runtime
/// does). `--help` is ours and runs no runtime.
#[test]
fn version_and_help_are_answered_by_the_wrapper() {
    let f = Fake::new();
    let c = f.config("");
    for flag in ["--version", "-v"] {
        let out = f.run(&c, &[flag]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let runc = f.path("bin/runc");
        let expected = format!(
            "gpuhook-runtime version {}\nwraps: {}\nFAKE-RUNC-STDOUT\n",
            env!("CARGO_PKG_VERSION"),
            runc.display()
        );
        assert_eq!(stdout, expected, "{flag}");
        assert_eq!(
            f.argv().as_deref(),
            Some("--version\n"),
            "runc asked its version"
        );
        std::fs::remove_file(f.path("argv")).unwrap();
    }
    for flag in ["--help", "-h"] {
        let out = f.run(&c, &[flag]);
        assert!(out.status.success());
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("gpuhook-runtime: the runc wrapper"),
            "{stdout}"
        );
        assert!(stdout.contains("Examples:"), "{stdout}");
        assert_eq!(f.argv(), None, "runc not run for {flag}");
    }
    // Not alone on the command line: runc's, passed through.
    let out = f.run(&c, &["--debug", "--version"]);
    assert_eq!(text(&out.stdout), "FAKE-RUNC-STDOUT\n");
    assert_eq!(f.argv().as_deref(), Some("--debug --version\n"));
}

/// The decision lines of a JSON log file (target `gpuhook::decision`).
fn decisions(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes in a file: {text:?}"
    );
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .filter(|v: &serde_json::Value| v["target"] == "gpuhook::decision")
        .collect()
}

/// Issue #17.6: every policy decision of the wrapper is a structured line at the default level,
/// in the format GPUHOOK_LOG_FORMAT asks for, with no log-level set up.
#[test]
fn policy_decisions_are_structured_json_lines_at_the_default_level() {
    let f = Fake::new();
    let log = f.path("gpuhook.log");
    let c = f.config(&format!(
        "log-file = \"{}\"\n[runtime]\ngenerate-missing = false",
        log.display()
    ));
    let run = |env: &str, id: &str| {
        let b = f.bundle(env);
        Command::new(env!("CARGO_BIN_EXE_gpuhook-runtime"))
            .args(["create", "--bundle", b.to_str().unwrap(), id])
            .env("PATH", f.path("bin"))
            .env("GPUHOOK_CONFIG", &c)
            .env("GPUHOOK_LOG_FORMAT", "json")
            .output()
            .unwrap()
    };
    assert!(run("PATH=/bin", "plain").status.success());
    assert_eq!(
        run("NVIDIA_VISIBLE_DEVICES=7", "gpu-7").status.code(),
        Some(1)
    );
    let d = decisions(&log);
    assert_eq!(d.len(), 2, "{d:?}");
    let skip = &d[0];
    assert_eq!(skip["level"], "INFO");
    assert_eq!(skip["fields"]["command"], "runtime create");
    assert_eq!(skip["fields"]["outcome"], "skip");
    assert_eq!(skip["fields"]["container"], "plain");
    assert!(skip["fields"]["reason"].is_string(), "{skip}");
    // The request is honoured (source and devices named); resolving it then fails, and that
    // failure is the ERROR line after it.
    let granted = &d[1];
    assert_eq!(granted["level"], "INFO");
    assert_eq!(granted["fields"]["outcome"], "inject");
    assert_eq!(granted["fields"]["container"], "gpu-7");
    assert_eq!(granted["fields"]["source"], "envvar");
    assert_eq!(granted["fields"]["devices"], "nvidia.com/gpu=7");
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR");
    let error = last["fields"]["error"].as_str().unwrap();
    assert!(
        error.contains("unresolvable CDI devices nvidia.com/gpu=7"),
        "{error}"
    );
}

/// Issue #17.6: an unknown GPUHOOK_LOG_FORMAT is not silently ignored: one warning naming the
/// value and the accepted ones, in the wrapper's log (the config's log-file, else runc's
/// `--log`), never on stdout (runc's) or stderr (the container's during `runc create`); the log
/// stays text, or follows runc's `--log-format`.
#[test]
fn unknown_log_format_warns_once_in_the_log() {
    let f = Fake::new();
    let log = f.path("gpuhook.log");
    let runc_log = f.path("runc.log");
    let with_file = f.config(&format!("log-file = \"{}\"", log.display()));
    let b = f.bundle("PATH=/bin");
    let bundle = b.to_str().unwrap();
    let run = |config: &Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuhook-runtime"))
            .args(args)
            .env("PATH", f.path("bin"))
            .env("GPUHOOK_CONFIG", config)
            .env("GPUHOOK_LOG_FORMAT", "xml")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "FAKE-RUNC-STDOUT\n");
        assert!(
            !text(&out.stderr).contains("GPUHOOK_LOG_FORMAT"),
            "{}",
            text(&out.stderr)
        );
    };
    run(&with_file, &["create", "--bundle", bundle, "fmt-1"]);
    let logged = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = logged.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{logged}");
    assert!(
        warnings[0].contains("GPUHOOK_LOG_FORMAT=\"xml\"") && warnings[0].contains("json|text"),
        "{logged}"
    );
    let line = logged.lines().find(|l| l.contains("fmt-1")).unwrap();
    assert!(
        serde_json::from_str::<serde_json::Value>(line).is_err(),
        "{line}"
    );

    let without_file = f.config("");
    let runc_args = ["--log", runc_log.to_str().unwrap(), "--log-format", "json"];
    run(
        &without_file,
        &[&runc_args[..], &["create", "--bundle", bundle, "fmt-2"]].concat(),
    );
    let logged = std::fs::read_to_string(&runc_log).unwrap();
    let warnings: Vec<serde_json::Value> = logged
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["level"] == "WARN")
        .collect();
    assert_eq!(warnings.len(), 1, "{logged}");
    assert_eq!(warnings[0]["value"], "xml", "{logged}");
    assert_eq!(warnings[0]["accepted"], "json|text", "{logged}");
}

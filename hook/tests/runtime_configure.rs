//! `gpuhook runtime configure` as a provisioning script sees it: stdout summary, exit status
//! 0 (changed) / 3 (unchanged) / 1 (error, nothing written), comments kept, a backup made.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn configure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuhook"))
        .env_remove("GPUHOOK_CONFIG")
        .args(["runtime", "configure"])
        .args(args)
        .output()
        .expect("run gpuhook")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const MAIN: &str = r#"# Node config: keep this comment.
version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "example.com/pause:9" # inline comment
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"#;

fn backups(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("config.toml.bak."))
        .collect();
    v.sort();
    v
}

#[test]
fn changed_then_unchanged_with_comments_and_backup() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, MAIN).unwrap();
    let c = config.to_str().unwrap();
    let binary = "/opt/gpuhook/bin/gpuhook-runtime";

    // Dry run: exit 0 (would change), a diff on stdout, nothing written.
    let out = configure(&["--containerd-config", c, "--binary", binary, "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("+  BinaryName = \"{binary}\"")) || stdout.contains(binary),
        "{stdout}"
    );
    assert!(stdout.contains("Dry run"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), MAIN);
    assert!(backups(tmp.path()).is_empty());

    let out = configure(&["--containerd-config", c, "--binary", binary]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("wrote"), "{}", text(&out.stdout));
    let after = std::fs::read_to_string(&config).unwrap();
    assert!(
        after.contains("# Node config: keep this comment."),
        "{after}"
    );
    assert!(after.contains("# inline comment"), "{after}");
    assert!(after.contains(binary), "{after}");
    assert!(after.contains("runtimes.gpuhook"), "{after}");
    let b = backups(tmp.path());
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join(&b[0])).unwrap(),
        MAIN
    );

    // Second run: exit 3, file byte-identical, no new backup.
    let out = configure(&["--containerd-config", c, "--binary", binary]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("nothing changed"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), after);
    assert_eq!(backups(tmp.path()).len(), 1);
}

#[test]
fn drop_in_with_and_without_a_path() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, MAIN).unwrap();
    let drop_in = tmp.path().join("conf.d/50-gpu.toml");
    let args = [
        "--containerd-config",
        config.to_str().unwrap(),
        "--drop-in",
        drop_in.to_str().unwrap(),
    ];
    let out = configure(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let d = std::fs::read_to_string(&drop_in).unwrap();
    assert!(d.contains("/usr/local/bin/gpuhook-runtime"), "{d}");
    let main = std::fs::read_to_string(&config).unwrap();
    assert!(main.contains("imports"), "{main}");
    assert!(main.contains("# Node config: keep this comment."));
    assert_eq!(configure(&args).status.code(), Some(3));
}

#[test]
fn bad_toml_is_an_error_naming_the_file_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.toml");
    let broken = "version = 2\n[plugins\nfoo = \n";
    std::fs::write(&config, broken).unwrap();
    let out = configure(&["--containerd-config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(config.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), broken);
    assert!(backups(tmp.path()).is_empty());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
}

#[test]
fn usage_errors_exit_2() {
    let out = configure(&["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

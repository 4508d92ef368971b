//! Helpers shared by the CDI end-to-end tests (`cdi_cli`, `cdi_hooks`, `cdi_list_validate`,
//! `cdi_podman`, `cdi_specs`): temp dirs and files, building a simulated node, running the
//! `gpuhook` binary, and validating a spec with an independent JSON schema validator (boon,
//! compiled from the schema files on disk, not gpuhook's embedded copy).

#![allow(dead_code)] // each test crate uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{materialise, MaterialiseOptions};

/// A path as a `&str` argument.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A temp dir named `gpuhook-cdi-<tag>-…`.
pub fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gpuhook-cdi-{tag}-"))
        .tempdir()
        .expect("tempdir")
}

/// Writes `text` to `path`, creating the parent directories.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Materialises the built-in `profile` into `dir` (needs root).
pub fn build_node(profile: &str, dir: &Path) -> NodeProfile {
    let p = NodeProfile::builtin(profile).unwrap_or_else(|e| panic!("profile {profile}: {e}"));
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    let report =
        materialise(&p, dir, &opts).unwrap_or_else(|e| panic!("materialise {profile}: {e}"));
    for note in &report.notes {
        eprintln!("note: {profile}: {note}");
    }
    p
}

/// `gpuhook_e2e::busybox_rootfs(dir, true)`, retried: it copies busybox into the rootfs and then
/// executes the copy, which fails with ETXTBSY when another test thread forks while the copy's
/// write descriptor is still open (the child holds it until it execs). A retry after that window
/// succeeds. (The race disappears if `busybox_rootfs` runs the host busybox for `--list`.)
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match std::panic::catch_unwind(|| gpuhook_e2e::busybox_rootfs(dir, true)) {
            Ok(p) => return p,
            Err(e) if attempt >= 5 => std::panic::resume_unwind(e),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50 * attempt)),
        }
    }
}

/// Runs `gpuhook ARGS` with `GPUHOOK_CONFIG` pointing at no file and an empty stdin.
pub fn gpuhook(args: &[&str]) -> Output {
    gpuhook_cmd(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spawn gpuhook {args:?}: {e}"))
}

/// The node's own inventory cache (the config's default `inventory-cache`), which no test may
/// write (#22: a test's temp node once replaced it).
pub const REAL_INVENTORY_CACHE: &str = "/var/run/gpuhook/inventory.json";

/// Refuses (panics on) a `gpuhook cdi generate|refresh` that would write the node's real paths:
/// without `--inventory-cache PATH` or `--no-inventory-cache` it saves the inventory to
/// [`REAL_INVENTORY_CACHE`]; `generate` without `--output` writes into `/var/run/cdi`.
pub fn refuse_real_paths(args: &[&str]) {
    let sub = args.get(..2);
    let writes = matches!(sub, Some(["cdi", "generate" | "refresh"]));
    if !writes || args.iter().any(|a| *a == "--help" || *a == "-h") {
        return;
    }
    let has = |flags: &[&str]| {
        args.iter().any(|a| {
            flags
                .iter()
                .any(|f| a == f || a.starts_with(&format!("{f}=")))
        })
    };
    assert!(
        has(&["--inventory-cache", "--no-inventory-cache"]),
        "test runs `gpuhook {args:?}` with the default inventory cache ({REAL_INVENTORY_CACHE}): \
         pass --inventory-cache <temp path> or --no-inventory-cache"
    );
    assert!(
        sub != Some(&["cdi", "generate"][..]) || has(&["--output", "-o"]),
        "test runs `gpuhook {args:?}` with the default output (/var/run/cdi): pass --output"
    );
}

/// The `gpuhook` command with a clean config environment; a `cdi generate|refresh` must name
/// its inventory cache and output ([`refuse_real_paths`]).
pub fn gpuhook_cmd(args: &[&str]) -> Command {
    refuse_real_paths(args);
    let mut cmd = Command::new(gpuhook_e2e::built("gpuhook"));
    cmd.args(args).env_remove("GPUHOOK_CONFIG");
    cmd
}

/// `gpuhook ARGS` must succeed; returns (stdout, stderr).
pub fn gpuhook_ok(args: &[&str]) -> (String, String) {
    let out = gpuhook(args);
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "gpuhook {args:?} failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

pub fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The CDI schema directory: `../shared/cdi-schema` beside the checkout (CI), else the in-repo
/// copy `cdi/schema`.
pub fn schema_dir() -> PathBuf {
    let root = gpuhook_e2e::workspace_root();
    let shared = root.join("../shared/cdi-schema");
    if shared.join("schema.json").is_file() {
        shared
    } else {
        root.join("cdi/schema")
    }
}

/// Validates a spec document with boon against the schema files on disk; returns the errors.
pub fn schema_errors(spec: &serde_json::Value) -> Vec<String> {
    let dir = schema_dir()
        .canonicalize()
        .expect("CDI schema directory exists");
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V7);
    let main = dir.join("schema.json");
    let index = compiler
        .compile(main.to_str().expect("UTF-8 schema path"), &mut schemas)
        .unwrap_or_else(|e| panic!("compile {}: {e:#}", main.display()));
    match schemas.validate(spec, index) {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!("{e:#}")],
    }
}

/// Checks a spec file: boon schema validation, `gpuhook cdi validate`, and a cdiVersion that
/// podman 4.3 / containerd 1.7.0 accept (<= 0.5.0). Returns the parsed document.
pub fn check_spec_file(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let errors = schema_errors(&doc);
    assert!(
        errors.is_empty(),
        "{} fails the CDI JSON schema ({}):\n{}",
        path.display(),
        schema_dir().display(),
        errors.join("\n")
    );
    let (stdout, _) = gpuhook_ok(&["cdi", "validate", path.to_str().unwrap()]);
    assert!(stdout.contains("valid CDI spec"), "{stdout}");
    let version = doc["cdiVersion"].as_str().expect("cdiVersion");
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(
        parts <= vec![0, 5, 0],
        "{}: cdiVersion {version} is newer than podman 4.3 / containerd 1.7.0 accept",
        path.display()
    );
    doc
}

/// Removes a file when dropped (spec files in /etc/cdi must not outlive a test).
#[derive(Debug)]
pub struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The device names of a spec document.
pub fn device_names(doc: &serde_json::Value) -> Vec<String> {
    doc["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["name"].as_str().expect("name").to_string())
        .collect()
}

/// `podman run --rm --device DEVICE --rootfs ROOTFS /bin/sh -c SCRIPT` (runc, no network, small
/// ulimits so busybox starts quickly).
pub fn podman_run(device: &str, rootfs: &Path, script: &str) -> Output {
    Command::new("podman")
        .args(["run", "--rm", "--runtime", "runc"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ])
        .args(["--network", "none", "--device", device, "--rootfs"])
        .arg(rootfs)
        .args(["/bin/sh", "-c", script])
        .output()
        .expect("spawn podman")
}
pub mod nvidia_norm;

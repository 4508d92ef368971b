//! `gpuhook cdi generate` as a user runs it: the binary, its exit status, stdout/stderr, and the
//! files it leaves (spec, inventory cache). `list`/`validate` are in `cdi_list_validate.rs`, the
//! `hook` subcommands in `cdi_hooks.rs`.
//!
//! The tests materialise simulated nodes (mknod: root) and are gated like the other end-to-end
//! tests. Every error case checks the contract: non-zero exit, exactly one `gpuhook: error:` line naming the file and
//! the fix, and the previous spec byte-for-byte untouched with no temporary file left behind.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use cdi_support::{build_node, check_spec_file, device_names, gpuhook, gpuhook_ok, s, texts, tmp};

fn ready(test: &str) -> bool {
    gpuhook_e2e::e2e_ready(test, &["ldconfig"])
}

/// Names of the entries of `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `gpuhook cdi generate --driver-root ROOT --output OUTPUT` followed by `extra`.
fn generate<'a>(root: &'a Path, output: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "cdi",
        "generate",
        "--driver-root",
        s(root),
        "--output",
        output,
    ];
    args.extend_from_slice(extra);
    args
}

/// Runs a generate that must fail; checks the one error line and that `previous` is untouched.
fn assert_fails_cleanly(args: &[&str], previous: &Path, needles: &[&str]) -> String {
    let before = std::fs::read(previous).expect("previous spec");
    let mtime = std::fs::metadata(previous).unwrap().mtime_nsec();
    let listing = entries(previous.parent().unwrap());
    let out = gpuhook(args);
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success(), "{args:?} must fail\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{args:?}\n{stderr}");
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("gpuhook: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "exactly one error line:\n{stderr}");
    for n in needles {
        assert!(
            errors[0].contains(n),
            "error line lacks {n:?}:\n{}",
            errors[0]
        );
    }
    assert_eq!(
        std::fs::read(previous).unwrap(),
        before,
        "previous spec changed"
    );
    assert_eq!(std::fs::metadata(previous).unwrap().mtime_nsec(), mtime);
    assert_eq!(
        entries(previous.parent().unwrap()),
        listing,
        "files left behind"
    );
    errors[0].to_string()
}

#[test]
fn generate_writes_atomically_reports_and_caches() {
    if !ready("cdi_cli::generate_writes_atomically_reports_and_caches") {
        return;
    }
    let t = tmp("gen");
    let root = t.path().join("driver");
    let p = build_node("t4", &root);
    let out_dir = t.path().join("cdi");
    let cache = t.path().join("state/inventory.json");
    let out_arg = format!("{}/", out_dir.display());
    let args = generate(&root, &out_arg, &["--inventory-cache", s(&cache)]);
    let (stdout, stderr) = gpuhook_ok(&args);
    let spec = out_dir.join("nvidia.com-gpu.json");
    assert!(stdout.is_empty(), "the spec goes to the file: {stdout}");
    assert_eq!(
        stderr.trim_end().lines().last(),
        Some(format!("wrote {}: 3 devices (cdiVersion 0.5.0)", spec.display()).as_str()),
        "{stderr}"
    );
    let meta = std::fs::metadata(&spec).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    assert_eq!(entries(&out_dir), vec!["nvidia.com-gpu.json"]);
    let doc = check_spec_file(&spec);
    assert_eq!(
        device_names(&doc),
        vec!["0".to_string(), p.gpus[0].uuid.clone(), "all".into()]
    );
    let canonical_root = root.canonicalize().unwrap();
    check_hooks_and_nodes(&doc, &canonical_root, p.gpus[0].minor);

    let inv = gpuhook_node::Inventory::load_json(&cache).expect("inventory cache");
    assert_eq!(inv.driver_root, canonical_root);
    assert_eq!(inv.gpus.len(), 1);
    assert_eq!(inv.gpus[0].uuid, p.gpus[0].uuid);
    assert_eq!(inv.driver_version, p.driver_version);

    // Same node, same options: the file is not rewritten.
    let mtime = meta.mtime_nsec();
    let (_, stderr) = gpuhook_ok(&args);
    assert!(
        stderr.contains(&format!("unchanged {}: 3 devices", spec.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::metadata(&spec).unwrap().mtime_nsec(), mtime);

    // --gpuhook-path replaces the hooks' binary; the file is rewritten in place.
    gpuhook_ok(&generate(
        &root,
        s(&spec),
        &["--gpuhook-path", "/usr/bin/gpuhook", "--no-inventory-cache"],
    ));
    let doc = check_spec_file(&spec);
    assert_eq!(
        doc["containerEdits"]["hooks"][0]["path"],
        "/usr/bin/gpuhook"
    );
    assert_eq!(entries(&out_dir), vec!["nvidia.com-gpu.json"]);
}

/// One `setup` hook runs this very binary, by its canonical path, with an explicit env; GPU 0's
/// node is the driver root's.
fn check_hooks_and_nodes(doc: &serde_json::Value, canonical_root: &Path, minor: u32) {
    let me = gpuhook_e2e::built("gpuhook").canonicalize().unwrap();
    let hooks = doc["containerEdits"]["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["args"][2], "setup", "{hooks:?}");
    for h in hooks {
        assert_eq!(h["path"], s(&me), "{h}");
        assert_eq!(h["args"][0], "gpuhook");
        assert_eq!(h["hookName"], "createContainer");
        assert!(!h["env"].as_array().unwrap().is_empty(), "{h}");
    }
    let node_paths: Vec<&str> = doc["devices"][0]["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["hostPath"].as_str().unwrap())
        .collect();
    assert_eq!(
        node_paths,
        vec![format!("{}/dev/nvidia{}", canonical_root.display(), minor)]
    );
}

#[test]
fn generate_formats_stdout_and_name_strategies() {
    if !ready("cdi_cli::generate_formats_stdout_and_name_strategies") {
        return;
    }
    let t = tmp("fmt");
    let root = t.path().join("driver");
    let p = build_node("a100-mig-mixed", &root);
    let base = [
        "cdi",
        "generate",
        "--driver-root",
        s(&root),
        "--no-inventory-cache",
    ];

    let mut args = base.to_vec();
    args.extend(["--output", "-", "--device-name-strategy", "type-index"]);
    let (stdout, stderr) = gpuhook_ok(&args);
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON spec on stdout");
    assert!(stderr.contains("wrote <stdout>"), "{stderr}");
    let names = device_names(&doc);
    let migs: usize = p.gpus.iter().map(|g| g.mig_devices.len()).sum();
    assert_eq!(names.len(), migs + 1, "{names:?}");
    assert_eq!(names[0], "mig0:0");
    assert!(names.contains(&"mig1:0".to_string()), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "gpu0" || n == "gpu1"),
        "MIG-enabled GPUs are not whole devices: {names:?}"
    );

    let dir = t.path().join("out");
    std::fs::create_dir(&dir).unwrap();
    let mut args = base.to_vec();
    args.extend([
        "--output",
        s(&dir),
        "--format",
        "yaml",
        "--vendor",
        "example.com",
    ]);
    args.extend(["--class", "accel"]);
    let (_, stderr) = gpuhook_ok(&args);
    let file = dir.join("example.com-accel.yaml");
    assert!(
        stderr.contains(&format!("wrote {}", file.display())),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("cdiVersion: 0.5.0\nkind: example.com/accel\n"),
        "{text}"
    );
    let (stdout, _) = gpuhook_ok(&["cdi", "validate", s(&file)]);
    assert!(stdout.contains("valid CDI spec"), "{stdout}");

    let mut args = base.to_vec();
    args.extend(["--output", "/tmp/x.json", "--format", "yaml"]);
    let (_, stderr) = texts(&gpuhook(&args));
    assert!(stderr.contains("does not match the extension"), "{stderr}");
}

#[test]
fn generate_errors_are_one_line_and_keep_the_previous_spec() {
    if !ready("cdi_cli::generate_errors_are_one_line_and_keep_the_previous_spec") {
        return;
    }
    let t = tmp("err");
    let good = t.path().join("good");
    build_node("t4", &good);
    let out_dir = t.path().join("cdi");
    let spec = out_dir.join("nvidia.com-gpu.json");
    gpuhook_ok(&generate(&good, s(&spec), &["--no-inventory-cache"]));
    broken_driver_roots_fail(t.path(), &spec);
    failing_nvml_is_named(t.path(), &spec);
    other_specs_are_not_overwritten(t.path(), &good);
    read_only_output_fails_and_cache_only_warns(t.path(), &good, &spec);
}

/// A generate of `root` onto `spec` that must fail, naming `needles`; returns the error line.
fn fails(spec: &Path, root: &Path, needles: &[&str]) -> String {
    let args = generate(root, s(spec), &["--no-inventory-cache"]);
    assert_fails_cleanly(&args, spec, needles)
}

/// No driver at the root, a root that does not exist, a corrupt or truncated ld.so.cache.
fn broken_driver_roots_fail(t: &Path, spec: &Path) {
    let empty = t.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty = empty.canonicalize().unwrap();
    fails(
        spec,
        &empty,
        &["no NVIDIA driver found", s(&empty), "--driver-root"],
    );

    // A driver root that does not exist.
    let missing = t.join("missing");
    fails(spec, &missing, &[s(&missing), "does not exist"]);

    // Corrupt and truncated ld.so.cache.
    for (tag, corrupt) in [
        (
            "garbage",
            b"this is not a cache at all, not even close".to_vec(),
        ),
        ("truncated", b"glibc-ld.so.cache1.1".to_vec()),
    ] {
        let root = t.join(format!("cache-{tag}"));
        build_node("t4", &root);
        let cache = root.canonicalize().unwrap().join("etc/ld.so.cache");
        std::fs::write(&cache, corrupt).unwrap();
        fails(spec, &root, &[s(&cache), "ldconfig"]);
    }
}

/// NVML that fails to initialise (the mock cannot read its node profile) is named with its
/// library; opting into the /proc fallback works for a node without MIG.
fn failing_nvml_is_named(t: &Path, spec: &Path) {
    let root = t.join("nvml");
    let p = build_node("t4", &root);
    let lib_dir = root
        .canonicalize()
        .unwrap()
        .join(p.lib_dir.trim_start_matches('/'));
    std::fs::remove_file(lib_dir.join(gpuhook_sim::profile::PROFILE_FILE_NAME)).unwrap();
    let line = fails(
        spec,
        &root,
        &["NVML", "failed to initialise", "--allow-procfs-fallback"],
    );
    assert!(line.contains(s(&lib_dir)), "names the library: {line}");
    let fallback = t.join("fallback.json");
    let (_, stderr) = gpuhook_ok(&generate(
        &root,
        s(&fallback),
        &["--no-inventory-cache", "--allow-procfs-fallback"],
    ));
    assert!(stderr.contains("3 devices"), "{stderr}");
    check_spec_file(&fallback);
}

/// An existing spec of our kind that another tool wrote, and a corrupt one, are not replaced.
fn other_specs_are_not_overwritten(t: &Path, good: &Path) {
    let theirs = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}],"containerEdits":{"hooks":[{"hookName":"createContainer","path":"/usr/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","update-ldcache"]}]}}"#;
    for (tag, content) in [("theirs", theirs), ("corrupt", "{ not json")] {
        let dir = t.join(tag);
        std::fs::create_dir(&dir).unwrap();
        let other = dir.join("nvidia.com-gpu.json");
        std::fs::write(&other, content).unwrap();
        let args = generate(good, s(&dir), &["--no-inventory-cache"]);
        assert_fails_cleanly(
            &args,
            &other,
            &[
                "refusing to overwrite",
                s(&other),
                "remove it or choose another --output",
            ],
        );
    }
}

/// An output directory that cannot be written (read-only bind mount) fails; a cache that cannot
/// be written is a warning and the spec is still written.
fn read_only_output_fails_and_cache_only_warns(t: &Path, good: &Path, spec: &Path) {
    let ro = t.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let previous = ro.join("nvidia.com-gpu.json");
    std::fs::copy(spec, &previous).unwrap();
    let _mount = ReadOnlyMount::new(&ro);
    let args = generate(
        good,
        s(&ro),
        &[
            "--device-name-strategy",
            "type-index",
            "--no-inventory-cache",
        ],
    );
    assert_fails_cleanly(&args, &previous, &[s(&ro), "not writable", "--output"]);

    let ok_out = t.join("cache-warning.json");
    let ro_cache = format!("{}/inventory.json", ro.display());
    let (_, stderr) = gpuhook_ok(&generate(
        good,
        s(&ok_out),
        &["--inventory-cache", &ro_cache],
    ));
    assert!(stderr.contains("inventory cache not saved"), "{stderr}");
    assert!(!stderr.contains("gpuhook: error"), "{stderr}");
    assert!(ok_out.is_file());
}

/// `dir` bind-mounted read-only onto itself until dropped.
struct ReadOnlyMount(PathBuf);

impl ReadOnlyMount {
    fn new(dir: &Path) -> Self {
        gpuhook_e2e::run_ok(Command::new("mount").args(["--bind", s(dir), s(dir)]));
        let guard = ReadOnlyMount(dir.to_path_buf());
        gpuhook_e2e::run_ok(Command::new("mount").args(["-o", "remount,bind,ro", s(dir)]));
        guard
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

//! Simulated nodes built by the materialiser, checked with the host's own tools.
//!
//! For every reference profile: the real `ldconfig -p` reads the cache and finds each driver
//! library at the right path, `stat` shows the device nodes with the profile's numbers, the
//! `/proc` files parse back to the profile, the simulated `nvidia-smi -L` agrees, and a second
//! build converges. Needs root (mknod, `ldconfig -r` chroots).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "sim_node/checks.rs"]
mod checks;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use checks::{check_node, ld_cache, opts};
use gpuhook_e2e::{built, mock_nvml_lib, run_ok};
use gpuhook_sim::materialise::{device_nodes, MARKER_FILE};
use gpuhook_sim::{builtin_names, materialise, NodeProfile, SimError};

#[test]
fn every_reference_profile_materialises_into_a_consistent_node() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    for name in builtin_names() {
        let p = NodeProfile::builtin(name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("node");
        let report = materialise(&p, &root, &opts()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.device_nodes, device_nodes(&p).len());
        assert!(root.join(MARKER_FILE).is_file());
        check_node(&root, &p);
    }
}

#[test]
fn second_build_keeps_correct_nodes_and_repairs_wrong_ones() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let p = NodeProfile::builtin("a100-mig-mixed").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    materialise(&p, root, &opts()).unwrap();
    let ctl_inode = std::fs::metadata(root.join("dev/nvidiactl")).unwrap().ino();
    // Break things: a wrong node, a regular file where a node belongs, a truncated library.
    std::fs::remove_file(root.join("dev/nvidia1")).unwrap();
    let rdev = libc::makedev(195, 7);
    let c = std::ffi::CString::new(root.join("dev/nvidia1").to_str().unwrap()).unwrap();
    // SAFETY: c is a valid C path string; mknod has no other preconditions.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, rdev) };
    assert_eq!(rc, 0);
    std::fs::remove_file(root.join("dev/nvidia-caps/nvidia-cap22")).unwrap();
    std::fs::write(root.join("dev/nvidia-caps/nvidia-cap22"), "not a node").unwrap();
    std::fs::write(
        root.join("usr/lib/x86_64-linux-gnu/libcuda.so.570.158.01"),
        "",
    )
    .unwrap();

    materialise(&p, root, &opts()).unwrap();
    assert_eq!(
        std::fs::metadata(root.join("dev/nvidiactl")).unwrap().ino(),
        ctl_inode,
        "correct node kept"
    );
    check_node(root, &p);
    let leftovers: Vec<_> = walk(root)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("gpuhook-sim-tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary files left: {leftovers:?}"
    );
}

#[test]
fn rebuilding_with_another_profile_removes_what_no_longer_belongs() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let dgx = NodeProfile::builtin("dgx-h100").unwrap();
    materialise(&dgx, root, &opts()).unwrap();
    assert!(root.join("dev/nvidia7").exists());
    let t4 = NodeProfile::builtin("t4").unwrap();
    materialise(&t4, root, &opts()).unwrap();
    check_node(root, &t4);
    assert!(
        !root.join("dev/nvidia7").exists(),
        "GPU nodes of the old profile removed"
    );
    assert!(!root.join("run/nvidia-fabricmanager/socket").exists());
    let cache = ld_cache(root);
    assert!(cache.values().all(|p| !p.contains("580.")), "{cache:?}");
    assert!(
        !cache.contains_key(&("libnvidia-nscq.so.2".to_string(), false)),
        "{cache:?}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn refuses_a_non_empty_directory_that_it_did_not_build() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), "user data").unwrap();
    let err = materialise(&NodeProfile::builtin("t4").unwrap(), dir.path(), &opts()).unwrap_err();
    assert!(matches!(err, SimError::NotASimRoot { .. }), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing written"
    );
}

#[test]
fn missing_mock_nvml_is_a_clear_error_before_anything_is_written() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts();
    o.mock_nvml = Some(dir.path().join("nope.so"));
    let err = materialise(
        &NodeProfile::builtin("t4").unwrap(),
        &dir.path().join("node"),
        &o,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("cargo build -p gpuhook-mock-nvml"),
        "{err}"
    );
    assert!(!dir.path().join("node").exists());
}

#[test]
fn cli_builds_checks_and_rejects() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig", "setpriv"]) {
        return;
    }
    let sim = built("gpuhook-sim");
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(Command::new(&sim).arg("list"));
    assert_eq!(out.lines().count(), builtin_names().len(), "{out}");
    let root = dir.path().join("node");
    let out = run_ok(
        Command::new(&sim)
            .args(["build", "h100-mig"])
            .arg(&root)
            .arg("--mock-nvml")
            .arg(mock_nvml_lib()),
    );
    assert!(out.contains("built node h100-mig"), "{out}");
    check_node(&root, &NodeProfile::builtin("h100-mig").unwrap());

    // `show` prints a profile that `check` accepts; a broken copy is rejected naming the field.
    let good = dir.path().join("good.toml");
    std::fs::write(&good, run_ok(Command::new(&sim).args(["show", "dgx-h100"]))).unwrap();
    run_ok(Command::new(&sim).arg("check").arg(&good));
    let text = std::fs::read_to_string(&good).unwrap();
    let second_uuid = NodeProfile::builtin("dgx-h100").unwrap().gpus[1]
        .uuid
        .clone();
    let first_uuid = NodeProfile::builtin("dgx-h100").unwrap().gpus[0]
        .uuid
        .clone();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, text.replace(&second_uuid, &first_uuid)).unwrap();
    let out = Command::new(&sim).arg("check").arg(&bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.toml")
            && err.contains(&format!("gpus[1].uuid: duplicate UUID {first_uuid}")),
        "{err}"
    );

    // Without CAP_MKNOD the build stops before writing anything.
    let target = dir.path().join("unprivileged");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&sim)
        .args(["build", "t4"])
        .arg(&target)
        .arg("--mock-nvml")
        .arg(mock_nvml_lib())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs CAP_MKNOD: run as root"),
        "{err}"
    );
    assert!(!target.exists());
}

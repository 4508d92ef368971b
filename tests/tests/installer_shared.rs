//! The installer on a node where other tools write too (issue 22), and its Docker hook link
//! (issue 26), run directly as root on a simulated host root (no podman).
//!
//! `/var/run/cdi` and `/etc/containerd` are shared: gpu-mps-daemon rewrites its spec there, a DRA
//! driver writes per-claim specs, an admin adds files. Here `gpuhook cdi generate`, as the
//! installer runs it, is a script that makes such another tool write beside it (busybox sh in
//! the host root) and then runs the real gpuhook; afterwards the other tool goes on writing.
//! Uninstall must then remove only gpuhook's own files and leave the others as they are.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;
mod installer_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cdi_support::{s, texts, tmp, write};
use gpuhook_e2e::{built, e2e_ready};
use installer_support::{check_runtime_in_dump, host_root, source_dir, INSTALL_DIR};

/// A CDI spec of another vendor (valid, so `cdi generate` has nothing to say about it).
fn other_spec(kind: &str, value: &str) -> String {
    format!(
        r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{{"name":"x","containerEdits":{{"env":["V={value}"]}}}}]}}"#
    )
}

/// A source dir whose `gpuhook` makes another tool write into the shared dirs, then runs the
/// real gpuhook (copied into the host root at /opt/real/gpuhook).
fn source_with_a_busy_neighbour(dir: &Path, root: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for b in ["gpuhook-runtime", "gpu-mps-daemon"] {
        std::fs::copy(source_dir().join(b), src.join(b)).unwrap();
    }
    std::fs::create_dir_all(root.join("opt/real")).unwrap();
    std::fs::copy(source_dir().join("gpuhook"), root.join("opt/real/gpuhook")).unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(gpuhook_e2e::which("busybox").unwrap(), root.join("bin/sh")).unwrap();
    let script = format!(
        "#!/bin/sh\n\
         echo '{}' > /run/cdi/dra.example.com-claim.json\n\
         echo '{}' > /run/cdi/mps.example.com-gpu.json\n\
         echo 'other = 1' > /etc/containerd/other.toml\n\
         exec /opt/real/gpuhook \"$@\"\n",
        other_spec("dra.example.com/claim", "1"),
        other_spec("mps.example.com/gpu", "2"),
    );
    gpuhook_fs::testing::write_executable(&src.join("gpuhook"), &script).unwrap();
    src
}

fn installer(root: &Path, args: &[&str]) -> Output {
    Command::new(built("gpuhook-installer"))
        .args(args)
        .args(["--host-root", s(root), "--restart-mode", "none"])
        .output()
        .unwrap()
}

fn ok(out: &Output, what: &str) -> String {
    let (stdout, stderr) = texts(out);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

#[test]
fn uninstall_leaves_other_writers_files_alone() {
    if !e2e_ready(
        "installer_shared",
        &["containerd", "ldd", "ldconfig", "busybox"],
    ) {
        return;
    }
    let dir = tmp("installer-shared");
    let root = host_root(dir.path());
    let src = source_with_a_busy_neighbour(dir.path(), &root);
    // The MPS daemon's spec was there before the install.
    let mps = root.join("run/cdi/mps.example.com-gpu.json");
    write(&mps, &other_spec("mps.example.com/gpu", "1"));
    let out = installer(&root, &["install", "--source-dir", s(&src)]);
    ok(&out, "install");
    assert!(root.join("run/cdi/nvidia.com-gpu.json").is_file());
    check_runtime_in_dump(&root.join("etc/containerd/config.toml"));
    // The other tool goes on after the install.
    let v3 = other_spec("mps.example.com/gpu", "3");
    write(&mps, &v3);

    ok(&installer(&root, &["uninstall"]), "uninstall");
    assert!(!root.join("run/cdi/nvidia.com-gpu.json").exists());
    assert_eq!(std::fs::read_to_string(&mps).unwrap(), v3);
    assert_eq!(
        std::fs::read_to_string(root.join("run/cdi/dra.example.com-claim.json")).unwrap(),
        format!("{}\n", other_spec("dra.example.com/claim", "1"))
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/containerd/other.toml")).unwrap(),
        "other = 1\n"
    );
}

/// `docker run --gpus` finds `nvidia-container-runtime-hook` on dockerd's PATH: the installer
/// links it to the installed gpuhook in /usr/local/bin, leaves NVIDIA's own hook alone without
/// --force, and with --force replaces it until uninstall puts it back byte for byte.
#[test]
fn docker_hook_link_respects_nvidias_hook() {
    if !e2e_ready("installer_shared", &["containerd", "ldd", "ldconfig"]) {
        return;
    }
    let dir = tmp("installer-docker-hook");
    let root = host_root(dir.path());
    let link = root.join("usr/local/bin/nvidia-container-runtime-hook");
    let src = source_dir();
    let install = ["install", "--no-containerd", "--source-dir", s(&src)];
    ok(&installer(&root, &install), "install");
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("/").join(INSTALL_DIR).join("gpuhook")
    );
    ok(&installer(&root, &["uninstall"]), "uninstall");
    assert!(std::fs::symlink_metadata(&link).is_err());

    let nvidia = root.join("usr/bin/nvidia-container-runtime-hook");
    write(&nvidia, "NVIDIA's hook");
    let out = ok(&installer(&root, &install), "install beside NVIDIA's hook");
    assert!(out.contains("--force"), "{out}");
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "shadowed without --force"
    );
    ok(&installer(&root, &["uninstall"]), "uninstall");

    // NVIDIA's hook in the link's own directory (uninstall removed the one it had made).
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::fs::rename(&nvidia, &link).unwrap();
    let mut forced = install.to_vec();
    forced.push("--force");
    ok(&installer(&root, &forced), "install --force");
    assert!(std::fs::read_link(&link).is_ok());
    ok(&installer(&root, &["uninstall"]), "uninstall");
    assert_eq!(std::fs::read_to_string(&link).unwrap(), "NVIDIA's hook");
}

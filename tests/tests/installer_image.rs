//! The installer image end to end, with real podman, a simulated node and containerd's parser.
//!
//! A temp dir stands for a node's root filesystem: a materialised a100-mig-mixed driver root,
//! the glibc the binaries need (a real host has one), `/var/run -> /run` as on every systemd
//! host (an absolute symlink that must resolve inside the host root, not in the image), and
//! containerd 1.6's own default config (`containerd config default`). The image is built from
//! the workspace's binaries with `deploy/image/build.sh`, run with the node at `/host` as
//! NVIDIA's toolkit container is, and what it left is checked against independent sources:
//! the built binaries, a spec generated directly from the driver root, the CDI schema and
//! `containerd config dump`. Then `uninstall` must leave the tree exactly as it was.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;
mod installer_support;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cdi_support::{check_spec_file, device_names, gpuhook_ok, s, tmp};
use gpuhook_e2e::{built, e2e_ready, run_ok, workspace_root};
use installer_support::{check_runtime_in_dump, copy_glibc, host_root, source_dir, INSTALL_DIR};

const BINARIES: [&str; 3] = ["gpuhook", "gpuhook-runtime", "gpu-mps-daemon"];

/// The image, removed when dropped.
struct Image(String);

impl Image {
    fn build() -> Image {
        let tag = format!("localhost/gpuhook-installer-e2e:{}", std::process::id());
        run_ok(
            Command::new(workspace_root().join("deploy/image/build.sh"))
                .arg(source_dir())
                .arg(&tag),
        );
        Image(tag)
    }

    /// `podman run --rm -v ROOT:/host IMAGE ARGS...`
    fn run(&self, root: &Path, args: &[&str]) -> Output {
        Command::new("podman")
            .args(["run", "--rm", "--runtime", "runc", "--network", "none"])
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ])
            .arg("-v")
            .arg(format!("{}:/host", root.display()))
            .arg(&self.0)
            .args(args)
            .output()
            .expect("spawn podman")
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rmi", "-f", &self.0]).output();
    }
}

fn ok(out: &Output, what: &str) -> String {
    let (stdout, stderr) = cdi_support::texts(out);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// Every entry under `root` with its type, mode and content (hash) or target.
fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let ft = meta.file_type();
            let what = if ft.is_dir() {
                stack.push(path.clone());
                format!("dir {mode:o}")
            } else if ft.is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if ft.is_file() {
                let mut h = DefaultHasher::new();
                std::fs::read(&path).unwrap().hash(&mut h);
                format!("file {mode:o} {:x}", h.finish())
            } else {
                format!("special {mode:o} {:?} {}", ft.is_char_device(), meta.rdev())
            };
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), what);
        }
    }
    out
}

fn diff(a: &BTreeMap<PathBuf, String>, b: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let keys: BTreeSet<&PathBuf> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{}: {:?} -> {:?}", k.display(), a.get(k), b.get(k)))
        .collect()
}

/// What install left: binaries, spec, inventory cache, containerd config.
fn check_installed(root: &Path) {
    let dir = root.join(INSTALL_DIR);
    for b in BINARIES {
        let path = dir.join(b);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(source_dir().join(b)).unwrap(),
            "{b}"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "{b}");
    }
    for b in ["gpuhook", "gpu-mps-daemon"] {
        let out = run_ok(Command::new(dir.join(b)).arg("--version"));
        assert!(out.starts_with(b), "{b} --version: {out}");
    }
    // Through the host's /var/run -> /run, not the image's.
    let spec = root.join("run/cdi/nvidia.com-gpu.json");
    let doc = check_spec_file(&spec);
    let (direct, _) = gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(root),
        "--output",
        "-",
        "--no-inventory-cache",
    ]);
    let direct: serde_json::Value = serde_json::from_str(&direct).unwrap();
    assert_eq!(device_names(&doc), device_names(&direct));
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(
        !text.contains(s(root)) && !text.contains("/host/"),
        "paths must be host paths:\n{text}"
    );
    let hook = format!("/{INSTALL_DIR}/gpuhook");
    let hooks: Vec<&str> = text
        .split('"')
        .filter(|w| w.ends_with("/gpuhook"))
        .collect();
    assert!(
        !hooks.is_empty() && hooks.iter().all(|h| *h == hook),
        "{hooks:?}"
    );
    assert!(root.join("run/gpuhook/inventory.json").is_file());
    // `docker run --gpus` finds the hook by name on dockerd's PATH (issue 26).
    let link = std::fs::read_link(root.join("usr/local/bin/nvidia-container-runtime-hook"));
    assert_eq!(link.unwrap(), PathBuf::from(&hook));

    check_runtime_in_dump(&root.join("etc/containerd/config.toml"));
}

/// deploy/kubernetes runs the MPS daemon from this image too: it must find its libraries.
fn check_mps_daemon_runs(image: &Image) {
    let out = Command::new("podman")
        .args(["run", "--rm", "--runtime", "runc", "--network", "none"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ])
        .args([
            "--entrypoint",
            "/opt/gpuhook/bin/gpu-mps-daemon",
            &image.0,
            "--version",
        ])
        .output()
        .expect("spawn podman");
    assert!(ok(&out, "gpu-mps-daemon --version in the image").starts_with("gpu-mps-daemon"));
}

#[test]
fn image_installs_on_a_node_and_uninstall_restores_it() {
    if !e2e_ready(
        "installer_image",
        &["podman", "containerd", "ldd", "ldconfig"],
    ) {
        return;
    }
    let dir = tmp("installer");
    let root = host_root(dir.path());
    let image = Image::build();
    check_mps_daemon_runs(&image);
    let before = tree(&root);

    let out = ok(
        &image.run(
            &root,
            &["install", "--host-root", "/host", "--restart-mode", "none"],
        ),
        "install",
    );
    assert!(
        out.contains("run `systemctl restart containerd` on the host"),
        "{out}"
    );
    check_installed(&root);

    // Again (a DaemonSet pod restarts): nothing new, containerd's config unchanged.
    let installed = tree(&root);
    ok(
        &image.run(
            &root,
            &["install", "--host-root", "/host", "--restart-mode", "none"],
        ),
        "second install",
    );
    let again = diff(&installed, &tree(&root));
    assert!(
        again
            .iter()
            .all(|d| d.contains("nvidia.com-gpu.json") || d.contains("inventory.json")),
        "a second install may only rewrite the spec and cache: {again:#?}"
    );

    ok(
        &image.run(
            &root,
            &[
                "uninstall",
                "--host-root",
                "/host",
                "--restart-mode",
                "none",
            ],
        ),
        "uninstall",
    );
    let changes = diff(&before, &tree(&root));
    assert!(
        changes.is_empty(),
        "uninstall left the node changed: {changes:#?}"
    );

    let out = image.run(&root, &["uninstall", "--host-root", "/host"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to uninstall"));
}

/// A node without a driver: `cdi generate` fails, and the install is rolled back completely
/// (the installer run directly, as root on the "host", without podman).
#[test]
fn failed_install_rolls_back() {
    if !e2e_ready("installer_image", &["containerd", "ldd"]) {
        return;
    }
    let dir = tmp("installer-fail");
    let root = dir.path().join("host");
    copy_glibc(&root, &[built("gpuhook")]);
    let config = run_ok(Command::new("containerd").args(["config", "default"]));
    cdi_support::write(&root.join("etc/containerd/config.toml"), &config);
    let before = tree(&root);
    let out = Command::new(built("gpuhook-installer"))
        .args(["install", "--host-root", s(&root), "--source-dir"])
        .arg(gpuhook_e2e::bin_dir())
        .output()
        .unwrap();
    let (_, stderr) = cdi_support::texts(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cdi generate") && stderr.contains("failed"),
        "{stderr}"
    );
    let changes = diff(&before, &tree(&root));
    assert!(
        changes.is_empty(),
        "a failed install left changes: {changes:#?}"
    );
}

/// The installer run directly on the "host" (no podman) with `--drop-in`: the runtime goes to
/// the drop-in, the main config only imports it, and uninstall removes the drop-in and its
/// directory and restores the main config.
#[test]
fn drop_in_install_and_uninstall_on_the_host() {
    if !e2e_ready("installer_image", &["containerd", "ldd", "ldconfig"]) {
        return;
    }
    let dir = tmp("installer-dropin");
    let root = host_root(dir.path());
    let before = tree(&root);
    let installer = |args: &[&str]| {
        let mut cmd = Command::new(built("gpuhook-installer"));
        cmd.args(args).args(["--host-root", s(&root)]);
        cmd.output().unwrap()
    };
    let out = installer(&[
        "install",
        "--drop-in",
        "--restart-mode",
        "none",
        "--source-dir",
        s(&source_dir()),
    ]);
    ok(&out, "install --drop-in");
    let drop_in = std::fs::read_to_string(root.join("etc/containerd/conf.d/99-gpuhook.toml"))
        .expect("the drop-in");
    assert!(
        drop_in.contains(&format!("/{INSTALL_DIR}/gpuhook-runtime")),
        "{drop_in}"
    );
    let main = std::fs::read_to_string(root.join("etc/containerd/config.toml")).unwrap();
    assert!(
        main.contains("/etc/containerd/conf.d/99-gpuhook.toml")
            && !main.contains("gpuhook-runtime"),
        "{main}"
    );
    ok(
        &installer(&["uninstall", "--restart-mode", "none"]),
        "uninstall",
    );
    let changes = diff(&before, &tree(&root));
    assert!(changes.is_empty(), "uninstall left changes: {changes:#?}");
}

/// `gpuhook-installer refresh` (the DaemonSet's long-running container) chroots into the host
/// root and becomes the installed `gpuhook cdi refresh --watch`: a spec removed from the node
/// comes back within 10 s, written inside the host root (host paths, the installed gpuhook in
/// its hooks), and uninstall still restores the node afterwards.
#[test]
fn refresh_regenerates_the_spec_inside_the_host_root() {
    if !e2e_ready("installer_image", &["containerd", "ldd", "ldconfig"]) {
        return;
    }
    let dir = tmp("installer-refresh");
    let root = host_root(dir.path());
    let before = tree(&root);
    let installer = |args: &[&str]| {
        let mut cmd = Command::new(built("gpuhook-installer"));
        cmd.args(args).args(["--host-root", s(&root)]);
        cmd
    };
    let src = source_dir();
    let install = ["install", "--no-containerd", "--source-dir", s(&src)];
    ok(&installer(&install).output().unwrap(), "install");
    let spec = root.join("run/cdi/nvidia.com-gpu.json");
    let installed = std::fs::read_to_string(&spec).unwrap();
    std::fs::remove_file(&spec).unwrap();

    let child = installer(&["refresh", "--interval", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn gpuhook-installer refresh");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !spec.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill(2) on our own child's pid, not reaped yet (it exec'd gpuhook, same pid).
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
    let log = child.wait_with_output().expect("wait for refresh");
    let log = String::from_utf8_lossy(&log.stderr);
    let refreshed = std::fs::read_to_string(&spec)
        .unwrap_or_else(|e| panic!("refresh did not rewrite the removed spec ({e}):\n{log}"));
    let doc: serde_json::Value = serde_json::from_str(&refreshed).unwrap();
    let first: serde_json::Value = serde_json::from_str(&installed).unwrap();
    assert_eq!(device_names(&doc), device_names(&first));
    assert!(
        refreshed.contains(&format!("/{INSTALL_DIR}/gpuhook")) && !refreshed.contains(s(&root)),
        "the refreshed spec must name host paths only:\n{refreshed}"
    );

    ok(&installer(&["uninstall"]).output().unwrap(), "uninstall");
    let changes = diff(&before, &tree(&root));
    assert!(changes.is_empty(), "uninstall left changes: {changes:#?}");
}

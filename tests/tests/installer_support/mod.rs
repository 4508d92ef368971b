//! What the installer tests share: a simulated node's root filesystem and the check that
//! containerd's own parser sees the installed runtime.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuhook_e2e::run_ok;

use super::cdi_support::{self, build_node};

/// Where the installer puts the binaries, relative to the host root.
pub const INSTALL_DIR: &str = "usr/local/nvidia-gpuhook/bin";

/// The binaries the image is built from: the release build when `GPUHOOK_RELEASE_DIR` names
/// it (`scripts/build-release.sh`, glibc 2.17), else the workspace's debug build.
pub fn source_dir() -> PathBuf {
    std::env::var_os("GPUHOOK_RELEASE_DIR").map_or_else(gpuhook_e2e::bin_dir, PathBuf::from)
}

/// Copies the shared libraries (and loader) `files` need into `root`, at the same paths.
pub fn copy_glibc(root: &Path, files: &[PathBuf]) {
    for file in files {
        let ldd = run_ok(Command::new("ldd").arg(file));
        for word in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
            let dest = root.join(word.trim_start_matches('/'));
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(word, &dest).unwrap_or_else(|e| panic!("copy {word}: {e}"));
        }
    }
}

/// A node's root: simulated driver, glibc, `/var/run -> /run`, containerd's default config.
pub fn host_root(dir: &Path) -> PathBuf {
    let root = dir.join("host");
    build_node("a100-mig-mixed", &root);
    copy_glibc(
        &root,
        &[source_dir().join("gpuhook"), gpuhook_e2e::mock_nvml_lib()],
    );
    std::fs::create_dir_all(root.join("var")).unwrap();
    std::fs::create_dir_all(root.join("run")).unwrap();
    std::os::unix::fs::symlink("/run", root.join("var/run")).unwrap();
    let config = run_ok(Command::new("containerd").args(["config", "default"]));
    cdi_support::write(&root.join("etc/containerd/config.toml"), &config);
    root
}

/// `containerd config dump` of `config` lists the `gpuhook` runtime with the installed
/// gpuhook-runtime as its BinaryName.
pub fn check_runtime_in_dump(config: &Path) {
    let dump = run_ok(
        Command::new("containerd")
            .arg("--config")
            .arg(config)
            .args(["config", "dump"]),
    );
    let runtime = dump
        .split("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpuhook.options]")
        .nth(1)
        .unwrap_or_else(|| panic!("no gpuhook runtime options in the dump:\n{dump}"));
    let binary = format!("BinaryName = \"/{INSTALL_DIR}/gpuhook-runtime\"");
    assert!(
        runtime.split("\n\n").next().unwrap().contains(&binary),
        "{dump}"
    );
}

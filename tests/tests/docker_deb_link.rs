//! The .deb's `nvidia-container-runtime-hook` link (hook/debian/postinst, prerm; packaged by
//! `maintainer-scripts` in hook/Cargo.toml): `docker run --gpus` runs that name from dockerd's PATH, so
//! the package links it to `gpuhook` — only where nothing is (NVIDIA's hook, from
//! nvidia-container-toolkit, is never replaced), and removes only its own link. The scripts run
//! here under `DPKG_ROOT` (dpkg's install root for maintainer scripts) in a temp dir; when the
//! release dir holds the built .deb, its control archive is checked to carry them.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn script(name: &str) -> PathBuf {
    gpuhook_e2e::workspace_root().join("hook/debian").join(name)
}

fn run(name: &str, arg: &str, root: &Path) -> String {
    let out = Command::new("sh")
        .arg(script(name))
        .arg(arg)
        .env("DPKG_ROOT", root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{name} {arg}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_link_is_made_where_nothing_is_and_removed_only_when_ours() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let hook = bin.join("nvidia-container-runtime-hook");
    run("postinst", "configure", d.path());
    assert_eq!(std::fs::read_link(&hook).unwrap(), Path::new("gpuhook"));
    // Idempotent (an upgrade runs configure again).
    run("postinst", "configure", d.path());
    assert_eq!(std::fs::read_link(&hook).unwrap(), Path::new("gpuhook"));
    // An upgrade's prerm ("upgrade") keeps it; removal takes it away.
    run("prerm", "upgrade", d.path());
    assert!(hook.is_symlink());
    run("prerm", "remove", d.path());
    assert!(!hook.is_symlink() && !hook.exists());

    // NVIDIA's hook (a regular file) is left alone by both, and the admin is told.
    std::fs::write(&hook, "#!/bin/sh\n# NVIDIA\n").unwrap();
    let said = run("postinst", "configure", d.path());
    assert!(said.contains("left alone"), "{said}");
    run("prerm", "remove", d.path());
    assert_eq!(
        std::fs::read_to_string(&hook).unwrap(),
        "#!/bin/sh\n# NVIDIA\n"
    );
    // A link to something else is not ours either.
    std::fs::remove_file(&hook).unwrap();
    std::os::unix::fs::symlink("/opt/nvidia/hook", &hook).unwrap();
    run("postinst", "configure", d.path());
    run("prerm", "remove", d.path());
    assert_eq!(
        std::fs::read_link(&hook).unwrap(),
        Path::new("/opt/nvidia/hook")
    );
}

#[test]
fn the_built_package_carries_the_scripts() {
    let Some(dir) = std::env::var_os("GPUHOOK_RELEASE_DIR").map(PathBuf::from) else {
        eprintln!("SKIP: GPUHOOK_RELEASE_DIR unset (scripts/build-release.sh --deb sets it in CI)");
        return;
    };
    if !gpuhook_e2e::e2e_ready("docker_deb_link", &["dpkg-deb"]) {
        return;
    }
    let deb = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("gpuhook_") && n.ends_with(".deb")
        })
        .unwrap_or_else(|| panic!("no gpuhook_*.deb in {}", dir.display()));
    for name in ["postinst", "prerm"] {
        let shipped =
            gpuhook_e2e::run_ok(Command::new("dpkg-deb").args(["-I"]).arg(&deb).arg(name));
        let ours = std::fs::read_to_string(script(name)).unwrap();
        assert!(
            shipped.contains("nvidia-container-runtime-hook"),
            "{name}: {shipped}"
        );
        assert!(
            shipped.contains(ours.lines().nth(1).unwrap()),
            "{name} is ours"
        );
    }
}

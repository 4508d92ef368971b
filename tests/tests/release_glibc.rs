//! Release artifacts: `scripts/check-glibc.sh` itself (it must fail a file that needs a glibc
//! above the floor, pass one below, and compare versions numerically), then, in the directory
//! `scripts/build-release.sh --deb` fills (`GPUHOOK_RELEASE_DIR`, e.g. `target/dist`), the
//! shipped binaries (glibc 2.17, still dynamically linked so that NVML can be dlopened) and the
//! two .deb packages (files, modes, dependencies, conffiles, the unit as in `deploy/systemd`).
//!
//! Expected symbol versions come from glibc, not from our output: `strlen` has been
//! `GLIBC_2.2.5` since the x86_64 port, and glibc 2.34 gave `__libc_start_main` the new version
//! `GLIBC_2.34` (glibc NEWS for 2.34), so any program linked on Debian 12 needs 2.34.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuhook_e2e::{e2e_ready, e2e_required, run_ok, workspace_root};

fn check_glibc(dir: &Path, floor: &str) -> Output {
    Command::new(workspace_root().join("scripts/check-glibc.sh"))
        .arg(dir)
        .env("GPUHOOK_GLIBC", floor)
        .output()
        .expect("run check-glibc.sh")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn gcc(dir: &Path, name: &str, source: &str, args: &[&str]) -> PathBuf {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let out = sub.join(name);
    run_ok(Command::new("gcc").args(args).arg("-o").arg(&out).arg(&c));
    sub
}

#[test]
fn check_glibc_fails_above_the_floor_and_passes_below() {
    if !e2e_ready("release_glibc", &["gcc", "readelf"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let old = gcc(
        tmp.path(),
        "old",
        "#include <string.h>\nsize_t f(const char *s) { return strlen(s); }\n",
        &["-shared", "-fPIC"],
    );
    let new = gcc(tmp.path(), "new", "int main(void) { return 0; }\n", &[]);

    let out = check_glibc(&old, "2.17");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("highest GLIBC_2.2.5"), "{}", text(&out));
    // Numeric, not lexical: 2.2.5 <= 2.3, but 2.2.5 > 2.2.
    assert!(check_glibc(&old, "2.3").status.success());
    let out = check_glibc(&old, "2.2");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    let out = check_glibc(&new, "2.17");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("needs GLIBC_2.3"), "{}", text(&out));
    assert!(
        text(&out).contains("above the floor 2.17"),
        "{}",
        text(&out)
    );

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(check_glibc(&empty, "2.17").status.code(), Some(2));
}

/// `GPUHOOK_RELEASE_DIR`, or `None` (skip) when it is unset and e2e is not required.
fn release_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("GPUHOOK_RELEASE_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if e2e_required() => panic!(
            "{test} needs the release build: run `scripts/build-release.sh --deb` and set \
             GPUHOOK_RELEASE_DIR to its output (target/dist)"
        ),
        None => {
            eprintln!("SKIP: {test}: GPUHOOK_RELEASE_DIR is not set");
            None
        }
    }
}

/// Libraries a release binary may link: glibc's and libgcc's. NVML is dlopened, never linked.
const ALLOWED_NEEDED: [&str; 7] = [
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
];

#[test]
fn release_binaries_need_at_most_glibc_2_17_and_stay_dynamic() {
    let Some(dir) = release_dir("release_binaries") else {
        return;
    };
    if !e2e_ready("release_glibc", &["readelf"]) {
        return;
    }
    let out = check_glibc(&dir, "2.17");
    assert!(out.status.success(), "{}", text(&out));
    for b in [
        "gpuhook",
        "gpuhook-runtime",
        "gpu-mps-daemon",
        "gpuhook-installer",
    ] {
        let path = dir.join(b);
        let dynamic = run_ok(
            Command::new("readelf")
                .args(["--dynamic", "--program-headers", "--wide"])
                .arg(&path),
        );
        assert!(
            dynamic.contains("/lib64/ld-linux-x86-64.so.2"),
            "{b}: not dynamically linked"
        );
        for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
            let lib = line
                .split('[')
                .nth(1)
                .and_then(|s| s.split(']').next())
                .unwrap();
            assert!(ALLOWED_NEEDED.contains(&lib), "{b} links {lib}");
        }
        if b != "gpuhook-runtime" {
            let version = run_ok(Command::new(&path).arg("--version"));
            assert!(version.starts_with(b), "{b} --version: {version}");
        }
    }
}

fn deb(dir: &Path, package: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&format!("{package}_")) && name.ends_with(".deb")
        })
        .unwrap_or_else(|| panic!("no {package}_*.deb in {}", dir.display()))
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    run_ok(Command::new("dpkg-deb").args(args).arg(deb))
}

/// The `libc6 (>= 2.N)` of a Depends line, as N.
fn libc_minor(depends: &str) -> u32 {
    let v = depends
        .split("libc6 (>= 2.")
        .nth(1)
        .unwrap_or_else(|| panic!("no libc6 in {depends}"));
    v.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The highest `GLIBC_2.N` version a binary needs, as N.
fn glibc_minor(binary: &Path) -> u32 {
    let info = run_ok(
        Command::new("readelf")
            .args(["--version-info", "--wide"])
            .arg(binary),
    );
    info.split("GLIBC_2.")
        .skip(1)
        .filter_map(|v| v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .max()
        .expect("no GLIBC_2.N version")
}

#[test]
fn debs_hold_the_binaries_units_and_dependencies() {
    let Some(dir) = release_dir("debs") else {
        return;
    };
    if !e2e_ready("release_glibc", &["dpkg-deb"]) {
        return;
    }
    let hook = deb(&dir, "gpuhook");
    let list = dpkg_deb(&["-c"], &hook);
    for f in ["./usr/bin/gpuhook", "./usr/bin/gpuhook-runtime"] {
        let line = list
            .lines()
            .find(|l| l.ends_with(f))
            .unwrap_or_else(|| panic!("{f}:\n{list}"));
        assert!(line.starts_with("-rwxr-xr-x 0/0 "), "{line}");
    }
    let depends = dpkg_deb(&["-f"], &hook);
    assert!(libc_minor(&depends) <= 17, "{depends}");
    // ... and not below what the binaries need.
    let needed =
        ["gpuhook", "gpuhook-runtime", "gpu-mps-daemon"].map(|b| glibc_minor(&dir.join(b)));
    assert!(
        needed.iter().all(|n| *n <= libc_minor(&depends)),
        "{needed:?} vs {depends}"
    );

    let mps = deb(&dir, "gpu-mps-daemon");
    let list = dpkg_deb(&["-c"], &mps);
    let unit = "./usr/lib/systemd/system/gpu-mps-daemon.service";
    let dropin = "./usr/lib/systemd/system/gpu-mps-daemon.service.d/10-deb-paths.conf";
    for f in [
        "./usr/bin/gpu-mps-daemon",
        unit,
        dropin,
        "./etc/gpuhook/mps.yaml",
    ] {
        assert!(list.lines().any(|l| l.ends_with(f)), "{f} missing:\n{list}");
    }
    let info = dpkg_deb(&["-I"], &mps);
    let depends = info
        .lines()
        .find(|l| l.trim_start().starts_with("Depends:"))
        .expect("Depends");
    assert!(
        depends.contains("gpuhook") && libc_minor(depends) <= 17,
        "{depends}"
    );
    assert!(dpkg_deb(&["-I"], &mps).contains("conffiles"), "{info}");
    assert!(run_ok(
        Command::new("dpkg-deb")
            .args(["-I"])
            .arg(&mps)
            .arg("conffiles")
    )
    .contains("/etc/gpuhook/mps.yaml"));

    // Unpacked (no dpkg -i on this machine): the unit is the repository's, the drop-in's
    // ExecStart names the packaged binary, and the packaged binaries run.
    let tmp = tempfile::tempdir().unwrap();
    for d in [&hook, &mps] {
        run_ok(Command::new("dpkg-deb").arg("-x").arg(d).arg(tmp.path()));
    }
    let shipped =
        std::fs::read(workspace_root().join("deploy/systemd/gpu-mps-daemon.service")).unwrap();
    assert_eq!(std::fs::read(tmp.path().join(&unit[2..])).unwrap(), shipped);
    let conf = std::fs::read_to_string(tmp.path().join(&dropin[2..])).unwrap();
    let exec = conf
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .find(|l| !l.is_empty())
        .unwrap();
    for binary in exec
        .split_whitespace()
        .filter(|w| w.starts_with("/usr/bin/"))
    {
        let path = tmp.path().join(&binary[1..]);
        let out = run_ok(Command::new(&path).arg("--version"));
        assert!(!out.is_empty(), "{binary} --version printed nothing");
    }
}

//! Device cgroups for real (root): v1 `devices.allow` on this hybrid host, and the v2 eBPF
//! program on a cgroup under the unified hierarchy. The proof is the errno of opening a mknod'ed
//! 195:N node without a driver: ENXIO when the cgroup allows it, EPERM when it denies it.

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{build_static, is_root, mknod, OPENER};
use gpuhook_inject::cgroup::{
    allow_devices, bpf_device_programs_supported, DeviceCgroup, DeviceController, DeviceRule,
    DeviceType, V2Devices,
};

struct Cg(PathBuf);
impl Drop for Cg {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn probe_setup(base: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let opener = build_static(base, "opener", OPENER);
    let n0 = base.join("nvidia0");
    let n1 = base.join("nvidia1");
    mknod(&n0, 195, 0);
    mknod(&n1, 195, 1);
    (opener, n0, n1)
}

fn spawn_opener(opener: &Path, paths: &[&Path]) -> Child {
    Command::new(opener)
        .args(paths)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn release_and_collect(mut child: Child) -> String {
    child.stdin.take().unwrap().write_all(b"x").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    out
}

fn unique(name: &str) -> String {
    format!("gpuhook-inject-test-{name}-{}", std::process::id())
}

#[test]
fn v1_devices_allow_grants_exactly_the_injected_minor() {
    if !is_root("cgroup v1") {
        return;
    }
    let devices = Path::new("/sys/fs/cgroup/devices");
    if !devices.join("devices.allow").exists() {
        eprintln!("SKIP: no cgroup v1 devices hierarchy on this host");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (opener, n0, n1) = probe_setup(tmp.path());
    let cg = Cg(devices.join(unique("v1")));
    std::fs::create_dir(&cg.0).unwrap();
    std::fs::write(cg.0.join("devices.deny"), "a").unwrap();
    let child = spawn_opener(&opener, &[&n0, &n1]);
    std::fs::write(cg.0.join("cgroup.procs"), child.id().to_string()).unwrap();
    let pid = i32::try_from(child.id()).expect("a pid fits in i32");
    let changed = allow_devices(pid, &[], &[DeviceRule::allow_char(195, 0)]).unwrap();
    assert_eq!(changed, DeviceCgroup::V1(cg.0.clone()));
    let list = std::fs::read_to_string(cg.0.join("devices.list")).unwrap();
    assert_eq!(list.trim(), "c 195:0 rwm");
    let out = release_and_collect(child);
    assert_eq!(
        out,
        format!(
            "{} {}\n{} {}\n",
            n0.display(),
            libc::ENXIO,
            n1.display(),
            libc::EPERM
        ),
        "195:0 allowed (ENXIO: no driver), 195:1 denied (EPERM)"
    );
}

#[test]
fn v2_bpf_program_replaces_runtime_program() {
    if !is_root("cgroup v2") {
        return;
    }
    let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .map(Path::new)
        .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.controllers").exists());
    let Some(unified) = unified else {
        eprintln!("SKIP: no cgroup2 hierarchy; the program builder is covered by unit tests");
        return;
    };
    if let Err(e) = bpf_device_programs_supported() {
        eprintln!(
            "SKIP: BPF device programs unavailable here ({e}); builder covered by unit tests"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (opener, n0, n1) = probe_setup(tmp.path());
    let cg = Cg(unified.join(unique("v2")));
    std::fs::create_dir(&cg.0).unwrap();
    // "runc": default deny + /dev/null, attached first (nothing attached before: plain attach).
    let base = vec![
        DeviceRule::new(false, DeviceType::All, None, None, "rwm").unwrap(),
        DeviceRule::new(true, DeviceType::Char, Some(1), Some(3), "rwm").unwrap(),
    ];
    let child = spawn_opener(&opener, &[&n0, &n1, Path::new("/dev/null")]);
    std::fs::write(cg.0.join("cgroup.procs"), child.id().to_string()).unwrap();
    let ctl = V2Devices::new(
        i32::try_from(child.id()).expect("a pid fits in i32"),
        cg.0.clone(),
    );
    ctl.apply(&[], &base).unwrap();
    let (before, _) = ctl.attached_programs().unwrap();
    assert_eq!(before.len(), 1);
    // Our hook: rebuild from the spec's rules + ours, replace atomically.
    ctl.apply(&base, &[DeviceRule::allow_char(195, 0)]).unwrap();
    let (after, flags) = ctl.attached_programs().unwrap();
    assert_eq!(after.len(), 1, "replaced, not stacked: {after:?}");
    assert_ne!(after, before);
    assert_eq!(flags & 2, 2, "attached with BPF_F_ALLOW_MULTI like runc");
    let out = release_and_collect(child);
    assert_eq!(
        out,
        format!(
            "{} {}\n{} {}\n/dev/null 0\n",
            n0.display(),
            libc::ENXIO,
            n1.display(),
            libc::EPERM
        )
    );
}

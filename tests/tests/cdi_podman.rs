//! CDI end to end with real podman, for every reference node.
//!
//! For each profile: materialise the simulated node, `gpuhook cdi generate` a spec with a vendor
//! unique to the test into `/etc/cdi` (podman 4.3 reads only `/etc/cdi` and `/var/run/cdi`),
//! validate it (boon against the CDI schema files, `gpuhook cdi validate`, cdiVersion podman 4.3
//! accepts), then `podman run --device <vendor>/gpu=<name>` a busybox rootfs for a GPU index, a
//! UUID, a MIG `N:M` (MIG nodes) and `all`. Inside the container we check, against the *profile*
//! (not the spec): the requested device nodes exist with the right type and major:minor and open
//! with ENXIO (the device cgroup allows them; a denied node gives EPERM), unrequested GPUs' and MIG
//! devices' nodes are absent, the driver libraries and the `setup` hook's links are there.
//! Afterwards the container's `/etc/ld.so.cache` (in the rootfs dir on the host) must list
//! `libcuda.so.1`: proof that the spec's `setup` createContainer hook ran.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use cdi_support::{build_node, check_spec_file, device_names, gpuhook_ok, RemoveOnDrop};
use gpuhook_sim::profile::NodeProfile;

#[path = "cdi_podman/expect.rs"]
mod expect;

use expect::OPTIONAL_CONTROL_NODES;
use expect::{control_nodes, every_device_node, requests, selected_nodes, Select};

/// Shell script printing one line per fact the test checks.
fn probe_script(nodes: &BTreeSet<String>, libs: &[String], links: &[String]) -> String {
    let mut s = String::new();
    for n in nodes {
        s.push_str(&format!(
            "if [ -e {n} ]; then echo \"NODE {n} $(stat -c '%t:%T %F %a' {n})\"; \
             echo \"OPEN {n} $(cat {n} 2>&1 </dev/null | head -n1)\"; else echo \"ABSENT {n}\"; fi\n"
        ));
    }
    for l in libs {
        s.push_str(&format!(
            "if [ -f {l} ]; then echo \"LIB {l} ok\"; else echo \"LIB {l} missing\"; fi\n"
        ));
    }
    for l in links {
        s.push_str(&format!("echo \"LINK {l} $(readlink {l})\"\n"));
    }
    s.push_str(&format!(
        "echo \"PROFILE $(cat {APP_PROFILE} 2>/dev/null)\"\n"
    ));
    s.push_str("echo DONE\n");
    s
}

/// Written by the setup hook's application-profile step (NVIDIA's update-application-profile).
const APP_PROFILE: &str = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";

fn run_container(vendor: &str, name: &str, rootfs: &Path, script: &str) -> String {
    let device = format!("{vendor}/gpu={name}");
    let out = cdi_support::podman_run(&device, rootfs, script);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("DONE"),
        "podman run --device {device} failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The host node's permission bits, in octal as `stat -c %a` prints them: NVIDIA's spec gives a
/// node the host node's mode (nvidia-container-toolkit v1.20.0 internal/edits/device.go
/// `fromPathOrDefault`), so a 0444 MIG cap node stays read-only in the container.
fn host_mode(root: &Path, path: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(root.join(path.trim_start_matches('/')))
        .unwrap_or_else(|e| panic!("host node {path} under {}: {e}", root.display()));
    format!("{:o}", meta.mode() & 0o7777)
}

fn check_output(
    p: &NodeProfile,
    root: &Path,
    (name, sel): (&str, Select),
    stdout: &str,
    libs: &[String],
) {
    let ctx = format!("{} --device {name}", p.name);
    let mut want = selected_nodes(p, sel);
    want.extend(control_nodes(p));
    let lookup = |kind: &str, path: &str| -> Option<String> {
        let prefix = format!("{kind} {path}");
        stdout.lines().find_map(|l| {
            l.strip_prefix(&prefix)
                .filter(|rest| rest.is_empty() || rest.starts_with(' '))
                .map(|rest| rest.trim_start().to_string())
        })
    };
    for (path, (major, minor)) in &want {
        let stat = lookup("NODE", path)
            .unwrap_or_else(|| panic!("{ctx}: {path} missing in the container\n{stdout}"));
        assert_eq!(
            stat,
            format!(
                "{major:x}:{minor:x} character special file {}",
                host_mode(root, path)
            ),
            "{ctx}: {path} (numbers, type and the host node's mode)"
        );
        let open = lookup("OPEN", path).unwrap_or_default();
        assert!(
            open.contains("No such device or address"),
            "{ctx}: opening {path} must fail with ENXIO (allowed by the device cgroup, no driver \
             behind it), got {open:?}"
        );
    }
    // Control nodes the node lacks are not in the container either (NVIDIA declares only the
    // ones it finds: pkg/nvcdi/common-nvml.go `controlDeviceNodeDiscoverer`).
    let optional = OPTIONAL_CONTROL_NODES.map(String::from);
    for path in every_device_node(p)
        .keys()
        .chain(optional.iter())
        .filter(|p| !want.contains_key(*p))
    {
        assert!(
            lookup("ABSENT", path).is_some(),
            "{ctx}: {path} was not requested but is in the container\n{stdout}"
        );
    }
    for lib in libs {
        assert_eq!(
            lookup("LIB", lib).as_deref(),
            Some("ok"),
            "{ctx}: driver library {lib} not mounted"
        );
    }
    // update-application-profile.go: bit `minor` for every /dev/nvidia<N> of the container.
    let mask = want
        .iter()
        .filter(|(path, _)| {
            path.strip_prefix("/dev/nvidia")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .fold(0u64, |m, (_, (_, minor))| m | (1u64 << minor));
    let profile = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PROFILE "))
        .unwrap_or_default();
    assert!(
        profile.contains(&format!("\"EGLVisibleDGPUDevices\",0x{mask:x}]")),
        "{ctx}: application profile {profile:?}, want mask 0x{mask:x}"
    );
    let libcuda_link = format!("{}/libcuda.so", p.lib_dir);
    let target = lookup("LINK", &libcuda_link).unwrap_or_default();
    assert!(
        target.ends_with("libcuda.so.1"),
        "{ctx}: setup hook did not make {libcuda_link} -> libcuda.so.1 (got {target:?})"
    );
}

fn host_ldcache_lists(rootfs: &Path, soname: &str) -> bool {
    let cache = rootfs.join("etc/ld.so.cache");
    let out = gpuhook_e2e::run_ok(Command::new("ldconfig").arg("-p").arg("-C").arg(&cache));
    out.lines()
        .any(|l| l.trim_start().starts_with(&format!("{soname} ")))
}

fn podman_profile(profile: &str) {
    if !gpuhook_e2e::e2e_ready("cdi_podman", &["podman", "runc", "ldconfig"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!("gpuhook-cdi-podman-{profile}-"))
        .tempdir()
        .expect("tempdir");
    let root = tmp.path().join("driver");
    let p = build_node(profile, &root);

    let vendor = format!("gpuhook-test-{profile}-{}.example", std::process::id());
    let spec_path = PathBuf::from(format!("/etc/cdi/{vendor}-gpu.json"));
    let _guard = RemoveOnDrop(spec_path.clone());
    let (_, stderr) = gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        root.to_str().unwrap(),
        "--vendor",
        &vendor,
        "--output",
        spec_path.to_str().unwrap(),
        "--no-inventory-cache",
    ]);
    assert!(
        stderr.contains(&format!("wrote {}", spec_path.display())),
        "{stderr}"
    );
    let doc = check_spec_file(&spec_path);
    let names = device_names(&doc);

    let libs: Vec<String> = ["libcuda.so", "libnvidia-ml.so"]
        .iter()
        .map(|l| format!("{}/{l}.{}", p.lib_dir, p.driver_version))
        .collect();
    let nodes: BTreeSet<String> = every_device_node(&p)
        .into_keys()
        .chain(control_nodes(&p).into_keys())
        .chain(OPTIONAL_CONTROL_NODES.map(String::from))
        .collect();
    let links = vec![format!("{}/libcuda.so", p.lib_dir)];
    let script = probe_script(&nodes, &libs, &links);

    for (i, (name, sel)) in requests(&p, &names).into_iter().enumerate() {
        let rootfs = cdi_support::busybox_rootfs(&tmp.path().join(format!("rootfs{i}")));
        let stdout = run_container(&vendor, &name, &rootfs, &script);
        eprintln!("{profile} --device {name}:\n{stdout}");
        check_output(&p, &root, (&name, sel), &stdout, &libs);
        assert!(
            host_ldcache_lists(&rootfs, "libcuda.so.1"),
            "{profile} --device {name}: the container's /etc/ld.so.cache does not list \
             libcuda.so.1: the setup hook did not run"
        );
    }
}

#[test]
fn podman_t4() {
    podman_profile("t4");
}

#[test]
fn podman_l20() {
    podman_profile("l20");
}

#[test]
fn podman_dgx_h100() {
    podman_profile("dgx-h100");
}

#[test]
fn podman_a100_mig_mixed() {
    podman_profile("a100-mig-mixed");
}

#[test]
fn podman_h100_mig() {
    podman_profile("h100-mig");
}

#[test]
fn podman_h20_mig() {
    podman_profile("h20-mig");
}

/// No nvidia-modeset, no nvidia-uvm-tools: the spec declares neither and containers work.
#[test]
fn podman_l20_minimal() {
    podman_profile("l20-minimal");
}

/// RPM layout (/usr/lib64), NVML index != device minor.
#[test]
fn podman_rhel_a100() {
    podman_profile("rhel-a100");
}

/// i386 libraries, .so links, GBM, X.org, ICD files.
#[test]
fn podman_workstation_full() {
    podman_profile("workstation-full");
}

/// MIG on with no MIG device: no spec on stdout (NVIDIA refuses too: `invalid device, empty
/// device edits`), and the refusal says why and what to do.
#[test]
fn podman_h100_mig_empty() {
    if !gpuhook_e2e::e2e_ready("cdi_podman", &["podman", "runc", "ldconfig"]) {
        return;
    }
    let tmp = cdi_support::tmp("mig-empty");
    let root = tmp.path().join("driver");
    build_node("h100-mig-empty", &root);
    let out = cdi_support::gpuhook(&[
        "cdi",
        "generate",
        "--driver-root",
        root.to_str().unwrap(),
        "--output",
        "-",
        "--no-inventory-cache",
    ]);
    let (_, stderr) = cdi_support::texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("MIG mode is on without MIG devices")
            && stderr.contains("disable MIG mode"),
        "{stderr}"
    );
}

#[test]
fn every_reference_profile_has_a_podman_test() {
    let covered = [
        "t4",
        "l20",
        "dgx-h100",
        "a100-mig-mixed",
        "h100-mig",
        "h20-mig",
        "l20-minimal",
        "rhel-a100",
        "workstation-full",
        "h100-mig-empty",
    ];
    let mut builtin = gpuhook_sim::builtin_names();
    builtin.sort_unstable();
    let mut covered = covered.to_vec();
    covered.sort_unstable();
    assert_eq!(
        builtin, covered,
        "add a podman_<profile> test for new profiles"
    );
}

//! `gpuhook prestart` as a real runc prestart hook, on every reference profile.
//!
//! For each NVIDIA_VISIBLE_DEVICES form (index, UUID, PCI bus id, MIG UUID, legacy MIG id, N:M,
//! all, none, void) a busybox container lists its NVIDIA device nodes, opens them, and looks for
//! the driver libraries. Expected nodes are computed here from the inventory (not from the
//! product's CDI code). The device cgroup is proven exact by the simulated nodes' behaviour:
//! opening an allowed node without a driver gives ENXIO, a denied one EPERM — and a host node that
//! was *not* injected is bind-mounted into every container to have a denied one at hand.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod prestart_support;

use std::collections::BTreeSet;

use gpuhook_node::{Capability, Inventory};
use prestart_support::{node, text, Bundle, Node};
use serde_json::json;

/// A device node the container must have: path, major, minor.
type NodeSpec = (String, u32, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sel {
    Gpu(usize),
    Mig(usize, usize),
}

/// `host_has(path)`: whether the node has that device node. libnvidia-container lists only the
/// control nodes that exist (`src/nvc_info.c` `find_device_node`: a missing one is logged
/// "missing device" and skipped), so a node without `/dev/nvidia-uvm-tools` (l20-minimal)
/// gives containers none.
fn expected_nodes(
    inv: &Inventory,
    sel: &[Sel],
    any: bool,
    host_has: impl Fn(&str) -> bool,
) -> BTreeSet<NodeSpec> {
    let mut out = BTreeSet::new();
    if !any {
        return out;
    }
    out.insert(("/dev/nvidiactl".into(), 195, 255));
    if let Some(uvm) = inv.majors.nvidia_uvm {
        for (path, minor) in [("/dev/nvidia-uvm", 0), ("/dev/nvidia-uvm-tools", 1)] {
            if host_has(path) {
                out.insert((path.into(), uvm, minor));
            }
        }
    }
    for s in sel {
        let (g, mig) = match *s {
            Sel::Gpu(g) => (&inv.gpus[g], None),
            Sel::Mig(g, m) => (&inv.gpus[g], Some(&inv.gpus[g].mig_devices[m])),
        };
        out.insert((format!("/dev/nvidia{}", g.minor), 195, g.minor));
        if let Some(m) = mig {
            let caps = inv.majors.nvidia_caps.expect("caps major");
            for c in [m.gi_cap_minor, m.ci_cap_minor] {
                out.insert((format!("/dev/nvidia-caps/nvidia-cap{c}"), caps, c));
            }
        }
    }
    out
}

/// libnvidia-container `src/cli/common.c` `select_devices`: `all` is every GPU
/// (`select_all_gpu_devices`, MIG-enabled ones too) and every MIG device.
fn all_selection(inv: &Inventory) -> Vec<Sel> {
    let mut out = Vec::new();
    for (gi, g) in inv.gpus.iter().enumerate() {
        out.push(Sel::Gpu(gi));
        out.extend((0..g.mig_devices.len()).map(|m| Sel::Mig(gi, m)));
    }
    out
}

/// `(NVIDIA_VISIBLE_DEVICES value, selection, GPU container?)` for every form this node supports.
fn cases(inv: &Inventory) -> Vec<(String, Vec<Sel>, bool)> {
    let mut out = Vec::new();
    // Prefer a GPU whose minor differs from its index (dgx-h100): the node must follow the minor.
    let whole = inv
        .gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.mig_enabled)
        .max_by_key(|(_, g)| (g.minor != g.index, std::cmp::Reverse(g.index)));
    if let Some((i, g)) = whole {
        out.push((g.index.to_string(), vec![Sel::Gpu(i)], true));
        out.push((g.uuid.to_ascii_lowercase(), vec![Sel::Gpu(i)], true));
        // The kernel's short-domain form; the hook normalises it to NVML's.
        let pci = g
            .pci_bus_id
            .strip_prefix("0000")
            .unwrap_or(&g.pci_bus_id)
            .to_ascii_uppercase();
        out.push((pci, vec![Sel::Gpu(i)], true));
    }
    // A MIG-enabled GPU, preferably one with MIG devices.
    let mig = inv
        .gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| g.mig_enabled)
        .max_by_key(|(_, g)| (!g.mig_devices.is_empty(), std::cmp::Reverse(g.index)));
    if let Some((gi, g)) = mig {
        // Issue #13.3: the MIG-enabled GPU itself (libnvc `select_gpu_device` ignores MIG
        // mode; NVIDIA's device plugin with MIG strategy `none` hands out its UUID): its
        // /dev/nvidia<minor> and no MIG cap node — with or without MIG instances
        // (h100-mig-empty).
        out.push((g.uuid.clone(), vec![Sel::Gpu(gi)], true));
        out.push((g.index.to_string(), vec![Sel::Gpu(gi)], true));
    }
    if let Some((gi, g)) = mig.filter(|(_, g)| !g.mig_devices.is_empty()) {
        let last = g.mig_devices.len() - 1;
        let m = &g.mig_devices[last];
        out.push((m.uuid.clone(), vec![Sel::Mig(gi, last)], true));
        out.push((
            format!("MIG-{}/{}/{}", g.uuid, m.gi_id, m.ci_id),
            vec![Sel::Mig(gi, last)],
            true,
        ));
        out.push((
            format!("{}:{}", g.index, m.index),
            vec![Sel::Mig(gi, last)],
            true,
        ));
    }
    out.push(("all".into(), all_selection(inv), true));
    out.push(("none".into(), vec![], true));
    out.push(("void".into(), vec![], false));
    out
}

const SCRIPT: &str = r#"
for f in /dev/nvidia* /dev/nvidia-caps/* /dev/nvidia-caps-imex-channels/*; do
  [ -c "$f" ] && echo "NODE $f $(stat -c '%t:%T' "$f")"
done
for f in $CHECK_OPEN; do echo "OPEN $f $(cat "$f" 2>&1 </dev/null | head -n1)"; done
for f in $CHECK_LIBS; do [ -f "$f" ] && echo "LIB $f"; done
[ -f /etc/ld.so.cache ] && echo "LDCACHE $(grep -c libnvidia-ml.so.1 /etc/ld.so.cache)"
exit 0
"#;

fn compute_utility_libs(inv: &Inventory) -> Vec<String> {
    inv.files
        .libraries
        .iter()
        .filter(|l| matches!(l.capability, Capability::Compute | Capability::Utility))
        .map(|l| l.path.display().to_string())
        .collect()
}

fn check_profile(profile: &str) {
    let n = node(profile, "");
    let inv = &n.inventory;
    let libs = compute_utility_libs(inv);
    assert!(!libs.is_empty(), "{profile}: no compute/utility libraries");
    // The libraries are where the profile's driver put them (rhel-a100: /usr/lib64), and the
    // container gets them there (the checks below look for these paths and the ldcache entry).
    let lib_dir = format!("{}/", n.profile.lib_dir);
    assert!(
        libs.iter().all(|l| l.starts_with(&lib_dir)),
        "{profile}: libraries outside {lib_dir}: {libs:?}"
    );
    // Expectations use the inventory's index/minor/MIG layout: pin it to the profile (rhel-a100:
    // index 0 is minor 1), so a discovery bug cannot hide behind itself.
    for pg in &n.profile.gpus {
        let g = inv
            .gpus
            .iter()
            .find(|g| g.uuid == pg.uuid)
            .expect("profile GPU");
        assert_eq!(
            (g.index, g.minor),
            (pg.index, pg.minor),
            "{profile}: {}",
            pg.uuid
        );
        assert_eq!(g.mig_enabled, pg.mig_mode, "{profile}: {}", pg.uuid);
        assert_eq!(g.mig_devices.len(), pg.mig_devices.len(), "{profile}");
    }
    let host_has = |path: &str| n.root.join(path.trim_start_matches('/')).exists();
    for (value, sel, gpu) in cases(inv) {
        let ctx = format!("{profile} NVIDIA_VISIBLE_DEVICES={value}");
        let want = expected_nodes(inv, &sel, gpu, host_has);
        let mut bundle = Bundle::new(SCRIPT, true);
        // Host nodes that are not injected: modeset (display only) where the node has it and,
        // when one GPU is selected, another GPU.
        let mut denied = Vec::new();
        if host_has("/dev/nvidia-modeset") {
            denied.push((
                "/dev/gpuhook-denied-modeset".to_string(),
                "nvidia-modeset".to_string(),
            ));
        }
        let selected: BTreeSet<String> = want.iter().map(|(p, _, _)| p.clone()).collect();
        if let Some(other) = inv
            .gpus
            .iter()
            .find(|g| !selected.contains(&format!("/dev/nvidia{}", g.minor)))
        {
            denied.push((
                "/dev/gpuhook-denied-gpu".into(),
                format!("nvidia{}", other.minor),
            ));
        }
        for (dest, host) in &denied {
            bundle.bind(&n.root.join("dev").join(host), dest);
        }
        let open: Vec<String> = want
            .iter()
            .map(|(p, _, _)| p.clone())
            .chain(denied.iter().map(|(d, _)| d.clone()))
            .collect();
        bundle
            .env(&format!("NVIDIA_VISIBLE_DEVICES={value}"))
            .env(&format!("CHECK_OPEN={}", open.join(" ")))
            .env(&format!("CHECK_LIBS={}", libs.join(" ")))
            .hook(n.hook());
        let (id, out) = bundle.run("runc");
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{ctx}: runc failed\n{stdout}\n{stderr}"
        );

        let got: BTreeSet<NodeSpec> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("NODE "))
            .filter(|l| !l.starts_with("/dev/gpuhook-denied"))
            .map(|l| {
                let (path, num) = l.split_once(' ').unwrap();
                let (ma, mi) = num.split_once(':').unwrap();
                (
                    path.to_string(),
                    u32::from_str_radix(ma, 16).unwrap(),
                    u32::from_str_radix(mi, 16).unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{ctx}: device nodes\n{stdout}");
        for line in stdout.lines().filter_map(|l| l.strip_prefix("OPEN ")) {
            let (path, result) = line.split_once(' ').unwrap();
            let expect = if path.starts_with("/dev/gpuhook-denied") {
                "Operation not permitted"
            } else {
                "No such device or address"
            };
            assert!(
                result.contains(expect),
                "{ctx}: open {path}: {result:?}, want {expect}"
            );
        }
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with("OPEN ")).count(),
            open.len(),
            "{ctx}\n{stdout}"
        );
        let got_libs = stdout.lines().filter(|l| l.starts_with("LIB ")).count();
        if gpu {
            assert_eq!(got_libs, libs.len(), "{ctx}: libraries\n{stdout}");
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with("LDCACHE ") && l != "LDCACHE 0"),
                "{ctx}: ld.so.cache lacks libnvidia-ml.so.1\n{stdout}"
            );
        } else {
            assert_eq!(got_libs, 0, "{ctx}: void must inject nothing\n{stdout}");
            assert!(!stdout.contains("LDCACHE"), "{ctx}\n{stdout}");
        }
        let decisions = n.decisions(&id);
        let outcome = if gpu { "inject" } else { "skip" };
        assert!(
            decisions.iter().any(|d| d["fields"]["outcome"] == outcome),
            "{ctx}: no {outcome} decision in the log: {decisions:?}"
        );
    }
}

macro_rules! profile_tests {
    ($($name:ident => $profile:literal),* $(,)?) => {$(
        #[test]
        fn $name() {
            if !gpuhook_e2e::e2e_ready(concat!("prestart_runc::", stringify!($name)), &["runc", "ldconfig"]) {
                return;
            }
            check_profile($profile);
        }
    )*};
}

profile_tests! {
    every_form_on_t4 => "t4",
    every_form_on_l20 => "l20",
    every_form_on_dgx_h100 => "dgx-h100",
    every_form_on_a100_mig_mixed => "a100-mig-mixed",
    every_form_on_h100_mig => "h100-mig",
    every_form_on_h20_mig => "h20-mig",
    // No nvidia-modeset, no nvidia-uvm-tools: neither appears in the container.
    every_form_on_l20_minimal => "l20-minimal",
    // /usr/lib64 libraries; NVML index 0 is minor 1: index 0 gives /dev/nvidia1.
    every_form_on_rhel_a100 => "rhel-a100",
    // MIG mode on, no instance: the GPU by index or UUID gives its /dev/nvidia<minor>.
    every_form_on_h100_mig_empty => "h100-mig-empty",
    every_form_on_workstation_full => "workstation-full",
}

#[test]
fn every_reference_profile_is_covered() {
    let mut names = gpuhook_sim::builtin_names();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "a100-mig-mixed",
            "dgx-h100",
            "h100-mig",
            "h100-mig-empty",
            "h20-mig",
            "l20",
            "l20-minimal",
            "rhel-a100",
            "t4",
            "workstation-full"
        ],
        "a profile was added: add it to profile_tests!"
    );
}

fn gpu_nodes(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("NODE "))
        .filter(|l| !l.starts_with("/dev/nvidiactl") && !l.starts_with("/dev/nvidia-uvm"))
        .collect()
}

#[test]
fn unprivileged_envvar_is_refused_by_policy_and_logged_but_cdi_annotations_work() {
    unprivileged_envvar_policy("accept-envvar-when-unprivileged = false");
}

/// Issue #13.7: the same policy written with NVIDIA's key name (toolkit
/// `internal/config/config.go`, `Config.AcceptEnvvarUnprivileged`), as in
/// `/etc/nvidia-container-runtime/config.toml`.
#[test]
fn nvidia_config_key_sets_the_same_policy() {
    unprivileged_envvar_policy("accept-nvidia-visible-devices-envvar-when-unprivileged = false");
}

fn unprivileged_envvar_policy(config: &str) {
    if !gpuhook_e2e::e2e_ready("prestart_runc::unprivileged_envvar", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("dgx-h100", config);
    // An image that bakes NVIDIA_VISIBLE_DEVICES=all in (like CUDA base images).
    let mut b = Bundle::new(SCRIPT, true);
    b.env("NVIDIA_VISIBLE_DEVICES=all").hook(n.hook());
    let (id, out) = b.run("unpriv");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("NODE /dev/nvidia"),
        "no GPU for an unprivileged env request:\n{stdout}"
    );
    let d = n.decisions(&id);
    assert!(
        d.iter().any(|l| l["fields"]["outcome"] == "skip"
            && l["fields"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("accept-envvar-when-unprivileged = false"))),
        "the log must say why: {d:?}"
    );

    // The same policy honours CDI annotations (set by the kubelet, not the image).
    let g = &n.inventory.gpus[1];
    let mut b = Bundle::new(SCRIPT, true);
    b.env("NVIDIA_VISIBLE_DEVICES=all").hook(n.hook());
    b.config["annotations"] = json!({
        "cdi.k8s.io/gpuhook-test": format!("nvidia.com/gpu={}", g.uuid),
        "cdi.k8s.io/other": "example.com/nic=eth1",
    });
    let (_, out) = b.run("cdi");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        gpu_nodes(&stdout),
        vec![format!("/dev/nvidia{} c3:{:x}", g.minor, g.minor)],
        "{stdout}"
    );
}

#[test]
fn failed_requirement_stops_the_container_with_our_message() {
    if !gpuhook_e2e::e2e_ready("prestart_runc::failed_requirement", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("t4", "");
    let mut b = Bundle::new("echo STARTED", true);
    b.env("NVIDIA_VISIBLE_DEVICES=0")
        .env("NVIDIA_REQUIRE_CUDA=cuda>=99.0")
        .hook(n.hook());
    let (id, out) = b.run("require");
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "must not start:\n{stdout}\n{stderr}");
    assert!(!stdout.contains("STARTED"), "{stdout}");
    assert!(
        stderr.contains("unsatisfied condition: cuda>=99.0") && stderr.contains("update"),
        "runc's error must carry our message:\n{stderr}"
    );
    let d = n.decisions(&id);
    assert!(
        d.iter().any(|l| l["fields"]["outcome"] == "refuse"),
        "{d:?}"
    );
    // Refused before anything was injected: no mountpoint was created in the rootfs.
    assert!(!b.rootfs.join("usr/lib/x86_64-linux-gnu").exists());
    assert!(!b.rootfs.join("etc/ld.so.conf.d").exists());
}

#[test]
fn privileged_mig_config_gets_the_config_capability() {
    if !gpuhook_e2e::e2e_ready("prestart_runc::mig_config", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("h100-mig", "");
    let caps = n.inventory.mig_caps.clone().expect("MIG control caps");
    let major = n.inventory.majors.nvidia_caps.unwrap();
    let mut b = Bundle::new(SCRIPT, true);
    b.env("NVIDIA_VISIBLE_DEVICES=0:0")
        .env("NVIDIA_MIG_CONFIG_DEVICES=all")
        .hook(n.hook());
    for set in ["bounding", "effective", "permitted"] {
        b.config["process"]["capabilities"][set]
            .as_array_mut()
            .unwrap()
            .push(json!("CAP_SYS_ADMIN"));
    }
    let (_, out) = b.run("migcfg");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let want = format!(
        "/dev/nvidia-caps/nvidia-cap{} {:x}:{:x}",
        caps.config_minor, major, caps.config_minor
    );
    assert!(stdout.contains(&format!("NODE {want}")), "{want}\n{stdout}");

    // Unprivileged: a clear refusal.
    let mut b = Bundle::new("echo STARTED", true);
    b.env("NVIDIA_VISIBLE_DEVICES=0:0")
        .env("NVIDIA_MIG_CONFIG_DEVICES=all")
        .hook(n.hook());
    let (_, out) = b.run("migcfg-unpriv");
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("NVIDIA_MIG_CONFIG_DEVICES requires a privileged container"),
        "{stderr}"
    );
}

#[test]
fn non_gpu_container_is_untouched() {
    if !gpuhook_e2e::e2e_ready("prestart_runc::non_gpu", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("l20", "");
    let before = prestart_support::snapshot(&n.root);
    std::fs::remove_file(&n.cache).unwrap();
    let mut b = Bundle::new(SCRIPT, true);
    b.hook(n.hook());
    let rootfs_before = prestart_support::snapshot(&b.rootfs);
    let (_, out) = b.run("plain");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("NODE"), "{stdout}");
    // The fast path ran no discovery: the removed cache was not rewritten.
    assert!(
        !n.cache.exists(),
        "a non-GPU container must not trigger discovery"
    );
    assert_eq!(prestart_support::snapshot(&n.root), before);
    assert_eq!(prestart_support::snapshot(&b.rootfs), rootfs_before);
}

#[test]
fn missing_cache_is_rediscovered_and_rewritten() {
    if !gpuhook_e2e::e2e_ready("prestart_runc::rediscover", &["runc", "ldconfig"]) {
        return;
    }
    let n: Node = node("t4", "");
    std::fs::remove_file(&n.cache).unwrap();
    let mut b = Bundle::new(SCRIPT, true);
    b.env("NVIDIA_VISIBLE_DEVICES=0").hook(n.hook());
    let (_, out) = b.run("rediscover");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(gpu_nodes(&stdout).len(), 1, "{stdout}");
    let inv = Inventory::load_json(&n.cache).expect("cache rewritten by the hook");
    assert_eq!(inv.gpus.len(), n.inventory.gpus.len());
}

#[test]
fn non_root_container_user_gets_gpus_and_a_fresh_ld_cache() {
    if !gpuhook_e2e::e2e_ready("prestart_runc::non_root_user", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("l20", "");
    let mut b = Bundle::new(&format!("id -u; {SCRIPT}"), false);
    b.config["process"]["user"] = json!({"uid": 1000, "gid": 1000});
    b.env("NVIDIA_VISIBLE_DEVICES=0").hook(n.hook());
    let (_, out) = b.run("nonroot");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("1000\n"), "{stdout}");
    assert_eq!(gpu_nodes(&stdout).len(), 1, "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("LDCACHE ") && l != "LDCACHE 0"),
        "{stdout}"
    );
}

#[test]
fn works_as_a_create_runtime_hook() {
    if !gpuhook_e2e::e2e_ready("prestart_runc::create_runtime", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("t4", "");
    let mut b = Bundle::new(SCRIPT, true);
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    b.config["hooks"] = json!({ "createRuntime": [n.hook()] });
    let (id, out) = b.run("createruntime");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let g = &n.inventory.gpus[0];
    assert_eq!(
        gpu_nodes(&stdout),
        vec![format!("/dev/nvidia{} c3:{:x}", g.minor, g.minor)],
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("LDCACHE ") && l != "LDCACHE 0"),
        "{stdout}"
    );
    assert!(n
        .decisions(&id)
        .iter()
        .any(|d| d["fields"]["outcome"] == "inject"));
}

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

#[path = "prestart_runc/forms.rs"]
mod forms;

use forms::SCRIPT;
use gpuhook_node::Inventory;
use prestart_support::{node, text, Bundle, Node};
use serde_json::json;

macro_rules! profile_tests {
    ($($name:ident => $profile:literal),* $(,)?) => {$(
        #[test]
        fn $name() {
            if !gpuhook_e2e::e2e_ready(concat!("prestart_runc::", stringify!($name)), &["runc", "ldconfig"]) {
                return;
            }
            forms::check_profile($profile);
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

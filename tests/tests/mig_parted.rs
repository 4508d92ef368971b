//! `gpuhook-mig-parted` on simulated nodes: seed 003's ConfigMap verbatim (`mixed-workload`,
//! then `all-small`) on an A100 80 GB whose MIG mode is off, through the mock NVML's MIG write
//! calls; placements as the MIG user guide's A100 table has them; the CDI spec that
//! `gpuhook cdi generate` writes afterwards lists exactly the MIG devices NVML now has; a
//! re-apply makes no NVML write call; bad input and held GPUs change nothing; a mode change that
//! needs a reset is reported as pending and completes after the "reset".

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cdi_support::{device_names, gpuhook_ok, s, texts, tmp};
use gpuhook_sim::mig_state;
use gpuhook_sim::{materialise, MaterialiseOptions, NodeProfile};

/// Seed 003's `mig-parted-config` ConfigMap, its `config.yaml` verbatim.
const SEED_003: &str = "version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        \"3g.40gb\": 1
        \"2g.20gb\": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        \"1g.10gb\": 7
";

/// a100-mig-mixed with GPU 0 fresh (MIG off, no instances); GPU 1 keeps its 7x 1g.10gb.
fn node(root: &Path) -> NodeProfile {
    let mut p = NodeProfile::builtin("a100-mig-mixed").unwrap();
    p.gpus[0].mig_mode = false;
    p.gpus[0].mig_devices.clear();
    p.name = "a100-gpu0-fresh".into();
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(&p, root, &opts).unwrap();
    p
}

fn lib_dir(root: &Path, p: &NodeProfile) -> PathBuf {
    root.join(p.lib_dir.trim_start_matches('/'))
}

fn mig_parted(root: &Path, args: &[&str]) -> Output {
    Command::new(gpuhook_e2e::built("gpuhook-mig-parted"))
        .arg("--driver-root")
        .arg(root)
        .args(args)
        .env_remove("MIG_PARTED_CONFIG_FILE")
        .env_remove("MIG_PARTED_SELECTED_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let (stdout, stderr) = texts(out);
    assert!(
        out.status.success(),
        "failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// `(gi, start, size)` of GPU 0 as the mock persisted it.
fn layout(lib: &Path, p: &NodeProfile) -> Vec<(u32, u32, u32)> {
    let st = mig_state::load(lib, &p.gpus[0].uuid)
        .unwrap()
        .expect("a persisted layout");
    st.instances
        .iter()
        .map(|g| (g.id, g.start, g.size))
        .collect()
}

fn mig_uuids(lib: &Path, p: &NodeProfile) -> Vec<String> {
    let st = mig_state::load(lib, &p.gpus[0].uuid).unwrap().unwrap();
    let mut v: Vec<String> = st
        .instances
        .iter()
        .flat_map(|g| g.cis.iter().map(|c| c.uuid.clone()))
        .collect();
    v.extend(p.gpus[1].mig_devices.iter().map(|m| m.uuid.clone()));
    v.sort();
    v
}

fn spec_mig_names(root: &Path, dir: &Path) -> Vec<String> {
    let out = dir.join("spec.json");
    gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(root),
        "--no-inventory-cache",
        "--output",
        s(&out),
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let mut names: Vec<String> = device_names(&doc)
        .into_iter()
        .filter(|n| n.starts_with("MIG-"))
        .collect();
    names.sort();
    names
}

fn writes(lib: &Path) -> usize {
    let log = mig_state::state_dir(lib).join("calls.log");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.starts_with("W ")).count()
}

#[test]
fn seed_003_layouts_apply_converge_and_reach_the_cdi_spec() {
    if !gpuhook_e2e::e2e_ready("mig_parted::seed_003", &[]) {
        return;
    }
    let t = tmp("mig");
    let root = t.path().join("driver");
    let p = node(&root);
    let lib = lib_dir(&root, &p);
    let cfg = t.path().join("config.yaml");
    std::fs::write(&cfg, SEED_003).unwrap();
    let out = ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "mixed-workload"],
    ));
    assert!(
        out.contains("MIG configuration applied successfully"),
        "{out}"
    );
    // MIG user guide, A100: 3g at {4}:4 (GPU instance 2), the 2g.20gb at {0}:2 and {2}:2.
    assert_eq!(layout(&lib, &p), [(2, 4, 4), (3, 0, 2), (4, 2, 2)]);
    for gi in [2, 3, 4] {
        let access = root.join(format!(
            "proc/driver/nvidia/capabilities/gpu0/mig/gi{gi}/ci0/access"
        ));
        assert!(access.is_file(), "{}", access.display());
    }
    assert_eq!(
        spec_mig_names(&root, t.path()),
        mig_uuids(&lib, &p),
        "3 new + GPU 1's 7"
    );
    // mig-parted's assert wants every GPU covered (facts §3): seed 003 names GPU 0 only.
    let out = mig_parted(&root, &["assert", "-f", s(&cfg), "-c", "mixed-workload"]);
    let (_, err) = texts(&out);
    assert!(
        !out.status.success()
            && err.contains("GPU 1")
            && err.contains("no entry of the config covers it"),
        "{err}"
    );

    std::fs::write(mig_state::state_dir(&lib).join("count-calls"), "").unwrap();
    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "mixed-workload"],
    ));
    assert_eq!(writes(&lib), 0, "a re-apply makes no NVML write call");

    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "all-small"],
    ));
    let want: Vec<(u32, u32, u32)> = (0..7).map(|s| (7 + s, s, 1)).collect();
    assert_eq!(layout(&lib, &p), want);
    assert!(!root
        .join("proc/driver/nvidia/capabilities/gpu0/mig/gi2")
        .exists());
    assert_eq!(spec_mig_names(&root, t.path()), mig_uuids(&lib, &p));
    assert_eq!(mig_uuids(&lib, &p).len(), 14);

    // export re-applies to the same layout without a write.
    let exported = ok(&mig_parted(&root, &["export"]));
    let ex = t.path().join("export.yaml");
    std::fs::write(&ex, &exported).unwrap();
    let before = writes(&lib);
    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&ex), "-c", "current"],
    ));
    assert_eq!(writes(&lib), before, "{exported}");
    ok(&mig_parted(
        &root,
        &["assert", "-f", s(&ex), "-c", "current"],
    ));
}

#[test]
fn bad_input_and_held_gpus_change_nothing() {
    if !gpuhook_e2e::e2e_ready("mig_parted::bad_input", &[]) {
        return;
    }
    let t = tmp("mig-bad");
    let root = t.path().join("driver");
    let p = node(&root);
    let lib = lib_dir(&root, &p);
    let cfg = t.path().join("config.yaml");
    std::fs::write(&cfg, SEED_003).unwrap();
    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "mixed-workload"],
    ));
    let before = layout(&lib, &p);

    let out = mig_parted(&root, &["apply", "-f", s(&cfg), "-c", "nope"]);
    let (_, err) = texts(&out);
    assert!(
        !out.status.success()
            && err.contains("selected mig-config not present: nope")
            && err.contains(s(&cfg)),
        "{err}"
    );
    let bad = t.path().join("bad.yaml");
    std::fs::write(&bad, SEED_003.replace("\"1g.10gb\": 7", "\"2g.10gb\": 3")).unwrap();
    let out = mig_parted(&root, &["apply", "-f", s(&bad), "-c", "all-small"]);
    let (_, err) = texts(&out);
    assert!(
        !out.status.success()
            && err.contains("no MIG profile 2g.10gb")
            && err.contains("NVIDIA A100-SXM4-80GB"),
        "{err}"
    );
    assert_eq!(layout(&lib, &p), before);

    std::fs::write(mig_state::in_use_file(&lib, &p.gpus[0].uuid), "").unwrap();
    let out = mig_parted(&root, &["apply", "-f", s(&cfg), "-c", "all-small"]);
    let (_, err) = texts(&out);
    assert!(
        !out.status.success()
            && err.contains("in use")
            && err.contains("NVML_ERROR_IN_USE")
            && err.contains("stop the processes"),
        "{err}"
    );
    assert_eq!(layout(&lib, &p), before, "a held GPU keeps its layout");
}

#[test]
fn a_mode_change_that_needs_a_reset_is_pending_until_the_reset() {
    if !gpuhook_e2e::e2e_ready("mig_parted::pending", &[]) {
        return;
    }
    let t = tmp("mig-reset");
    let root = t.path().join("driver");
    let p = node(&root);
    let lib = lib_dir(&root, &p);
    let cfg = t.path().join("config.yaml");
    std::fs::write(&cfg, SEED_003).unwrap();
    let switch = mig_state::needs_reset_file(&lib, &p.gpus[0].uuid);
    std::fs::create_dir_all(switch.parent().unwrap()).unwrap();
    std::fs::write(&switch, "").unwrap();
    let out = mig_parted(&root, &["apply", "-f", s(&cfg), "-c", "mixed-workload"]);
    assert_eq!(out.status.code(), Some(3), "{:?}", texts(&out));
    assert!(texts(&out).0.contains("pending"), "{:?}", texts(&out));
    let st = mig_state::load(&lib, &p.gpus[0].uuid).unwrap().unwrap();
    assert_eq!((st.mig_enabled, st.pending), (false, Some(true)));
    std::fs::remove_file(&switch).unwrap();
    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "mixed-workload"],
    ));
    assert_eq!(layout(&lib, &p), [(2, 4, 4), (3, 0, 2), (4, 2, 2)]);
}

#[test]
fn the_boot_unit_applies_before_containerd_and_the_kubelet_and_verifies() {
    if !gpuhook_e2e::e2e_ready("mig_parted::unit", &["systemd-analyze"]) {
        return;
    }
    let path = gpuhook_e2e::workspace_root().join("deploy/systemd/gpuhook-mig-parted.service");
    let text = std::fs::read_to_string(&path).unwrap();
    let before = text
        .lines()
        .find_map(|l| l.strip_prefix("Before="))
        .expect("Before=");
    for unit in [
        "containerd.service",
        "kubelet.service",
        "gpuhook-cdi-refresh.service",
    ] {
        assert!(before.split_whitespace().any(|u| u == unit), "{before}");
    }
    assert!(
        text.lines().any(|l| l == "Type=oneshot")
            && text.contains("ExecStart=/usr/bin/gpuhook-mig-parted apply")
    );
    let t = tmp("mig-unit");
    let unit = t.path().join("gpuhook-mig-parted.service");
    let bin = gpuhook_e2e::built("gpuhook-mig-parted");
    std::fs::write(&unit, text.replace("/usr/bin/gpuhook-mig-parted", s(&bin))).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.lines().any(|l| l.contains("gpuhook-mig-parted")),
        "{stderr}"
    );
}

/// NVML's running processes are holders: a compute process scripted on one MIG device (the mock
/// lists it on that MIG handle, as the driver does) keeps the layout, with the device, the pid
/// and the fix named; once it ends the layout applies. `--drain` skips the check (the simulated
/// driver, unlike a real one, does not refuse the destroy of a device with a scripted process:
/// NVML's own `IN_USE` refusal is covered by `bad_input_and_held_gpus_change_nothing`).
#[test]
fn a_process_on_a_mig_device_keeps_it_until_it_ends_or_the_admin_drains() {
    if !gpuhook_e2e::e2e_ready("mig_parted::process_holder", &[]) {
        return;
    }
    let t = tmp("mig-proc");
    let root = t.path().join("driver");
    let p = node(&root);
    let lib = lib_dir(&root, &p);
    let cfg = t.path().join("config.yaml");
    std::fs::write(&cfg, SEED_003).unwrap();
    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "mixed-workload"],
    ));
    let before = layout(&lib, &p);
    let st = mig_state::load(&lib, &p.gpus[0].uuid).unwrap().unwrap();
    let held = st.instances.iter().find(|g| g.id == 3).unwrap().cis[0]
        .uuid
        .clone();
    let procs = mig_state::state_dir(&lib).join(format!("processes-{held}"));
    std::fs::write(&procs, "4242 compute 1024\n").unwrap();

    let out = mig_parted(&root, &["apply", "-f", s(&cfg), "-c", "all-small"]);
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "2g.20gb (GPU instance 3",
        held.as_str(),
        "compute process pid 4242",
        "end the process",
        "--drain",
    ] {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
    assert_eq!(
        layout(&lib, &p),
        before,
        "the held device and its GPU are kept"
    );
    // A process on GPU 1's devices (not changed by this config) holds nothing of GPU 0.
    std::fs::remove_file(&procs).unwrap();
    let other =
        mig_state::state_dir(&lib).join(format!("processes-{}", p.gpus[1].mig_devices[0].uuid));
    std::fs::write(&other, "77 compute 10\n").unwrap();
    ok(&mig_parted(
        &root,
        &["apply", "-f", s(&cfg), "-c", "all-small"],
    ));
    assert_eq!(layout(&lib, &p).len(), 7);

    std::fs::write(
        mig_state::state_dir(&lib).join(format!("processes-{}", layout_uuid(&lib, &p))),
        "4243 graphics 10\n",
    )
    .unwrap();
    let out = mig_parted(&root, &["apply", "-f", s(&cfg), "-c", "mixed-workload"]);
    assert!(
        texts(&out).1.contains("graphics process pid 4243"),
        "{:?}",
        texts(&out)
    );
    ok(&mig_parted(
        &root,
        &["apply", "--drain", "-f", s(&cfg), "-c", "mixed-workload"],
    ));
    assert_eq!(layout(&lib, &p), before, "drained: mixed-workload again");
}

/// The MIG UUID of GPU 0's first device.
fn layout_uuid(lib: &Path, p: &NodeProfile) -> String {
    let st = mig_state::load(lib, &p.gpus[0].uuid).unwrap().unwrap();
    st.instances[0].cis[0].uuid.clone()
}

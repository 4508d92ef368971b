//! gpuhook's spec against NVIDIA's, on every reference profile.
//!
//! `tests/expectations/nvidia-ctk/<profile>.json` is the normalised output of `nvidia-ctk cdi
//! generate` v1.20.0 (built from NVIDIA's source, run by `scripts/compare-nvidia-ctk.sh` on the
//! same simulated nodes). gpuhook's spec, normalised the same way, must match it except the
//! deliberate differences of docs/nvidia-differences.md: device permissions `rw` (A2, not
//! compared), one setup hook (A1: compared as actions), the i386 libraries (A4: left out here).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use cdi_support::{build_node, gpuhook, s, texts, tmp};
use serde_json::Value;

/// A4: gpuhook's i386 entries, which NVIDIA's CDI path does not have.
fn without_i386(v: &Value) -> Value {
    Value::from(
        v.as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                !e.as_str().unwrap_or_default().contains("/i386-linux-gnu/")
                    && e.as_str() != Some("/usr/lib/i386-linux-gnu")
            })
            .cloned()
            .collect::<Vec<_>>(),
    )
}

fn check(profile: &str) {
    check_mode(profile, "");
    check_mode(profile, "management");
}

/// `mode`: "" for the default spec, else a `--mode` whose expectations are in that folder.
fn check_mode(profile: &str, mode: &str) {
    if !gpuhook_e2e::e2e_ready("cdi_nvidia_expectations", &["ldconfig"]) {
        return;
    }
    let file = gpuhook_e2e::workspace_root()
        .join("tests/expectations/nvidia-ctk")
        .join(mode)
        .join(format!("{profile}.json"));
    let nv: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let t = tmp(&format!("nvexp-{profile}"));
    let root = t.path().join("driver");
    build_node(profile, &root);
    let mut args = vec![
        "cdi",
        "generate",
        "--driver-root",
        s(&root),
        "--no-inventory-cache",
    ];
    args.extend(["--output", "-"]);
    if !mode.is_empty() {
        args.extend(["--mode", mode]);
    }
    let out = gpuhook(&args);
    let profile = &format!("{profile} {mode}");
    let (stdout, stderr) = texts(&out);
    if let Some(err) = nv.get("error") {
        assert!(
            !out.status.success(),
            "{profile}: NVIDIA fails ({err}); gpuhook wrote a spec"
        );
        return;
    }
    assert!(out.status.success(), "{profile}: {stderr}");
    let spec: Value = serde_json::from_str(&stdout).unwrap();
    let ours = cdi_support::nvidia_norm::normalise(&spec, s(&root));
    for key in ["cdiVersion", "kind", "devices", "common_nodes"] {
        assert_eq!(ours[key], nv[key], "{profile}: {key}");
    }
    // B7 decided against: NVIDIA_CTK_LIBCUDA_DIR is read by nothing in toolkit v1.20 and is no
    // part of what gpuhook's containers need.
    let nv_env: Vec<&Value> = nv["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e.as_str().unwrap_or_default().starts_with("NVIDIA_CTK_"))
        .collect();
    let ours_env: Vec<&Value> = ours["env"].as_array().unwrap().iter().collect();
    assert_eq!(ours_env, nv_env, "{profile}: env");
    for key in ["mounts", "links", "ldcache_folders"] {
        let (ours, nv) = (without_i386(&ours[key]), nv[key].clone());
        let only = |a: &Value, b: &Value| -> Vec<Value> {
            let b = b.as_array().unwrap();
            a.as_array()
                .unwrap()
                .iter()
                .filter(|e| !b.contains(e))
                .cloned()
                .collect()
        };
        assert_eq!(
            ours,
            nv,
            "{profile}: {key}: only gpuhook {:?}, only nvidia-ctk {:?}",
            only(&ours, &nv),
            only(&nv, &ours)
        );
    }
    assert_eq!(
        ours["hook_actions"], nv["hook_actions"],
        "{profile}: hook actions"
    );
    assert_eq!(
        ours["hooks_without_env"],
        serde_json::json!([]),
        "{profile}: every hook has an env"
    );
}

#[test]
fn t4() {
    check("t4");
}

#[test]
fn l20() {
    check("l20");
}

#[test]
fn l20_minimal() {
    check("l20-minimal");
}

#[test]
fn dgx_h100() {
    check("dgx-h100");
}

#[test]
fn rhel_a100() {
    check("rhel-a100");
}

#[test]
fn a100_mig_mixed() {
    check("a100-mig-mixed");
}

#[test]
fn h100_mig() {
    check("h100-mig");
}

#[test]
fn h100_mig_empty() {
    check("h100-mig-empty");
}

#[test]
fn h20_mig() {
    check("h20-mig");
}

#[test]
fn workstation_full() {
    check("workstation-full");
}

#[test]
fn every_profile_has_an_expectation_test() {
    let mut names = gpuhook_sim::builtin_names();
    names.sort_unstable();
    let mut files: Vec<String> =
        std::fs::read_dir(gpuhook_e2e::workspace_root().join("tests/expectations/nvidia-ctk"))
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").map(str::to_string)
            })
            .collect();
    files.sort();
    assert_eq!(names, files);
}

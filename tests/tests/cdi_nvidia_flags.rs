//! `gpuhook cdi generate` with `nvidia-ctk cdi generate`'s flags, on a simulated MIG node.
//!
//! Expectations from nvidia-container-toolkit v1.20.0: pkg/nvcdi/management.go (one `all`
//! device with every NVIDIA node, MIG capability nodes included, each with the host node's
//! mode: internal/edits/device.go `fromPathOrDefault`), cmd/nvidia-ctk/cdi/generate/generate.go
//! (`--no-all-device`, `--device-id`, the `NVIDIA_CTK_CDI_GENERATE_MODE` env source), and
//! internal/discover/gds.go (gds mode describes `/dev/nvidia-fs*`, which this node lacks).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cdi_support::{build_node, device_names, gpuhook, gpuhook_cmd, gpuhook_ok, s, texts, tmp};

fn spec_of(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

fn node_modes(device: &serde_json::Value) -> Vec<(String, u64)> {
    device["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let mode = n["fileMode"]
                .as_u64()
                .unwrap_or_else(|| panic!("no fileMode: {n}"));
            (n["path"].as_str().unwrap().to_string(), mode)
        })
        .collect()
}

fn host_mode(root: &Path, path: &str) -> u64 {
    let meta = std::fs::symlink_metadata(root.join(path.trim_start_matches('/'))).unwrap();
    u64::from(meta.mode() & 0o7777)
}

#[test]
fn nvidia_ctk_flags_on_a_mig_node() {
    if !gpuhook_e2e::e2e_ready("cdi_nvidia_flags", &["ldconfig"]) {
        return;
    }
    let t = tmp("nvflags");
    let root = t.path().join("driver");
    let p = build_node("h100-mig", &root);
    let base = [
        "cdi",
        "generate",
        "--driver-root",
        s(&root),
        "--no-inventory-cache",
        "--output",
        "-",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|a| a.to_string()).collect()
    };
    let run = |extra: &[&str]| {
        let args = with(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        spec_of(&gpuhook_ok(&refs).0)
    };

    // Management: one `all` device with every node, each with the host node's mode.
    let mgmt = run(&["--mode", "management"]);
    assert_eq!(device_names(&mgmt), ["all"]);
    let nodes = node_modes(&mgmt["devices"][0]);
    let gpu = &p.gpus[0];
    let mig = &gpu.mig_devices[0];
    for path in [
        format!("/dev/nvidia{}", gpu.minor),
        "/dev/nvidiactl".to_string(),
        format!("/dev/nvidia-caps/nvidia-cap{}", mig.gi_cap_minor),
        format!("/dev/nvidia-caps/nvidia-cap{}", mig.ci_cap_minor),
    ] {
        let (_, mode) = nodes
            .iter()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("management spec lacks {path}: {nodes:?}"));
        assert_eq!(
            *mode,
            host_mode(&root, &path),
            "{path}: the host node's mode"
        );
    }
    // The same through NVIDIA's env source.
    let args = with(&[]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = gpuhook_cmd(&refs)
        .env("NVIDIA_CTK_CDI_GENERATE_MODE", "management")
        .output()
        .unwrap();
    assert_eq!(spec_of(&texts(&out).0), mgmt);

    // --device-id and --no-all-device.
    let first = format!("{}:0", gpu.index);
    let one = run(&["--no-all-device", "--device-id", &first]);
    assert_eq!(device_names(&one), [first.clone(), mig.uuid.clone()]);
    let caps = node_modes(&one["devices"][0]);
    assert!(
        caps.iter()
            .any(|(p, m)| p.contains("nvidia-cap") && *m == 0o444),
        "MIG cap nodes keep 0444: {caps:?}"
    );

    // gds on a node without nvidia-fs: refused, naming what is missing.
    let args = with(&["--mode", "gds"]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = gpuhook(&refs);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("nvidia-fs*") && stderr.contains("no such device"),
        "{stderr}"
    );
}

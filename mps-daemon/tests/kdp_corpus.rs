//! `gpu-mps-daemon check` against NVIDIA's own config cases: the 78 configs of
//! `shared/reference/kdp-configs/` with the outcome NVIDIA's k8s-device-plugin v0.20.0 gives each
//! (`expect.json`, from its Go tests and code). Accept/reject must agree on every case, except
//! the deliberate differences listed in [`DISAGREE`] with their reasons, for the daemon's `check`
//! and for the device plugin's loader (`gpuhook-sharing`) alike: one ConfigMap serves both.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::Value;

/// Cases where we deliberately disagree with NVIDIA (file, reason). None today: our extensions
/// (`replicas: 1` for MPS, a strict `mpsDaemon` section) are not exercised by the corpus.
const DISAGREE: &[(&str, &str)] = &[];

/// The corpus: `$GPUHOOK_KDP_CONFIGS`, else `shared/reference/kdp-configs` next to the repository.
fn corpus() -> PathBuf {
    let candidates = [
        std::env::var_os("GPUHOOK_KDP_CONFIGS").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/kdp-configs")),
        Some(PathBuf::from("/work/shared/reference/kdp-configs")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("expect.json").is_file())
        .expect(
            "NVIDIA's config corpus (kdp-configs/expect.json) not found: set GPUHOOK_KDP_CONFIGS",
        )
}

#[test]
fn check_agrees_with_nvidia_on_every_corpus_config() {
    let dir = corpus();
    let expect: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expect.json")).unwrap()).unwrap();
    let cases = expect["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 78);
    let node = Node::new(2, 81920);
    let mut wrong = Vec::new();
    for c in cases {
        let file = c["file"].as_str().unwrap();
        let want = c["accepted"].as_bool().unwrap();
        let out = std::process::Command::new(daemon_bin())
            .arg("check")
            .arg("--config")
            .arg(dir.join(file))
            .arg("--inventory-json")
            .arg(&node.inventory)
            .arg("--mps-root")
            .arg(&node.mps_root)
            .output()
            .unwrap();
        let got = out.status.success();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if got != want && !DISAGREE.iter().any(|(f, _)| *f == file) {
            wrong.push(format!(
                "{file}: NVIDIA accepted={want}, we accepted={got}: {stderr}"
            ));
        }
        let plugin = gpuhook_sharing::config::load(&dir.join(file));
        if plugin.is_ok() != want && !DISAGREE.iter().any(|(f, _)| *f == file) {
            wrong.push(format!(
                "{file}: NVIDIA accepted={want}, the plugin's loader: {plugin:?}"
            ));
        }
        if !got {
            // A refusal names the problem once, on one line, and the file.
            assert!(stderr.contains(file), "{file}: {stderr}");
        }
    }
    assert!(
        wrong.is_empty(),
        "{} disagreements:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_config_without_mps_idles_and_is_ready() {
    let node = Node::new(1, 16000);
    let text = format!(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 4}}\nmpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  cdiSpecDir: {}\n",
        node.mps_root.display(),
        node.driver_root.display(),
        node.cdi_dir.display()
    );
    std::fs::write(&node.config, text).unwrap();
    let d = node.start();
    let (code, body) = wait_for("readyz", || Some(d.get("/readyz")).filter(|r| r.0 != 0));
    assert_eq!(code, 200, "{body}; log:\n{}", d.log_text());
    assert!(body.contains("nothing to run"), "{body}");
    assert!(!node.cdi_spec().exists());
    assert!(
        d.log_text().contains("idles and reports ready"),
        "{}",
        d.log_text()
    );
}

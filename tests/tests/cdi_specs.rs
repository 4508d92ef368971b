//! The checked-in specs in `cdi-specs/` (one per reference node profile).
//!
//! They document what gpuhook generates and let reviewers see every change to the output in a
//! diff. Two tests keep them honest: every file must be a valid spec that podman 4.3 accepts
//! (no root needed), and regenerating each profile exactly as `scripts/regen-cdi-specs.sh` does
//! (root: node at `/var/lib/gpuhook-sim/<profile>`, hooks naming `/usr/bin/gpuhook`) must give the
//! same bytes; a drift fails with the first differing line and the command that updates them.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::path::{Path, PathBuf};

use cdi_support::{check_spec_file, gpuhook};
use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{builtin_names, materialise, MaterialiseOptions};

/// Where the regeneration script materialises each profile (fixed, so hostPaths are stable).
const SIM_ROOT: &str = "/var/lib/gpuhook-sim";
/// The gpuhook path the checked-in specs' hooks name.
const INSTALLED_GPUHOOK: &str = "/usr/bin/gpuhook";
const REGEN: &str = "sudo scripts/regen-cdi-specs.sh (after `cargo build --workspace`)";

fn spec_dir() -> PathBuf {
    gpuhook_e2e::workspace_root().join("cdi-specs")
}

fn checked_in(profile: &str) -> PathBuf {
    spec_dir().join(format!("{profile}.json"))
}

/// `cdi-specs/<profile>.empty`: the node has no device to describe (MIG on without MIG devices;
/// nvidia-ctk v1.20.0 fails there: tests/expectations/nvidia-ctk/h100-mig-empty.json), so
/// `cdi generate` writes no spec, exits 0 and warns with this line (a deliberate difference:
/// docs/nvidia-differences.md).
fn expected_empty(profile: &str) -> Option<String> {
    std::fs::read_to_string(spec_dir().join(format!("{profile}.empty")))
        .ok()
        .map(|s| s.trim().to_string())
}

#[test]
fn every_profile_has_a_valid_checked_in_spec() {
    for profile in builtin_names() {
        if let Some(warning) = expected_empty(profile) {
            assert!(
                !checked_in(profile).exists(),
                "{profile}: both a spec and an .empty file"
            );
            assert!(
                warning.starts_with("gpuhook: warning:") && warning.contains("no spec written"),
                "{profile}: {warning}"
            );
            continue;
        }
        let path = checked_in(profile);
        assert!(
            path.is_file(),
            "{} is missing: generate it with {REGEN}",
            path.display()
        );
        let doc = check_spec_file(&path);
        assert_eq!(doc["kind"], "nvidia.com/gpu", "{}", path.display());
        for hook in doc["containerEdits"]["hooks"].as_array().expect("hooks") {
            assert_eq!(hook["path"], INSTALLED_GPUHOOK, "{}", path.display());
        }
        let root = format!("{SIM_ROOT}/{profile}/");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!("\"hostPath\": \"{root}")),
            "{}: hostPaths must be under the fixed {root}",
            path.display()
        );
    }
    let readme =
        std::fs::read_to_string(spec_dir().join("README.md")).expect("cdi-specs/README.md");
    assert!(
        readme.contains("scripts/regen-cdi-specs.sh"),
        "README documents regeneration"
    );
}

/// Index and content of the first line where `a` and `b` differ.
fn first_difference(a: &str, b: &str) -> Option<(usize, String, String)> {
    let (mut la, mut lb) = (a.lines(), b.lines());
    for n in 1.. {
        match (la.next(), lb.next()) {
            (None, None) => return None,
            (x, y) if x == y => continue,
            (x, y) => {
                return Some((
                    n,
                    x.unwrap_or("<end of file>").to_string(),
                    y.unwrap_or("<end of file>").to_string(),
                ))
            }
        }
    }
    None
}

/// What `gpuhook cdi generate` did for one profile.
#[derive(Debug, PartialEq, Eq)]
enum Regenerated {
    /// The spec was written.
    Written,
    /// Generation succeeded without a spec (a node with nothing to describe): its warning line.
    NoSpec(String),
    /// Generation failed: the last stderr line.
    Failed(String),
}

/// Regenerates `profile`'s spec into `out`.
fn regenerate(profile: &str, out: &Path) -> Regenerated {
    let p = NodeProfile::builtin(profile).unwrap();
    let root = Path::new(SIM_ROOT).join(profile);
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    let report = materialise(&p, &root, &opts)
        .unwrap_or_else(|e| panic!("materialise {profile} at {}: {e}", root.display()));
    assert!(
        report.notes.is_empty(),
        "{profile}: node not fully materialised, so the spec would differ: {:?} (build the whole \
         workspace first)",
        report.notes
    );
    let result = gpuhook(&[
        "--log-level",
        "error",
        "cdi",
        "generate",
        "--driver-root",
        root.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--gpuhook-path",
        INSTALLED_GPUHOOK,
        "--no-inventory-cache",
    ]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    let last = stderr.trim().lines().last().unwrap_or_default().to_string();
    match (result.status.success(), out.exists()) {
        (true, true) => Regenerated::Written,
        (true, false) => Regenerated::NoSpec(last),
        (false, _) => Regenerated::Failed(last),
    }
}

#[test]
fn checked_in_specs_match_the_generator() {
    if !gpuhook_e2e::e2e_ready("cdi_specs", &["ldconfig"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-cdi-specs-")
        .tempdir()
        .unwrap();
    let mut drifted = Vec::new();
    for profile in builtin_names() {
        let fresh = tmp.path().join(format!("{profile}.json"));
        match (regenerate(profile, &fresh), expected_empty(profile)) {
            (Regenerated::NoSpec(got), Some(want)) if got == want => continue,
            (Regenerated::Written, None) => {}
            (got, want) => {
                drifted.push(format!(
                    "{profile}: generation gave {got:?}, checked in {want:?}"
                ));
                continue;
            }
        }
        let want = std::fs::read_to_string(&fresh).unwrap();
        let path = checked_in(profile);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some((line, old, new)) = first_difference(&have, &want) {
            drifted.push(format!(
                "{} differs from the generator at line {line}:\n  checked in: {}\n  generated:  {}",
                path.display(),
                old.trim(),
                new.trim()
            ));
        }
    }
    assert!(
        drifted.is_empty(),
        "{}\nIf the change is intended, regenerate with {REGEN} and review `git diff cdi-specs/`.",
        drifted.join("\n")
    );
}

#[test]
fn first_difference_reports_lines() {
    assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
    assert_eq!(
        first_difference("a\nb\n", "a\nc\n"),
        Some((2, "b".into(), "c".into()))
    );
    assert_eq!(
        first_difference("a\n", "a\nb\n"),
        Some((2, "<end of file>".into(), "b".into()))
    );
}

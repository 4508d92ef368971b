//! The Kubernetes manifests against Kubernetes' own OpenAPI schemas (`kubernetes-validate`,
//! offline), for the oldest and the newest Kubernetes version we support: every manifest file,
//! and what every kustomization renders to (`kubectl apply -k` sends that).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{root, yaml_docs};

/// Oldest and newest Kubernetes versions the manifests are validated against. The newest is the
/// newest schema bundled by the pinned validator (`kubernetes-validate==1.37.0` in `.ci/run`).
const K8S_VERSIONS: [&str; 2] = ["1.28.0", "1.37.0"];
/// The DRA bundle (`deploy/kubernetes/dra`, `examples/dra`) needs resource.k8s.io/v1 (1.34+):
/// it is validated against these instead.
const DRA_K8S_VERSIONS: [&str; 2] = ["1.34.0", "1.37.0"];

/// Whether `file` (a manifest or a rendered kustomization) belongs to the DRA bundle.
fn is_dra(file: &Path) -> bool {
    file.components().any(|c| c.as_os_str() == "dra")
        || file
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("-dra-"))
}

/// Whether `file` is a partial object that its directory's kustomization patches in (validated
/// as part of the rendering only).
fn is_patch(file: &Path) -> bool {
    let k = file.with_file_name("kustomization.yaml");
    let Ok(text) = std::fs::read_to_string(&k) else {
        return false;
    };
    let v: yaml_serde::Value = yaml_serde::from_str(&text).expect("kustomization.yaml");
    let name = file.file_name().and_then(|n| n.to_str());
    v.get("patchesStrategicMerge")
        .and_then(yaml_serde::Value::as_sequence)
        .is_some_and(|l| l.iter().any(|p| p.as_str() == name))
}

/// Every Kubernetes manifest we ship: all YAML under `deploy/kubernetes` but the kustomizations
/// and their patches
/// (`containerd/runtimeclass.yaml` links to the base's RuntimeClass).
fn k8s_manifests() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
                && !is_patch(&p)
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("deploy/kubernetes"), &mut out);
    out.sort();
    out
}

#[test]
fn kubernetes_manifests_pass_schema_validation() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &["kubernetes-validate", "kubectl"]) {
        return;
    }
    let mut files = k8s_manifests();
    let rendered = tempfile::tempdir().expect("tempdir");
    for (i, dir) in super::bundle::kustomizations().iter().enumerate() {
        let dra = if is_dra(dir) { "-dra" } else { "" };
        let path = rendered.path().join(format!("rendered{dra}-{i}.yaml"));
        std::fs::write(&path, super::bundle::render(dir)).expect("write rendered bundle");
        files.push(path);
    }
    let (dra_files, files): (Vec<PathBuf>, Vec<PathBuf>) =
        files.into_iter().partition(|f| is_dra(f));
    validate(&files, &K8S_VERSIONS, 2 * 9);
    validate(&dra_files, &DRA_K8S_VERSIONS, 2 * 5);
}

/// Validates `files` against each of `versions`; at least `min_docs` documents.
fn validate(files: &[PathBuf], versions: &[&str], min_docs: usize) {
    let docs: usize = files.iter().map(|f| yaml_docs(f).len()).sum();
    assert!(
        docs >= min_docs,
        "expected the files and the example's rendering: ConfigMap, Namespace, 2 ServiceAccounts, \
         3 DaemonSets, RuntimeClass"
    );
    for version in versions {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .args(files)
            .output()
            .expect("run kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "kubernetes-validate {version} failed:\n{text}"
        );
        // Unknown kinds are only a WARN with exit status 0: every resource we ship must have a
        // schema and pass it.
        let bad: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("ERROR") || l.starts_with("WARN"))
            .collect();
        assert!(bad.is_empty(), "kubernetes-validate {version}:\n{text}");
        let passed = text
            .lines()
            .filter(|l| l.contains(" passed for resource "))
            .count();
        assert_eq!(
            passed, docs,
            "every document must be validated against {version}:\n{text}"
        );
    }
}

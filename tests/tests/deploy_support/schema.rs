//! The Kubernetes manifests against Kubernetes' own OpenAPI schemas (`kubernetes-validate`,
//! offline), for the oldest and the newest Kubernetes version we support.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{root, yaml_docs};

/// Oldest and newest Kubernetes versions the manifests are validated against. The newest is the
/// newest schema bundled by the pinned validator (`kubernetes-validate==1.37.0` in `.ci/run`).
const K8S_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

/// Every Kubernetes manifest we ship: all YAML under `deploy/kubernetes` plus the RuntimeClass.
fn k8s_manifests() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("deploy/kubernetes"), &mut out);
    out.sort();
    out.push(root().join("containerd/runtimeclass.yaml"));
    out
}

#[test]
fn kubernetes_manifests_pass_schema_validation() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &["kubernetes-validate"]) {
        return;
    }
    let files = k8s_manifests();
    let docs: usize = files.iter().map(|f| yaml_docs(f).len()).sum();
    assert!(
        docs >= 6,
        "expected the ConfigMap, Namespace, ServiceAccount, 2 DaemonSets, RuntimeClass"
    );
    for version in K8S_VERSIONS {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .args(&files)
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

//! The Kubernetes bundle as a cluster receives it: every kustomization under `deploy/kubernetes`
//! rendered with `kubectl kustomize` (Debian 12's kubectl 1.20 with kustomize v2.0.3 in CI, any
//! newer one elsewhere), then checked for what a reviewer of a privileged DaemonSet asks: which
//! containers are privileged, that no pod gets an API token or RBAC, that every pod lands only on
//! GPU nodes, that every image is the one the overlay names, and that every command is a binary
//! the image (`deploy/image/build.sh`) ships, called with flags that binary accepts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_serde::Value;

use super::{by_kind, get, parse_docs, read, root, s, seq, EXAMPLE};

/// Where the image's binaries are (`deploy/image/build.sh`; the image has no PATH).
pub const IMAGE_BIN_DIR: &str = "/opt/gpuhook/bin";

/// The namespace of every namespaced object of the bundle.
const NAMESPACE: &str = "gpuhook-system";

/// The only privileged containers, as (DaemonSet, container): the installer writes host files and
/// chroots, the refresher chroots and loads NVML, the MPS daemon mounts and sets compute modes.
const PRIVILEGED: [(&str, &str); 4] = [
    ("gpu-mps-daemon-l20", "gpu-mps-daemon"),
    ("gpu-mps-daemon-t4", "gpu-mps-daemon"),
    ("gpuhook-node", "cdi-refresh"),
    ("gpuhook-node", "install"),
];

/// The GPU node labels a selector may use: GPU feature discovery's, Node Feature Discovery's.
const GFD: &str = "nvidia.com/gpu.present";
const NFD: &str = "feature.node.kubernetes.io/pci-10de.present";

/// Every directory under `deploy/kubernetes` holding a `kustomization.yaml`.
pub fn kustomizations() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("kustomization.yaml").exists() {
            out.push(dir.to_path_buf());
        }
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("deploy/kubernetes"), &mut out);
    out.sort();
    out
}

/// `kubectl kustomize DIR`: the objects `kubectl apply -k DIR` would send.
pub fn render(dir: &Path) -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 manifests")
}

/// The binaries `deploy/image/build.sh` puts into the image (its `for b in ...; do` loop).
fn image_binaries() -> BTreeSet<String> {
    let script = read(&root().join("deploy/image/build.sh"));
    let line = script
        .lines()
        .find(|l| l.starts_with("for b in "))
        .expect("build.sh's loop over the binaries");
    let list = line["for b in ".len()..].split(';').next().unwrap();
    let bins: BTreeSet<String> = list.split_whitespace().map(str::to_string).collect();
    assert!(
        script.contains("$ctx/rootfs/opt/gpuhook/bin/$b"),
        "build.sh's bin dir moved"
    );
    bins
}

/// The image the example overlay sets (`images:` newName:newTag).
fn overlay_image() -> String {
    let k: Value = yaml_serde::from_str(&read(&root().join(EXAMPLE).join("kustomization.yaml")))
        .expect("kustomization.yaml");
    let img = &seq(&k, &["images"])[0];
    format!("{}:{}", s(img, &["newName"]), s(img, &["newTag"]))
}

fn strings(v: &[Value]) -> Vec<String> {
    v.iter()
        .map(|a| a.as_str().expect("string").to_string())
        .collect()
}

/// `--flag value` from `args`, if present.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

/// Checks one command line runs a binary of the image; installer command lines must also parse.
fn check_command(what: &str, argv: &[String], bins: &BTreeSet<String>) {
    let bin = argv[0]
        .strip_prefix(IMAGE_BIN_DIR)
        .and_then(|b| b.strip_prefix('/'))
        .unwrap_or_else(|| panic!("{what}: {} is not in {IMAGE_BIN_DIR}", argv[0]));
    assert!(
        bins.contains(bin),
        "{what}: the image has no {bin}: {bins:?}"
    );
    if bin == "gpuhook-installer" {
        // clap checks every flag before --help: an unknown one fails.
        let out = Command::new(gpuhook_e2e::built(bin))
            .args(&argv[1..])
            .arg("--help")
            .output()
            .expect("run gpuhook-installer");
        assert!(
            out.status.success(),
            "{what}: gpuhook-installer rejects {argv:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(flag(argv, "--host-root"), Some("/host"), "{what}");
    }
}

/// The pod-level rules every DaemonSet of the bundle follows.
fn check_pod(name: &str, pod: &Value, accounts: &BTreeSet<String>) {
    assert_eq!(
        get(pod, &["automountServiceAccountToken"]).as_bool(),
        Some(false),
        "{name}: no API token"
    );
    let sa = s(pod, &["serviceAccountName"]);
    assert!(
        accounts.contains(sa),
        "{name}: ServiceAccount {sa} is not in the bundle"
    );
    assert_eq!(
        s(pod, &["nodeSelector", "nvidia.com/gpu.present"]),
        "true",
        "{name}"
    );
    assert!(
        seq(pod, &["tolerations"])
            .iter()
            .any(|t| t.get("key").and_then(Value::as_str) == Some("nvidia.com/gpu")),
        "{name}: must tolerate the nvidia.com/gpu taint"
    );
    assert!(pod.get("hostNetwork").is_none(), "{name}: no host network");
}

/// The containers and init containers of a pod.
fn containers(pod: &Value) -> Vec<&Value> {
    let mut all: Vec<&Value> = seq(pod, &["containers"]).iter().collect();
    if pod.get("initContainers").is_some() {
        all.extend(seq(pod, &["initContainers"]));
    }
    all
}

#[test]
fn rendered_bundle_grants_only_what_each_pod_needs() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &["kubectl"]) {
        return;
    }
    let docs = parse_docs(&render(&root().join(EXAMPLE)), EXAMPLE);
    let kinds: BTreeSet<&str> = docs.iter().map(|d| s(d, &["kind"])).collect();
    let want = [
        "ConfigMap",
        "DaemonSet",
        "Namespace",
        "RuntimeClass",
        "ServiceAccount",
    ];
    assert_eq!(kinds, want.into_iter().collect(), "no RBAC, no Secret");
    for d in &docs {
        let k = s(d, &["kind"]);
        if !["Namespace", "RuntimeClass"].contains(&k) {
            assert_eq!(s(d, &["metadata", "namespace"]), NAMESPACE, "{k}");
        }
    }
    let mut accounts = BTreeSet::new();
    for sa in by_kind(&docs, "ServiceAccount") {
        let name = s(sa, &["metadata", "name"]);
        assert_eq!(
            get(sa, &["automountServiceAccountToken"]).as_bool(),
            Some(false),
            "{name}"
        );
        accounts.insert(name.to_string());
    }
    let rc = by_kind(&docs, "RuntimeClass")[0];
    assert_eq!(
        s(rc, &["handler"]),
        gpuhook_containerd::DEFAULT_RUNTIME_NAME
    );
    assert_eq!(s(rc, &["metadata", "name"]), "gpuhook");

    let (bins, image) = (image_binaries(), overlay_image());
    let mut privileged = Vec::new();
    for ds in by_kind(&docs, "DaemonSet") {
        let name = s(ds, &["metadata", "name"]);
        let pod = get(ds, &["spec", "template", "spec"]);
        check_pod(name, pod, &accounts);
        for c in containers(pod) {
            let what = format!("{name}/{}", s(c, &["name"]));
            assert_eq!(s(c, &["image"]), image, "{what}");
            let mut argv = strings(seq(c, &["command"]));
            if c.get("args").is_some() {
                argv.extend(strings(seq(c, &["args"])));
            }
            check_command(&what, &argv, &bins);
            if let Some(pre) = c.get("lifecycle").and_then(|l| l.get("preStop")) {
                check_command(&what, &strings(seq(pre, &["exec", "command"])), &bins);
            }
            let sc = c.get("securityContext");
            if sc
                .and_then(|v| v.get("privileged"))
                .and_then(Value::as_bool)
                == Some(true)
            {
                privileged.push((name.to_string(), s(c, &["name"]).to_string()));
            }
        }
    }
    privileged.sort();
    let want: Vec<(String, String)> = PRIVILEGED
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(privileged, want, "privileged only where needed");
}

/// The node installer: installs, then keeps the spec fresh with the same driver root, and
/// uninstalls on pod deletion; the host root is mounted where its flags say.
#[test]
fn node_installer_installs_refreshes_and_uninstalls_on_the_host_root() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &["kubectl"]) {
        return;
    }
    let docs = parse_docs(&render(&root().join("deploy/kubernetes/base")), "base");
    assert!(
        by_kind(&docs, "ConfigMap").is_empty(),
        "per-node configs belong in overlays"
    );
    let ds = by_kind(&docs, "DaemonSet");
    assert_eq!(ds.len(), 1, "the base holds the node installer only");
    let pod = get(ds[0], &["spec", "template", "spec"]);
    let argv = |c: &Value| {
        let mut v = strings(seq(c, &["command"]));
        v.extend(strings(seq(c, &["args"])));
        v
    };
    let init = argv(&seq(pod, &["initContainers"])[0]);
    let main = &seq(pod, &["containers"])[0];
    let refresh = argv(main);
    assert_eq!(init[1], "install");
    assert_eq!(
        refresh[1], "refresh",
        "the long-running container keeps the spec fresh"
    );
    assert_eq!(
        flag(&init, "--driver-root").unwrap_or("/"),
        flag(&refresh, "--driver-root").unwrap_or("/"),
        "install and refresh must generate from the same driver root"
    );
    // gpuhook's watch loop has no SIGTERM handler: it must not be its pid namespace's init.
    assert_eq!(get(pod, &["shareProcessNamespace"]).as_bool(), Some(true));
    let pre = strings(seq(main, &["lifecycle", "preStop", "exec", "command"]));
    assert_eq!(pre[1], "uninstall");
    let volumes = seq(pod, &["volumes"]);
    for c in containers(pod) {
        let m = &seq(c, &["volumeMounts"])[0];
        assert_eq!(s(m, &["mountPath"]), "/host");
        let vol = super::named(volumes, s(m, &["name"]));
        assert_eq!(
            s(vol, &["hostPath", "path"]),
            "/",
            "the host's root at /host"
        );
    }
}

/// The node selectors of every DaemonSet and of the RuntimeClass: GPU pods must land only where
/// gpuhook is installed, so all of them select the same GPU label.
fn gpu_selectors(docs: &[Value]) -> Vec<(String, &yaml_serde::Mapping)> {
    let mut out: Vec<(String, &yaml_serde::Mapping)> = by_kind(docs, "DaemonSet")
        .into_iter()
        .map(|ds| {
            let sel = get(ds, &["spec", "template", "spec", "nodeSelector"]);
            (
                s(ds, &["metadata", "name"]).to_string(),
                sel.as_mapping().unwrap(),
            )
        })
        .collect();
    let rc = by_kind(docs, "RuntimeClass")[0];
    let sel = get(rc, &["scheduling", "nodeSelector"])
        .as_mapping()
        .unwrap();
    out.push(("RuntimeClass".to_string(), sel));
    out
}

/// The example overlay selects GFD's label, the `nfd` overlay NFD's instead (never both: a node
/// with only one of them would be skipped).
#[test]
fn every_gpu_pod_and_the_runtime_class_select_one_gpu_label() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &["kubectl"]) {
        return;
    }
    for (dir, want, not) in [
        (EXAMPLE, GFD, NFD),
        ("deploy/kubernetes/examples/nfd", NFD, GFD),
    ] {
        let docs = parse_docs(&render(&root().join(dir)), dir);
        let sels = gpu_selectors(&docs);
        assert!(sels.len() >= 2, "{dir}: DaemonSets and the RuntimeClass");
        for (name, sel) in sels {
            let get = |k: &str| sel.get(Value::from(k)).and_then(Value::as_str);
            assert_eq!(get(want), Some("true"), "{dir}: {name} must select {want}");
            assert_eq!(get(not), None, "{dir}: {name} must not also select {not}");
        }
    }
}

use super::*;
use crate::generate::{generate, GenerateOptions};
use crate::spec::{Format, Mount};
use crate::test_support::inventory;
use crate::write::write_spec;

fn oci() -> Value {
    json!({
        "ociVersion": "1.2.0",
        "x-unknown": {"keep": true},
        "process": {
            "user": {"uid": 1000, "gid": 1001, "additionalGids": [5]},
            "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]
        },
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr/bin/nvidia-smi", "source": "/old"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"}
        ],
        "linux": {"devices": [{"path": "/dev/nvidia0", "type": "c", "major": 1, "minor": 1}]}
    })
}

fn registry() -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    let spec = generate(&inventory(), &GenerateOptions::new("/usr/bin/gpuhook")).unwrap();
    write_spec(&spec, &dir.path().join("nvidia.com-gpu.json"), Format::Json).unwrap();
    let reg = Registry::load(&[dir.path()]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    (dir, reg)
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn applies_generated_devices() {
    let (_dir, reg) = registry();
    let mut v = oci();
    apply_devices(
        &mut v,
        &reg,
        &names(&["nvidia.com/gpu=1:0", "nvidia.com/gpu=0", "nvidia.com/gpu=0"]),
    )
    .unwrap();
    assert_eq!(v["x-unknown"]["keep"], true);
    let env: Vec<_> = v["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        env,
        ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"],
        "replaced by key"
    );
    let devs = v["linux"]["devices"].as_array().unwrap();
    let paths: Vec<_> = devs.iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset",
            "/dev/nvidia1",
            "/dev/nvidia-caps/nvidia-cap66",
            "/dev/nvidia-caps/nvidia-cap67",
        ]
    );
    assert_eq!(
        devs[0],
        json!({"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "uid": 1000, "gid": 1001})
    );
    let rules = v["linux"]["resources"]["devices"].as_array().unwrap();
    assert!(rules
        .contains(&json!({"allow": true, "type": "c", "major": 511, "minor": 66, "access": "rw"})));
    assert_eq!(rules.len(), 8, "one rule per node applied: {rules:?}");
    let hooks = v["hooks"]["createContainer"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "common edits once per spec");
    assert!(hooks
        .iter()
        .all(|h| h["env"].as_array().is_some_and(|e| !e.is_empty())));
    let mounts = v["mounts"].as_array().unwrap();
    let smi: Vec<_> = mounts
        .iter()
        .filter(|m| m["destination"] == "/usr/bin/nvidia-smi")
        .collect();
    assert_eq!(smi.len(), 1);
    assert_eq!(
        smi[0]["source"], "/usr/bin/nvidia-smi",
        "replaced by destination"
    );
    let depths: Vec<_> = mounts.iter().map(mount_depth).collect();
    assert!(depths.windows(2).all(|w| w[0] <= w[1]), "{depths:?}");
    assert_eq!(mounts[0]["destination"], "/proc");
    assert_eq!(mounts[1]["destination"], "/dev", "stable among equal depth");
}

#[test]
fn unresolvable_leaves_spec_untouched() {
    let (_dir, reg) = registry();
    let mut v = oci();
    let err = apply_devices(
        &mut v,
        &reg,
        &names(&[
            "nvidia.com/gpu=0",
            "nvidia.com/gpu=9",
            "x.com/y=1",
            "nvidia.com/gpu=9",
        ]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unresolvable CDI devices nvidia.com/gpu=9, x.com/y=1"
    );
    assert_eq!(v, oci());
}

#[test]
fn nodes_without_numbers_are_filled_from_lstat() {
    let mut v = oci();
    let edits = ContainerEdits {
        device_nodes: vec![DeviceNode {
            path: "/dev/mynull".into(),
            host_path: Some("/dev/null".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    apply_edits(&mut v, &edits).unwrap();
    let d = &v["linux"]["devices"][1];
    assert_eq!(
        (d["type"].as_str(), d["major"].as_i64(), d["minor"].as_i64()),
        (Some("c"), Some(1), Some(3))
    );
    assert_eq!(d["fileMode"], 0o666);
    assert_eq!(v["linux"]["resources"]["devices"][0]["access"], "rwm");

    let file = tempfile::NamedTempFile::new().unwrap();
    let edits = ContainerEdits {
        env: vec!["NEW=1".into()],
        device_nodes: vec![DeviceNode {
            path: "/dev/x".into(),
            host_path: Some(file.path().to_str().unwrap().into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let before = v.clone();
    let err = apply_edits(&mut v, &edits).unwrap_err();
    assert!(err.to_string().contains("not a device node"), "{err}");
    assert_eq!(v, before, "no half-applied edits");
}

#[test]
fn mounts_sorted_by_depth_gids_deduplicated() {
    let mut v = json!({"process": {"user": {"uid": 0, "gid": 0}}});
    let m = |p: &str| Mount {
        host_path: p.into(),
        container_path: p.into(),
        ..Default::default()
    };
    let edits = ContainerEdits {
        mounts: vec![m("/a/b/c"), m("/x/./y/"), m("/a"), m("/b/../z")],
        additional_gids: vec![0, 44, 44, 45],
        ..Default::default()
    };
    apply_edits(&mut v, &edits).unwrap();
    let dests: Vec<_> = v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap())
        .collect();
    assert_eq!(dests, ["/a", "/b/../z", "/x/./y/", "/a/b/c"]);
    assert_eq!(v["process"]["user"]["additionalGids"], json!([44, 45]));
}

#[test]
fn clean_paths() {
    assert_eq!(clean("/a/./b/../c/"), "/a/c");
    assert_eq!(clean("/"), "/");
    assert_eq!(clean("/.."), "/");
    assert_eq!(clean("a/../../b"), "../b");
    assert_eq!(split_dev(libc_makedev(195, 255)), (195, 255));
    assert_eq!(split_dev(libc_makedev(511, 70000)), (511, 70000));
}

fn libc_makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xfffff000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffffff00) << 12)
        | (minor & 0xff)
}

#[test]
fn not_an_object_is_an_error() {
    let mut v = json!([1]);
    assert!(matches!(
        apply_edits(&mut v, &ContainerEdits::default()),
        Err(CdiError::OciSpec(_))
    ));
}

/// Issue #14.1 (CVE-2025-23266): a hook of another vendor's spec with no `env` must not run with
/// the container's env (older runc gave a createContainer hook the container's, LD_PRELOAD
/// included): it gets PATH only; a hook that has an env keeps exactly its own.
#[test]
fn foreign_hook_without_env_gets_path_only() {
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({
        "cdiVersion": "0.5.0",
        "kind": "example.com/dev",
        "devices": [{"name": "a", "containerEdits": {"hooks": [
            {"hookName": "createContainer", "path": "/opt/x/hook", "args": ["hook", "a"]},
            {"hookName": "startContainer", "path": "/opt/x/hook", "env": ["A=1"]}
        ]}}]
    });
    std::fs::write(dir.path().join("example.json"), spec.to_string()).unwrap();
    let reg = Registry::load(&[dir.path()]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    let mut v = oci();
    v["process"]["env"] = json!(["LD_PRELOAD=/proc/self/cwd/poc.so", "PATH=/bin"]);
    apply_devices(&mut v, &reg, &names(&["example.com/dev=a"])).unwrap();
    let create = &v["hooks"]["createContainer"][0];
    assert_eq!(create["env"], json!(crate::edits::DEFAULT_HOOK_ENV));
    assert_eq!(create["env"], json!(["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]));
    assert_eq!(v["hooks"]["startContainer"][0]["env"], json!(["A=1"]));

    // The same through apply_edits (the wrapper's jit-cdi and legacy modes).
    let edits: ContainerEdits = serde_json::from_value(json!({"hooks": [
        {"hookName": "prestart", "path": "/usr/bin/other"}
    ]}))
    .unwrap();
    let mut v = oci();
    apply_edits(&mut v, &edits).unwrap();
    assert_eq!(
        v["hooks"]["prestart"][0]["env"],
        json!(["PATH=/usr/sbin:/usr/bin:/sbin:/bin"])
    );
}

/// Issue #14.11: a spec file over the limit is reported and skipped, never read whole.
#[test]
fn huge_spec_file_is_skipped_with_an_error() {
    let (dir, _) = registry();
    let big = dir.path().join("zz-big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(700 << 20)
        .unwrap();
    let reg = Registry::load(&[dir.path()]);
    assert_eq!(reg.errors.len(), 1, "{:?}", reg.errors);
    assert_eq!(reg.errors[0].path, big);
    assert!(
        reg.errors[0].message.contains("larger than"),
        "{:?}",
        reg.errors
    );
    assert!(
        reg.get("nvidia.com/gpu=0").is_some(),
        "the other specs still load"
    );
}

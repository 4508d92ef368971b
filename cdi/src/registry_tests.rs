use super::*;

fn spec_json(kind: &str, devices: &[(&str, &str)]) -> String {
    let devs: Vec<String> = devices
        .iter()
        .map(|(name, node)| {
            format!(
                r#"{{"name":"{name}","containerEdits":{{"deviceNodes":[{{"path":"{node}"}}]}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{}]}}"#,
        devs.join(",")
    )
}

fn node_of(reg: &Registry, name: &str) -> String {
    reg.get(name).unwrap().device().container_edits.device_nodes[0]
        .path
        .clone()
}

#[test]
fn later_dir_wins_and_conflicts_in_one_dir_are_dropped() {
    let etc = tempfile::tempdir().unwrap();
    let run = tempfile::tempdir().unwrap();
    fs::write(
        etc.path().join("a.json"),
        spec_json("nvidia.com/gpu", &[("0", "/dev/etc0"), ("1", "/dev/etc1")]),
    )
    .unwrap();
    fs::write(
        run.path().join("b.yaml"),
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/run0\n",
    )
    .unwrap();
    // Two files of one dir define vendor.com/x=d: dropped; their other devices stay.
    fs::write(
        run.path().join("c.json"),
        spec_json("vendor.com/x", &[("d", "/dev/c"), ("e", "/dev/e")]),
    )
    .unwrap();
    fs::write(
        run.path().join("d.json"),
        spec_json("vendor.com/x", &[("d", "/dev/d"), ("f", "/dev/f")]),
    )
    .unwrap();
    let reg = Registry::load(&[etc.path(), run.path()]);
    assert_eq!(
        node_of(&reg, "nvidia.com/gpu=0"),
        "/dev/run0",
        "later dir wins"
    );
    assert_eq!(node_of(&reg, "nvidia.com/gpu=1"), "/dev/etc1");
    assert!(reg.get("vendor.com/x=d").is_none());
    assert_eq!(node_of(&reg, "vendor.com/x=e"), "/dev/e");
    assert_eq!(node_of(&reg, "vendor.com/x=f"), "/dev/f");
    assert_eq!(reg.errors.len(), 1, "{:?}", reg.errors);
    assert!(
        reg.errors[0].message.contains("vendor.com/x=d"),
        "{}",
        reg.errors[0]
    );
    assert_eq!(
        reg.device_names().collect::<Vec<_>>(),
        [
            "nvidia.com/gpu=0",
            "nvidia.com/gpu=1",
            "vendor.com/x=e",
            "vendor.com/x=f"
        ]
    );
    let order: Vec<_> = reg
        .specs
        .iter()
        .map(|s| s.path.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(
        order,
        ["a.json", "b.yaml", "c.json", "d.json"],
        "lexical per dir"
    );
    assert_eq!(reg.get("nvidia.com/gpu=0").unwrap().spec.priority, 1);
}

#[test]
fn broken_files_reported_others_loaded_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("0-broken.json"), "{ nope").unwrap();
    fs::write(
        dir.path().join("1-invalid.json"),
        spec_json("nvidia.com/gpu", &[("bad/name", "/dev/x")]),
    )
    .unwrap();
    fs::write(
        dir.path().join("2-good.json"),
        spec_json("nvidia.com/gpu", &[("0", "/dev/nvidia0")]),
    )
    .unwrap();
    fs::write(
        dir.path().join("3-ignored.yml"),
        spec_json("a.com/b", &[("y", "/dev/y")]),
    )
    .unwrap();
    fs::write(dir.path().join("4-ignored.txt"), "x").unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(
        dir.path().join("sub/deep.json"),
        spec_json("a.com/b", &[("z", "/dev/z")]),
    )
    .unwrap();
    let reg = Registry::load(&[dir.path(), Path::new("/nonexistent/cdi")]);
    assert_eq!(reg.device_names().collect::<Vec<_>>(), ["nvidia.com/gpu=0"]);
    let bad: Vec<_> = reg
        .errors
        .iter()
        .map(|e| e.path.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(bad, ["0-broken.json", "1-invalid.json"], "{:?}", reg.errors);
    assert!(
        reg.errors[1].message.contains("devices[0].name"),
        "{}",
        reg.errors[1]
    );
}

/// container-device-interface pkg/cdi/cache.go `refresh` (vendored in nvidia-container-toolkit
/// v1.20.0): a later directory's device replaces an earlier one (`devPrio > oldPrio`), and a name
/// defined twice at one priority goes into `conflicts` and is deleted at the end, even when a
/// later directory defines it too.
#[test]
fn conflicts_follow_the_cdi_cache_and_are_explained() {
    let etc = tempfile::tempdir().unwrap();
    let run = tempfile::tempdir().unwrap();
    let nv = etc.path().join("nvidia.yaml");
    fs::write(
        &nv,
        spec_json("nvidia.com/gpu", &[("0", "/dev/a"), ("1", "/dev/a")]),
    )
    .unwrap();
    let dup = etc.path().join("other.json");
    fs::write(&dup, spec_json("nvidia.com/gpu", &[("1", "/dev/b")])).unwrap();
    let ours = run.path().join("nvidia.com-gpu.json");
    fs::write(
        &ours,
        spec_json("nvidia.com/gpu", &[("0", "/dev/c"), ("1", "/dev/c")]),
    )
    .unwrap();
    let reg = Registry::load(&[etc.path(), run.path()]);
    assert_eq!(
        node_of(&reg, "nvidia.com/gpu=0"),
        "/dev/c",
        "later dir wins"
    );
    assert!(
        reg.get("nvidia.com/gpu=1").is_none(),
        "a same-directory conflict drops the name even though a later directory defines it"
    );
    let mut groups = reg.conflict_groups();
    groups.sort_by(|a, b| (&a.devices, &a.files).cmp(&(&b.devices, &b.files)));
    let mut want = vec![
        ConflictGroup {
            files: vec![nv.clone(), dup.clone()],
            winner: None,
            devices: vec!["nvidia.com/gpu=1".into()],
        },
        ConflictGroup {
            files: vec![nv.clone(), ours.clone()],
            winner: None,
            devices: vec!["nvidia.com/gpu=1".into()],
        },
        ConflictGroup {
            files: vec![nv, ours.clone()],
            winner: Some(ours),
            devices: vec!["nvidia.com/gpu=0".into()],
        },
    ];
    want.sort_by(|a, b| (&a.devices, &a.files).cmp(&(&b.devices, &b.files)));
    assert_eq!(groups, want);
}

use crate::load::ProfileError;
use crate::profile::NodeProfile;

fn a100() -> NodeProfile {
    NodeProfile::builtin("a100-mig-mixed").unwrap()
}

/// Validates `p` through the TOML path (as a file would be) and returns the error text.
fn rejected(p: &NodeProfile) -> String {
    match NodeProfile::from_toml_named(&p.to_toml(), "test.toml") {
        Ok(_) => panic!("profile was accepted"),
        Err(e @ ProfileError::Invalid { .. }) => e.to_string(),
        Err(e) => panic!("wrong error kind: {e}"),
    }
}

fn assert_rejected(p: &NodeProfile, field: &str, words: &str) {
    let err = rejected(p);
    assert!(err.contains("test.toml"), "error names the profile: {err}");
    assert!(
        err.contains(&format!(": {field}: ")),
        "error names {field}: {err}"
    );
    assert!(err.contains(words), "error says {words:?}: {err}");
}

#[test]
fn duplicate_gpu_uuid_index_minor_and_bus_id() {
    let mut p = a100();
    p.gpus[1].uuid = p.gpus[0].uuid.clone();
    assert_rejected(
        &p,
        "gpus[1].uuid",
        &format!("duplicate UUID {}", p.gpus[0].uuid),
    );
    let mut p = a100();
    p.gpus[1].index = 0;
    assert_rejected(&p, "gpus[1].index", "duplicate NVML index 0");
    let mut p = a100();
    p.gpus[1].pci_bus_id = p.gpus[0].pci_bus_id.to_lowercase();
    assert_rejected(&p, "gpus[1].pci_bus_id", "duplicate PCI bus id");
    let mut p = NodeProfile::builtin("dgx-h100").unwrap();
    p.gpus[3].minor = p.gpus[0].minor;
    assert_rejected(&p, "gpus[3].minor", "duplicate device minor");
}

#[test]
fn duplicate_mig_uuid_and_cap_minor() {
    let mut p = a100();
    p.gpus[1].mig_devices[2].uuid = p.gpus[0].mig_devices[0].uuid.clone();
    assert_rejected(&p, "gpus[1].mig_devices[2].uuid", "duplicate MIG UUID");
    let mut p = a100();
    p.gpus[0].mig_devices[1].ci_cap_minor = p.gpus[0].mig_devices[0].ci_cap_minor;
    assert_rejected(
        &p,
        "gpus[0].mig_devices[1].ci_cap_minor",
        "duplicate cap minor 22",
    );
}

#[test]
fn cap_minor_must_follow_the_driver_numbering() {
    let mut p = a100();
    p.gpus[1].mig_devices[0].gi_cap_minor = 600;
    p.gpus[1].mig_devices[0].ci_cap_minor = 601;
    assert_rejected(&p, "gpus[1].mig_devices[0].gi_cap_minor", "expected 201");
}

#[test]
fn mig_profile_must_exist_for_the_gpu_model() {
    let mut p = a100();
    p.gpus[0].mig_devices[0].profile = "1g.12gb".into();
    assert_rejected(
        &p,
        "gpus[0].mig_devices[0].profile",
        "unknown MIG profile \"1g.12gb\"",
    );
    // 1g.20gb exists on H100 but not in our A100 table.
    let mut p = NodeProfile::builtin("h100-mig").unwrap();
    p.gpus[0].mig_devices[0].profile = "1g.20gb".into();
    NodeProfile::from_toml_str(&p.to_toml()).expect("H100 has 1g.20gb");
    let mut p = NodeProfile::builtin("t4").unwrap();
    p.gpus[0].mig_mode = true;
    assert_rejected(&p, "gpus[0].mig_mode", "no MIG support");
}

#[test]
fn more_than_seven_slices_is_rejected() {
    let mut p = a100();
    let mut extra = p.gpus[0].mig_devices[1].clone();
    extra.gi_id = 4;
    extra.uuid = "MIG-00000000-1111-2222-3333-444444444444".into();
    extra.gi_cap_minor = 3 + 4 * 9;
    extra.ci_cap_minor = extra.gi_cap_minor + 1;
    p.gpus[0].mig_devices.push(extra);
    assert_rejected(&p, "gpus[0].mig_devices", "9 compute slices");
}

#[test]
fn mig_devices_need_mig_mode() {
    let mut p = a100();
    p.gpus[0].mig_mode = false;
    assert_rejected(&p, "gpus[0].mig_devices", "without mig_mode");
}

#[test]
fn lib_dir_must_be_absolute_and_uuids_well_formed() {
    let mut p = a100();
    p.lib_dir = "usr/lib64".into();
    assert_rejected(&p, "lib_dir", "absolute");
    p.lib_dir = "/usr/../lib64".into();
    assert_rejected(&p, "lib_dir", "absolute");
    let mut p = a100();
    p.gpus[0].uuid = "GPU-1234".into();
    assert_rejected(&p, "gpus[0].uuid", "is not a GPU UUID");
    let mut p = a100();
    p.gpus[1].mig_devices[3].uuid = p.gpus[1].mig_devices[3].uuid.replace("MIG-", "GPU-");
    assert_rejected(&p, "gpus[1].mig_devices[3].uuid", "is not a MIG UUID");
    let mut p = a100();
    p.gpus[0].pci_bus_id = "0000:07:00.0".into();
    assert_rejected(&p, "gpus[0].pci_bus_id", "NVML PCI bus id");
}

#[test]
fn majors_and_versions_are_checked() {
    let mut p = a100();
    p.majors.nvidia_caps = p.majors.nvidia_uvm;
    assert_rejected(&p, "majors.nvidia_caps", "duplicate major");
    let mut p = a100();
    p.majors.nvidia_uvm = 195;
    assert_rejected(&p, "majors.nvidia_uvm", "not a dynamic char major");
    let mut p = a100();
    p.driver_version = "latest".into();
    assert_rejected(&p, "driver_version", "570.158.01");
}

#[test]
fn indexes_must_be_contiguous() {
    let mut p = a100();
    p.gpus[1].index = 5;
    assert_rejected(&p, "gpus", "without gaps");
}

#[test]
fn missing_field_names_the_field_and_the_profile() {
    let text = NodeProfile::builtin("t4")
        .unwrap()
        .to_toml()
        .replace("pci_bus_id = \"00000000:00:1E.0\"\n", "");
    let err = NodeProfile::from_toml_named(&text, "my-node.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("my-node.toml") && err.contains("missing field `pci_bus_id`"),
        "{err}"
    );
    let err = NodeProfile::from_toml_named("name = 3", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("x.toml") && err.contains("name"), "{err}");
}

#[test]
fn unknown_field_is_rejected() {
    let text = NodeProfile::builtin("t4")
        .unwrap()
        .to_toml()
        .replace("memory_mib = 15360", "memory_mib = 15360\nmemory_gb = 16");
    let err = NodeProfile::from_toml_named(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `memory_gb`"), "{err}");
}

#[test]
fn from_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let mut p = a100();
    p.gpus[1].uuid = p.gpus[0].uuid.clone();
    std::fs::write(&path, p.to_toml()).unwrap();
    let err = NodeProfile::from_file(&path).unwrap_err().to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("gpus[1].uuid"),
        "{err}"
    );
    let err = NodeProfile::from_file(&dir.path().join("none.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("none.toml") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn feature_rules_name_the_feature_field() {
    let ws = || NodeProfile::builtin("workstation-full").unwrap();
    let mut p = ws();
    p.features.nvidia_uvm = false;
    assert_rejected(&p, "features.nvidia_uvm_tools", "nvidia-uvm module");
    let mut p = ws();
    p.features.graphics = false;
    p.features.dev_links.clear();
    assert_rejected(&p, "features.gbm", "graphics");
    let mut p = ws();
    p.features.dev_links.push("libfoo.so".into());
    assert_rejected(
        &p,
        "features.dev_links[10]",
        "\"libfoo.so\" is not a driver library",
    );
    let mut p = ws();
    p.features.dev_links.push("libcuda.so".into());
    assert_rejected(&p, "features.dev_links[10]", "duplicate development link");
    let mut p = a100();
    p.features.dev_links = vec!["libGLX_nvidia.so".into()];
    assert_rejected(&p, "features.dev_links[0]", "not installed by this profile");
    let mut p = ws();
    p.features.lib32_dir = Some("usr/lib32".into());
    assert_rejected(&p, "features.lib32_dir", "absolute, normalised");
    let mut p = ws();
    p.features.lib32_dir = Some(p.lib_dir.clone());
    assert_rejected(&p, "features.lib32_dir", "own directory");
}

#[test]
fn mig_mode_without_instances_is_a_valid_profile() {
    let p = NodeProfile::builtin("h100-mig-empty").unwrap();
    assert!(p.gpus[0].mig_mode && p.gpus[0].mig_devices.is_empty());
    assert_eq!(p.validate(), Ok(()));
}

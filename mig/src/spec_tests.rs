use super::*;

const SEED_003: &str = r#"version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "2g.20gb": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"#;

#[test]
fn seed_configmap_parses() {
    let f = MigConfigFile::parse(SEED_003.as_bytes(), "config.yaml").unwrap();
    assert_eq!(f.names(), ["all-small", "mixed-workload"]);
    let mixed = f.config("mixed-workload").unwrap();
    assert_eq!(mixed[0].devices, Devices::List(vec![0]));
    assert_eq!(mixed[0].mig_devices.get("2g.20gb"), Some(&2));
    assert!(f.selected_name(None).is_err(), "two configs need -c");
}

#[test]
fn errors_name_file_config_entry_and_key() {
    let bad = SEED_003.replace("\"1g.10gb\": 7", "\"1g.10gbx\": 7");
    let e = MigConfigFile::parse(bad.as_bytes(), "/etc/mig.yaml").unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("/etc/mig.yaml: mig-configs.all-small[0].mig-devices.1g.10gbx: invalid MIG profile name"), "{msg}");
    let bad = SEED_003.replace(
        "devices: [0]\n      mig-enabled: true\n      mig-devices:\n        \"1g",
        "devices: [0]\n      bogus: 1\n      mig-enabled: true\n      mig-devices:\n        \"1g",
    );
    let msg = MigConfigFile::parse(bad.as_bytes(), "f")
        .unwrap_err()
        .to_string();
    assert_eq!(msg, "f: mig-configs.all-small[0].bogus: unexpected field: bogus (allowed: device-filter, devices, mig-enabled, mig-devices)");
    let f = MigConfigFile::parse(SEED_003.as_bytes(), "f").unwrap();
    let msg = f.config("nope").unwrap_err().to_string();
    assert_eq!(msg, "f: mig-configs: selected mig-config not present: nope (the file has: all-small, mixed-workload)");
}

#[test]
fn counts_and_modes_follow_mig_parted() {
    let doc = |body: &str| format!("version: v1\nmig-configs:\n  c:\n    - {body}\n");
    let ok = |body: &str| MigConfigFile::parse(doc(body).as_bytes(), "f");
    assert!(ok("{devices: all, mig-enabled: true, mig-devices: {}}").is_ok());
    assert!(ok("{devices: all, mig-enabled: true, mig-devices: {\"0g.0gb\": 100}}").is_ok());
    let e = ok("{devices: all, mig-enabled: true, mig-devices: {\"1g.5gb\": 0}}").unwrap_err();
    assert!(
        e.message.contains("all counts for all MigProfiles are 0"),
        "{e}"
    );
    let e = ok("{devices: all, mig-enabled: true, mig-devices: {\"1g.5gb\": -1}}").unwrap_err();
    assert!(e.message.contains("must be 0 or more"), "{e}");
    let e = ok("{devices: all, mig-enabled: false, mig-devices: {\"1g.5gb\": 1}}").unwrap_err();
    assert!(e.message.contains("'mig-enabled' is false"), "{e}");
    let e = ok("{devices: [0, x], mig-enabled: false}").unwrap_err();
    assert!(e.path.ends_with("devices"), "{e}");
    let f = ok("{device-filter: [\"0x20B010DE\", \"0x233010DE:0x16C010DE\"], devices: all, mig-enabled: false}").unwrap();
    assert_eq!(f.configs["c"][0].device_filter.len(), 2);
}

#[test]
fn oversized_and_non_utf8_input_is_refused() {
    let e = MigConfigFile::parse(&[0xff, 0xfe], "f").unwrap_err();
    assert!(e.message.contains("UTF-8"), "{e}");
    let big = vec![b' '; MAX_CONFIG_BYTES + 1];
    assert!(MigConfigFile::parse(&big, "f").is_err());
}

#[test]
fn tabs_in_flow_mappings_are_accepted() {
    let text = "{\n\t\t\t\t\"version\": \"v1\",\n\t\t\t\t\"mig-configs\": {\n\t\t\t\t\t\"all-disabled\": [{\n\t\t\t\t\t\t\"devices\": \"all\",\n\t\t\t\t\t\t\"mig-enabled\": false\n\t\t\t\t\t}],\n\t\t\t\t}\n\t\t\t}\n";
    let f = MigConfigFile::parse(text.as_bytes(), "f").unwrap();
    assert!(!f.configs["all-disabled"][0].mig_enabled);
}

//! mig-parted's own cases (`shared/reference/mig-parted/`, transcribed from NVIDIA/mig-parted
//! v0.15.0 and go-nvlib v0.12.0 tests; see its SOURCES.md): every spec test string gets the same
//! accept/refuse result, every device-filter and profile-name case the same answer, and the GPU
//! Operator's default config parses.

use std::path::PathBuf;

use gpuhook_mig::{filter_matches, parse_entry_document, DeviceId, MigConfigFile, MigProfile};
use serde_json::Value;

/// `$GPUHOOK_MIG_PARTED_REFERENCE`, else `shared/reference/mig-parted` beside the repository.
pub fn reference() -> PathBuf {
    [
        std::env::var_os("GPUHOOK_MIG_PARTED_REFERENCE").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/mig-parted")),
        Some(PathBuf::from("/work/shared/reference/mig-parted")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.join("spec_test-expect.json").is_file())
    .expect("mig-parted reference cases not found: set GPUHOOK_MIG_PARTED_REFERENCE")
}

fn json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(reference().join(name)).unwrap()).unwrap()
}

#[test]
fn every_spec_test_case_is_accepted_or_refused_as_mig_parted_does() {
    let expect = json("spec_test-expect.json");
    let cases = expect.as_object().unwrap();
    assert_eq!(cases.len(), 23);
    let mut wrong = Vec::new();
    for (file, c) in cases {
        let bytes = std::fs::read(reference().join(file)).unwrap();
        let refused = match c["parsedAs"].as_str().unwrap() {
            "Spec" => MigConfigFile::parse(&bytes, file)
                .err()
                .map(|e| e.to_string()),
            _ => parse_entry_document(&bytes, file)
                .err()
                .map(|e| e.to_string()),
        };
        let want = c["expectError"].as_bool().unwrap();
        if refused.is_some() != want {
            wrong.push(format!(
                "{file}: mig-parted refuses={want}, we: {refused:?}"
            ));
        }
        if let Some(msg) = refused {
            assert!(
                msg.starts_with(file.as_str()),
                "the message names the file: {msg}"
            );
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn device_filter_cases_match_as_in_mig_parted() {
    let d = json("device-filter-cases.json");
    let (_, spec) = d
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("MigConfigSpec"))
        .unwrap();
    let hw = DeviceId::parse(spec["hardware"].as_str().unwrap()).unwrap();
    for c in spec["cases"].as_array().unwrap() {
        let filter: Vec<String> = match &c["filter"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
            other => panic!("{other}"),
        };
        assert_eq!(
            filter_matches(&filter, &hw),
            c["want"].as_bool().unwrap(),
            "{}",
            c["name"]
        );
    }
    for (k, v) in d.as_object().unwrap() {
        if k.starts_with("types.NewDeviceIDFromString") {
            for c in v.as_array().unwrap() {
                let got = DeviceId::parse(c["input"].as_str().unwrap());
                match c.get("wantErrContains") {
                    Some(e) => assert!(
                        got.unwrap_err().to_string().contains(e.as_str().unwrap()),
                        "{c}"
                    ),
                    None => assert_eq!(
                        got.unwrap().primary(),
                        format!(
                            "{}{}",
                            c["want"]["device"].as_str().unwrap(),
                            &c["want"]["vendor"].as_str().unwrap()[2..]
                        ),
                        "{c}"
                    ),
                }
            }
        }
        if k.starts_with("types.DeviceID.String") {
            for c in v.as_array().unwrap() {
                let want = c["want"].as_str().unwrap();
                assert_eq!(DeviceId::parse(want).unwrap().to_string(), want);
            }
        }
        if k.starts_with("types.DeviceID.Matches") {
            for c in v.as_array().unwrap() {
                let f = DeviceId::parse(c["filter"].as_str().unwrap()).unwrap();
                let h = DeviceId::parse(c["hardware"].as_str().unwrap()).unwrap();
                assert_eq!(f.matches(&h), c["want"].as_bool().unwrap(), "{}", c["name"]);
            }
        }
    }
}

#[test]
fn profile_name_grammar_matches_go_nvlib() {
    let d = json("mig-profile-format-cases.json");
    let cases = d["cases"].as_array().unwrap();
    assert!(cases.len() >= 52);
    for c in cases {
        let input = c["input"].as_str().unwrap();
        assert_eq!(
            MigProfile::parse(input).is_ok(),
            c["validFormat"].as_bool().unwrap(),
            "{input:?}"
        );
    }
}

/// The GPU Operator's `default-mig-parted-config` ConfigMap: its `config.yaml` value.
pub fn operator_default_config() -> String {
    let text = std::fs::read_to_string(
        reference().join("gpu-operator-0400_configmap-default-mig-parted-config.yaml"),
    )
    .unwrap();
    let cm: Value = yaml_serde::from_str(&text).unwrap();
    cm["data"]["config.yaml"].as_str().unwrap().to_string()
}

#[test]
fn the_gpu_operator_default_config_and_mig_parted_examples_parse() {
    let f = MigConfigFile::parse(operator_default_config().as_bytes(), "config.yaml").unwrap();
    assert!(f.configs.len() > 40, "{}", f.configs.len());
    assert_eq!(f.configs["all-1g.10gb"].len(), 2);
    for name in [
        "examples-config.yaml",
        "examples-dgx-station-80gb-config.yaml",
        "systemd-config-default.yaml",
    ] {
        let bytes = std::fs::read(reference().join(name)).unwrap();
        MigConfigFile::parse(&bytes, name).unwrap_or_else(|e| panic!("{e}"));
    }
}

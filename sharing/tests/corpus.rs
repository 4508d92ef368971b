//! The config loader against NVIDIA's own config cases: the 78 configs of
//! `shared/reference/kdp-configs/` with what NVIDIA's k8s-device-plugin v0.20.0 does with each
//! (`expect.json`, from its Go tests and code): accepted or not, the values its parser keeps
//! (`effective`) and the values its running plugin uses (`runtime_effective`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is the failure report

mod common;

use std::path::PathBuf;

use gpuhook_sharing::config::{self, Devices, ReplicatedResources};
use gpuhook_sharing::{advertised_name, DeviceIdStrategy, DeviceListStrategy, MigStrategy};
use serde_json::{json, Value};

/// `$GPUHOOK_KDP_CONFIGS`, else `shared/reference/kdp-configs` beside the checkout.
fn corpus() -> PathBuf {
    let beside =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/kdp-configs");
    let dir = std::env::var_os("GPUHOOK_KDP_CONFIGS")
        .map(PathBuf::from)
        .into_iter()
        .chain([beside, PathBuf::from("/work/shared/reference/kdp-configs")])
        .find(|d| d.join("expect.json").is_file());
    dir.expect(
        "NVIDIA's config corpus (kdp-configs/expect.json) not found: set GPUHOOK_KDP_CONFIGS",
    )
}

fn cases() -> (PathBuf, Vec<Value>) {
    let dir = corpus();
    let expect: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expect.json")).unwrap()).unwrap();
    let cases = expect["cases"].as_array().unwrap().clone();
    assert_eq!(cases.len(), 78);
    (dir, cases)
}

fn devices_json(d: &Devices) -> Value {
    match d {
        Devices::All => json!("all"),
        Devices::Count(n) => json!({ "count": n }),
        Devices::List(ids) => {
            json!({ "list": ids.iter().map(ToString::to_string).collect::<Vec<_>>() })
        }
    }
}

/// The sharing part of `expect.json`'s `effective`, from our parsed config.
fn sharing_json(section: &ReplicatedResources, mps: bool, strategy: &str) -> Value {
    let fail = match (mps, section.fail_requests_greater_than_one) {
        // Time-slicing leaves it unset (null), which behaves as false.
        (false, false) => Value::Null,
        (_, f) => json!(f),
    };
    let resources: Vec<Value> = section
        .resources
        .iter()
        .map(|r| {
            json!({
                "name": r.full_name(),
                "rename": r.rename.as_deref().map(config::full_resource_name).unwrap_or_default(),
                "replicas": r.replicas,
                "devices": devices_json(&r.devices),
            })
        })
        .collect();
    json!({
        "sharingStrategy": strategy,
        "renameByDefault": section.rename_by_default,
        "failRequestsGreaterThanOne": fail,
        "resources": resources,
    })
}

#[test]
fn the_loader_accepts_and_refuses_what_nvidia_does() {
    let (dir, cases) = cases();
    let mut wrong = Vec::new();
    for c in &cases {
        let file = c["file"].as_str().unwrap();
        let want = c["accepted"].as_bool().unwrap();
        let got = config::load(&dir.join(file));
        if got.is_ok() != want {
            wrong.push(format!("{file}: NVIDIA accepted={want}, we: {got:?}"));
        }
        if let Err(e) = got {
            let text = e.to_string();
            assert!(
                text.contains(file),
                "{file}: the error names the file: {text}"
            );
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
fn the_loader_keeps_the_values_nvidia_keeps() {
    let (dir, cases) = cases();
    let mut checked = 0;
    for c in &cases {
        let file = c["file"].as_str().unwrap();
        let Some(want) = c.get("effective").filter(|e| e["resources"].is_array()) else {
            continue;
        };
        let cfg = config::load(&dir.join(file)).unwrap();
        let strategy = cfg.sharing.strategy().to_string();
        let (section, mps) = cfg.sharing.replicated().unwrap();
        let mut got = sharing_json(section, mps, &strategy);
        if let Some(p) = want.get("sharedDevicesAllocationPolicy") {
            got["sharedDevicesAllocationPolicy"] = json!(cfg
                .flags
                .plugin
                .shared_devices_allocation_policy
                .map(|p| format!("{p:?}").to_lowercase()));
            assert_eq!(p, &got["sharedDevicesAllocationPolicy"], "{file}");
        }
        assert_eq!(&got, want, "{file}");
        checked += 1;
    }
    assert_eq!(checked, 29, "every case with sharing values is compared");
}

#[test]
fn the_running_plugin_shares_every_device_under_nvidias_names() {
    let (dir, cases) = cases();
    for c in &cases {
        let file = c["file"].as_str().unwrap();
        let Some(rt) = c.get("runtime_effective") else {
            continue;
        };
        let Some(want) = rt["resources"].as_array() else {
            continue;
        };
        let cfg = config::load(&dir.join(file)).unwrap();
        let (section, _) = cfg.sharing.replicated().unwrap();
        for (r, w) in section.resources.iter().zip(want) {
            assert_eq!(
                advertised_name(section, &r.full_name()),
                w["rename"],
                "{file}"
            );
            assert_eq!(w["devices"], "all", "{file}");
        }
    }
}

#[test]
fn flags_default_as_nvidia_defaults_them() {
    let (dir, cases) = cases();
    for c in &cases {
        let file = c["file"].as_str().unwrap();
        let Some(want) = c.get("effective").and_then(|e| e.get("migStrategy")) else {
            continue;
        };
        let cfg = config::load(&dir.join(file)).unwrap();
        let mig = cfg.flags.mig_strategy.unwrap_or_default();
        let name = match mig {
            MigStrategy::None => "none",
            MigStrategy::Single => "single",
            MigStrategy::Mixed => "mixed",
        };
        assert_eq!(want, name, "{file}");
        if let Some(p) = c["effective"].get("plugin") {
            // What the plugin runs with: through advertise(), on a T4 node.
            let ad =
                gpuhook_sharing::advertise(file, &cfg, &common::node("t4"), &|_| true).unwrap();
            assert_eq!(p["deviceListStrategy"], json!(["envvar"]), "{file}");
            assert_eq!(
                ad.device_list_strategies,
                [DeviceListStrategy::Envvar],
                "{file}"
            );
            assert_eq!(p["deviceIDStrategy"], "uuid", "{file}");
            assert_eq!(ad.device_id_strategy, DeviceIdStrategy::Uuid, "{file}");
            assert_eq!(p["passDeviceSpecs"], json!(ad.pass_device_specs), "{file}");
        }
    }
}

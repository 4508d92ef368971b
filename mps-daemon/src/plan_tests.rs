//! Tests of [`super::resolve`]: limits and every config error naming its key.

use super::*;
use crate::config::parse;
use crate::inventory::GpuFacts;

const MIG: &str = "MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa";

fn node() -> Vec<GpuFacts> {
    (0..4)
        .map(|i| GpuFacts {
            index: i,
            uuid: format!("GPU-{i:08}-0000-0000-0000-000000000000"),
            memory_mib: 81559,
            mig_enabled: i == 3,
            mig_uuids: if i == 3 { vec![MIG.into()] } else { vec![] },
            // GPU 1 is a V100 (7.0): at most 16 MPS clients.
            compute_capability: Some(if i == 1 { (7, 0) } else { (9, 0) }),
        })
        .collect()
}

fn resolve_str(yaml: &str) -> Result<Plan, ConfigError> {
    resolve(
        &parse(yaml).expect("parses"),
        &node(),
        &Overrides::default(),
    )
}

fn err(yaml: &str) -> String {
    match parse(yaml) {
        Err(e) => e.to_string(),
        Ok(cfg) => resolve(&cfg, &node(), &Overrides::default())
            .expect_err("must fail")
            .to_string(),
    }
}

const HEAD: &str = "version: v1\nsharing:\n  mps:\n    resources:\n";

#[test]
fn limits_from_replicas_and_overrides() {
    let p = resolve_str(&format!(
        "{HEAD}      - {{name: a, replicas: 3, devices: [0, GPU-00000002-0000-0000-0000-000000000000]}}\n      - {{name: b, replicas: 1, devices: [1]}}\nmpsDaemon:\n  gpus:\n    - {{device: 2, activeThreadPercentage: 50, pinnedMemoryLimitMiB: 1024}}\n"
    ))
    .unwrap();
    assert_eq!(p.mps_root, PathBuf::from(DEFAULT_MPS_ROOT));
    assert_eq!(p.gpus.len(), 3);
    assert_eq!(
        (
            p.gpus[0].active_thread_percentage,
            p.gpus[0].pinned_memory_limit_mib
        ),
        (33, Some(81559 / 3))
    );
    assert_eq!(
        (
            p.gpus[1].resource.as_str(),
            p.gpus[1].active_thread_percentage
        ),
        ("b", 100)
    );
    assert_eq!(
        (
            p.gpus[2].active_thread_percentage,
            p.gpus[2].pinned_memory_limit_mib
        ),
        (50, Some(1024))
    );
    assert_eq!(
        p.gpus[0].control_binary,
        PathBuf::from("/usr/bin/nvidia-cuda-mps-control")
    );
}

#[test]
fn all_skips_mig_enabled_gpus_with_a_warning_and_count_takes_the_first() {
    let p = resolve_str(&format!(
        "{HEAD}      - {{name: a, replicas: 2, devices: all}}\n"
    ))
    .unwrap();
    assert_eq!(
        p.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(p.warnings[0].contains("MIG"), "{:?}", p.warnings);
    let p = resolve_str(&format!(
        "{HEAD}      - {{name: a, replicas: 2, devices: 2}}\n"
    ))
    .unwrap();
    assert_eq!(
        p.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
        vec![0, 1]
    );
}

#[test]
fn each_error_names_its_key() {
    let cases = [
        (format!("{HEAD}      - {{name: a, replicas: 0}}\n"), "sharing.mps.resources[0].replicas: number of replicas must be >= 1, got 0"),
        (format!("{HEAD}      - {{name: a, replicas: 49, devices: [0]}}\n"), "sharing.mps.resources[0].replicas: 49 > 48: GPU 0 (GPU-00000000-0000-0000-0000-000000000000) of compute capability 9.0"),
        (format!("{HEAD}      - {{name: a, replicas: 17, devices: [1]}}\n"), "sharing.mps.resources[0].replicas: 17 > 16: GPU 1"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0, 9]}}\n"), "sharing.mps.resources[0].devices[1]: unknown device \"9\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [GPU-nope]}}\n"), "sharing.mps.resources[0].devices: unsupported type for device in devices list: GPU-nope"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [GPU-12345678-1234-1234-1234-123456789abc]}}\n"), "sharing.mps.resources[0].devices[0]: unknown device \"GPU-12345678-1234-1234-1234-123456789abc\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [{MIG}]}}\n"), "sharing.mps.resources[0].devices[0]: MPS on MIG devices is not supported: MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa; use a full GPU"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [3]}}\n"), "MPS on MIG devices is not supported: GPU-00000003-0000-0000-0000-000000000000 (MIG mode is enabled); use a full GPU"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\n      - {{name: a, replicas: 2, devices: [1]}}\n"), "sharing.mps.resources[1].name: duplicate resource name \"a\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\n      - {{name: b, replicas: 2, devices: [1, 0]}}\n"), "sharing.mps.resources[1].devices[1]: GPU 0 (GPU-00000000-0000-0000-0000-000000000000) is already shared by resource \"a\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: 4}}\n"), "sharing.mps.resources[0].devices: asks for 4 GPUs but the node has 3"),
        ("version: v2\n".to_string(), "version: unknown version: v2"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\nmpsDaemon:\n  gpus: [{{device: 1, activeThreadPercentage: 50}}]\n"), "mpsDaemon.gpus[0].device: GPU 1 (GPU-00000001-0000-0000-0000-000000000000) is not shared"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\nmpsDaemon:\n  gpus: [{{device: 0, activeThreadPercentage: 101}}]\n"), "mpsDaemon.gpus[0].activeThreadPercentage: must be between 1 and 100"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\nmpsDaemon:\n  gpus: [{{device: 0, pinnedMemoryLimitMiB: 900000}}]\n"), "mpsDaemon.gpus[0].pinnedMemoryLimitMiB: must be between 1 and the GPU's memory (81559 MiB)"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\nmpsDaemon:\n  probeInterval: 0s\n"), "mpsDaemon.probeInterval: must be greater than 0"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\nmpsDaemon:\n  mpsRoot: relative\n"), "mpsDaemon.mpsRoot: must be an absolute path"),
    ];
    for (yaml, want) in cases {
        let got = err(&yaml);
        assert!(
            got.contains(want),
            "config:\n{yaml}\nwant: {want}\n got: {got}"
        );
    }
}

#[test]
fn socket_path_over_108_bytes_is_refused() {
    let long = format!("/{}", "d".repeat(60));
    let got = err(&format!(
        "{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\nmpsDaemon:\n  mpsRoot: {long}\n"
    ));
    assert!(
        got.starts_with("mpsDaemon.mpsRoot: control socket path"),
        "{got}"
    );
    assert!(got.contains("108") || got.contains("107"), "{got}");
}

#[test]
fn a_config_without_mps_is_an_idle_plan_with_a_warning() {
    for yaml in [
        "",
        "version: v1\n",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}\n",
    ] {
        let p = resolve_str(yaml).unwrap();
        assert!(p.gpus.is_empty(), "{yaml}");
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("idles and reports ready")),
            "{:?}",
            p.warnings
        );
    }
    // 48 on a 9.0 GPU and 16 on a 7.0 one are fine.
    resolve_str(&format!("{HEAD}      - {{name: a, replicas: 48, devices: [0]}}\n      - {{name: b, replicas: 16, devices: [1]}}\n")).unwrap();
}

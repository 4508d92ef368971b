//! Tests of [`super::resolve`]: limits and every config error naming its key.

use super::*;
use crate::config::parse;
use crate::inventory::GpuFacts;

fn node() -> Vec<GpuFacts> {
    (0..4)
        .map(|i| GpuFacts {
            index: i,
            uuid: format!("GPU-{i:08}-0000-0000-0000-000000000000"),
            memory_mib: 81559,
            mig_enabled: i == 3,
            mig_uuids: if i == 3 {
                vec!["MIG-aaaa".into()]
            } else {
                vec![]
            },
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
    resolve_str(yaml).expect_err("must fail").to_string()
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
        (format!("{HEAD}      - {{name: a, replicas: 0}}\n"), "sharing.mps.resources[0].replicas: must be between 1 and 100, got 0"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0, 9]}}\n"), "sharing.mps.resources[0].devices[1]: unknown device \"9\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [GPU-nope]}}\n"), "sharing.mps.resources[0].devices[0]: unknown device \"GPU-nope\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [MIG-aaaa]}}\n"), "sharing.mps.resources[0].devices[0]: MPS on MIG devices is not supported: MIG-aaaa; use a full GPU"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [3]}}\n"), "MPS on MIG devices is not supported: GPU-00000003-0000-0000-0000-000000000000 (MIG mode is enabled); use a full GPU"),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\n      - {{name: a, replicas: 2, devices: [1]}}\n"), "sharing.mps.resources[1].name: duplicate resource name \"a\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: [0]}}\n      - {{name: b, replicas: 2, devices: [1, 0]}}\n"), "sharing.mps.resources[1].devices[1]: GPU 0 (GPU-00000000-0000-0000-0000-000000000000) is already shared by resource \"a\""),
        (format!("{HEAD}      - {{name: a, replicas: 2, devices: 4}}\n"), "sharing.mps.resources[0].devices: asks for 4 GPUs but the node has 3"),
        ("version: v2\n".to_string(), "version: unsupported version \"v2\""),
        ("version: v1\n".to_string(), "sharing.mps.resources: no MPS resources configured"),
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

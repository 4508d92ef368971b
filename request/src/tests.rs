//! Tests of [`parse`], sources order, privilege gating and the fast path.

use gpuhook_node::{Capability, DeviceRef};
use serde_json::{json, Value};

use super::test_support::*;
use super::*;

pub(super) fn config(env: &[&str]) -> Value {
    json!({"process": {"env": env, "capabilities": {"bounding": ["CAP_CHOWN"]}}})
}

pub(super) fn privileged(mut c: Value) -> Value {
    c["process"]["capabilities"]["bounding"] = json!(["CAP_CHOWN", "CAP_SYS_ADMIN"]);
    c
}

pub(super) fn mounts_policy() -> RequestPolicy {
    RequestPolicy {
        accept_device_list_as_volume_mounts: true,
        ..RequestPolicy::default()
    }
}

pub(super) fn secure_policy() -> RequestPolicy {
    RequestPolicy {
        accept_envvar_when_unprivileged: false,
        ..mounts_policy()
    }
}

/// Parses and checks the fast path agrees.
pub(super) fn parse_with(c: &Value, policy: &RequestPolicy) -> Result<ParseOutcome, RequestError> {
    let outcome = parse(c, policy);
    if let Ok(o) = &outcome {
        assert_eq!(
            is_gpu_container(c, policy),
            matches!(o, ParseOutcome::Gpu(_)),
            "fast path disagrees on {c}"
        );
    }
    outcome
}

fn gpu(c: &Value, policy: &RequestPolicy) -> GpuRequest {
    match parse_with(c, policy).unwrap() {
        ParseOutcome::Gpu(r) => r,
        other => panic!("{c}: {other:?}"),
    }
}

fn not_gpu(c: &Value, policy: &RequestPolicy) -> NotGpuReason {
    match parse_with(c, policy).unwrap() {
        ParseOutcome::NotGpu(r) => r,
        other => panic!("{c}: {other:?}"),
    }
}

#[test]
fn plain_containers_are_not_gpu_containers() {
    let p = RequestPolicy::default();
    assert_eq!(not_gpu(&json!({}), &p), NotGpuReason::NoRequest);
    assert_eq!(
        not_gpu(&config(&["PATH=/bin"]), &p),
        NotGpuReason::NoRequest
    );
    assert_eq!(
        not_gpu(&config(&["NVIDIA_VISIBLE_DEVICES="]), &p),
        NotGpuReason::NoRequest
    );
    assert_eq!(
        not_gpu(&config(&["NVIDIA_VISIBLE_DEVICES=void"]), &p),
        NotGpuReason::Void
    );
    assert_eq!(
        not_gpu(&config(&["NVIDIA_VISIBLE_DEVICES=0,void"]), &p),
        NotGpuReason::Void
    );
    // CUDA image that states its requirement: not legacy, no devices.
    assert_eq!(
        not_gpu(
            &config(&["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]),
            &p
        ),
        NotGpuReason::NoRequest
    );
}

#[test]
fn envvar_request() {
    let r = gpu(
        &config(&[
            "NVIDIA_VISIBLE_DEVICES=0,1:1",
            "NVIDIA_DRIVER_CAPABILITIES=video",
        ]),
        &RequestPolicy::default(),
    );
    assert_eq!(r.source, RequestSource::EnvVar);
    assert!(!r.privileged && !r.legacy_image);
    assert_eq!(
        r.devices,
        DeviceSelection::Ids(vec![
            DeviceId::Index(0),
            DeviceId::MigIndex { gpu: 1, mig: 1 }
        ])
    );
    assert_eq!(
        r.capabilities.iter().copied().collect::<Vec<_>>(),
        vec![Capability::Compute, Capability::Video]
    );
    let resolved = r.resolve(&inventory()).unwrap();
    assert_eq!(
        resolved.devices,
        vec![
            DeviceRef::Gpu { index: 0 },
            DeviceRef::Mig {
                parent_index: 1,
                index: 1
            }
        ]
    );
    let none = gpu(
        &config(&["NVIDIA_VISIBLE_DEVICES=none"]),
        &RequestPolicy::default(),
    );
    assert_eq!(none.devices, DeviceSelection::None);
    assert!(none.resolve(&inventory()).unwrap().devices.is_empty());
}

#[test]
fn duplicate_env_keys_last_wins() {
    let r = gpu(
        &config(&["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=2"]),
        &RequestPolicy::default(),
    );
    assert_eq!(r.devices, DeviceSelection::Ids(vec![DeviceId::Index(2)]));
    let c = config(&["NVIDIA_VISIBLE_DEVICES=2", "NVIDIA_VISIBLE_DEVICES=void"]);
    assert_eq!(not_gpu(&c, &RequestPolicy::default()), NotGpuReason::Void);
}

#[test]
fn legacy_image_means_all_and_requires_its_cuda() {
    let r = gpu(&config(&["CUDA_VERSION=12.2.0"]), &RequestPolicy::default());
    assert_eq!(r.source, RequestSource::LegacyImage);
    assert!(r.legacy_image);
    assert_eq!(r.devices, DeviceSelection::All);
    assert_eq!(r.capabilities.len(), Capability::ALL.len());
    assert_eq!(
        r.requirements.constraints[0].terms[0].factors[0].text,
        "cuda>=12.2"
    );
    assert!(r.resolve(&inventory()).is_ok());
    let too_new = gpu(&config(&["CUDA_VERSION=13.0.1"]), &RequestPolicy::default());
    let e = too_new.resolve(&inventory()).unwrap_err().to_string();
    assert!(
        e.contains("cuda>=13.0") && e.contains("please update your driver"),
        "{e}"
    );
    // An explicit NVIDIA_VISIBLE_DEVICES beats the legacy default.
    let r = gpu(
        &config(&["CUDA_VERSION=12.2.0", "NVIDIA_VISIBLE_DEVICES=0"]),
        &RequestPolicy::default(),
    );
    assert_eq!(r.source, RequestSource::EnvVar);
    assert_eq!(
        not_gpu(
            &config(&["CUDA_VERSION=12.2.0", "NVIDIA_VISIBLE_DEVICES="]),
            &RequestPolicy::default()
        ),
        NotGpuReason::NoRequest
    );
}

#[test]
fn unprivileged_envvar_gating() {
    let c = config(&["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=0"]);
    assert_eq!(
        not_gpu(&c, &secure_policy()),
        NotGpuReason::EnvVarNotAccepted
    );
    assert_eq!(
        not_gpu(&config(&["CUDA_VERSION=12.0"]), &secure_policy()),
        NotGpuReason::NoRequest
    );
    let r = gpu(&privileged(c.clone()), &secure_policy());
    assert!(r.privileged);
    assert_eq!(r.imex_channels, ImexChannels::Ids(vec![0]));
    // CAP_SYS_ADMIN anywhere but the bounding set does not count.
    let mut fake = c.clone();
    fake["process"]["capabilities"]["effective"] = json!(["CAP_SYS_ADMIN"]);
    assert_eq!(
        not_gpu(&fake, &secure_policy()),
        NotGpuReason::EnvVarNotAccepted
    );
}

#[test]
fn sources_in_order_first_wins() {
    let mut c = config(&["NVIDIA_VISIBLE_DEVICES=2"]);
    c["mounts"] =
        json!([{"destination": "/var/run/nvidia-container-devices/0", "source": "/dev/null"}]);
    assert_eq!(
        gpu(&c, &RequestPolicy::default()).source,
        RequestSource::EnvVar,
        "mounts off by default"
    );
    let r = gpu(&c, &mounts_policy());
    assert_eq!(
        (r.source, &r.devices),
        (
            RequestSource::VolumeMounts,
            &DeviceSelection::Ids(vec![DeviceId::Index(0)])
        )
    );
    c["annotations"] = json!({"cdi.k8s.io/b": "nvidia.com/gpu=1:0", "cdi.k8s.io/a": "nvidia.com/gpu=2, nvidia.com/gpu=0"});
    let r = gpu(&c, &mounts_policy());
    assert_eq!(r.source, RequestSource::CdiAnnotations);
    assert_eq!(
        r.resolve(&inventory()).unwrap().devices,
        vec![
            DeviceRef::Gpu { index: 2 },
            DeviceRef::Gpu { index: 0 },
            DeviceRef::Mig {
                parent_index: 1,
                index: 0
            }
        ],
        "annotations sorted by key"
    );
}

#[test]
fn secure_cluster_takes_mounts_and_ignores_env() {
    let mut c = config(&["NVIDIA_VISIBLE_DEVICES=all"]);
    c["mounts"] = json!([
        {"destination": "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=1:1", "source": "/dev/null"},
        {"destination": format!("/var/run/nvidia-container-devices/MIG-{A100_UUID}/7/0"), "source": "/dev/null"}
    ]);
    let r = gpu(&c, &secure_policy());
    assert_eq!(r.source, RequestSource::VolumeMounts);
    assert_eq!(
        r.resolve(&inventory()).unwrap().devices,
        vec![
            DeviceRef::Mig {
                parent_index: 1,
                index: 1
            },
            DeviceRef::Mig {
                parent_index: 1,
                index: 0
            }
        ]
    );
    c["mounts"] = json!([{"destination": "/var/run/nvidia-container-devices/../../etc", "source": "/dev/null"}]);
    let e = parse(&c, &secure_policy()).unwrap_err().to_string();
    assert!(
        e.contains("'..' path component") && e.contains("volume mounts"),
        "{e}"
    );
}

#[test]
fn foreign_annotations_do_not_make_a_gpu_container() {
    let mut c = config(&[]);
    c["annotations"] = json!({"cdi.k8s.io/net": "example.com/net=eth0"});
    assert_eq!(
        not_gpu(&c, &RequestPolicy::default()),
        NotGpuReason::NoRequest
    );
    c["annotations"] = json!({"cdi.k8s.io/x": "not-a-name"});
    let e = parse(&c, &RequestPolicy::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("invalid CDI device name \"not-a-name\" in the cdi.k8s.io/* annotations"),
        "{e}"
    );
}

#[test]
fn capabilities_restricted_to_supported() {
    let policy = RequestPolicy {
        supported_capabilities: [Capability::Utility, Capability::Compute]
            .into_iter()
            .collect(),
        ..RequestPolicy::default()
    };
    let r = gpu(
        &config(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"]),
        &policy,
    );
    assert_eq!(r.capabilities, policy.supported_capabilities);
    let e = parse(
        &config(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=bogus",
        ]),
        &policy,
    )
    .unwrap_err();
    assert!(matches!(e, RequestError::UnknownCapability { .. }));
}

#[test]
fn requirements_from_env() {
    let env = [
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        "NVIDIA_REQUIRE_ARCH=arch>=9.0",
        "NVIDIA_REQUIRE_JETPACK=garbage!!",
    ];
    let r = gpu(&config(&env), &RequestPolicy::default());
    assert_eq!(r.requirements.constraints.len(), 2, "JETPACK is ignored");
    let e = r.resolve(&inventory()).unwrap_err().to_string();
    assert!(
        e.contains("NVIDIA_REQUIRE_ARCH=\"arch>=9.0\"") && e.contains("on GPU 0"),
        "{e}"
    );
    let mut disabled = env.to_vec();
    disabled.push("NVIDIA_DISABLE_REQUIRE=true");
    assert!(gpu(&config(&disabled), &RequestPolicy::default())
        .resolve(&inventory())
        .is_ok());
    let e = parse(
        &config(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=cuda>>1"]),
        &RequestPolicy::default(),
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .starts_with("syntax error in NVIDIA_REQUIRE_X at \"cuda>>1\""));
}

#[test]
fn mig_access_needs_privilege() {
    let env = [
        "NVIDIA_VISIBLE_DEVICES=none",
        "NVIDIA_MIG_CONFIG_DEVICES=all",
        "NVIDIA_MIG_MONITOR_DEVICES=all",
    ];
    let e = parse(&config(&env), &RequestPolicy::default()).unwrap_err();
    assert_eq!(
        e,
        RequestError::NotPrivileged {
            variable: "NVIDIA_MIG_CONFIG_DEVICES".into()
        }
    );
    let r = gpu(&privileged(config(&env)), &RequestPolicy::default());
    assert!(r.mig_config && r.mig_monitor);
    // Not a GPU container: the variables are not even looked at.
    assert_eq!(
        not_gpu(&config(&env[1..]), &RequestPolicy::default()),
        NotGpuReason::NoRequest
    );
}

#[test]
fn mps_and_imex() {
    let env = [
        "NVIDIA_VISIBLE_DEVICES=0",
        "CUDA_MPS_PIPE_DIRECTORY=/mps/pipe",
        "NVIDIA_IMEX_CHANNELS=all",
    ];
    let r = gpu(&config(&env), &RequestPolicy::default());
    assert_eq!(r.mps_pipe_dir.as_deref(), Some("/mps/pipe"));
    assert_eq!(r.imex_channels, ImexChannels::All);
    let resolved = r.resolve(&inventory()).unwrap();
    assert_eq!(
        (resolved.mps_pipe_dir.as_deref(), &resolved.imex_channels),
        (Some("/mps/pipe"), &ImexChannels::All)
    );
}

mod hostile;

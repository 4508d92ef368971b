//! Allocate as the kubelet calls it, for each deviceListStrategy, with the answers NVIDIA's
//! k8s-device-plugin v0.20 gives (`internal/plugin/server.go:getAllocateResponse`, facts in
//! shared/reference/kdp-facts.md §5–§6), CDI names in gpuhook's own kinds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{advertisement, gpu_uuid, next_list, FakeKubelet, Fixed, WAIT};
use gpuhook_device_plugin::api::{self, ContainerAllocateResponse};
use gpuhook_device_plugin::preferred::AllocationPolicy;
use gpuhook_device_plugin::run::{run, Options};
use gpuhook_device_plugin::served::HealthState;
use gpuhook_device_plugin::service::{PreferError, Preferrer};
use gpuhook_sharing::{
    Advertisement, DeviceIdStrategy, DeviceListStrategy as S, Resource, SharingKind,
};
use tokio::sync::{oneshot, watch};

struct NoPreference;

impl Preferrer for NoPreference {
    fn preferred(
        &self,
        _: &Resource,
        _: AllocationPolicy,
        _: &[String],
        _: &[String],
        _: usize,
    ) -> Result<Vec<String>, PreferError> {
        Err("not used here".into())
    }
}

/// Registers a plugin serving `ad` with a fake kubelet, then sends one Allocate per request.
async fn allocate(
    ad: Advertisement,
    requests: &[&[String]],
) -> Vec<Result<ContainerAllocateResponse, tonic::Status>> {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let (_health, health_rx) = watch::channel(HealthState::default());
    let (stop, stop_rx) = oneshot::channel::<()>();
    let opts = Options {
        plugin_dir: dir.path().into(),
        container_pipe_dir: "/tmp/nvidia-mps".into(),
        poll: Duration::from_millis(50),
    };
    let task = tokio::spawn(run(
        opts,
        Box::new(Fixed(ad)),
        health_rx,
        Arc::new(NoPreference),
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut reg = kubelet.next_registration().await;
    next_list(&mut reg, WAIT).await;
    let mut out = Vec::new();
    for ids in requests {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest {
                devices_ids: ids.to_vec(),
            }],
        };
        out.push(
            reg.client
                .allocate(req)
                .await
                .map(|r| r.into_inner().container_responses.remove(0)),
        );
    }
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    kubelet.stop().await;
    out
}

fn two_gpus(strategies: &[S]) -> Advertisement {
    advertisement("nvidia.com/gpu", 2, 1, SharingKind::None, strategies)
}

fn both() -> Vec<String> {
    vec![gpu_uuid(0), gpu_uuid(1)]
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envvar_lists_the_devices_in_nvidia_visible_devices() {
    let r = allocate(two_gpus(&[S::Envvar]), &[&both()])
        .await
        .remove(0)
        .unwrap();
    let joined = format!("{},{}", gpu_uuid(0), gpu_uuid(1));
    assert_eq!(r.envs, env(&[("NVIDIA_VISIBLE_DEVICES", &joined)]));
    assert!(
        r.mounts.is_empty()
            && r.annotations.is_empty()
            && r.cdi_devices.is_empty()
            && r.devices.is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_strategy_names_devices_by_index() {
    let mut ad = two_gpus(&[S::Envvar]);
    ad.device_id_strategy = DeviceIdStrategy::Index;
    for (i, d) in ad.resources[0].devices.iter_mut().enumerate() {
        d.backing.device_name = i.to_string();
    }
    let r = allocate(ad, &[&[gpu_uuid(1)]]).await.remove(0).unwrap();
    assert_eq!(r.envs, env(&[("NVIDIA_VISIBLE_DEVICES", "1")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_mounts_mount_dev_null_per_device() {
    let r = allocate(two_gpus(&[S::VolumeMounts]), &[&both()])
        .await
        .remove(0)
        .unwrap();
    assert_eq!(
        r.envs,
        env(&[(
            "NVIDIA_VISIBLE_DEVICES",
            "/var/run/nvidia-container-devices"
        )])
    );
    let mounts: Vec<(String, String, bool)> = r
        .mounts
        .iter()
        .map(|m| (m.host_path.clone(), m.container_path.clone(), m.read_only))
        .collect();
    let want: Vec<_> = both()
        .iter()
        .map(|u| {
            (
                "/dev/null".to_string(),
                format!("/var/run/nvidia-container-devices/{u}"),
                false,
            )
        })
        .collect();
    assert_eq!(mounts, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_annotations_give_one_annotation_and_no_env() {
    let r = allocate(two_gpus(&[S::CdiAnnotations]), &[&both()])
        .await
        .remove(0)
        .unwrap();
    assert!(
        r.envs.is_empty(),
        "all strategies CDI: no NVIDIA_VISIBLE_DEVICES: {:?}",
        r.envs
    );
    assert_eq!(r.annotations.len(), 1);
    let (k, v) = r.annotations.iter().next().unwrap();
    assert!(k.starts_with("cdi.k8s.io/nvidia-device-plugin_"), "{k}");
    assert!(
        k.len() <= "cdi.k8s.io/".len() + 63,
        "annotation name over 63 characters: {k}"
    );
    assert_eq!(
        v,
        &format!(
            "nvidia.com/gpu={},nvidia.com/gpu={}",
            gpu_uuid(0),
            gpu_uuid(1)
        )
    );
    assert!(r.cdi_devices.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_cri_fills_cdi_devices() {
    let r = allocate(two_gpus(&[S::CdiCri]), &[&both()])
        .await
        .remove(0)
        .unwrap();
    let names: Vec<&str> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            format!("nvidia.com/gpu={}", gpu_uuid(0)),
            format!("nvidia.com/gpu={}", gpu_uuid(1))
        ]
    );
    assert!(r.envs.is_empty() && r.annotations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envvar_with_cdi_annotations_gives_both() {
    let r = allocate(two_gpus(&[S::Envvar, S::CdiAnnotations]), &[&[gpu_uuid(0)]])
        .await
        .remove(0)
        .unwrap();
    assert_eq!(r.envs, env(&[("NVIDIA_VISIBLE_DEVICES", &gpu_uuid(0))]));
    assert_eq!(
        r.annotations.values().collect::<Vec<_>>(),
        [&format!("nvidia.com/gpu={}", gpu_uuid(0))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_one_gpu_name_it_once() {
    // failRequestsGreaterThanOne unset (time-slicing default): two replicas of GPU 0 are one device.
    let ad = advertisement(
        "nvidia.com/gpu",
        1,
        4,
        SharingKind::TimeSlicing,
        &[S::Envvar],
    );
    let ids = [format!("{}::0", gpu_uuid(0)), format!("{}::3", gpu_uuid(0))];
    let r = allocate(ad, &[&ids]).await.remove(0).unwrap();
    assert_eq!(r.envs, env(&[("NVIDIA_VISIBLE_DEVICES", &gpu_uuid(0))]));
}

fn mps(strategies: &[S], root: &std::path::Path) -> Advertisement {
    let mut ad = advertisement("nvidia.com/gpu", 2, 4, SharingKind::Mps, strategies);
    ad.mps_root = Some(root.display().to_string());
    ad.resources[0].fail_requests_greater_than_one = false;
    ad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_share_gets_its_gpus_pipe_directory_and_shm() {
    let root = tempfile::tempdir().unwrap();
    let g1 = root.path().join(gpu_uuid(1));
    std::fs::create_dir_all(g1.join("pipe")).unwrap();
    std::fs::create_dir_all(g1.join("shm")).unwrap();
    let one = [format!("{}::2", gpu_uuid(1))];
    let spans = [format!("{}::0", gpu_uuid(0)), format!("{}::0", gpu_uuid(1))];
    let mut res = allocate(mps(&[S::Envvar], root.path()), &[&one, &spans]).await;
    let r = res.remove(0).unwrap();
    assert_eq!(
        r.envs,
        env(&[
            ("NVIDIA_VISIBLE_DEVICES", &gpu_uuid(1)),
            ("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
        ])
    );
    let mounts: Vec<(String, String)> = r
        .mounts
        .iter()
        .map(|m| (m.host_path.clone(), m.container_path.clone()))
        .collect();
    assert_eq!(
        mounts,
        [
            (
                g1.join("pipe").display().to_string(),
                "/tmp/nvidia-mps".to_string()
            ),
            (g1.join("shm").display().to_string(), "/dev/shm".to_string()),
        ]
    );
    assert!(
        r.mounts.iter().all(|m| !m.read_only),
        "the pipe directory is written by clients"
    );
    let e = res.remove(0).unwrap_err();
    assert!(e.message().contains("spans GPUs"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_share_under_cdi_cri_is_gpu_mps_daemons_cdi_device() {
    let root = tempfile::tempdir().unwrap();
    let r = allocate(
        mps(&[S::CdiCri], root.path()),
        &[&[format!("{}::1", gpu_uuid(0))]],
    )
    .await
    .remove(0)
    .unwrap();
    let names: Vec<&str> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [format!("nvidia.com/gpu-mps={}", gpu_uuid(0))]);
    assert!(
        r.envs.is_empty() && r.mounts.is_empty(),
        "the CDI device carries pipe, shm and limits"
    );
}

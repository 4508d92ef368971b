//! The plugin driven through the device plugin API exactly as the kubelet's device manager does:
//! registration on kubelet.sock, GetDevicePluginOptions, ListAndWatch, GetPreferredAllocation,
//! Allocate, PreStartContainer, a kubelet restart, a kubelet that is not up yet, shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{advertisement, gpu_uuid, next_list, FakeKubelet, Fixed, WAIT};
use gpuhook_device_plugin::api;
use gpuhook_device_plugin::preferred::AllocationPolicy;
use gpuhook_device_plugin::run::{run, AdSource, Loaded, Options};
use gpuhook_device_plugin::served::HealthState;
use gpuhook_device_plugin::service::{PreferError, Preferrer};
use gpuhook_sharing::{DeviceListStrategy, Resource, SharingKind};
use tokio::sync::{oneshot, watch};

/// Advertises `replicas` time-sliced replicas of 2 GPUs, read from a file `replicas: <n>`;
/// anything else is an invalid config.
struct FileSource {
    path: PathBuf,
}

impl AdSource for FileSource {
    fn watched(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }
    fn load(&mut self) -> Result<Loaded, PreferError> {
        let text = std::fs::read_to_string(&self.path)?;
        let value = text
            .trim()
            .strip_prefix("replicas: ")
            .unwrap_or(text.trim());
        let n: u32 = value.parse().map_err(|_| {
            format!(
                "{}: sharing.timeSlicing.resources[0].replicas: invalid value {value:?}",
                self.path.display()
            )
        })?;
        let (name, sharing) = if n > 1 {
            ("nvidia.com/gpu.shared", SharingKind::TimeSlicing)
        } else {
            ("nvidia.com/gpu", SharingKind::None)
        };
        let ad = advertisement(name, 2, n, sharing, &[DeviceListStrategy::Envvar]);
        Ok(Loaded {
            ad,
            inventory: None,
            policy: Default::default(),
        })
    }
}

/// Records its arguments; prefers must_include, then the available IDs from the end.
#[derive(Default)]
struct Recording(Mutex<Vec<Call>>);

/// (resource, available, must_include, size) of one call.
type Call = (String, Vec<String>, Vec<String>, usize);

impl Preferrer for Recording {
    fn preferred(
        &self,
        r: &Resource,
        _: AllocationPolicy,
        available: &[String],
        must: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferError> {
        self.0
            .lock()
            .unwrap()
            .push((r.name.clone(), available.to_vec(), must.to_vec(), size));
        let mut out = must.to_vec();
        out.extend(
            available
                .iter()
                .rev()
                .filter(|a| !must.contains(a))
                .cloned(),
        );
        out.truncate(size);
        Ok(out)
    }
}

struct Plugin {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), gpuhook_device_plugin::error::PluginError>>,
    health: watch::Sender<HealthState>,
    preferrer: Arc<Recording>,
}

fn start(dir: &std::path::Path, source: Box<dyn AdSource>) -> Plugin {
    let (health, health_rx) = watch::channel(HealthState::default());
    let preferrer = Arc::new(Recording::default());
    let (stop, stop_rx) = oneshot::channel::<()>();
    let opts = Options {
        plugin_dir: dir.to_path_buf(),
        container_pipe_dir: "/tmp/nvidia-mps".into(),
        poll: Duration::from_millis(50),
    };
    let task = tokio::spawn(run(opts, source, health_rx, preferrer.clone(), async {
        let _ = stop_rx.await;
    }));
    Plugin {
        stop: Some(stop),
        task,
        health,
        preferrer,
    }
}

impl Plugin {
    async fn shutdown(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        let res = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("plugin did not stop");
        res.unwrap().expect("plugin failed");
    }
}

fn sockets(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn ids(list: &api::ListAndWatchResponse) -> Vec<(String, String, Vec<i64>)> {
    list.devices
        .iter()
        .map(|d| {
            (
                d.id.clone(),
                d.health.clone(),
                d.topology
                    .iter()
                    .flat_map(|t| t.nodes.iter().map(|n| n.id))
                    .collect(),
            )
        })
        .collect()
}

fn replicated(n: u32) -> gpuhook_sharing::Advertisement {
    let mut ad = advertisement(
        "nvidia.com/gpu",
        2,
        n,
        SharingKind::TimeSlicing,
        &[DeviceListStrategy::Envvar],
    );
    ad.resources[0].fail_requests_greater_than_one = true;
    ad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_lists_and_follows_health_like_the_kubelet_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = start(dir.path(), Box::new(Fixed(replicated(2))));
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.version, "v1beta1");
    assert_eq!(reg.request.endpoint, "nvidia-gpu.sock");
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu");
    let opts = reg.request.options.clone().unwrap();
    assert!(opts.get_preferred_allocation_available && !opts.pre_start_required);
    assert_eq!(
        reg.options, opts,
        "GetDevicePluginOptions agrees with Register"
    );

    let first = ids(&next_list(&mut reg, WAIT).await);
    let want: Vec<_> = [(0, 0), (0, 1), (1, 0), (1, 1)]
        .iter()
        .map(|(g, r)| {
            (
                format!("{}::{r}", gpu_uuid(*g)),
                "Healthy".to_string(),
                vec![i64::from(*g % 2)],
            )
        })
        .collect();
    assert_eq!(first, want);

    // GPU 1 fails: both its replicas are Unhealthy in the next list, within a second.
    plugin.health.send_replace(HealthState {
        unhealthy: [gpu_uuid(1)].into(),
    });
    let after = ids(&next_list(&mut reg, Duration::from_secs(1)).await);
    let health: Vec<&str> = after.iter().map(|d| d.1.as_str()).collect();
    assert_eq!(health, ["Healthy", "Healthy", "Unhealthy", "Unhealthy"]);
    // ...and comes back.
    plugin.health.send_replace(HealthState::default());
    let back = ids(&next_list(&mut reg, Duration::from_secs(1)).await);
    assert_eq!(back, want);

    let pre = reg
        .client
        .pre_start_container(api::PreStartContainerRequest {
            devices_ids: vec![want[0].0.clone()],
        })
        .await;
    assert!(pre.is_ok(), "PreStartContainer: {pre:?}");
    plugin.shutdown().await;
    assert_eq!(
        sockets(dir.path()),
        ["kubelet.sock"],
        "plugin socket removed at shutdown"
    );
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_allocation_and_allocate_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = start(dir.path(), Box::new(Fixed(replicated(2))));
    let mut reg = kubelet.next_registration().await;
    let all: Vec<String> = next_list(&mut reg, WAIT)
        .await
        .devices
        .into_iter()
        .map(|d| d.id)
        .collect();

    // The kubelet asks for a preferred allocation only for its available devices and size.
    let req = api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_ids: all.clone(),
            must_include_device_ids: vec![all[1].clone()],
            allocation_size: 2,
        }],
    };
    let got = reg
        .client
        .get_preferred_allocation(req)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.container_responses.len(), 1);
    assert_eq!(
        got.container_responses[0].device_ids,
        [all[1].clone(), all[3].clone()]
    );
    let calls = plugin.preferrer.0.lock().unwrap().clone();
    assert_eq!(
        calls,
        [(
            "nvidia.com/gpu".to_string(),
            all.clone(),
            vec![all[1].clone()],
            2
        )]
    );

    // One replica: NVIDIA_VISIBLE_DEVICES names the GPU (the `::n` is stripped).
    let one = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: vec![all[2].clone()],
        }],
    };
    let r = reg.client.allocate(one).await.unwrap().into_inner();
    assert_eq!(
        r.container_responses[0].envs.get("NVIDIA_VISIBLE_DEVICES"),
        Some(&gpu_uuid(1))
    );

    // failRequestsGreaterThanOne: two replicas refused with NVIDIA's message.
    let two = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: all[..2].to_vec(),
        }],
    };
    let e = reg.client.allocate(two).await.unwrap_err();
    assert!(e.message().contains("invalid allocation request for \"nvidia.com/gpu\": invalid request: maximum request size for shared resources is 1; found 2"), "{}", e.message());

    // An ID never advertised: refused, naming it.
    let bad = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: vec!["GPU-not-ours::0".into()],
        }],
    };
    let e = reg.client.allocate(bad).await.unwrap_err();
    assert!(
        e.message()
            .ends_with("invalid request: unknown device: GPU-not-ours::0"),
        "{}",
        e.message()
    );
    plugin.shutdown().await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_kubelet_and_registers_again_after_a_kubelet_restart() {
    let dir = tempfile::tempdir().unwrap();
    // No kubelet yet: the plugin waits, serving nothing.
    let plugin = start(dir.path(), Box::new(Fixed(replicated(2))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !plugin.task.is_finished(),
        "plugin gave up on a kubelet that is not up yet"
    );
    let mut kubelet = FakeKubelet::start(dir.path());
    let reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu");
    drop(reg);

    // Kubelet restart: kubelet.sock goes away, the new kubelet removes every socket in the dir
    // and serves a new kubelet.sock. The plugin must serve and register again.
    kubelet.stop().await;
    let mut kubelet = FakeKubelet::start(dir.path());
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.endpoint, "nvidia-gpu.sock");
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 4);
    let one = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: vec![format!("{}::0", gpu_uuid(0))],
        }],
    };
    assert!(
        reg.client.allocate(one).await.is_ok(),
        "the new connection serves Allocate"
    );
    plugin.shutdown().await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_change_is_applied_and_an_invalid_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("config.yaml");
    std::fs::write(&cfg, "replicas: 2").unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = start(dir.path(), Box::new(FileSource { path: cfg.clone() }));
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu.shared");
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 4);

    // Same resource, more replicas: a new list on the same stream.
    std::fs::write(&cfg, "replicas: 3").unwrap();
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 6);

    // Invalid: nothing changes (no new list, same registration), still served.
    std::fs::write(&cfg, "replicas: lots").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), reg.lists.recv())
            .await
            .is_err(),
        "an invalid config changed the list"
    );
    let one = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: vec![format!("{}::2", gpu_uuid(1))],
        }],
    };
    assert!(
        reg.client.allocate(one).await.is_ok(),
        "last good config still served"
    );

    // Another resource name: its own socket, registered anew; the old socket is gone.
    std::fs::write(&cfg, "replicas: 1").unwrap();
    let mut reg = kubelet.next_registration().await;
    assert_eq!(
        (
            reg.request.resource_name.as_str(),
            reg.request.endpoint.as_str()
        ),
        ("nvidia.com/gpu", "nvidia-gpu.sock")
    );
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 2);
    assert_eq!(sockets(dir.path()), ["kubelet.sock", "nvidia-gpu.sock"]);
    plugin.shutdown().await;
    kubelet.stop().await;
}

//! GetPreferredAllocation runs off the async workers with a deadline (#22): a preference that
//! takes long (a large best-effort search, a slow topology read) neither delays Allocate nor
//! keeps the kubelet waiting past the deadline.

use std::sync::{Condvar, Mutex};

use api::DevicePlugin as _;
use gpuhook_sharing::{
    AdvertisedDevice, Backing, DeviceIdStrategy, DeviceListStrategy, Resource, SharingKind,
};

use super::*;
use crate::served::{AllocSettings, HealthState};

/// A preference that blocks its thread until released.
#[derive(Default)]
struct Stuck {
    released: Mutex<bool>,
    cv: Condvar,
}

impl Stuck {
    fn release(&self) {
        *self.released.lock().expect("lock") = true;
        self.cv.notify_all();
    }
}

impl Preferrer for Stuck {
    fn preferred(
        &self,
        _: &Resource,
        _: AllocationPolicy,
        available: &[String],
        _: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferError> {
        let mut done = self.released.lock().expect("lock");
        while !*done {
            done = self.cv.wait(done).expect("wait");
        }
        Ok(available.iter().take(size).cloned().collect())
    }
}

fn served() -> Served {
    let devices = (0..2u32)
        .map(|i| AdvertisedDevice {
            id: format!("GPU-{i}"),
            backing: Backing {
                gpu_uuid: format!("GPU-{i}"),
                gpu_index: i,
                mig: None,
                device_name: format!("GPU-{i}"),
            },
            replica: None,
            numa_node: None,
        })
        .collect();
    let resource = Resource {
        name: "nvidia.com/gpu".into(),
        sharing: SharingKind::None,
        replicas: 1,
        fail_requests_greater_than_one: false,
        devices,
    };
    let settings = AllocSettings {
        strategies: vec![DeviceListStrategy::Envvar],
        id_strategy: DeviceIdStrategy::Uuid,
        pass_device_specs: false,
        cdi_annotation_prefix: "cdi.k8s.io/".into(),
        mps_root: None,
        container_pipe_dir: "/tmp/nvidia-mps".into(),
        dev_root: "/".into(),
        device_paths: Default::default(),
        policy: AllocationPolicy::default(),
    };
    Served::new(resource, settings, HealthState::default())
}

fn preferred_request() -> Request<api::PreferredAllocationRequest> {
    Request::new(api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_ids: vec!["GPU-0".into(), "GPU-1".into()],
            must_include_device_ids: vec![],
            allocation_size: 1,
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_preference_blocks_neither_allocate_nor_the_kubelet() {
    let (_tx, rx) = watch::channel(Arc::new(served()));
    let stuck = Arc::new(Stuck::default());
    let svc = PluginService::new(rx, stuck.clone()).with_deadline(Duration::from_millis(300));
    // A watchdog frees the stuck threads after 3 s, so that inline preferences (holding every
    // worker) make this test fail instead of hanging.
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, f) = (stuck.clone(), fired.clone());
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        f.store(true, std::sync::atomic::Ordering::SeqCst);
        s.release();
    });
    // As many stuck preferences as the runtime has workers: inline, they would hold both.
    let pending: Vec<_> = (0..2)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { svc.get_preferred_allocation(preferred_request()).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let alloc = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: vec!["GPU-1".into()],
        }],
    };
    let answered =
        tokio::time::timeout(Duration::from_secs(5), svc.allocate(Request::new(alloc))).await;
    let answered = answered.expect("Allocate answers");
    assert!(
        !fired.load(std::sync::atomic::Ordering::SeqCst),
        "Allocate waited behind GetPreferredAllocation"
    );
    let envs = &answered
        .expect("allocates")
        .into_inner()
        .container_responses[0]
        .envs;
    assert_eq!(envs["NVIDIA_VISIBLE_DEVICES"], "GPU-1");
    // Past the deadline: an empty preference per container, not a wait.
    for p in pending {
        let r = tokio::time::timeout(Duration::from_secs(5), p)
            .await
            .expect("no answer past the deadline")
            .expect("task")
            .expect("an answer, not an error")
            .into_inner();
        assert_eq!(r.container_responses.len(), 1);
        assert!(r.container_responses[0].device_ids.is_empty(), "{r:?}");
    }
    assert!(!fired.load(std::sync::atomic::Ordering::SeqCst));
    stuck.release();
    // Released: the preference comes back as computed.
    let r = svc
        .get_preferred_allocation(preferred_request())
        .await
        .expect("answer")
        .into_inner();
    assert_eq!(r.container_responses[0].device_ids, ["GPU-0"]);
}

//! `gpu-mps-daemon --cri-socket` against containerd 1.6's real CRI plugin: a pod sandbox and a
//! running container created through CRI the way the kubelet creates them (its
//! `kuberuntime/labels.go:newContainerLabels` labels, from `pkg/kubelet/types/labels.go`), then
//! the container's process mapped to its id through `/proc/<pid>/cgroup` (as the MPS client
//! watcher does), and that id named by the daemon's own CRI client: pod, namespace, container.
//!
//! Run under `flock /tmp/gpuhook-e2e.lock`. The pod is stopped and removed through CRI; the
//! bench's drop kills whatever is left, then containerd.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;

use std::collections::HashMap;
use std::path::Path;

use device_plugin_cri_support::kubelet::{container_config, run_options};
use device_plugin_cri_support::rig::{ready, tmp, Bench};
use gpu_mps_daemon::cri::{self, PodRef};
use gpu_mps_daemon::status::{Board, ClientStatus, GpuStatus};

const POD: &str = "trainer-0";
const NAMESPACE: &str = "ml-team";
const CONTAINER: &str = "cuda";

/// The kubelet's container labels for `POD`/`NAMESPACE`/`CONTAINER`.
fn kubelet_labels(uid: &str) -> HashMap<String, String> {
    HashMap::from([
        ("io.kubernetes.pod.name".into(), POD.into()),
        ("io.kubernetes.pod.namespace".into(), NAMESPACE.into()),
        ("io.kubernetes.pod.uid".into(), uid.into()),
        ("io.kubernetes.container.name".into(), CONTAINER.into()),
    ])
}

/// Starts the pod with one sleeping container; returns (sandbox id, container id).
async fn start_pod(bench: &mut Bench) -> (String, String) {
    let cri = &mut bench.cri;
    let mut sandbox = cri.sandbox_config(POD);
    let meta = sandbox.metadata.as_mut().unwrap();
    meta.namespace = NAMESPACE.into();
    let uid = meta.uid.clone();
    let mut config = container_config(CONTAINER, "sleep 120", run_options(&[]));
    config.labels = kubelet_labels(&uid);
    config.log_path = "ctr_0.log".into();
    cri.start_pod(sandbox, config).await
}

fn board_with_client(pid: u32, id: &str) -> Board {
    let mut g: GpuStatus = serde_json::from_value(serde_json::json!({
        "uuid": "GPU-0", "index": 0, "resource": "nvidia.com/gpu", "replicas": 2,
        "state": "ready", "pid": 1, "activeThreadPercentage": 50,
        "pinnedMemoryLimitMiB": null, "appliedActiveThreadPercentage": null,
        "appliedPinnedMemoryLimitMiB": null, "restarts": 0, "lastError": null,
        "lastErrorAt": null, "readySince": 1, "pipeDirectory": "/p", "logDirectory": "/l",
        "shmDirectory": null
    }))
    .unwrap();
    g.usage.clients.push(ClientStatus {
        pid,
        server: 1,
        container: Some(id.to_string()),
        runtime: Some("containerd".into()),
        pod: None,
        namespace: None,
        container_name: None,
    });
    let board = Board::default();
    board.insert(g);
    board
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cri_container_id_is_named_by_its_pod_namespace_and_container() {
    if !ready("mps_cri_names") {
        return;
    }
    let dir = tmp("mps-cri-names");
    let mut bench = Bench::start(dir.path(), "dgx-h100", &[]).await;
    let (pod_id, id) = start_pod(&mut bench).await;

    // The watcher's view: the process's cgroup gives the same id CRI knows.
    let pid = bench.cri.running_pid(&id).await;
    let owner = gpu_mps_daemon::cgroup::owner_of(Path::new("/proc"), pid)
        .expect("read /proc/<pid>/cgroup")
        .expect("a container process");
    assert_eq!(owner.id, id);

    let socket = bench.cri.daemon.socket.clone();
    let listed = cri::list_running(&socket).await.expect("ListContainers");
    let ours = listed.iter().find(|c| c.id == id).expect("our container");
    let want = PodRef {
        pod: POD.into(),
        namespace: NAMESPACE.into(),
        container: CONTAINER.into(),
    };
    assert_eq!(ours.pod_ref(), Some(want));
    // The sandbox's pause container is not a running container of the list's kind: only ours.
    assert!(listed.iter().all(|c| c.id != pod_id));

    let board = board_with_client(pid, &owner.id);
    gpu_mps_daemon::attrib::pass(&board, &socket, &mut Default::default()).await;
    let c = &board.snapshot().gpus[0].usage.clients[0];
    assert_eq!(
        (
            c.pod.as_deref(),
            c.namespace.as_deref(),
            c.container_name.as_deref()
        ),
        (Some(POD), Some(NAMESPACE), Some(CONTAINER))
    );

    let cri = &mut bench.cri;
    cri.remove_pod(&pod_id).await;
    // Once stopped, the id is no longer a running container.
    let after = cri::list_running(&socket).await.expect("ListContainers");
    assert!(after.iter().all(|c| c.id != id));
}

use std::path::PathBuf;

use gpuhook_device_plugin::fake_pod_resources::serve_pod_resources;
use gpuhook_device_plugin::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};

use super::*;

const MIG_A: &str = "MIG-aaaaaaaa-0000-0000-0000-000000000001";
const MIG_B: &str = "MIG-bbbbbbbb-0000-0000-0000-000000000002";
const GPU_1: &str = "GPU-11111111-0000-0000-0000-000000000000";

fn pod(ns: &str, name: &str, container: &str, resource: &str) -> Holder {
    Holder::Pod {
        namespace: ns.into(),
        pod: name.into(),
        container: container.into(),
        resource: resource.into(),
    }
}

fn list() -> ListPodResourcesResponse {
    let devices = |resource: &str, ids: &[&str]| ContainerDevices {
        resource_name: resource.into(),
        device_ids: ids.iter().map(ToString::to_string).collect(),
        topology: None,
    };
    ListPodResourcesResponse {
        pod_resources: vec![
            PodResources {
                name: "train-0".into(),
                namespace: "ml".into(),
                containers: vec![ContainerResources {
                    name: "trainer".into(),
                    devices: vec![devices("nvidia.com/mig-3g.40gb", &[MIG_A])],
                }],
            },
            PodResources {
                name: "infer".into(),
                namespace: "web".into(),
                containers: vec![ContainerResources {
                    name: "server".into(),
                    // A time-sliced replica of a whole GPU: `<uuid>::<n>`.
                    devices: vec![devices("nvidia.com/gpu.shared", &[&format!("{GPU_1}::3")])],
                }],
            },
            PodResources {
                name: "idle".into(),
                namespace: "web".into(),
                containers: vec![ContainerResources {
                    name: "c".into(),
                    devices: Vec::new(),
                }],
            },
        ],
    }
}

/// A fake kubelet serving `resp` on `<dir>/kubelet.sock`.
fn fake_kubelet(dir: &std::path::Path, resp: ListPodResourcesResponse) -> PathBuf {
    let sock = dir.join("kubelet.sock");
    serve_pod_resources(&sock, resp);
    sock
}

#[test]
fn the_kubelets_allocations_hold_their_devices_replicas_by_their_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let sock = fake_kubelet(dir.path(), list());
    let h = read_pod_resources(&sock).unwrap();
    assert_eq!(
        h.of(MIG_A),
        [pod("ml", "train-0", "trainer", "nvidia.com/mig-3g.40gb")]
    );
    assert_eq!(
        h.of(GPU_1),
        [pod("web", "infer", "server", "nvidia.com/gpu.shared")]
    );
    assert!(h.of(MIG_B).is_empty());
}

#[test]
fn no_socket_is_no_pod_and_a_dead_socket_is_an_error_naming_it_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let none = read_pod_resources(&dir.path().join("kubelet.sock")).unwrap();
    assert!(none.is_empty());
    // A socket file nobody listens on: the kubelet is wedged or gone.
    let dead = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let e = read_pod_resources(&dead).unwrap_err();
    assert!(e.contains("dead.sock") && e.contains("--drain"), "{e}");
}

fn status_json(clients: &str) -> String {
    format!(
        r#"{{"formatVersion":1,"pid":10,"updatedAt":1,"config":null,"lastReloadError":null,
"gpus":[{{"uuid":"{GPU_1}","index":1,"resource":"nvidia.com/gpu","replicas":4,"state":"ready",
"pid":11,"activeThreadPercentage":25,"restarts":0,"pipeDirectory":"/p","logDirectory":"/l",
"usage":{{"servers":[12],"terminations":{{}},"serversLimited":1,"lastPassAt":1,
"lastPassError":null,"clients":[{clients}]}}}}]}}"#
    )
}

#[test]
fn live_mps_clients_hold_their_gpu_and_gone_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join("500")).unwrap();
    let status = dir.path().join("status.json");
    std::fs::write(
        &status,
        status_json(
            r#"{"pid":500,"server":12,"container":"abc","runtime":"containerd","pod":"infer-1","namespace":"ml"},
               {"pid":501,"server":12,"container":null,"runtime":null}"#,
        ),
    )
    .unwrap();
    let h = read_mps(&status, &proc_root).unwrap();
    assert_eq!(
        h.of(GPU_1),
        [Holder::MpsClient {
            pid: 500,
            pod: Some("ml/infer-1".into())
        }]
    );
    assert_eq!(
        h.of(GPU_1)[0].to_string(),
        "MPS client pid 500 of pod ml/infer-1"
    );
    // No daemon: no file, no client.
    assert!(read_mps(&dir.path().join("none.json"), &proc_root)
        .unwrap()
        .is_empty());
    // A file that is not the daemon's: an error naming it, not "nobody".
    std::fs::write(&status, "{not json").unwrap();
    let e = read_mps(&status, &proc_root).unwrap_err();
    assert!(e.contains("status.json"), "{e}");
}

#[test]
fn pod_holders_dedup_one_device_listed_twice() {
    let a = Assignment {
        resource: "nvidia.com/mig-1g.10gb".into(),
        device_id: MIG_B.into(),
        pod: "p".into(),
        namespace: "n".into(),
        container: "c".into(),
    };
    let h = pod_holders(&[a.clone(), a]);
    assert_eq!(h.of(MIG_B).len(), 1);
}

//! `--cri-socket` against a fake CRI runtime on a unix socket: a tonic server that implements
//! only `runtime.v1.RuntimeService/ListContainers`, with the messages generated from
//! `k8s.io/cri-api` `pkg/apis/runtime/v1/api.proto` by the `k8s-cri` crate (not our hand-written
//! subset), labelled the way the kubelet labels its containers.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use gpu_mps_daemon::attrib::{self, Cache};
use gpu_mps_daemon::cri::{self, CriError, PodRef};
use gpu_mps_daemon::status::{Board, ClientStatus, GpuStatus};
use k8s_cri::v1 as api;
use tonic::body::BoxBody;
use tonic::codegen::{http, BoxFuture, Service, StdError};

/// The fake runtime: its containers, and the requests it got.
#[derive(Clone, Default)]
struct Fake {
    containers: Arc<Vec<api::Container>>,
    seen: Arc<Mutex<Vec<api::ListContainersRequest>>>,
}

impl tonic::server::NamedService for Fake {
    const NAME: &'static str = "runtime.v1.RuntimeService";
}

struct List(Fake);

impl tonic::server::UnaryService<api::ListContainersRequest> for List {
    type Response = api::ListContainersResponse;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
    fn call(&mut self, req: tonic::Request<api::ListContainersRequest>) -> Self::Future {
        let f = self.0.clone();
        Box::pin(async move {
            f.seen.lock().unwrap().push(req.into_inner());
            Ok(tonic::Response::new(api::ListContainersResponse {
                containers: f.containers.to_vec(),
            }))
        })
    }
}

impl<B> Service<http::Request<B>> for Fake
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let f = self.clone();
        Box::pin(async move {
            if req.uri().path() != "/runtime.v1.RuntimeService/ListContainers" {
                return Ok(tonic::Status::unimplemented("fake: ListContainers only").into_http());
            }
            let codec = tonic::codec::ProstCodec::<
                api::ListContainersResponse,
                api::ListContainersRequest,
            >::default();
            Ok(tonic::server::Grpc::new(codec).unary(List(f), req).await)
        })
    }
}

/// Serves `fake` on `dir/cri.sock`.
fn serve(dir: &Path, fake: Fake) -> PathBuf {
    let path = dir.join("cri.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(fake)
            .serve_with_incoming(incoming),
    );
    path
}

/// A container as the kubelet creates it (`kuberuntime/labels.go`: `newContainerLabels`).
fn kube_container(id: &str, ns: &str, pod: &str, name: &str) -> api::Container {
    let labels = HashMap::from([
        ("io.kubernetes.pod.name".to_string(), pod.to_string()),
        ("io.kubernetes.pod.namespace".to_string(), ns.to_string()),
        ("io.kubernetes.container.name".to_string(), name.to_string()),
        ("io.kubernetes.pod.uid".to_string(), "0d6d-uid".to_string()),
    ]);
    api::Container {
        id: id.to_string(),
        pod_sandbox_id: format!("sandbox-{pod}"),
        metadata: Some(api::ContainerMetadata {
            name: name.to_string(),
            attempt: 2,
        }),
        image: Some(api::ImageSpec {
            image: "registry.example/cuda:12".to_string(),
            ..Default::default()
        }),
        image_ref: "sha256:abc".to_string(),
        state: api::ContainerState::ContainerRunning.into(),
        created_at: 1_700_000_000,
        labels,
        annotations: HashMap::from([("a".to_string(), "b".to_string())]),
        ..Default::default()
    }
}

fn fake_with(containers: Vec<api::Container>) -> Fake {
    Fake {
        containers: Arc::new(containers),
        ..Default::default()
    }
}

const ID_A: &str = "4f2b9c0e7d1a4f2b9c0e7d1a4f2b9c0e7d1a4f2b9c0e7d1a4f2b9c0e7d1a4f2b";
const ID_B: &str = "9a8b7c6d5e4f9a8b7c6d5e4f9a8b7c6d5e4f9a8b7c6d5e4f9a8b7c6d5e4f9a8b";
const ID_PODMAN: &str = "1111111111111111111111111111111111111111111111111111111111111111";

#[tokio::test]
async fn list_running_reads_kubelet_labels_and_asks_for_running_containers() {
    let dir = tempfile::tempdir().unwrap();
    let mut other = kube_container(ID_B, "", "", "");
    other.labels.clear(); // a container the kubelet did not create
    let fake = fake_with(vec![kube_container(ID_A, "ml", "trainer-0", "cuda"), other]);
    let sock = serve(dir.path(), fake.clone());
    let list = cri::list_running(&sock).await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].id, ID_A);
    assert_eq!(
        list[0].pod_ref(),
        Some(PodRef {
            pod: "trainer-0".into(),
            namespace: "ml".into(),
            container: "cuda".into(),
        })
    );
    assert_eq!(list[1].pod_ref(), None);
    let seen = fake.seen.lock().unwrap();
    let state = seen[0]
        .filter
        .as_ref()
        .unwrap()
        .state
        .as_ref()
        .unwrap()
        .state;
    assert_eq!(state, i32::from(api::ContainerState::ContainerRunning));
}

#[tokio::test]
async fn a_hung_cri_socket_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hung.sock");
    // Accepts connections and never answers.
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let t0 = Instant::now();
    let err = cri::list_running(&path).await.unwrap_err();
    assert!(matches!(err, CriError::Timeout { .. }), "{err}");
    assert!(t0.elapsed() < cri::CALL_TIMEOUT + Duration::from_secs(2));
}

#[tokio::test]
async fn a_missing_socket_is_a_connect_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.sock");
    let err = cri::list_running(&path).await.unwrap_err();
    assert!(matches!(err, CriError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("absent.sock"), "{err}");
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = kube_container(ID_A, "ml", "trainer-0", "cuda");
    big.annotations
        .insert("huge".into(), "x".repeat(cri::MAX_RESPONSE_BYTES + 1));
    let sock = serve(dir.path(), fake_with(vec![big]));
    let err = cri::list_running(&sock).await.unwrap_err();
    assert!(matches!(err, CriError::Call { .. }), "{err}");
    assert!(err.to_string().contains("too large"), "{err}");
}

fn gpu_with(clients: &[(u32, Option<&str>)]) -> GpuStatus {
    let mut g: GpuStatus = serde_json::from_value(serde_json::json!({
        "uuid": "GPU-0", "index": 0, "resource": "nvidia.com/gpu", "replicas": 4,
        "state": "ready", "pid": 10, "activeThreadPercentage": 50,
        "pinnedMemoryLimitMiB": null, "appliedActiveThreadPercentage": null,
        "appliedPinnedMemoryLimitMiB": null, "restarts": 0, "lastError": null,
        "lastErrorAt": null, "readySince": 1, "pipeDirectory": "/p", "logDirectory": "/l",
        "shmDirectory": null
    }))
    .unwrap();
    g.usage.servers = vec![7];
    for (pid, ctr) in clients {
        g.usage.clients.push(ClientStatus {
            pid: *pid,
            server: 7,
            container: ctr.map(str::to_string),
            runtime: ctr.map(|_| "containerd".to_string()),
            pod: None,
            namespace: None,
            container_name: None,
        });
    }
    g
}

#[tokio::test]
async fn a_pass_names_clients_in_status_metrics_and_table_and_caches() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_with(vec![kube_container(ID_A, "ml", "trainer-0", "cuda")]);
    let sock = serve(dir.path(), fake.clone());
    let board = Board::default();
    board.insert(gpu_with(&[
        (1, Some(ID_A)),
        (2, Some(ID_PODMAN)),
        (3, None),
    ]));
    let mut cache = Cache::default();
    attrib::pass(&board, &sock, &mut cache).await;

    let snap = board.snapshot();
    let c = &snap.gpus[0].usage.clients;
    assert_eq!(c[0].pod.as_deref(), Some("trainer-0"));
    assert_eq!(c[0].namespace.as_deref(), Some("ml"));
    assert_eq!(c[0].container_name.as_deref(), Some("cuda"));
    assert_eq!((c[1].pod.as_ref(), c[2].pod.as_ref()), (None, None));
    // Additive JSON: the names only where known.
    let json = serde_json::to_value(&snap).unwrap();
    let clients = &json["gpus"][0]["usage"]["clients"];
    assert_eq!(clients[0]["containerName"], "cuda");
    assert!(clients[1].get("pod").is_none());

    let text = gpu_mps_daemon::metrics::render_for(&board, "node-1");
    let line = text
        .lines()
        .find(|l| l.starts_with("gpuhook_mps_container_clients{") && l.contains(ID_A))
        .unwrap();
    for want in [
        r#"pod="trainer-0""#,
        r#"namespace="ml""#,
        r#"container="cuda""#,
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }
    let table = gpu_mps_daemon::status_table::render_table(&snap, true);
    assert!(
        table.contains(", pod ml/trainer-0 container cuda"),
        "{table}"
    );

    // Cached: the named id and the unknown podman id are not asked for again at once.
    attrib::pass(&board, &sock, &mut cache).await;
    assert_eq!(fake.seen.lock().unwrap().len(), 1);
}

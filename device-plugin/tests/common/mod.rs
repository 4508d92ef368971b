//! A fake kubelet that plays the device manager's part exactly as
//! `pkg/kubelet/cm/devicemanager` does (see device-plugin/README.md for each behaviour and its
//! source), plus hand-built advertisements.
#![allow(dead_code)]

pub mod node;

use std::path::{Path, PathBuf};

use std::time::Duration;

use gpuhook_device_plugin::api::{self, DevicePluginClient, Registration, RegistrationServer};
use gpuhook_device_plugin::kubelet::connect;
use gpuhook_device_plugin::run::{AdSource, Loaded};
use gpuhook_device_plugin::service::PreferError;
use gpuhook_sharing::{
    AdvertisedDevice, Advertisement, Backing, DeviceIdStrategy, DeviceListStrategy, Resource,
    SharingKind,
};
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// How long a test waits for something the plugin must do.
pub const WAIT: Duration = Duration::from_secs(10);

/// One registration the fake kubelet accepted, with its connection to the plugin.
#[derive(Debug)]
pub struct Registered {
    pub request: api::RegisterRequest,
    pub options: api::DevicePluginOptions,
    pub client: DevicePluginClient<Channel>,
    pub lists: mpsc::UnboundedReceiver<api::ListAndWatchResponse>,
}

struct Reg {
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Registered>,
}

#[tonic::async_trait]
impl Registration for Reg {
    /// `plugin/v1beta1/server.go:Register`: version check, extended resource name, then
    /// `connectClient`: dial `<dir>/<endpoint>`, GetDevicePluginOptions (`PluginConnected`),
    /// answer, and run ListAndWatch in the background (`runClient`).
    async fn register(
        &self,
        req: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let request = req.into_inner();
        if request.version != api::VERSION {
            return Err(Status::unknown(format!(
                "requested device plugin version {} is not supported",
                request.version
            )));
        }
        if !request.resource_name.contains('/')
            || request.resource_name.starts_with("kubernetes.io/")
        {
            return Err(Status::unknown("invalid extended resource name"));
        }
        let channel = connect(&self.dir.join(&request.endpoint))
            .await
            .map_err(|e| Status::unknown(e.to_string()))?;
        let mut client = DevicePluginClient::new(channel);
        let options = client
            .get_device_plugin_options(api::Empty {})
            .await?
            .into_inner();
        let (ltx, lists) = mpsc::unbounded_channel();
        let mut lw = client.clone();
        tokio::spawn(async move {
            let Ok(stream) = lw.list_and_watch(api::Empty {}).await else {
                return;
            };
            let mut stream = stream.into_inner();
            while let Ok(Some(list)) = stream.message().await {
                if ltx.send(list).is_err() {
                    break;
                }
            }
        });
        let _ = self.tx.send(Registered {
            request,
            options,
            client,
            lists,
        });
        Ok(Response::new(api::Empty {}))
    }
}

/// The kubelet's registration server on `<dir>/kubelet.sock`.
#[derive(Debug)]
pub struct FakeKubelet {
    pub dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub registrations: mpsc::UnboundedReceiver<Registered>,
}

/// `ManagerImpl.CleanupPluginDirectory`: removes every non-directory entry of `dir` (the
/// checkpoint file aside) when the device manager starts.
pub fn cleanup_plugin_directory(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("read plugin dir").flatten() {
        let ft = e.file_type().expect("file type");
        if !ft.is_dir() && e.file_name() != "kubelet_internal_checkpoint" {
            std::fs::remove_file(e.path()).expect("remove socket");
        }
    }
}

impl FakeKubelet {
    /// Starts like the device manager: cleans the dir, then serves `kubelet.sock`.
    pub fn start(dir: &Path) -> FakeKubelet {
        cleanup_plugin_directory(dir);
        let sock = dir.join(api::KUBELET_SOCKET);
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind kubelet.sock");
        let (tx, registrations) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let reg = Reg {
            dir: dir.to_path_buf(),
            tx,
        };
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(reg))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = stop_rx.await;
                    },
                )
                .await;
        });
        FakeKubelet {
            dir: dir.to_path_buf(),
            stop: Some(stop),
            task: Some(task),
            registrations,
        }
    }

    /// The next registration, within [`WAIT`].
    pub async fn next_registration(&mut self) -> Registered {
        tokio::time::timeout(WAIT, self.registrations.recv())
            .await
            .expect("no registration within 10 s")
            .expect("kubelet stopped")
    }

    /// Stops serving; the Go gRPC server's listener close removes `kubelet.sock`.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
        }
        let _ = std::fs::remove_file(self.dir.join(api::KUBELET_SOCKET));
    }
}

/// The next list from a ListAndWatch stream, within `d`.
pub async fn next_list(r: &mut Registered, d: Duration) -> api::ListAndWatchResponse {
    tokio::time::timeout(d, r.lists.recv())
        .await
        .expect("no device list in time")
        .expect("ListAndWatch ended")
}

/// The UUID of test GPU `i`.
pub fn gpu_uuid(i: u32) -> String {
    format!("GPU-0000000{i}-1111-2222-3333-444444444444")
}

/// An advertisement of `gpus` full GPUs on NUMA node `i % 2`, with `replicas` (1 = not shared)
/// under `name`, answered with `strategies`.
pub fn advertisement(
    name: &str,
    gpus: u32,
    replicas: u32,
    sharing: SharingKind,
    strategies: &[DeviceListStrategy],
) -> Advertisement {
    let mut devices = Vec::new();
    for i in 0..gpus {
        let backing = Backing {
            gpu_uuid: gpu_uuid(i),
            gpu_index: i,
            mig: None,
            device_name: gpu_uuid(i),
        };
        for r in 0..replicas {
            let shared = replicas > 1;
            devices.push(AdvertisedDevice {
                id: if shared {
                    format!("{}::{r}", gpu_uuid(i))
                } else {
                    gpu_uuid(i)
                },
                backing: backing.clone(),
                replica: shared.then_some(r),
                numa_node: Some(i % 2),
            });
        }
    }
    Advertisement {
        config_name: "default".into(),
        resources: vec![Resource {
            name: name.into(),
            sharing,
            replicas,
            fail_requests_greater_than_one: sharing == SharingKind::Mps,
            devices,
        }],
        labels: Default::default(),
        device_list_strategies: strategies.to_vec(),
        device_id_strategy: DeviceIdStrategy::Uuid,
        pass_device_specs: false,
        cdi_annotation_prefix: "cdi.k8s.io/".into(),
        mps_root: None,
    }
}

/// Serves a fixed advertisement.
pub struct Fixed(pub Advertisement);

impl AdSource for Fixed {
    fn watched(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    fn load(&mut self) -> Result<Loaded, PreferError> {
        Ok(Loaded {
            ad: self.0.clone(),
            inventory: None,
            policy: Default::default(),
        })
    }
}

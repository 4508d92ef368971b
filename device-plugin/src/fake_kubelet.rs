//! A fake kubelet device manager for tests (feature `testing`): the registration server on
//! `<dir>/kubelet.sock`, playing the device manager's part as `pkg/kubelet/cm/devicemanager`
//! does (device-plugin/README.md has each behaviour and its source). Used by the plugin's own
//! tests and by the CRI end-to-end tests, so both drive the plugin the same way.
#![allow(clippy::expect_used, missing_debug_implementations)] // test support: a failed set-up is the test's failure

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::api::{self, DevicePluginClient, Registration, RegistrationServer};
use crate::kubelet::connect;

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

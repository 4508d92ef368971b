//! The kubelet's registration server on `<dir>/kubelet.sock`, as the device manager serves it
//! (`pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go:Register`, `handler.go:connectClient`):
//! check the version, dial the plugin's endpoint, call GetDevicePluginOptions before answering,
//! then run ListAndWatch in the background (`client.go:Run`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuhook_device_plugin::api::{self, DevicePluginClient, Registration, RegistrationServer};
use gpuhook_device_plugin::kubelet::connect;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// How long a test waits for a device list.
pub const WAIT: Duration = Duration::from_secs(10);

/// One accepted registration with its connection to the plugin and its ListAndWatch lists.
pub struct Registered {
    pub request: api::RegisterRequest,
    pub options: api::DevicePluginOptions,
    pub client: DevicePluginClient<Channel>,
    pub lists: mpsc::UnboundedReceiver<api::ListAndWatchResponse>,
}

struct Kubelet {
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Registered>,
}

#[tonic::async_trait]
impl Registration for Kubelet {
    async fn register(
        &self,
        req: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let request = req.into_inner();
        if request.version != api::VERSION {
            return Err(Status::unknown("unsupported device plugin version"));
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
        let mut watcher = client.clone();
        tokio::spawn(async move {
            if let Ok(s) = watcher.list_and_watch(api::Empty {}).await {
                let mut s = s.into_inner();
                while let Ok(Some(l)) = s.message().await {
                    if ltx.send(l).is_err() {
                        break;
                    }
                }
            }
        });
        let reg = Registered {
            request,
            options,
            client,
            lists,
        };
        let _ = self.tx.send(reg);
        Ok(Response::new(api::Empty {}))
    }
}

/// The fake kubelet; its server task ends with the test's runtime.
pub struct FakeKubelet {
    pub registrations: mpsc::UnboundedReceiver<Registered>,
}

impl FakeKubelet {
    /// Serves `<dir>/kubelet.sock` (the dir must be empty, as after the device manager's
    /// `CleanupPluginDirectory`).
    pub fn start(dir: &Path) -> FakeKubelet {
        let listener =
            tokio::net::UnixListener::bind(dir.join(api::KUBELET_SOCKET)).expect("kubelet.sock");
        let (tx, registrations) = mpsc::unbounded_channel();
        let svc = RegistrationServer::new(Kubelet {
            dir: dir.to_path_buf(),
            tx,
        });
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming),
        );
        FakeKubelet { registrations }
    }
}

/// The next ListAndWatch list of `r`, within `d`.
pub async fn next_list(r: &mut Registered, d: Duration) -> api::ListAndWatchResponse {
    tokio::time::timeout(d, r.lists.recv())
        .await
        .expect("no device list in time")
        .expect("ListAndWatch ended")
}

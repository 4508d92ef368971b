//! One gRPC server on one unix socket per resource, as NVIDIA's plugin
//! (`internal/plugin/server.go`): socket `nvidia-<name after the prefix>.sock` in the device
//! plugin dir, e.g. `nvidia-gpu.sock`, `nvidia-gpu.shared.sock`, `nvidia-mig-1g.10gb.sock`.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

use crate::api::DevicePluginServer;
use crate::error::PluginError;
use crate::served::Served;
use crate::service::{PluginService, Preferrer};

/// How long a stopping server may take to close its connections before it is aborted.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The socket file name of `resource` (`nvidia.com/gpu` → `nvidia-gpu.sock`).
pub fn socket_name(resource: &str) -> Result<String, PluginError> {
    match resource.split_once('/') {
        Some((_, name)) if !name.is_empty() && !name.contains('/') => {
            Ok(format!("nvidia-{name}.sock"))
        }
        _ => Err(PluginError::ResourceName {
            resource: resource.to_string(),
        }),
    }
}

/// A running resource server.
#[derive(Debug)]
pub struct ResourceServer {
    resource: String,
    socket: PathBuf,
    /// (dev, inode) of the socket we bound, so we never remove another process's socket.
    socket_id: Option<(u64, u64)>,
    state: watch::Sender<Arc<Served>>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// (dev, inode) of a socket file, `None` when there is none.
pub fn socket_id(path: &Path) -> Option<(u64, u64)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    m.file_type().is_socket().then(|| (m.dev(), m.ino()))
}

impl ResourceServer {
    /// Binds `<dir>/<socket_name(resource)>` (replacing a stale socket) and serves `served`.
    pub fn start(
        dir: &Path,
        served: Served,
        preferrer: Arc<dyn Preferrer>,
    ) -> Result<Self, PluginError> {
        let resource = served.resource.name.clone();
        let socket = dir.join(socket_name(&resource)?);
        let io_err = |source| PluginError::Socket {
            path: socket.clone(),
            source,
        };
        match std::fs::remove_file(&socket) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(e)),
            _ => {}
        }
        let listener = UnixListener::bind(&socket).map_err(io_err)?;
        let socket_id = socket_id(&socket);
        let (state, rx) = watch::channel(Arc::new(served));
        let svc = PluginService::new(rx, preferrer);
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(svc))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                }),
        );
        tracing::info!(resource = %resource, socket = %socket.display(), "serving");
        Ok(ResourceServer {
            resource,
            socket,
            socket_id,
            state,
            stop,
            task,
        })
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The file name the kubelet is given as `endpoint`.
    pub fn endpoint(&self) -> String {
        self.socket
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Whether our socket file is still there (the kubelet removes every socket of its dir when
    /// it starts).
    pub fn socket_present(&self) -> bool {
        self.socket_id.is_some() && socket_id(&self.socket) == self.socket_id
    }

    /// The state now served.
    pub fn served(&self) -> Arc<Served> {
        self.state.borrow().clone()
    }

    /// Serves `served` from now on; ListAndWatch streams send it when the device list changed.
    pub fn update(&self, served: Served) {
        self.state.send_replace(Arc::new(served));
    }

    /// Ends ListAndWatch streams, stops serving and removes the socket (if still ours).
    pub async fn stop(self) {
        let ResourceServer {
            resource,
            socket,
            socket_id: id,
            state,
            stop,
            mut task,
        } = self;
        drop(state);
        let _ = stop.send(());
        match tokio::time::timeout(STOP_GRACE, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(resource = %resource, error = %e, "server ended with an error")
            }
            Ok(Err(e)) => tracing::warn!(resource = %resource, error = %e, "server task failed"),
            Err(_) => {
                tracing::warn!(resource = %resource, "connections still open after {STOP_GRACE:?}; closing them");
                task.abort();
            }
        }
        if id.is_some() && socket_id(&socket) == id {
            if let Err(e) = std::fs::remove_file(&socket) {
                tracing::warn!(socket = %socket.display(), error = %e, "cannot remove socket");
            }
        }
        tracing::info!(resource = %resource, "stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVIDIA's `getPluginSocketPath`: `nvidia-<name after the prefix>.sock` (kdp-facts §2).
    #[test]
    fn socket_names_follow_nvidia() {
        let name = |r: &str| socket_name(r).unwrap();
        assert_eq!(name("nvidia.com/gpu"), "nvidia-gpu.sock");
        assert_eq!(name("nvidia.com/gpu.shared"), "nvidia-gpu.shared.sock");
        assert_eq!(name("nvidia.com/mig-1g.5gb"), "nvidia-mig-1g.5gb.sock");
        assert!(socket_name("gpu").is_err());
        assert!(socket_name("nvidia.com/a/b").is_err());
    }
}

//! The plugin's two unix sockets (dra-facts §2, the reference helper's layout): the DRA services
//! on `<plugin dir>/dra.sock` (v1, v1beta1 and, when enabled, the health service), and the
//! registration service on `<registry dir>/<driver>-reg.sock`, bound only once the DRA socket
//! serves (the kubelet dials the endpoint as soon as it has read `GetInfo`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

use crate::api::health::DRAResourceHealthServer;
use crate::api::registration::RegistrationServer;
use crate::api::{v1, v1beta1};
use crate::driver::Driver;
use crate::error::DraError;
use crate::health_service::HealthService;
use crate::registration::RegistrationService;
use crate::service::DraService;

/// Where the sockets go.
#[derive(Debug, Clone)]
pub struct Sockets {
    /// The kubelet's plugin watcher dir (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// The plugin's own dir (`/var/lib/kubelet/plugins/gpu.nvidia.com`).
    pub plugin_dir: PathBuf,
}

impl Sockets {
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir.join("dra.sock")
    }
    pub fn registration_socket(&self, driver: &str) -> PathBuf {
        self.registry_dir.join(format!("{driver}-reg.sock"))
    }
}

fn bind(path: &Path) -> Result<UnixListener, DraError> {
    let err = |source| DraError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
        _ => {}
    }
    UnixListener::bind(path).map_err(err)
}

type Task = JoinHandle<Result<(), tonic::transport::Error>>;

/// The running servers.
#[derive(Debug)]
pub struct Servers {
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<Task>,
    paths: Vec<PathBuf>,
    pub registration: RegistrationService,
}

impl Servers {
    /// Serves `driver` (and `health`) and registers with the kubelet's plugin watcher.
    pub fn start(
        driver: Arc<Driver>,
        health: Option<HealthService>,
        sockets: &Sockets,
    ) -> Result<Servers, DraError> {
        let name = driver.options().driver.clone();
        let dra_path = sockets.dra_socket();
        let reg_path = sockets.registration_socket(&name);
        let dra_listener = bind(&dra_path)?;
        let svc = DraService::new(driver);
        let (stop_dra, rx_dra) = oneshot::channel::<()>();
        let builder = tonic::transport::Server::builder()
            .add_service(v1::DRAPluginServer::new(svc.clone()))
            .add_service(v1beta1::DRAPluginServer::new(svc));
        let router = match health.clone() {
            Some(h) => builder.add_service(DRAResourceHealthServer::new(h)),
            None => builder,
        };
        let dra_task = tokio::spawn(router.serve_with_incoming_shutdown(
            UnixListenerStream::new(dra_listener),
            async {
                let _ = rx_dra.await;
            },
        ));
        let registration =
            RegistrationService::new(&name, &dra_path.display().to_string(), health.is_some());
        let reg_listener = bind(&reg_path)?;
        let (stop_reg, rx_reg) = oneshot::channel::<()>();
        let reg_task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(registration.clone()))
                .serve_with_incoming_shutdown(UnixListenerStream::new(reg_listener), async {
                    let _ = rx_reg.await;
                }),
        );
        tracing::info!(dra = %dra_path.display(), registration = %reg_path.display(), "serving");
        Ok(Servers {
            stops: vec![stop_reg, stop_dra],
            tasks: vec![reg_task, dra_task],
            paths: vec![reg_path, dra_path],
            registration,
        })
    }

    /// Stops serving (registration first, so the kubelet sees the plugin go) and removes the
    /// sockets.
    pub async fn stop(self) {
        for (stop, (task, path)) in self
            .stops
            .into_iter()
            .zip(self.tasks.into_iter().zip(self.paths))
        {
            let _ = stop.send(());
            match tokio::time::timeout(std::time::Duration::from_secs(2), task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "server ended with an error"),
                Ok(Err(e)) => tracing::warn!(error = %e, "server task failed"),
                Err(_) => {
                    tracing::warn!(socket = %path.display(), "connections still open; leaving them")
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
}

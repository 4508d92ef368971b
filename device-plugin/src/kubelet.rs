//! Talking to the kubelet: registration on `kubelet.sock`, and gRPC over unix sockets.
//!
//! The kubelet's `Register` handler dials the plugin's socket and calls GetDevicePluginOptions
//! before it answers (`plugin/v1beta1/handler.go:connectClient`, `client.go:Connect`), so a
//! resource's server must be serving before it registers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::api::{self, RegistrationClient};
use crate::error::PluginError;
use crate::service::options;

/// How long a connection or a Register call may take (the kubelet's own dial timeout is 10 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A gRPC channel to the unix socket `path` (connected now, failing after [`CALL_TIMEOUT`]).
pub async fn connect(path: &Path) -> Result<Channel, PluginError> {
    let p = path.to_path_buf();
    // The URI is required by tonic but unused: the connector dials the socket.
    let endpoint = Endpoint::from_static("http://localhost").connect_timeout(CALL_TIMEOUT);
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_| {
        let p = p.clone();
        async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
    }));
    match tokio::time::timeout(CALL_TIMEOUT, connect).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(source)) => Err(PluginError::Connect {
            path: path.to_path_buf(),
            source,
        }),
        Err(_) => Err(PluginError::Timeout {
            path: path.to_path_buf(),
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

/// The kubelet's registration socket in `plugin_dir`.
pub fn kubelet_socket(plugin_dir: &Path) -> PathBuf {
    plugin_dir.join(api::KUBELET_SOCKET)
}

/// Registers `resource`, served on `endpoint` (a socket file name in `plugin_dir`).
pub async fn register(
    plugin_dir: &Path,
    endpoint: &str,
    resource: &str,
) -> Result<(), PluginError> {
    let path = kubelet_socket(plugin_dir);
    let mut client = RegistrationClient::new(connect(&path).await?);
    let req = api::RegisterRequest {
        version: api::VERSION.to_string(),
        endpoint: endpoint.to_string(),
        resource_name: resource.to_string(),
        options: Some(options()),
    };
    match tokio::time::timeout(CALL_TIMEOUT, client.register(req)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(PluginError::Refused {
            resource: resource.to_string(),
            status: Box::new(status),
        }),
        Err(_) => Err(PluginError::Timeout {
            path,
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

//! A fake kubelet: the plugin watcher's registration handshake and the DRA manager's calls,
//! over the plugin's real unix sockets (dra-facts §1–§2: `pluginwatcher`, `dra_plugin_manager.go`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuhook_dra::api::{self, registration::RegistrationClient};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

/// The services this kubelet speaks (1.36: v1 and v1beta1).
pub const KUBELET_SUPPORTS: [&str; 2] = [api::DRA_V1, api::DRA_V1BETA1];

pub async fn dial(path: &Path) -> Channel {
    let p = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let p = p.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .unwrap()
}

/// What the kubelet ended up with.
pub struct Registered {
    pub info: api::PluginInfo,
    /// The version chosen: the first of the plugin's list this kubelet supports.
    pub version: String,
    pub channel: Channel,
    pub reg: RegistrationClient<Channel>,
}

/// Waits for `<dir>/<driver>-reg.sock`, then GetInfo, validation, dial and NotifyRegistrationStatus.
pub async fn register(registry: &Path, driver: &str) -> Registered {
    let sock = registry.join(format!("{driver}-reg.sock"));
    // Generous: a loaded 2-core CI machine starts the plugin slowly.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sock.exists() {
        assert!(
            Instant::now() < deadline,
            "no registration socket {}",
            sock.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut reg = RegistrationClient::new(dial(&sock).await);
    let info = reg
        .get_info(api::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, driver);
    let version = info
        .supported_versions
        .iter()
        .find(|v| KUBELET_SUPPORTS.contains(&v.as_str()))
        .cloned()
        .expect("no supported version: the kubelet rejects the plugin");
    let channel = dial(&PathBuf::from(&info.endpoint)).await;
    reg.notify_registration_status(api::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    Registered {
        info,
        version,
        channel,
        reg,
    }
}

pub fn claim(ns: &str, name: &str, uid: &str) -> api::Claim {
    api::Claim {
        namespace: ns.into(),
        name: name.into(),
        uid: uid.into(),
    }
}

//! `status`: the node's usage report outside the serving process. Health is what the running
//! plugin serves: the first ListAndWatch answer on each resource's socket, as the kubelet reads
//! it; a resource nobody serves has unknown health.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::api::{self, DevicePluginClient};
use crate::usage::Usage;

/// Longest wait for a resource's first device list.
const LIST_TIMEOUT: Duration = Duration::from_secs(3);

/// Health of each device ID in the first list served on `socket`; `None` if nothing answers.
pub async fn served_health(socket: &Path) -> Option<HashMap<String, bool>> {
    let channel = crate::kubelet::connect(socket).await.ok()?;
    let mut client = DevicePluginClient::new(channel);
    let first = async {
        let mut stream = client
            .list_and_watch(api::Empty {})
            .await
            .ok()?
            .into_inner();
        stream.message().await.ok().flatten()
    };
    let list = tokio::time::timeout(LIST_TIMEOUT, first).await.ok()??;
    Some(
        list.devices
            .into_iter()
            .map(|d| (d.id, d.health == api::HEALTHY))
            .collect(),
    )
}

/// Replaces each device's health with what the plugin in `plugin_dir` serves (unknown where
/// it serves nothing for the device).
pub async fn with_served_health(mut u: Usage, plugin_dir: &Path) -> Usage {
    let mut served: HashMap<String, Option<HashMap<String, bool>>> = HashMap::new();
    for d in &mut u.devices {
        if !served.contains_key(&d.resource) {
            let h = match crate::server::socket_name(&d.resource) {
                Ok(name) => served_health(&plugin_dir.join(name)).await,
                Err(_) => None,
            };
            served.insert(d.resource.clone(), h);
        }
        d.healthy = served
            .get(&d.resource)
            .and_then(|h| h.as_ref())
            .and_then(|h| h.get(&d.id).copied());
    }
    u
}

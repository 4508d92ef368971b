//! The kubelet's DRA resource-health service (`v1alpha1.DRAResourceHealth`, KEP-4680,
//! ResourceHealthStatus gate: beta and on in 1.36; dra-facts §1): `NodeWatchResources` streams
//! the health of every published device, now and at every change. The changes come from the
//! same NVML event monitor as the device plugin's (`gpuhook_device_plugin::health`). The devices
//! are the driver's at each report: after a MIG re-partition (`rescan.rs`) the new ones.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::api::{self, health::DRAResourceHealth};
use crate::devices::NodeDevice;
use crate::driver::Driver;

/// Unhealthy devices: UUID (GPU or MIG) → reason.
pub type Unhealthy = BTreeMap<String, String>;

/// The health service.
#[derive(Debug, Clone)]
pub struct HealthService {
    driver: Arc<Driver>,
    state: watch::Receiver<Unhealthy>,
}

/// Seconds since the epoch.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The health of every device under `unhealthy`.
pub fn report(
    pool: &str,
    devices: &[(String, String, String)],
    unhealthy: &Unhealthy,
) -> api::NodeWatchResourcesResponse {
    let t = now();
    api::NodeWatchResourcesResponse {
        devices: devices
            .iter()
            .map(|(name, uuid, gpu)| {
                let bad = unhealthy.get(uuid).or_else(|| unhealthy.get(gpu));
                api::DeviceHealth {
                    device: Some(api::DeviceIdentifier {
                        pool_name: pool.to_string(),
                        device_name: name.clone(),
                    }),
                    health: match bad {
                        Some(_) => api::HealthStatus::Unhealthy as i32,
                        None => api::HealthStatus::Healthy as i32,
                    },
                    last_updated_time: t,
                    health_check_timeout_seconds: 0,
                    message: bad.cloned().unwrap_or_default(),
                }
            })
            .collect(),
    }
}

/// (name, UUID, GPU UUID) of every device in `devices`.
pub fn identities(devices: &[NodeDevice]) -> Vec<(String, String, String)> {
    devices
        .iter()
        .filter(|d| d.offered())
        .map(|d| (d.name.clone(), d.uuid.clone(), d.gpu_uuid.clone()))
        .collect()
}

impl HealthService {
    pub fn new(driver: Arc<Driver>, state: watch::Receiver<Unhealthy>) -> Self {
        HealthService { driver, state }
    }
}

type WatchStream =
    Pin<Box<dyn Stream<Item = Result<api::NodeWatchResourcesResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DRAResourceHealth for HealthService {
    type NodeWatchResourcesStream = WatchStream;

    async fn node_watch_resources(
        &self,
        _: Request<api::NodeWatchResourcesRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let driver = self.driver.clone();
        // The stream never fails: every item is a report.
        #[allow(clippy::result_large_err)]
        let item = move |u: Unhealthy| {
            let devices = identities(&driver.published().0);
            Ok(report(&driver.options().node, &devices, &u))
        };
        let stream = tokio_stream::wrappers::WatchStream::new(self.state.clone()).map(item);
        Ok(Response::new(Box::pin(stream)))
    }
}

//! The `v1beta1.DevicePlugin` service of one resource, as the kubelet's device manager calls it
//! (`pkg/kubelet/cm/devicemanager`): options once on connect, one long ListAndWatch stream, then
//! GetPreferredAllocation and Allocate per pod admission.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use gpuhook_sharing::Resource;
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::allocate::container_response;
use crate::api;
use crate::preferred::AllocationPolicy;
use crate::served::Served;

/// Error of a [`Preferrer`].
pub type PreferError = Box<dyn std::error::Error + Send + Sync>;

/// GetPreferredAllocation's policy for one container request (`preferred.rs` implements the
/// topology- and load-aware one; tests supply their own).
pub trait Preferrer: Send + Sync + 'static {
    /// The `size` IDs to prefer among `available`, `must_include` first, under `policy`
    /// (`sharedDevicesAllocationPolicy`).
    fn preferred(
        &self,
        resource: &Resource,
        policy: AllocationPolicy,
        available: &[String],
        must_include: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferError>;
}

/// The options every resource server answers: GetPreferredAllocation is served,
/// PreStartContainer is not needed.
pub fn options() -> api::DevicePluginOptions {
    api::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

/// One resource's DevicePlugin service; the state comes from a watch channel.
#[derive(Clone)]
pub struct PluginService {
    state: watch::Receiver<Arc<Served>>,
    preferrer: Arc<dyn Preferrer>,
    deadline: Duration,
}

/// Longest GetPreferredAllocation computes (the kubelet waits for it without a deadline).
pub const PREFERRED_DEADLINE: Duration = Duration::from_secs(2);

impl std::fmt::Debug for PluginService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginService")
            .field("resource", &self.state.borrow().resource.name)
            .finish_non_exhaustive()
    }
}

impl PluginService {
    pub fn new(state: watch::Receiver<Arc<Served>>, preferrer: Arc<dyn Preferrer>) -> Self {
        PluginService {
            state,
            preferrer,
            deadline: PREFERRED_DEADLINE,
        }
    }

    /// Another deadline for GetPreferredAllocation (tests).
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    fn current(&self) -> Arc<Served> {
        self.state.borrow().clone()
    }
}

/// Each container request's preference, in order.
fn preferences(
    served: &Served,
    preferrer: &dyn Preferrer,
    requests: &[api::ContainerPreferredAllocationRequest],
) -> Result<api::PreferredAllocationResponse, String> {
    let mut container_responses = Vec::new();
    for req in requests {
        let size = usize::try_from(req.allocation_size)
            .map_err(|_| format!("allocation_size {} is negative", req.allocation_size))?;
        let device_ids = preferrer
            .preferred(
                &served.resource,
                served.settings.policy,
                &req.available_device_ids,
                &req.must_include_device_ids,
                size,
            )
            .map_err(|e| {
                format!(
                    "no preferred allocation for \"{}\": {e}",
                    served.resource.name
                )
            })?;
        container_responses.push(api::ContainerPreferredAllocationResponse { device_ids });
    }
    Ok(api::PreferredAllocationResponse {
        container_responses,
    })
}

type ListStream = Pin<Box<dyn Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl api::DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = ListStream;

    /// The current list at once, then a list each time it changes (health or config). The
    /// stream ends when the server stops (its state sender is dropped).
    async fn list_and_watch(&self, _: Request<api::Empty>) -> Result<Response<ListStream>, Status> {
        let mut last: Option<api::ListAndWatchResponse> = None;
        let stream = tokio_stream::wrappers::WatchStream::new(self.state.clone())
            .map(|served| served.device_list())
            .filter(move |list| {
                let changed = last.as_ref() != Some(list);
                if changed {
                    last = Some(list.clone());
                }
                changed
            })
            .map(Ok);
        Ok(Response::new(Box::pin(stream)))
    }

    /// Computed on a blocking thread (the search and the topology read never hold the async
    /// workers that answer Allocate and ListAndWatch), within [`PREFERRED_DEADLINE`]: past it,
    /// no preference for any container (the kubelet then chooses itself, as after NVIDIA's
    /// empty answer).
    async fn get_preferred_allocation(
        &self,
        request: Request<api::PreferredAllocationRequest>,
    ) -> Result<Response<api::PreferredAllocationResponse>, Status> {
        let served = self.current();
        let requests = request.into_inner().container_requests;
        let count = requests.len();
        let preferrer = self.preferrer.clone();
        let resource = served.resource.name.clone();
        let job = tokio::task::spawn_blocking(move || preferences(&served, &*preferrer, &requests));
        match tokio::time::timeout(self.deadline, job).await {
            Ok(Ok(answer)) => answer.map(Response::new).map_err(Status::invalid_argument),
            Ok(Err(e)) => Err(Status::internal(format!(
                "no preferred allocation for \"{resource}\": {e}"
            ))),
            Err(_) => {
                tracing::warn!(resource = %resource, deadline = ?self.deadline, "no preferred allocation within the deadline; the kubelet chooses");
                Ok(Response::new(api::PreferredAllocationResponse {
                    container_responses: vec![
                        api::ContainerPreferredAllocationResponse::default();
                        count
                    ],
                }))
            }
        }
    }

    async fn allocate(
        &self,
        request: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        let served = self.current();
        let mut container_responses = Vec::new();
        for req in &request.get_ref().container_requests {
            let r = container_response(&served, &req.devices_ids).map_err(|e| {
                tracing::warn!(resource = %served.resource.name, ids = ?req.devices_ids, error = %e, "Allocate refused");
                Status::invalid_argument(e.to_string())
            })?;
            tracing::info!(resource = %served.resource.name, ids = ?req.devices_ids, "allocated");
            container_responses.push(r);
        }
        Ok(Response::new(api::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<api::PreStartContainerRequest>,
    ) -> Result<Response<api::PreStartContainerResponse>, Status> {
        Ok(Response::new(api::PreStartContainerResponse {}))
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;

/// NVIDIA's preference (`crate::preferred`) with the node's NVLink/PCIe topology, read from NVML
/// when a full-GPU request needs it.
impl Preferrer for crate::preferred::TopologyPreferrer {
    fn preferred(
        &self,
        resource: &Resource,
        policy: AllocationPolicy,
        available: &[String],
        must_include: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferError> {
        let with_policy = crate::preferred::TopologyPreferrer {
            policy,
            ..self.clone()
        };
        Ok(with_policy.prefer(resource, available, must_include, size)?)
    }
}

/// NVIDIA's preference without topology (no NVML here): replicas and MIG devices by the
/// policy, full GPUs without link information.
#[derive(Debug, Clone, Copy, Default)]
pub struct WithoutTopology;

impl Preferrer for WithoutTopology {
    fn preferred(
        &self,
        resource: &Resource,
        policy: AllocationPolicy,
        available: &[String],
        must_include: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferError> {
        let p = crate::preferred::preferred_with_policy(
            resource,
            available,
            must_include,
            size,
            None,
            policy,
        )?;
        Ok(p)
    }
}

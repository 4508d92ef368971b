//! The gRPC services on the plugin's `dra.sock`: DRAPlugin v1 and v1beta1 over one [`Driver`],
//! claims of one call prepared concurrently, each claim's failure in its own `error` (a gRPC
//! error would make the kubelet drop the whole answer; dra-facts §1).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::{self, v1, v1beta1};
use crate::driver::{ClaimRef, Driver};

/// Both DRA API versions over one driver.
#[derive(Debug, Clone)]
pub struct DraService {
    driver: Arc<Driver>,
}

impl DraService {
    pub fn new(driver: Arc<Driver>) -> Self {
        DraService { driver }
    }

    /// Prepares every claim of `req`, concurrently.
    pub async fn prepare(
        &self,
        req: api::NodePrepareResourcesRequest,
        with_share_id: bool,
    ) -> api::NodePrepareResourcesResponse {
        let mut tasks = tokio::task::JoinSet::new();
        for c in req.claims {
            let driver = self.driver.clone();
            tasks.spawn(async move {
                let r = ClaimRef {
                    namespace: c.namespace,
                    name: c.name,
                    uid: c.uid,
                };
                let res = driver.prepare(&r).await;
                (r.uid, res)
            });
        }
        let mut out = api::NodePrepareResourcesResponse::default();
        while let Some(joined) = tasks.join_next().await {
            let Ok((uid, res)) = joined else { continue };
            let entry = match res {
                Ok(devices) => api::NodePrepareResourceResponse {
                    devices: devices
                        .into_iter()
                        .map(|d| api::Device {
                            request_names: d.requests,
                            pool_name: d.pool,
                            device_name: d.device,
                            cdi_device_ids: d.cdi_device_ids,
                            share_id: d.share_id.filter(|_| with_share_id),
                        })
                        .collect(),
                    error: String::new(),
                },
                Err(e) => {
                    tracing::warn!(claim = %uid, error = %e, "prepare failed");
                    api::NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error: e.to_string(),
                    }
                }
            };
            out.claims.insert(uid, entry);
        }
        out
    }

    /// Unprepares every claim of `req`, concurrently.
    pub async fn unprepare(
        &self,
        req: api::NodeUnprepareResourcesRequest,
    ) -> api::NodeUnprepareResourcesResponse {
        let mut tasks = tokio::task::JoinSet::new();
        for c in req.claims {
            let driver = self.driver.clone();
            tasks.spawn(async move {
                let res = driver.unprepare(&c.uid).await;
                (c.uid, res)
            });
        }
        let mut out = api::NodeUnprepareResourcesResponse::default();
        while let Some(joined) = tasks.join_next().await {
            let Ok((uid, res)) = joined else { continue };
            let error = match res {
                Ok(()) => String::new(),
                Err(e) => {
                    tracing::warn!(claim = %uid, error = %e, "unprepare failed");
                    e.to_string()
                }
            };
            out.claims
                .insert(uid, api::NodeUnprepareResourceResponse { error });
        }
        out
    }
}

#[tonic::async_trait]
impl v1::DRAPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        request: Request<api::NodePrepareResourcesRequest>,
    ) -> Result<Response<api::NodePrepareResourcesResponse>, Status> {
        Ok(Response::new(
            self.prepare(request.into_inner(), true).await,
        ))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<api::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<api::NodeUnprepareResourcesResponse>, Status> {
        Ok(Response::new(self.unprepare(request.into_inner()).await))
    }
}

#[tonic::async_trait]
impl v1beta1::DRAPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        request: Request<api::NodePrepareResourcesRequest>,
    ) -> Result<Response<api::NodePrepareResourcesResponse>, Status> {
        Ok(Response::new(
            self.prepare(request.into_inner(), false).await,
        ))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<api::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<api::NodeUnprepareResourcesResponse>, Status> {
        Ok(Response::new(self.unprepare(request.into_inner()).await))
    }
}

//! Plugin registration (pluginregistration v1; dra-facts §2): the kubelet's plugin watcher finds
//! `<registry dir>/<driver>-reg.sock`, calls `GetInfo` and learns the DRA socket and the API
//! versions (in our order of preference: the kubelet takes the first it supports), then reports
//! the outcome with `NotifyRegistrationStatus`.

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::api::{self, registration::Registration};

/// The registration service.
#[derive(Debug, Clone)]
pub struct RegistrationService {
    info: api::PluginInfo,
    status: watch::Sender<Option<api::RegistrationStatus>>,
}

/// `supported_versions` in our order: v1 first, v1beta1 for 1.32/1.33 kubelets, then the
/// health service when it is served.
pub fn supported_versions(health: bool) -> Vec<String> {
    let mut v = vec![api::DRA_V1.to_string(), api::DRA_V1BETA1.to_string()];
    if health {
        v.push(api::HEALTH_V1ALPHA1.to_string());
    }
    v
}

impl RegistrationService {
    /// `endpoint` is the absolute path of the DRA socket.
    pub fn new(driver: &str, endpoint: &str, health: bool) -> Self {
        RegistrationService {
            info: api::PluginInfo {
                r#type: api::PLUGIN_TYPE.to_string(),
                name: driver.to_string(),
                endpoint: endpoint.to_string(),
                supported_versions: supported_versions(health),
            },
            status: watch::channel(None).0,
        }
    }

    /// The last status the kubelet reported.
    pub fn status(&self) -> watch::Receiver<Option<api::RegistrationStatus>> {
        self.status.subscribe()
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(
        &self,
        _: Request<api::InfoRequest>,
    ) -> Result<Response<api::PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<api::RegistrationStatus>,
    ) -> Result<Response<api::RegistrationStatusResponse>, Status> {
        let st = request.into_inner();
        if st.plugin_registered {
            tracing::info!(driver = %self.info.name, "registered with the kubelet");
        } else {
            tracing::error!(driver = %self.info.name, error = %st.error, "the kubelet refused the registration");
        }
        let refused = !st.plugin_registered;
        let message = st.error.clone();
        self.status.send_replace(Some(st));
        if refused {
            // As the reference helper: a refusal is answered with an error.
            return Err(Status::internal(format!("registration failed: {message}")));
        }
        Ok(Response::new(api::RegistrationStatusResponse {}))
    }
}

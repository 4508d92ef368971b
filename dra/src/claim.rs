//! The parts of a resource.k8s.io/v1 ResourceClaim the plugin reads (dra-facts §3): its identity
//! and `status.allocation.devices` (results and configs). Unknown fields are ignored (an API
//! object has many); what is read is typed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::DraError;

/// A claim as the API server returns it.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceClaim {
    pub metadata: Meta,
    #[serde(default)]
    pub status: Option<ClaimStatus>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatus {
    #[serde(default)]
    pub allocation: Option<Allocation>,
    /// The consumers the claim is reserved for (pods, for the claim index).
    #[serde(default)]
    pub reserved_for: Vec<ConsumerRef>,
}

/// One `status.reservedFor[]` entry (ResourceClaimConsumerReference).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConsumerRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Allocation {
    #[serde(default)]
    pub devices: Option<DeviceAllocation>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct DeviceAllocation {
    #[serde(default)]
    pub results: Vec<AllocationResult>,
    #[serde(default)]
    pub config: Vec<AllocationConfig>,
}

/// One allocated device (`status.allocation.devices.results[]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationResult {
    /// `<request>` or `<request>/<subrequest>`.
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[serde(default)]
    pub admin_access: Option<bool>,
    /// Consumable capacity (KEP-5075): the share of a multi-allocatable device.
    #[serde(default, rename = "shareID")]
    pub share_id: Option<String>,
    #[serde(default)]
    pub consumed_capacity: Option<BTreeMap<String, Value>>,
}

impl AllocationResult {
    /// The request name without a sub-request (`gpu/big` → `gpu`).
    pub fn parent_request(&self) -> &str {
        self.request.split('/').next().unwrap_or(&self.request)
    }
}

/// One config of the allocation (`FromClass` or `FromClaim`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationConfig {
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub requests: Vec<String>,
    #[serde(default)]
    pub opaque: Option<OpaqueConfig>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OpaqueConfig {
    pub driver: String,
    #[serde(default)]
    pub parameters: Value,
}

/// `FromClass` configs come before `FromClaim` ones: lower precedence first (dra-facts §5,
/// `GetOpaqueDeviceConfigs`).
pub fn ordered_configs<'a>(
    configs: &'a [AllocationConfig],
    driver: &str,
) -> Vec<&'a AllocationConfig> {
    let ours = |c: &&AllocationConfig| c.opaque.as_ref().is_some_and(|o| o.driver == driver);
    let class = configs
        .iter()
        .filter(ours)
        .filter(|c| c.source == "FromClass");
    let claim = configs
        .iter()
        .filter(ours)
        .filter(|c| c.source != "FromClass");
    class.chain(claim).collect()
}

/// The claim `namespace/name` with UID `uid`, parsed from the API server's JSON, after checking
/// that it is the one the kubelet means.
pub fn parse_claim(
    value: Value,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<ResourceClaim, DraError> {
    let claim: ResourceClaim = serde_json::from_value(value).map_err(|e| DraError::Invalid {
        what: "ResourceClaim",
        value: format!("{namespace}/{name}"),
        why: e.to_string(),
    })?;
    if claim.metadata.uid != uid
        || claim.metadata.namespace != namespace
        || claim.metadata.name != name
    {
        return Err(DraError::UidMismatch {
            namespace: namespace.into(),
            name: name.into(),
            found: format!(
                "{} ({}/{})",
                claim.metadata.uid, claim.metadata.namespace, claim.metadata.name
            ),
            wanted: uid.into(),
        });
    }
    Ok(claim)
}

impl ResourceClaim {
    /// The allocation, or an error when the claim is not allocated.
    pub fn allocation(&self) -> Result<&DeviceAllocation, DraError> {
        self.status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .ok_or_else(|| DraError::NotAllocated {
                namespace: self.metadata.namespace.clone(),
                name: self.metadata.name.clone(),
            })
    }

    /// The pods (name, UID) the claim is reserved for.
    pub fn pods(&self) -> Vec<(String, String)> {
        let all = self.status.iter().flat_map(|s| &s.reserved_for);
        all.filter(|r| r.resource == "pods")
            .map(|r| (r.name.clone(), r.uid.clone()))
            .collect()
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }
}

/// The results of `driver` (devices of other drivers belong to their plugins).
pub fn results_for<'a>(
    alloc: &'a DeviceAllocation,
    driver: &str,
) -> impl Iterator<Item = &'a AllocationResult> {
    let driver = driver.to_string();
    alloc.results.iter().filter(move |r| r.driver == driver)
}

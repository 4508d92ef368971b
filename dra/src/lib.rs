//! A Kubernetes DRA (Dynamic Resource Allocation) kubelet plugin for the driver
//! `gpu.nvidia.com`, so that NVIDIA's DeviceClasses and example claims work unchanged on
//! gpuhook nodes: full GPUs, MIG devices, and MPS or time-sliced shares of them as
//! ResourceClaims (resource.k8s.io/v1).
//!
//! - [`server`]/[`registration`]/[`service`]: the kubelet-facing gRPC (plugin registration,
//!   DRAPlugin v1 and v1beta1, [`health_service`]).
//! - [`driver`]: prepare/unprepare, per-claim locks, [`checkpoint`], [`plan`] (what a claim gets,
//!   decided before any change), [`cdi_claim`] (one CDI spec per claim), [`mps`] (one MPS control
//!   daemon per claim, limits before the first client; [`mps_share`]: one per GPU for its
//!   consumable-capacity shares; both held by [`mps_daemons`], supervised by [`mps_supervise`]),
//!   [`timeslice`].
//! - [`partition`]/[`slot`]/[`dynmig`]/[`sweep`]: partitionable MIG devices (KEP-4815), made at
//!   prepare, destroyed at unprepare or at start when their claim is gone.
//! - [`devices`]/[`slices`]/[`publish`]: this node's ResourceSlices.
//! - [`kube`]: the API-server calls, behind the [`kube::Cluster`] trait.
//! - [`claim`]/[`config`]/[`quantity`]: the ResourceClaim and NVIDIA's opaque config.

pub mod api;
pub mod cdi_claim;
pub mod checkpoint;
pub mod claim;
pub mod claimwatch;
pub mod config;
pub mod devices;
pub mod driver;
pub mod dynmig;
pub mod error;
pub mod health_service;
pub mod kube;
pub mod layout;
pub mod modes;
pub mod mps;
pub mod mps_daemons;
pub mod mps_node;
pub mod mps_share;
pub mod mps_supervise;
pub mod partition;
pub mod plan;
pub mod podindex;
pub mod publish;
pub mod quantity;
pub mod registration;
pub mod rescan;
pub mod resolve;
pub mod run;
pub mod server;
pub mod service;
pub mod slices;
pub mod slot;
pub mod sweep;
pub mod testkit;
pub mod timeslice;

/// The driver name (NVIDIA's GPU DRA driver's).
pub const DRIVER_NAME: &str = "gpu.nvidia.com";

//! Generates the tonic client and server code of the kubelet's DRA plugin API (v1 and v1beta1),
//! the plugin-registration API and the DRA resource-health API from the service descriptions
//! below (no protoc: the messages are hand-written in `src/api.rs`). The output goes to OUT_DIR.
//!
//! Packages and routes are the wire contract of `k8s.io/kubelet` (dra-facts §1, §2):
//! `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`, `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`,
//! `pluginregistration.Registration`, `v1alpha1.DRAResourceHealth`.

use tonic_build::manual::{Builder, Method, Service};

const CODEC: &str = "tonic::codec::ProstCodec";

fn method(name: &str, route: &str, input: &str, output: &str) -> Method {
    Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("crate::api::{input}"))
        .output_type(format!("crate::api::{output}"))
        .codec_path(CODEC)
        .build()
}

fn dra(package: &str) -> Service {
    Service::builder()
        .name("DRAPlugin")
        .package(package)
        .method(method(
            "node_prepare_resources",
            "NodePrepareResources",
            "NodePrepareResourcesRequest",
            "NodePrepareResourcesResponse",
        ))
        .method(method(
            "node_unprepare_resources",
            "NodeUnprepareResources",
            "NodeUnprepareResourcesRequest",
            "NodeUnprepareResourcesResponse",
        ))
        .build()
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    gpuhook_build::link_unwinder_statically();
    let registration = Service::builder()
        .name("Registration")
        .package("pluginregistration")
        .method(method("get_info", "GetInfo", "InfoRequest", "PluginInfo"))
        .method(method(
            "notify_registration_status",
            "NotifyRegistrationStatus",
            "RegistrationStatus",
            "RegistrationStatusResponse",
        ))
        .build();
    let health = Service::builder()
        .name("DRAResourceHealth")
        .package("v1alpha1")
        .method(
            Method::builder()
                .name("node_watch_resources")
                .route_name("NodeWatchResources")
                .input_type("crate::api::NodeWatchResourcesRequest")
                .output_type("crate::api::NodeWatchResourcesResponse")
                .codec_path(CODEC)
                .server_streaming()
                .build(),
        )
        .build();
    Builder::new().compile(&[
        dra("k8s.io.kubelet.pkg.apis.dra.v1"),
        dra("k8s.io.kubelet.pkg.apis.dra.v1beta1"),
        registration,
        health,
    ]);
}

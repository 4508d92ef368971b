//! Generates the tonic client and server code of the kubelet device plugin API v1beta1 from the
//! service descriptions below (no protoc: the messages are hand-written in `src/api.rs`). The
//! output goes to OUT_DIR and is never committed.
//!
//! Services, methods and routes are the wire contract of `k8s.io/kubelet`
//! `pkg/apis/deviceplugin/v1beta1/api.proto` (package `v1beta1`), see `src/api.rs`.

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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    gpuhook_build::link_unwinder_statically();
    let registration = Service::builder()
        .name("Registration")
        .package("v1beta1")
        .method(method("register", "Register", "RegisterRequest", "Empty"))
        .build();
    let list_and_watch = Method::builder()
        .name("list_and_watch")
        .route_name("ListAndWatch")
        .input_type("crate::api::Empty")
        .output_type("crate::api::ListAndWatchResponse")
        .codec_path(CODEC)
        .server_streaming()
        .build();
    let device_plugin = Service::builder()
        .name("DevicePlugin")
        .package("v1beta1")
        .method(method(
            "get_device_plugin_options",
            "GetDevicePluginOptions",
            "Empty",
            "DevicePluginOptions",
        ))
        .method(list_and_watch)
        .method(method(
            "get_preferred_allocation",
            "GetPreferredAllocation",
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
        ))
        .method(method(
            "allocate",
            "Allocate",
            "AllocateRequest",
            "AllocateResponse",
        ))
        .method(method(
            "pre_start_container",
            "PreStartContainer",
            "PreStartContainerRequest",
            "PreStartContainerResponse",
        ))
        .build();
    // The kubelet's pod-resources API v1 (`k8s.io/kubelet` `pkg/apis/podresources/v1/api.proto`,
    // package `v1`), messages in `src/podresources.rs`.
    let pod_resources = Service::builder()
        .name("PodResourcesLister")
        .package("v1")
        .method(
            Method::builder()
                .name("list")
                .route_name("List")
                .input_type("crate::podresources::ListPodResourcesRequest")
                .output_type("crate::podresources::ListPodResourcesResponse")
                .codec_path(CODEC)
                .build(),
        )
        .build();
    Builder::new().compile(&[registration, device_plugin, pod_resources]);
}

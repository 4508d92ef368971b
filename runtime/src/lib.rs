//! gpuhook's container-engine configuration: `gpuhook runtime configure` registers the runc
//! wrapper (`gpuhook-runtime`, crate `gpuhook-wrapper` in `wrapper/`) as a containerd runtime by
//! editing containerd's TOML config in place (comments and unrelated settings kept), for each
//! config version ([`configure`]); as a Docker runtime in `daemon.json` and a CRI-O runtime
//! handler ([`engine`]); and writes the OCI hook file of podman's and CRI-O's hooks directories
//! ([`oci_hook`]). Every file goes through one publisher ([`publish`]).
//!
//! The wrapper itself is not here: it depends on the request parser, the prestart code and the
//! node config of the `gpuhook` library, which depends on this crate for `runtime configure` and
//! `doctor`.

pub mod configure;
pub mod engine;
pub mod json_order;
pub mod oci_hook;
pub mod timestamp;

pub use configure::publish;
pub use engine::{crio, docker};

pub use configure::{
    configure, plan, ConfigVersion, ConfigureError, ConfigureOptions, ConfigureOutcome, FileChange,
    DEFAULT_BINARY, DEFAULT_CONFIG, DEFAULT_DROP_IN, DEFAULT_RUNTIME_NAME, EXIT_CHANGED,
    EXIT_ERROR, EXIT_UNCHANGED,
};

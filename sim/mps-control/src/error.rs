//! Why a command, a client's limits or the daemon's settings were refused. The texts are the
//! replies and messages the daemon prints (shaped like NVIDIA's), so each variant's message is
//! the whole reply: nothing wraps or repeats it.

use std::path::PathBuf;

/// A value of a limit (a percentage, a memory size, a device) that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error(
        "Invalid active thread percentage '{0}': expected a number greater than 0 and at most 100"
    )]
    Percentage(String),
    #[error(
        "Invalid memory limit '{0}': expected an integer with a unit K, M, G or T (e.g. 4096M, 2G)"
    )]
    Memory(String),
    #[error("Invalid device '{0}'")]
    Device(String),
    #[error("Invalid device '{dev}': this daemon serves {count} device(s) (CUDA_VISIBLE_DEVICES)")]
    DeviceOrdinal { dev: String, count: usize },
    #[error("Invalid device '{0}': not in this daemon's CUDA_VISIBLE_DEVICES")]
    DeviceNotVisible(String),
    #[error("Invalid device '{0}': expected a device ordinal or a GPU-/MIG- UUID")]
    DeviceName(String),
    #[error("Invalid CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry '{0}': expected <device>=<value>")]
    PinnedEntry(String),
}

/// A command the daemon refuses; the message is its reply.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("Invalid or missing PID argument")]
    Pid,
    #[error("Server {0} not found")]
    NoServer(u32),
    #[error("Client {0} not found")]
    NoClient(u32),
    #[error("Client {client} not found on server {server}")]
    NotOnServer { client: u32, server: u32 },
    #[error("Invalid user id '{0}'")]
    Uid(String),
    #[error("An MPS server for user {uid} is already running (pid {pid}); only one server can be active at a time")]
    OtherUser { uid: u32, pid: u32 },
    #[error("Failed to start nvidia-cuda-mps-server: {0}")]
    StartServer(String),
    #[error("Invalid timeout '{0}'")]
    Timeout(String),
    #[error("Invalid client priority '{0}': expected 0 or 1")]
    Priority(String),
    #[error("Wrong number of arguments for command {0}")]
    Arguments(String),
    #[error("Unrecognized command: {0}")]
    Unknown(String),
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// A connecting client's request line that cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("invalid pid '{0}'")]
    Pid(String),
    #[error("invalid uid '{0}'")]
    Uid(String),
    #[error("poisoned")]
    Poisoned,
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// A setting of the daemon from its environment that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("MPS control socket path {} is {len} bytes long; unix socket paths must be at most {max} bytes: set CUDA_MPS_PIPE_DIRECTORY to a shorter directory", path.display())]
    SocketPath {
        path: PathBuf,
        len: usize,
        max: usize,
    },
    #[error("Invalid GPUHOOK_SIM_MPS_FAULT '{0}': expected wedge-after:N, crash-after:N, ignore-uuid-limits or ignore-env-limits")]
    Fault(String),
}

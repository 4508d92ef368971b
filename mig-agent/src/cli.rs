//! The `gpuhook-mig-manager` command line. Flags take NVIDIA's environment variables where
//! k8s-mig-manager has one (`NODE_NAME`, `CONFIG_FILE`, `WITH_REBOOT`), so its DaemonSet env
//! carries over.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::agent::{Agent, Timing};
use crate::holders::HolderSources;
use crate::host::{Argv, NodeHost};
use crate::layout::MigParted;
use crate::node::KubeNode;
use crate::reconcile::{Reconciler, Settings};

/// Follows the Node's nvidia.com/mig.config label: applies the named MIG config of the mounted
/// mig-parted config file, pausing and restoring the GPU clients, and reports
/// nvidia.com/mig.config.state.
#[derive(Debug, Parser)]
#[command(
    name = "gpuhook-mig-manager",
    version,
    after_help = "Examples:\n  \
    gpuhook-mig-manager --node-name $NODE_NAME --config-file /mig-parted-config/config.yaml \\\n      \
    --driver-root /host --host-root /host \\\n      \
    --cdi-refresh /usr/local/nvidia-gpuhook/bin/gpuhook --cdi-refresh-arg cdi --cdi-refresh-arg generate"
)]
pub struct Args {
    /// This node's name (the pod's spec.nodeName through the downward API)
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The mig-parted config file (a mounted ConfigMap key), re-read at every run
    #[arg(
        long,
        env = "CONFIG_FILE",
        default_value = "/mig-parted-config/config.yaml"
    )]
    pub config_file: PathBuf,
    /// The driver root: NVML is loaded from it only
    #[arg(long, default_value = "/")]
    pub driver_root: PathBuf,
    /// This NVML library instead of the driver root's (tests)
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// The host's /proc (the pod runs with hostPID), scanned for the GPU clients' processes
    #[arg(long, default_value = "/proc")]
    pub host_proc: PathBuf,
    /// gpuhook's MPS root (a GPU the MPS daemon serves has a directory there)
    #[arg(long, default_value = "/run/gpuhook/mps")]
    pub mps_root: PathBuf,
    /// Run --cdi-refresh and --reboot chrooted into this directory (the host's root mounted in
    /// the pod), so their programs are host paths
    #[arg(long, value_name = "DIR")]
    pub host_root: Option<PathBuf>,
    /// The program that regenerates the CDI spec and inventory after a change (gpuhook)
    #[arg(long, value_name = "PROGRAM")]
    pub cdi_refresh: Option<PathBuf>,
    /// An argument of --cdi-refresh (repeat, in order)
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub cdi_refresh_arg: Vec<String>,
    /// Reboot the node when a MIG mode change needs it (once per config)
    #[arg(long, env = "WITH_REBOOT", default_value_t = false)]
    pub with_reboot: bool,
    /// The reboot command's program
    #[arg(long, value_name = "PROGRAM", default_value = "/usr/bin/systemctl")]
    pub reboot: PathBuf,
    /// An argument of --reboot (repeat; default: reboot)
    #[arg(long, value_name = "ARG")]
    pub reboot_arg: Vec<String>,
    /// The kubelet's pod-resources socket: a MIG device the kubelet allocated to a running pod
    /// is not destroyed (unless --drain); no socket there: no pod is checked
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock"
    )]
    pub pod_resources_socket: PathBuf,
    /// Destroy MIG devices (and change MIG modes) even when processes, pods or MPS clients hold
    /// them
    #[arg(long, env = "DRAIN", default_value_t = false)]
    pub drain: bool,
    /// Seconds the paused GPU clients get to stop
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub client_timeout: u64,
    /// Seconds between two reads of the Node
    #[arg(long, value_name = "SECS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub poll: u64,
    /// Longest wait between two retries of a failed config, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub max_backoff: u64,
    /// Namespace of the Events about the Node (the pod's; none: no Events)
    #[arg(long, env = "POD_NAMESPACE")]
    pub events_namespace: Option<String>,
    /// API server for tests: http://127.0.0.1:PORT (default: in-cluster config)
    #[arg(long, hide = true)]
    pub api_server: Option<String>,
}

impl Args {
    /// The agent these flags describe.
    pub fn agent(&self) -> anyhow::Result<Agent> {
        let client = match &self.api_server {
            Some(url) => gpuhook_kube::Client::loopback(url)?,
            None => gpuhook_kube::Client::in_cluster()?,
        };
        let api = KubeNode::new(client, &self.node_name, self.events_namespace.as_deref())?;
        let reboot_args = if self.reboot_arg.is_empty() {
            vec!["reboot".to_string()]
        } else {
            self.reboot_arg.clone()
        };
        let host = NodeHost {
            proc_root: self.host_proc.clone(),
            mps_root: self.mps_root.clone(),
            cdi_refresh: self.cdi_refresh.clone().map(|program| Argv {
                program,
                args: self.cdi_refresh_arg.clone(),
                root: self.host_root.clone(),
            }),
            reboot: Argv {
                program: self.reboot.clone(),
                args: reboot_args,
                root: self.host_root.clone(),
            },
        };
        let layout = MigParted {
            config_file: self.config_file.clone(),
            driver_root: self.driver_root.clone(),
            nvml_lib: self.nvml_lib.clone(),
            holders: HolderSources {
                pod_resources: Some(self.pod_resources_socket.clone()),
                mps_status: Some(gpu_mps_daemon::layout::status_path(&self.mps_root)),
                proc_root: self.host_proc.clone(),
            },
            drain: self.drain,
        };
        let reconciler = Reconciler {
            api: Box::new(api),
            layout: Box::new(layout),
            host: Box::new(host),
            settings: Settings {
                with_reboot: self.with_reboot,
                client_timeout: Duration::from_secs(self.client_timeout),
                client_poll: Duration::from_secs(1),
                stop: Arc::new(AtomicBool::new(false)),
            },
        };
        let timing = Timing {
            poll: Duration::from_secs(self.poll),
            min_backoff: Duration::from_secs(10).min(Duration::from_secs(self.max_backoff)),
            max_backoff: Duration::from_secs(self.max_backoff),
        };
        Ok(Agent::new(reconciler, timing))
    }
}

/// The binary's `main`.
pub fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match args.agent() {
        Ok(mut agent) => {
            on_sigterm(&agent.reconciler.settings.stop);
            tracing::info!(node = %args.node_name, config = %args.config_file.display(), "MIG manager started");
            agent.run();
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            ExitCode::FAILURE
        }
    }
}

/// The flag SIGTERM and SIGINT set (a signal handler can only touch a static).
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn signalled(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Relaxed);
}

/// Copies SIGTERM/SIGINT into `stop`: a watcher thread polls the static the handler sets.
fn on_sigterm(stop: &Arc<AtomicBool>) {
    let handler = signalled as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
    let stop = stop.clone();
    std::thread::spawn(move || loop {
        if SIGNALLED.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    });
}

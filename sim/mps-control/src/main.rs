//! `sim-nvidia-cuda-mps-control`: a simulator of NVIDIA's `nvidia-cuda-mps-control`, used in
//! simulated driver roots as `usr/bin/nvidia-cuda-mps-control` so that `gpu-mps-daemon` can
//! drive it exactly like the real binary (same CLI, environment, files, log format and
//! command replies) on machines without a GPU.
//!
//! Real behaviour reproduced: `-d` / `-f`, client mode on stdin, `CUDA_MPS_PIPE_DIRECTORY`
//! (`control` socket, `control_lock`, `nvidia-cuda-mps-control.pid`), `CUDA_MPS_LOG_DIRECTORY`
//! (`control.log`, `server.log`), `CUDA_VISIBLE_DEVICES`, one server at a time with other
//! uids queued, defaults applying to later servers and per-server settings to later clients,
//! a pipe directory and control socket every user can reach, clients identified by
//! `SO_PEERCRED`, and servers running as their client's user.
//!
//! Simulation-only extensions (never needed by product code; see `--help`):
//! * `--sim-client --uid U [--pid P] [--hold SECONDS]`: a CUDA application stand-in;
//! * `--sim-server --uid U`: the server processes the daemon spawns (argv[0]
//!   `nvidia-cuda-mps-server`);
//! * commands `sim_get_client_limits <pid>`, `sim_get_pending_list`, `sim_crash`, `sim_wedge`;
//! * `GPUHOOK_SIM_MPS_FAULT=wedge-after:N|crash-after:N|ignore-uuid-limits|ignore-env-limits`;
//! * `GPUHOOK_SIM_MPS_HOLD[_COMMANDS]=<file>`: a daemon start (client-mode command) held
//!   while the file exists (`config`);
//! * the GPU's compute mode (read through the node's NVML) decides whether a client without a
//!   daemon, or an MPS server, may create a context (`context`);
//! * `GPUHOOK_SIM_MPS_GPU_REGISTRY=<dir>`: one simulated node's record of which (user, GPU) a
//!   control daemon serves, so a second daemon of a GPU and user is refused (`gpus`).
//!
//! The wire protocol on the `control` socket is the simulator's own (see `daemon`): only the
//! binary talks it, so callers depend on the CLI and the reply texts, as with the real one.

mod client;
mod commands;
mod config;
mod context;
mod daemon;
mod error;
mod gpus;
mod limits;
mod log;
mod state;
mod users;

use config::Paths;

const HELP: &str = "\
sim-nvidia-cuda-mps-control: simulator of nvidia-cuda-mps-control (gpuhook test support)

USAGE:
  nvidia-cuda-mps-control -d      start the control daemon in the background
  nvidia-cuda-mps-control -f      run the control daemon in the foreground
  nvidia-cuda-mps-control         client mode: commands on stdin, replies on stdout
                                  (exit 1 and \"Cannot find MPS control daemon process\"
                                  on stderr when no daemon answers)

ENVIRONMENT:
  CUDA_MPS_PIPE_DIRECTORY  socket dir (default /tmp/nvidia-mps): control, control_lock,
                           nvidia-cuda-mps-control.pid; socket path must be < 108 bytes
  CUDA_MPS_LOG_DIRECTORY   log dir (default /var/log/nvidia-mps): control.log, server.log
  CUDA_VISIBLE_DEVICES     devices served (ordinals/UUIDs accepted by *_pinned_mem_limit)
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (\"0=1G,1=512M\")
                           in the daemon's environment: its defaults from the start (as
                           set_default_* would set them); in a client's: that client's limits

COMMANDS:
  get_server_list | get_server_status <pid> | start_server -uid <uid>
  get_client_list <server-pid> | ps | quit [-t <seconds>]
  set_default_active_thread_percentage <pct>   (prints the value, e.g. 25.0)
  get_default_active_thread_percentage
  set_active_thread_percentage <server-pid> <pct> | get_active_thread_percentage <server-pid>
  set_default_device_pinned_mem_limit <dev> <value>   (value like 4096M, 2G)
  get_default_device_pinned_mem_limit <dev>            (prints e.g. 4096M; 0M = no limit)
  set_device_pinned_mem_limit <server-pid> <dev> <value>
  get_device_pinned_mem_limit <server-pid> <dev>
  terminate_client <server-pid> <client-pid>   (prints 0)
  set_default_client_priority 0|1 | get_default_client_priority

SIMULATION-ONLY EXTENSIONS:
  --sim-client --uid U [--pid P] [--hold SECONDS]
        act as a CUDA application: read CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
        CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (\"0=1G,1=512M\"), join or wait for a server of uid U
        as client pid P (default: own pid); prints \"pending\" while queued, then
        \"server=<pid> active_thread_percentage=<p> pinned_mem_limit=<dev>=<n>M,..|none\";
        exits 0 after --hold seconds (default: stay until terminated), 2 when terminated
        (terminate_client, quit), 3 when the daemon vanished, 4 when no daemon (runs without
        MPS), 5 refused, 6 when no daemon and the GPU's compute mode refuses it a context
        (PROHIBITED; EXCLUSIVE_PROCESS while an MPS server holds one). The GPU is the first
        CUDA_VISIBLE_DEVICES entry (UUID or ordinal; default 0), its compute mode read through
        libnvidia-ml.so.1 (the node's NVML); no NVML: DEFAULT. An MPS server refused a context
        by the compute mode refuses its clients (exit 5).
  --sim-server --uid U
        internal: MPS server stand-in spawned by the daemon (lives until its stdin closes)
  sim_get_client_limits <client-pid>
        prints \"active_thread_percentage=<p> pinned_mem_limit=<limits>\" (effective values)
  sim_get_pending_list   pids of clients waiting for a server
  sim_crash              daemon exits at once, leaving socket and pid file behind
  sim_wedge              daemon keeps accepting connections but never answers again
  GPUHOOK_SIM_MPS_FAULT=wedge-after:N | crash-after:N | ignore-uuid-limits | ignore-env-limits
        wedge or crash when the (N+1)th command arrives; or accept pinned memory limits
        given by UUID without applying them (a bug of some drivers); or ignore the limits in
        the daemon's own environment (start with defaults 100 / no pinned limit)

  GPUHOOK_SIM_MPS_HOLD=<file>, GPUHOOK_SIM_MPS_HOLD_COMMANDS=<file>
        while <file> exists, -d/-f waits before binding its socket (a slow start), or client
        mode before it connects (a slow command); either writes <file>.waiting first
  GPUHOOK_SIM_MPS_GPU_REGISTRY=<dir>
        the simulated node's record of daemons per (user, GPU) and of MPS servers' contexts
        (EXCLUSIVE_PROCESS: one context per GPU)

NOTES:
  -f also prints control.log/server.log lines on stdout. Errors are reported as reply text
  (client mode still exits 0); `quit` removes socket and pid file before it answers.
  The pipe directory and the control socket are made 0777 (every user may connect). A client
  is the user it runs as (SO_PEERCRED); only a root client may name another uid with --uid.
  A non-root client's server runs as that user (when the daemon is root) and must reach
  <pipe dir>/control as that user, or it fails to start and the client is refused (exit 5);
  a server for a uid named by root runs as the daemon's user (the uid is recorded).
";

fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn sim_client(paths: &Paths, args: &[String]) -> anyhow::Result<i32> {
    let uid = match flag_value(args, "--uid") {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("--uid: invalid user id '{v}'"))?,
        // SAFETY: getuid has no preconditions and cannot fail.
        None => unsafe { libc::getuid() },
    };
    let pid = match flag_value(args, "--pid") {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("--pid: invalid pid '{v}'"))?,
        None => std::process::id(),
    };
    let hold = flag_value(args, "--hold")
        .map(|v| {
            v.parse::<f64>()
                .map_err(|_| anyhow::anyhow!("--hold: invalid number of seconds '{v}'"))
        })
        .transpose()?;
    Ok(client::sim_client(
        paths,
        &client::SimClient { uid, pid, hold },
    ))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let paths = Paths::from_env();
    let result = match args.first().map(String::as_str) {
        None => Ok(client::ui(&paths)),
        Some("-h" | "--help") => {
            print!("{HELP}");
            Ok(0)
        }
        Some("-d") => daemon::run(&paths, true),
        Some("-f") => daemon::run(&paths, false),
        Some("--sim-client") => sim_client(&paths, &args[1..]),
        Some("--sim-server") => Ok(client::sim_server()),
        Some(other) => Err(anyhow::anyhow!(
            "unknown option '{other}': run with --help for usage"
        )),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("{e:#}");
            std::process::exit(1);
        }
    }
}

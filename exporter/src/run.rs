//! Start-up: counters, NVML from the driver root, the node's GPUs, the collector and Xid
//! threads, the pod-naming task, then the endpoint. Every start-up error names what to fix and
//! stops the exporter; after start it keeps serving whatever fails.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use gpuhook_node::{NodeError, Nvml, NvmlLocation};

use crate::cli::{AddressError, Args};
use crate::collect::{Collector, Settings};
use crate::counters::{Counters, CountersError};
use crate::fields::Source;
use crate::http::Endpoint;
use crate::page::render;
use crate::pods::Names;
use crate::render::View;

/// Why the exporter did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Counters(#[from] CountersError),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Nvml(#[from] NodeError),
    #[error("cannot listen on {addr}: {error}; pick another --address")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// The node's name for the `Hostname` label: `NODE_NAME`, else the kernel's host name.
pub fn hostname() -> String {
    if let Some(n) = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()) {
        return n;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Everything the page is rendered from.
#[derive(Debug)]
pub struct State {
    pub collector: Arc<Collector>,
    pub counters: Counters,
    pub hostname: Option<String>,
    pub driver_version: String,
    pub names: Option<Names>,
}

impl State {
    pub fn page(&self) -> String {
        let names = self
            .names
            .as_ref()
            .map(|n| n.read().unwrap_or_else(|p| p.into_inner()).clone());
        render(&View {
            collector: &self.collector,
            counters: &self.counters,
            hostname: self.hostname.as_deref(),
            driver_version: &self.driver_version,
            pods: names.as_ref(),
            now: Instant::now(),
        })
    }
}

/// Loads everything and starts the collector threads.
pub fn start(args: &Args) -> Result<State, StartError> {
    let counters = Counters::load(&args.collectors)?;
    if let Some(msg) = counters.refused_message() {
        tracing::warn!("{msg}");
    }
    let loc = NvmlLocation::locate(&args.driver_root, args.nvml_lib.as_deref())?;
    let nvml = Arc::new(Nvml::load(&loc)?);
    let driver_version = nvml.driver_version()?;
    let mut gpus = crate::devices::read_all(&nvml)?;
    if args.replace_blanks_in_model_name {
        for g in &mut gpus {
            g.model = g.model.replace(' ', "-");
        }
    }
    tracing::info!(gpus = gpus.len(), nvml = %loc.path().display(), %driver_version, "serving GPU telemetry");
    let xid_table = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
    let wants_xid = counters
        .values
        .iter()
        .any(|c| c.source == Source::XidErrors);
    let xid = wants_xid && crate::xid::start(Arc::clone(&nvml), &gpus, Arc::clone(&xid_table));
    let settings = Settings {
        interval: args.interval(),
        timeout: Duration::from_millis(args.nvml_timeout),
        processes: args.kubernetes,
        proc_root: args.proc_root.clone(),
        xid,
    };
    let collector = Arc::new(Collector::new(gpus, settings, xid_table));
    collector.start(nvml, Arc::new(counters.values.clone()));
    Ok(State {
        collector,
        counters,
        hostname: (!args.no_hostname).then(hostname),
        driver_version,
        names: args
            .kubernetes
            .then(|| Arc::new(RwLock::new(HashMap::new()))),
    })
}

/// Starts and serves until SIGTERM or SIGINT.
pub fn run(args: &Args) -> Result<(), StartError> {
    let addr = args.listen()?;
    let state = Arc::new(start(args)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|error| StartError::Listen { addr, error })?;
        tracing::info!(%addr, "listening");
        if let Some(names) = &state.names {
            let task = crate::pods::run(
                args.cri_socket.clone(),
                Arc::clone(&state.collector),
                Arc::clone(names),
            );
            tokio::spawn(task);
        }
        let s = Arc::clone(&state);
        let ep = Arc::new(Endpoint::new(
            Box::new(move || s.page()),
            Duration::from_millis(args.scrape_cache),
        ));
        tokio::select! {
            () = crate::http::serve(listener, ep) => {}
            () = stop_signal() => tracing::info!("stopping"),
        }
        Ok(())
    })
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

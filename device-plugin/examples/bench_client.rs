//! Benchmark client for `scripts/bench-device-plugin.sh`: plays the kubelet's device manager
//! (registration server on `kubelet.sock`, then ListAndWatch and Allocate over the plugin's
//! socket) around a plugin it starts itself, and prints what it measured as `key=value` lines:
//!
//! - `start_to_registration_ms`: from spawning the plugin to its Register call;
//! - `alloc_p50_ms`, `alloc_p99_ms`, `alloc_mean_ms`: Allocate round trips, one replica each,
//!   cycling over every advertised ID (after a warm-up);
//! - `xid_to_unhealthy_ms`: from appending a critical Xid to the mock NVML's events file to the
//!   ListAndWatch update that shows the GPU Unhealthy;
//! - `vm_hwm_kb`, `vm_rss_kb`: the plugin's peak and current RSS (`/proc/<pid>/status`).
//! - with `SCRAPERS=N SCRAPE_ADDR=HOST:PORT` (the plugin's `--metrics-listen`): N threads loop
//!   `GET /metrics` (a new connection each) during the Allocates, as the scrapers of issue #22
//!   did; `scrapers`, `scrapes_ok` (complete 200 answers) and `scrapes_failed` are printed.
//!
//! Usage: `bench_client PLUGIN_DIR EVENTS_FILE ALLOCS -- PLUGIN_COMMAND...`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a panic is a failed run

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuhook_device_plugin::api::{
    self, DevicePluginClient, Registration, RegistrationServer, UNHEALTHY,
};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

struct Reg(mpsc::UnboundedSender<(Instant, api::RegisterRequest)>);

#[tonic::async_trait]
impl Registration for Reg {
    async fn register(
        &self,
        req: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let _ = self.0.send((Instant::now(), req.into_inner()));
        Ok(Response::new(api::Empty {}))
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn proc_status_kb(pid: u32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().to_string()
}

/// Scraper threads looping `GET /metrics` on `addr` until `stop`; counts (ok, failed).
struct Scrapers {
    stop: Arc<AtomicBool>,
    counts: Arc<[AtomicU64; 2]>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Scrapers {
    fn start(n: usize, addr: &str) -> Scrapers {
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let threads = (0..n)
            .map(|_| {
                let (stop, counts, addr) = (stop.clone(), counts.clone(), addr.to_string());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let ok = scrape(&addr).unwrap_or(false);
                        counts[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Scrapers {
            stop,
            counts,
            threads,
        }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        println!("scrapes_ok={}", self.counts[0].load(Ordering::Relaxed));
        println!("scrapes_failed={}", self.counts[1].load(Ordering::Relaxed));
    }
}

/// One `GET /metrics` on a new connection; whether a complete 200 answer came back.
fn scrape(addr: &str) -> std::io::Result<bool> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    Ok(body.starts_with(b"HTTP/1.1 200") || body.starts_with(b"HTTP/1.0 200"))
}

async fn allocate_all(
    client: &mut DevicePluginClient<tonic::transport::Channel>,
    ids: &[String],
    n: usize,
) {
    let mut lat = Vec::with_capacity(n);
    for i in 0..(n + 50) {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest {
                devices_ids: vec![ids[i % ids.len()].clone()],
            }],
        };
        let t = Instant::now();
        client.allocate(req).await.unwrap();
        if i >= 50 {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    let mean = lat.iter().sum::<Duration>() / u32::try_from(lat.len()).unwrap();
    println!("allocs={n}");
    println!("alloc_p50_ms={}", ms(percentile(&lat, 50)));
    println!("alloc_p99_ms={}", ms(percentile(&lat, 99)));
    println!("alloc_mean_ms={}", ms(mean));
}

/// [`allocate_all`] while `SCRAPERS` threads scrape `SCRAPE_ADDR` (none without `SCRAPERS`).
async fn allocate_while_scraped(
    client: &mut DevicePluginClient<tonic::transport::Channel>,
    ids: &[String],
    n: usize,
) {
    let scrapers: usize = std::env::var("SCRAPERS")
        .ok()
        .map_or(0, |v| v.parse().unwrap());
    println!("scrapers={scrapers}");
    let scraping = (scrapers > 0).then(|| {
        let addr = std::env::var("SCRAPE_ADDR").expect("SCRAPE_ADDR with SCRAPERS");
        // The scrapers are under way before the first timed Allocate.
        let s = Scrapers::start(scrapers, &addr);
        std::thread::sleep(Duration::from_millis(500));
        s
    });
    allocate_all(client, ids, n).await;
    if let Some(s) = scraping {
        s.finish();
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sep = args
        .iter()
        .position(|a| a == "--")
        .expect("-- PLUGIN_COMMAND");
    let (dir, events) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]));
    let n: usize = args[3].parse().unwrap();
    let cmd = &args[sep + 1..];

    let listener = tokio::net::UnixListener::bind(dir.join(api::KUBELET_SOCKET)).unwrap();
    let (tx, mut regs) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(Reg(tx)))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let t0 = Instant::now();
    let mut plugin = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (t_reg, reg) = tokio::time::timeout(Duration::from_secs(30), regs.recv())
        .await
        .expect("no registration within 30 s")
        .unwrap();
    println!("start_to_registration_ms={}", ms(t_reg - t0));

    let channel = gpuhook_device_plugin::kubelet::connect(&dir.join(&reg.endpoint))
        .await
        .unwrap();
    let mut client = DevicePluginClient::new(channel);
    let mut lists = client
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    let first = lists.message().await.unwrap().unwrap();
    let ids: Vec<String> = first.devices.iter().map(|d| d.id.clone()).collect();
    println!("resource={} devices={}", reg.resource_name, ids.len());
    allocate_while_scraped(&mut client, &ids, n).await;

    let gpu = ids[ids.len() / 2].split("::").next().unwrap().to_string();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&events)
        .unwrap();
    let t = Instant::now();
    std::io::Write::write_all(&mut f, format!("xid {gpu} 48\n").as_bytes()).unwrap();
    drop(f);
    loop {
        let l = tokio::time::timeout(Duration::from_secs(10), lists.message())
            .await
            .expect("no ListAndWatch update within 10 s of the Xid")
            .unwrap()
            .unwrap();
        if l.devices
            .iter()
            .any(|d| d.id.starts_with(&gpu) && d.health == UNHEALTHY)
        {
            println!("xid_to_unhealthy_ms={}", ms(t.elapsed()));
            break;
        }
    }
    println!("vm_hwm_kb={}", proc_status_kb(plugin.id(), "VmHWM:"));
    println!("vm_rss_kb={}", proc_status_kb(plugin.id(), "VmRSS:"));
    // Hang up first, as the kubelet's device manager would: the plugin then stops at once.
    drop((lists, client));
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &plugin.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    println!("exit={:?}", plugin.wait().unwrap().code());
}

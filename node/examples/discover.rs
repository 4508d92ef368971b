//! Prints what discovery finds under a driver root, and how long it takes.
//!
//! `cargo run -p gpuhook-node --example discover -- [DRIVER_ROOT] [ITERATIONS]`
//! (default `/`, 1). With more than one iteration it prints p50/p90/max of `discover()` to
//! stderr: the CDI generation budget is p50 <= 5 ms on a 2-core box for an 8-GPU node.

use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let root = args.next().unwrap_or_else(|| "/".into());
    let iterations: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(1);
    let opts = gpuhook_node::DiscoverOptions::for_root(&root);
    let d = gpuhook_node::discover(&opts)?;
    println!("{}", serde_json::to_string_pretty(&d.inventory)?);
    for w in &d.warnings {
        eprintln!("warning: {w}");
    }
    if iterations > 1 {
        let mut times: Vec<f64> = (0..iterations)
            .map(|_| {
                let t = Instant::now();
                gpuhook_node::discover(&opts).expect("discover");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let pct = |percent: usize| times[(times.len() - 1) * percent / 100];
        eprintln!(
            "discover() over {iterations} runs: p50 {:.3} ms, p90 {:.3} ms, max {:.3} ms ({} GPUs)",
            pct(50),
            pct(90),
            pct(100),
            d.inventory.gpus.len()
        );
    }
    Ok(())
}

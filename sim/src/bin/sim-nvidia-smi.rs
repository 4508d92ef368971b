//! Simulated `nvidia-smi`: installed as `<driver root>/usr/bin/nvidia-smi`, it finds the driver
//! root from its own path (`<root>/usr/bin/nvidia-smi`) and prints the node's profile the way
//! `nvidia-smi` and `nvidia-smi -L` print a real node.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpuhook_sim::{smi, NodeProfile};

fn driver_root() -> PathBuf {
    let exe = std::fs::read_link("/proc/self/exe")
        .unwrap_or_else(|_| PathBuf::from("/usr/bin/nvidia-smi"));
    // <root>/usr/bin/nvidia-smi -> <root>
    exe.ancestors()
        .nth(3)
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = driver_root();
    let Some(path) = smi::find_profile(&root) else {
        eprintln!("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.");
        eprintln!(
            "(gpuhook-sim: no node profile found under {}; set GPUHOOK_SIM_PROFILE)",
            root.display()
        );
        return ExitCode::from(9);
    };
    let profile = match NodeProfile::from_file(&path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvidia-smi (gpuhook-sim): {e}");
            return ExitCode::from(9);
        }
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => print!("{}", smi::table(&profile)),
        ["-L"] | ["--list-gpus"] => print!("{}", smi::list(&profile)),
        ["-h"] | ["--help"] => println!("NVIDIA System Management Interface (gpuhook-sim)\n\nSupported: nvidia-smi, nvidia-smi -L"),
        other => {
            eprintln!("nvidia-smi (gpuhook-sim): unsupported arguments {other:?}; supported: none, -L");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

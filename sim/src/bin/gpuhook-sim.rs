//! `gpuhook-sim`: list the built-in node profiles and materialise one as a driver root.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpuhook_sim::{builtin_names, materialise, MaterialiseOptions, NodeProfile};

#[derive(Debug, Parser)]
#[command(
    name = "gpuhook-sim",
    about = "Simulated NVIDIA GPU nodes for testing gpuhook"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the built-in node profiles.
    List,
    /// Print a profile (built-in name or FILE.toml) as TOML.
    Show { profile: String },
    /// Materialise a profile (built-in name or FILE.toml) as a driver root in DIR (needs root).
    Build {
        profile: String,
        dir: PathBuf,
        /// The mock NVML cdylib (default: libgpuhook_mock_nvml.so next to this binary).
        #[arg(long)]
        mock_nvml: Option<PathBuf>,
        /// Directory of built simulator binaries (default: the directory of this binary).
        #[arg(long)]
        bin_dir: Option<PathBuf>,
    },
    /// Validate a profile file.
    Check { file: PathBuf },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuhook-sim: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::List => {
            for name in builtin_names() {
                let p = NodeProfile::builtin(name)?;
                println!("{name:<16} {}", p.description);
            }
        }
        Cmd::Show { profile } => print!("{}", NodeProfile::load(&profile)?.to_toml()),
        Cmd::Check { file } => {
            let p = NodeProfile::from_file(&file)?;
            let migs = p.mig_devices().count();
            println!(
                "{}: ok ({} GPUs, {migs} MIG devices)",
                file.display(),
                p.gpus.len()
            );
        }
        Cmd::Build {
            profile,
            dir,
            mock_nvml,
            bin_dir,
        } => {
            let p = NodeProfile::load(&profile)?;
            let opts = MaterialiseOptions {
                mock_nvml,
                bin_dir,
                ldconfig: None,
            };
            let report = materialise(&p, &dir, &opts)
                .with_context(|| format!("building node {} in {}", p.name, dir.display()))?;
            println!(
                "built node {} in {}: {} device nodes, {} libraries, {} other files, cache {}",
                report.profile,
                report.root.display(),
                report.device_nodes,
                report.libraries.len(),
                report.files.len(),
                report.ld_cache.display()
            );
            for note in &report.notes {
                println!("note: {note}");
            }
        }
    }
    Ok(())
}

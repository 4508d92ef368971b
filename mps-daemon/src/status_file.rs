//! `status.json`: the daemon's writer task and the reader of `gpu-mps-daemon status`.

use std::path::Path;

use crate::status::{Board, StatusFile};

/// Bound of one status file write.
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Rewrites `status.json` after each change until `stop` resolves.
pub async fn write_loop(
    board: Board,
    path: std::path::PathBuf,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut stop = stop;
    let mut changes = board.subscribe();
    loop {
        let snap = board.snapshot();
        match serde_json::to_vec_pretty(&snap) {
            Ok(data) => {
                // Bounded: a slow disk delays the file, never the supervisors or HTTP.
                let p = path.clone();
                let write =
                    crate::layout::blocking("writing the status file", WRITE_TIMEOUT, move || {
                        gpuhook_fs::write_atomic(&p, &data, 0o644)
                    });
                if let Err(e) = write.await {
                    tracing::warn!(error = %e, "cannot write status file");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialise status"),
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// Why `gpu-mps-daemon status` found no status to show (the cause is part of the message).
#[derive(Debug, thiserror::Error)]
pub enum StatusReadError {
    #[error("cannot read {}: {error} (is gpu-mps-daemon running with this --mps-root?)", path.display())]
    Read {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("{} is not a status file: {error}", path.display())]
    Parse {
        path: std::path::PathBuf,
        error: serde_json::Error,
    },
}

/// Reads a status file written by a running daemon.
pub fn read(path: &Path) -> Result<StatusFile, StatusReadError> {
    let bytes =
        crate::safefs::read_bounded(path, 16 << 20).map_err(|error| StatusReadError::Read {
            path: path.to_path_buf(),
            error,
        })?;
    serde_json::from_slice(&bytes).map_err(|error| StatusReadError::Parse {
        path: path.to_path_buf(),
        error,
    })
}

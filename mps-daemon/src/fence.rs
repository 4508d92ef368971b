//! A GPU's compute mode across its control daemon's life: no CUDA process may run on the GPU
//! without MPS limits while the daemon is down or its limits are not yet read back.
//!
//! NVIDIA documents that a CUDA application that cannot reach an MPS control daemon "continues
//! to run as it normally would without MPS" (`nvidia-cuda-mps-control(1)`), i.e. unlimited, and
//! that compute mode PROHIBITED allows no contexts on the device ("No contexts can be created on
//! this device at this time": CUDA Driver API `CUcomputemode`; "no contexts per device": NVML
//! `nvmlComputeMode_t`, `nvidia-smi(1)` "Compute Mode"). So the supervisor [`prohibit`]s the GPU
//! before every daemon start (and as soon as a running daemon is found dead or unhealthy), and
//! [`allow_mps`] switches it to EXCLUSIVE_PROCESS (one context per device: the MPS server's; the
//! mode NVIDIA's MPS guide, "Starting MPS control daemon", sets) only after the limits were read
//! back, just before the ready file is written. A CUDA process started in between fails to create
//! a context (`cudaErrorDevicesUnavailable`) instead of running unlimited; so does an MPS server
//! the new daemon would start for an early client, so that client is refused too.
//!
//! On stop the admin's mode (read by our first change) is restored, whatever we set last: a stop
//! in the middle of a restart never leaves the GPU PROHIBITED. A mode read as PROHIBITED at our
//! first change is taken as left behind by an instance of ours that was killed (an admin does not
//! configure MPS sharing on a GPU that allows no contexts) and restored as DEFAULT.
//!
//! [`prohibit`]: ComputeFence::prohibit
//! [`allow_mps`]: ComputeFence::allow_mps

use std::sync::Arc;
use std::time::Duration;

use crate::inventory::{ComputeMode, ComputeModeError, ComputeModeSetter};
use crate::layout;

/// One GPU's compute-mode fence.
#[derive(Debug)]
pub struct ComputeFence {
    compute: Arc<dyn ComputeModeSetter>,
    uuid: String,
    /// The admin's mode, read by our first successful change: restored on stop.
    admin: Option<ComputeMode>,
    /// The mode we set last (`None`: we never changed it).
    current: Option<ComputeMode>,
    /// No NVML to set modes with (logged once; not an error of each restart).
    unavailable_seen: bool,
}

impl ComputeFence {
    pub fn new(compute: Arc<dyn ComputeModeSetter>, uuid: &str) -> Self {
        ComputeFence {
            compute,
            uuid: uuid.to_string(),
            admin: None,
            current: None,
            unavailable_seen: false,
        }
    }

    /// The mode we set last, if any.
    pub fn current(&self) -> Option<ComputeMode> {
        self.current
    }

    /// The admin's mode (read by our first change, or handed over), if known.
    pub fn admin(&self) -> Option<ComputeMode> {
        self.admin
    }

    /// Starts with the admin's mode a replaced supervisor handed over (`crate::restart`).
    pub fn with_admin(mut self, admin: Option<ComputeMode>) -> Self {
        self.admin = self.admin.or(admin);
        self
    }

    /// Sets `mode` (bounded by `to`); `Ok(false)` when there is no NVML to set it with.
    async fn set(&mut self, mode: ComputeMode, to: Duration) -> Result<bool, String> {
        let (compute, uuid) = (self.compute.clone(), self.uuid.clone());
        let call = layout::blocking("setting the compute mode", to, move || {
            Ok::<_, std::convert::Infallible>(compute.set_compute_mode(&uuid, mode))
        });
        match call.await {
            Ok(Ok(prev)) => {
                if self.admin.is_none() {
                    self.admin = Some(if prev == ComputeMode::Prohibited {
                        tracing::warn!(gpu = %self.uuid,
                            "the GPU was in compute mode PROHIBITED (left by a gpu-mps-daemon that was killed?); DEFAULT is restored on stop");
                        ComputeMode::Default
                    } else {
                        prev
                    });
                }
                self.current = Some(mode);
                Ok(true)
            }
            Ok(Err(e @ ComputeModeError::Unavailable { .. })) => {
                if !self.unavailable_seen {
                    self.unavailable_seen = true;
                    tracing::warn!(gpu = %self.uuid, error = %e,
                        "compute mode left as it is: other processes may use the GPU outside MPS, and may run without limits while its control daemon restarts");
                }
                Ok(false)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Compute mode PROHIBITED: no new CUDA context on the GPU, with or without MPS. Never
    /// fails the caller (a restart must go on): returns the error to report, if any.
    pub async fn prohibit(&mut self, to: Duration) -> Option<String> {
        if self.current == Some(ComputeMode::Prohibited) {
            return None;
        }
        match self.set(ComputeMode::Prohibited, to).await {
            Ok(_) => None,
            Err(e) => {
                let msg = format!("cannot set compute mode PROHIBITED for the restart window (CUDA processes started before the GPU is ready again may run without MPS limits): {e}");
                tracing::error!(gpu = %self.uuid, error = %e, mode = "PROHIBITED",
                    "cannot set the compute mode; CUDA processes started before the GPU is ready again may run without MPS limits");
                Some(msg)
            }
        }
    }

    /// Compute mode EXCLUSIVE_PROCESS, once the limits are read back. An error while the GPU is
    /// PROHIBITED by us is the caller's error (the GPU would refuse every client); otherwise it is
    /// logged and the mode stays as it is (as before this fence existed).
    pub async fn allow_mps(&mut self, to: Duration) -> Result<(), String> {
        match self.set(ComputeMode::ExclusiveProcess, to).await {
            Ok(_) => Ok(()),
            Err(e) if self.current == Some(ComputeMode::Prohibited) => Err(format!(
                "cannot set compute mode EXCLUSIVE_PROCESS (the GPU stays PROHIBITED, not ready): {e}"
            )),
            Err(e) => {
                tracing::warn!(gpu = %self.uuid, error = %e,
                    "compute mode not set to EXCLUSIVE_PROCESS; other processes may use the GPU outside MPS");
                Ok(())
            }
        }
    }

    /// Restores the admin's mode if we changed it since. Logged, never fails the caller.
    pub async fn restore(&mut self, to: Duration) {
        let (Some(admin), Some(current)) = (self.admin, self.current) else {
            return;
        };
        if admin == current {
            return;
        }
        if let Err(e) = self.set(admin, to).await {
            tracing::error!(gpu = %self.uuid, error = %e, mode = ?admin, left = ?current,
                "cannot restore the compute mode; set it with `nvidia-smi -i <gpu> -c <mode>`");
        }
    }
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;

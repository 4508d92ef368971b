//! gpu-mps-daemon (not built yet).

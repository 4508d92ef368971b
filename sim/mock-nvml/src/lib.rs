//! Mock NVML (not built yet).

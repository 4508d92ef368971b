//! Injection (not built yet).

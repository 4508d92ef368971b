//! CDI (not built yet).

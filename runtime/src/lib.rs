//! Runtime wrapper core (not built yet).

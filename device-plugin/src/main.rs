//! `gpuhook-device-plugin`: a thin `main` over the library.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("gpuhook-device-plugin: not built yet")
}

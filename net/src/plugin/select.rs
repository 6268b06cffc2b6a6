//! Which network a communicator uses (`NCCL_NET`, `NCCL_NET_PLUGIN`), as NCCL 2.28 chooses.
//!
//! The external plugins `NCCL_NET_PLUGIN` names are opened once per process ([`env_plugins`]).
//! For each communicator, [`select`] walks them in order, skipping those whose `name` differs
//! from `NCCL_NET` (compared before `init`, case-insensitively); the first that initializes and
//! has a usable device wins. Then comes the built-in socket network ("Socket"). `NCCL_NET=Socket`
//! takes the built-in one directly. Nothing usable and `NCCL_NET` naming something else is an
//! invalid-usage error that names what was asked for and what exists.

use super::{PluginLib, PluginNet, loader};
use crate::Net;
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use std::sync::{Arc, OnceLock};

/// The built-in network's name.
pub const BUILTIN: &str = "Socket";

/// Opens every entry of `spec` (the value of `NCCL_NET_PLUGIN`, `None` when unset), logging
/// the ones that give no plugin: at INFO for the default `libnccl-net.so` (most machines have
/// none), at WARN for a plugin the user named.
pub fn load_all(spec: Option<&str>) -> Vec<Arc<PluginLib>> {
    let mut libs = Vec::new();
    for entry in loader::entries(spec) {
        match PluginLib::load(&entry) {
            Ok(lib) => {
                if !libs.iter().any(|l| Arc::ptr_eq(l, &lib)) {
                    libs.push(lib);
                }
            }
            Err(e @ loader::OpenError::NotFound(_)) if spec.is_none() => {
                tracing::info!(target: "oxccl::init",
                    "NET/Plugin: no plugin {entry} found ({e}); using the internal network");
            }
            Err(e) => {
                tracing::warn!(target: "oxccl::net",
                    "NET/Plugin: NCCL_NET_PLUGIN entry {entry}: {e}; it is not used");
            }
        }
    }
    libs
}

/// The plugins of this process's `NCCL_NET_PLUGIN`, opened on first use.
pub fn env_plugins() -> &'static [Arc<PluginLib>] {
    static PLUGINS: OnceLock<Vec<Arc<PluginLib>>> = OnceLock::new();
    PLUGINS.get_or_init(|| load_all(config::get(&vars::NCCL_NET_PLUGIN).as_deref()))
}

/// The network of one communicator: the first of `plugins` whose name matches `want`
/// (`NCCL_NET`; any when `None`) and that initializes (`comm_id` goes to v11+ plugins), else the
/// built-in network from `builtin` if `want` allows it.
pub fn select(
    plugins: &[Arc<PluginLib>],
    want: Option<&str>,
    comm_id: u64,
    builtin: impl FnOnce() -> Arc<dyn Net>,
) -> Result<Arc<dyn Net>> {
    let want = want.map(str::trim).filter(|w| !w.is_empty());
    if want.is_some_and(|w| w.eq_ignore_ascii_case(BUILTIN)) {
        return Ok(builtin());
    }
    let mut seen = Vec::new();
    let mut failed = Vec::new();
    for lib in plugins {
        let name = lib.name();
        if let Some(w) = want
            && !name.eq_ignore_ascii_case(w)
        {
            seen.push(format!("{name} (v{}, {})", lib.version(), lib.path()));
            continue;
        }
        match PluginNet::new(lib.clone(), comm_id) {
            Ok(net) => {
                tracing::info!(target: "oxccl::init",
                    "NET/Plugin: Using network {} (plugin v{}, {})",
                    net.name(), net.version(), lib.path());
                return Ok(Arc::new(net));
            }
            Err(e) => {
                tracing::warn!(target: "oxccl::net",
                    "NET/Plugin: network plugin {name} (v{}, {}) failed to initialize: {e}",
                    lib.version(), lib.path());
                failed.push(format!("{name} (v{}, {}: {e})", lib.version(), lib.path()));
            }
        }
    }
    match want {
        None => {
            if plugins.is_empty() {
                tracing::info!(target: "oxccl::init", "NET/Plugin: Using internal network {BUILTIN}");
            } else {
                tracing::warn!(target: "oxccl::init",
                    "NET/Plugin: no network plugin could be used; falling back to the internal network {BUILTIN}");
            }
            Ok(builtin())
        }
        Some(w) => {
            let mut msg = format!(
                "NCCL_NET={w}: no network of that name is available; available: {BUILTIN} (built in)"
            );
            for s in &seen {
                msg.push_str(&format!(", {s}"));
            }
            if !failed.is_empty() {
                msg.push_str(&format!("; failed to initialize: {}", failed.join(", ")));
            }
            if plugins.is_empty() {
                msg.push_str(" (no network plugin loaded: see NCCL_NET_PLUGIN)");
            }
            Err(Error::InvalidUsage(msg))
        }
    }
}

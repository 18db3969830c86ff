//! Host errors, and the one place they become CNI error codes.

use crate::sandbox::{AbortCause, CallError};
use wasm_cni_protocol::{CniError, ErrorCode};
use wasm_cni_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Already a CNI error: protocol and config problems, or a plugin's own.
    #[error("{0}")]
    Cni(#[from] CniError),
    #[error(transparent)]
    Call(#[from] CallError),
    /// A plugin returned a result that does not parse as CNI.
    #[error("plugin {plugin:?} returned an invalid result: {error}")]
    PluginResult { plugin: String, error: CniError },
    #[error("{what}: {source}")]
    State {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Filter {
        what: &'static str,
        source: wasm_cni_kernel::filter::FilterError,
    },
    #[error("{0}")]
    Internal(String),
    /// Which chain step an error happened in.
    #[error("{source}")]
    InStep {
        index: usize,
        plugin: String,
        source: Box<HostError>,
    },
    /// Every failure of a best-effort operation (DEL, GC).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Many(Vec<HostError>),
}

impl HostError {
    pub fn internal(msg: impl Into<String>) -> Self {
        HostError::Internal(msg.into())
    }

    pub fn state(what: &'static str, source: std::io::Error) -> Self {
        HostError::State { what, source }
    }

    pub fn filter(what: &'static str, source: wasm_cni_kernel::filter::FilterError) -> Self {
        HostError::Filter { what, source }
    }

    pub fn many(mut errors: Vec<HostError>) -> Self {
        if errors.len() == 1 {
            errors.remove(0)
        } else {
            HostError::Many(errors)
        }
    }

    pub fn in_step(self, index: usize, plugin: &str) -> Self {
        match self {
            e @ HostError::InStep { .. } => e,
            e => HostError::InStep {
                index,
                plugin: plugin.to_string(),
                source: Box::new(e),
            },
        }
    }
}

impl From<HostError> for CniError {
    fn from(e: HostError) -> CniError {
        match e {
            HostError::Cni(e) => e,
            HostError::Call(e) => call_error(e),
            HostError::PluginResult { plugin, error } => CniError::new(
                ErrorCode::Internal,
                format!("plugin {plugin:?} returned an invalid result"),
            )
            .with_details(error.to_string()),
            HostError::State { what, source } => {
                CniError::new(ErrorCode::Io, format!("{what}: {source}"))
            }
            // The ruleset kept changing under the host: worth a retry.
            HostError::Filter {
                what,
                source:
                    source @ wasm_cni_kernel::filter::FilterError::Kernel {
                        errno: libc::EBUSY, ..
                    },
            } => CniError::new(ErrorCode::TryAgainLater, format!("{what}: {source}")),
            HostError::Filter { what, source } => {
                CniError::new(ErrorCode::Internal, format!("{what}: {source}"))
            }
            HostError::Internal(msg) => CniError::new(ErrorCode::Internal, msg),
            HostError::InStep {
                index,
                plugin,
                source,
            } => {
                let mut e = CniError::from(*source);
                let place = format!("chain[{index}] ({plugin})");
                e.details = if e.details.is_empty() {
                    place
                } else {
                    format!("{place}: {}", e.details)
                };
                e
            }
            HostError::Many(errors) => {
                let mut all: Vec<CniError> = errors.into_iter().map(CniError::from).collect();
                if all.is_empty() {
                    return CniError::new(ErrorCode::Internal, "unknown failure");
                }
                // The first failure decides the code; every message is kept.
                let mut first = all.remove(0);
                for e in all {
                    first.msg.push_str("; ");
                    first.msg.push_str(&e.msg);
                    if !e.details.is_empty() {
                        first.details.push_str("; ");
                        first.details.push_str(&e.details);
                    }
                }
                first
            }
        }
    }
}

fn call_error(e: CallError) -> CniError {
    let msg = e.to_string();
    match e {
        CallError::Plugin { plugin, error } => {
            // Keep the plugin's own code and words; say which plugin spoke.
            let prefix = format!("{plugin}: ");
            let msg = if error.msg.starts_with(&prefix) {
                error.msg
            } else {
                format!("{prefix}{}", error.msg)
            };
            CniError {
                code: error.code,
                msg,
                details: error.details,
            }
        }
        CallError::Image { error, .. }
            if matches!(error.as_ref(), wasm_cni_image::ImageError::Io(_)) =>
        {
            CniError::new(ErrorCode::Io, msg)
        }
        // A compile the node was too busy to finish: worth a retry.
        CallError::CompileLimit { error, .. } if error.is_transient() => {
            CniError::new(ErrorCode::TryAgainLater, msg)
        }
        CallError::NotFound { .. }
        | CallError::Contract { .. }
        | CallError::Image { .. }
        | CallError::BadName { .. }
        | CallError::DigestMismatch { .. }
        | CallError::CompileLimit { .. } => CniError::new(ErrorCode::InvalidConfig, msg),
        // A cluster store out of reach at commit: nothing was written.
        CallError::Store {
            source: StoreError::Unavailable(_) | StoreError::Busy(_),
            ..
        } => CniError::new(ErrorCode::TryAgainLater, msg),
        CallError::Read { .. } | CallError::Store { .. } => CniError::new(ErrorCode::Io, msg),
        // Another call holds the state, or the cluster store is out of
        // reach: the runtime may retry.
        CallError::Aborted {
            cause: AbortCause::StoreBusy { .. } | AbortCause::StoreUnavailable(_),
            ..
        } => CniError::new(ErrorCode::TryAgainLater, msg),
        CallError::Invalid { .. } | CallError::Aborted { .. } => {
            CniError::new(ErrorCode::Internal, msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_errors_keep_their_code_and_gain_the_plugin_name() {
        let e = HostError::from(CallError::Plugin {
            plugin: "bridge".into(),
            error: CniError::new(ErrorCode::TryAgainLater, "busy"),
        })
        .in_step(1, "bridge");
        let c = CniError::from(e);
        assert_eq!(c.code, 11);
        assert_eq!(c.msg, "bridge: busy");
        assert_eq!(c.details, "chain[1] (bridge)");
    }

    #[test]
    fn aborts_are_internal_and_name_the_cause() {
        let c = CniError::from(HostError::from(CallError::Aborted {
            plugin: "fx".into(),
            verb: "add",
            cause: AbortCause::Deadline { ms: 50 },
        }));
        assert_eq!(c.code, 999);
        assert!(c.msg.contains("\"fx\""), "{}", c.msg);
        assert!(c.msg.contains("deadline of 50 ms"), "{}", c.msg);
    }

    #[test]
    fn a_scope_locked_past_the_deadline_is_try_again_later() {
        let c = CniError::from(HostError::from(CallError::Aborted {
            plugin: "host-local".into(),
            verb: "add",
            cause: AbortCause::StoreBusy {
                scope: "net1/host-local".into(),
                waited_ms: 1000,
            },
        }));
        assert_eq!(c.code, 11);
        assert!(c.msg.contains("net1/host-local"), "{}", c.msg);
    }

    #[test]
    fn many_keeps_first_code_and_every_message() {
        let c = CniError::from(HostError::many(vec![
            HostError::Cni(CniError::new(ErrorCode::Io, "a")),
            HostError::Cni(CniError::new(ErrorCode::Internal, "b")),
        ]));
        assert_eq!(c.code, 5);
        assert_eq!(c.msg, "a; b");
    }

    #[test]
    fn a_compile_bound_is_for_good_and_a_busy_node_is_try_again() {
        use crate::sandbox::compile::CompileError;
        let limit = |error| {
            CniError::from(HostError::from(CallError::CompileLimit {
                plugin: "p".into(),
                path: "/x/p.wasm".into(),
                error: Box::new(error),
            }))
        };
        assert_eq!(limit(CompileError::Timeout { ms: 5 }).code, 7);
        assert_eq!(limit(CompileError::Memory { bytes: 1 }).code, 7);
        assert_eq!(limit(CompileError::TooLarge { size: 2, max: 1 }).code, 7);
        let busy = limit(CompileError::Overloaded { ms: 45_000 });
        assert_eq!(busy.code, 11);
        assert!(busy.msg.contains("try again later"), "{}", busy.msg);
    }

    #[test]
    fn unknown_plugin_is_invalid_config_naming_type_and_dir() {
        let c = CniError::from(HostError::from(CallError::NotFound {
            plugin: "nope".into(),
            dir: "/opt/cni/wasm".into(),
            cni_path: vec!["/opt/cni/bin".into()],
        }));
        assert_eq!(c.code, 7);
        assert!(c.msg.contains("nope") && c.msg.contains("/opt/cni/wasm"));
        assert!(c.msg.contains("CNI_PATH [/opt/cni/bin]"), "{}", c.msg);
    }
}

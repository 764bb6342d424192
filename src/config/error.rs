//! Errors from parsing a `WGPOOL_CONF` string.

use thiserror::Error;

use crate::format::visible;

/// What was wrong with a configuration string.
///
/// Every variant names the offending key (or position) and what is allowed, so the
/// message alone is enough to fix the input; what it quotes of the input shows invisible
/// characters escaped ([`visible`]). Parsing never panics.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key that is not in the option table.
    #[error(
        "unknown option `{}` in WGPOOL_CONF; valid options are: {}",
        visible(key),
        valid.join(", ")
    )]
    UnknownKey {
        /// The key as written.
        key: String,
        /// Every key the parser accepts.
        valid: Vec<&'static str>,
    },
    /// A known key with a value outside its allowed set.
    #[error(
        "invalid value `{}` for option `{key}`: {reason}; allowed: {allowed}",
        visible(value)
    )]
    InvalidValue {
        /// The option.
        key: &'static str,
        /// The value as written.
        value: String,
        /// Why the value was refused.
        reason: String,
        /// The allowed values, as the option table states them.
        allowed: &'static str,
    },
    /// Two options whose values are each allowed but not together.
    #[error("`{option}` cannot be combined with `{other}`: {reason}")]
    Conflict {
        /// The refused option and its value, as `key:value`.
        option: &'static str,
        /// The option it conflicts with, as `key:value`.
        other: &'static str,
        /// Why the two cannot go together.
        reason: String,
    },
    /// The string does not have the `key:value,key:value` shape.
    #[error(
        "malformed WGPOOL_CONF near `{}`: {reason}; expected comma-separated `key:value` pairs",
        visible(near)
    )]
    Syntax {
        /// The fragment where parsing stopped.
        near: String,
        /// What was expected there.
        reason: String,
    },
    /// The same key appears twice; refusing is safer than silently keeping one.
    #[error("option `{key}` is given more than once in WGPOOL_CONF")]
    DuplicateKey {
        /// The repeated key.
        key: &'static str,
    },
    /// The environment variable holds bytes that are not UTF-8.
    #[error("WGPOOL_CONF is not valid UTF-8")]
    NotUnicode,
}

/// Why the cap cannot be computed from a configuration.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum CapError {
    /// `per_process_memory_fraction` is set, but the device memory size is unknown and no
    /// `memory_limit_mb` gives the cap in bytes.
    #[error(
        "per_process_memory_fraction:{fraction} needs the device memory size, which is unknown \
         here; set memory_limit_mb to give the cap in MiB"
    )]
    FractionNeedsDeviceMemory {
        /// The fraction asked for.
        fraction: f64,
    },
}

//! Pool configuration: the `WGPOOL_CONF` string and the settings it produces.
//!
//! The syntax is that of `PYTORCH_CUDA_ALLOC_CONF`: comma-separated `key:value` pairs, where
//! a value may be a bracketed list (`roundup_power2_divisions:[256:1,512:2,>:8]`).
//! Every key, its default, its allowed values and its meaning live in one table,
//! [`OPTIONS`]; the parser, the README's option table (`wgpool options`) and the tests all read
//! that table.
//!
//! ```
//! use wgpool::config::{Config, Policy};
//! let config = Config::parse("policy:pytorch,max_split_size_mb:128").unwrap();
//! assert_eq!(config.policy, Policy::Pytorch);
//! assert_eq!(config.max_split_size, Some(128 << 20));
//! assert!(Config::parse("max_split_size_mb:1").is_err());
//! ```

mod error;
mod options;
mod parse;
mod roundup;

pub use error::ConfigError;
pub use options::{OPTIONS, OptionSpec, options_markdown_table};
pub use roundup::RoundupDivisions;

/// Name of the environment variable read by [`Config::from_env`].
pub const ENV_VAR: &str = "WGPOOL_CONF";

/// Which placement policy the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// PyTorch's native CUDA caching allocator, rule for rule.
    Pytorch,
    /// wgpool's own policy: PyTorch's rules plus lifetime-aware segment reuse and release
    /// that keep reserved memory close to live memory without re-creating many segments.
    #[default]
    Compact,
}

impl Policy {
    /// The name used in `WGPOOL_CONF`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Pytorch => "pytorch",
            Policy::Compact => "compact",
        }
    }
}

/// How requests reach device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Caching {
    /// The caching pool.
    #[default]
    Native,
    /// One segment per request, released at free; no caching. For debugging and comparison,
    /// like `PYTORCH_NO_CUDA_MEMORY_CACHING=1`.
    Passthrough,
}

impl Caching {
    /// The name used in `WGPOOL_CONF`.
    pub fn name(self) -> &'static str {
        match self {
            Caching::Native => "native",
            Caching::Passthrough => "passthrough",
        }
    }
}

/// What the pool does when the device cap is reached and releasing cached memory did not help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Fail with an out-of-memory error.
    #[default]
    None,
    /// Serve the block from a host-resident segment.
    Host,
}

impl Overflow {
    /// The name used in `WGPOOL_CONF`.
    pub fn name(self) -> &'static str {
        match self {
            Overflow::None => "none",
            Overflow::Host => "host",
        }
    }
}

/// Parsed pool settings. `Config::default()` equals `Config::parse("")`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Placement policy.
    pub policy: Policy,
    /// Cached blocks of this many bytes or more are never split (`max_split_size_mb`).
    /// `None` means unlimited.
    pub max_split_size: Option<u64>,
    /// A request at or above `max_split_size` takes a cached block only when the block is
    /// less than this many bytes larger (`max_non_split_rounding_mb`).
    pub max_non_split_rounding: u64,
    /// Power-of-two rounding divisions by size interval (`roundup_power2_divisions`).
    pub roundup_power2_divisions: RoundupDivisions,
    /// Requests above this many bytes skip division rounding (`roundup_bypass_threshold_mb`).
    pub roundup_bypass_threshold: Option<u64>,
    /// Fraction of the cap above which a miss first releases old cached blocks
    /// (`garbage_collection_threshold`). `None` disables it.
    pub garbage_collection_threshold: Option<f64>,
    /// Cap as a fraction of device memory (`per_process_memory_fraction`).
    pub per_process_memory_fraction: Option<f64>,
    /// Cap in bytes (`memory_limit_mb`).
    pub memory_limit: Option<u64>,
    /// Segment size for large-pool requests under 10 MiB (`large_segment_size_mb`).
    pub large_segment_size: u64,
    /// Always false: wgpu has no virtual memory mapping (`expandable_segments`).
    pub expandable_segments: bool,
    /// Caching pool or pass-through (`backend`).
    pub backend: Caching,
    /// Behaviour at the cap (`overflow`).
    pub overflow: Overflow,
    /// `policy:compact`: a request takes a free block spanning a whole segment only if it
    /// fills at least this share of it (`compact_min_share`).
    pub compact_min_share: f64,
    /// `policy:compact`: reserved memory may exceed the allocated peak by this fraction before
    /// idle segments are released (`compact_reserved_slack`).
    pub compact_reserved_slack: f64,
    /// `policy:compact`: most bytes released over the pool's life, as a multiple of the
    /// allocated peak (`compact_release_budget`).
    pub compact_release_budget: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::default(),
            max_split_size: None,
            max_non_split_rounding: 20 << 20,
            roundup_power2_divisions: RoundupDivisions::none(),
            roundup_bypass_threshold: None,
            garbage_collection_threshold: None,
            per_process_memory_fraction: None,
            memory_limit: None,
            large_segment_size: 20 << 20,
            expandable_segments: false,
            backend: Caching::default(),
            overflow: Overflow::default(),
            compact_min_share: 0.0625,
            compact_reserved_slack: 0.06,
            compact_release_budget: 0.25,
        }
    }
}

impl Config {
    /// Parses a configuration string in `PYTORCH_CUDA_ALLOC_CONF` syntax.
    ///
    /// Unknown keys, malformed values, repeated keys and syntax errors are all
    /// [`ConfigError`]s that name what was wrong and what is allowed.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        parse::parse(text)
    }

    /// Reads `WGPOOL_CONF` from the environment; an unset or empty variable gives the
    /// defaults.
    pub fn from_env() -> Result<Config, ConfigError> {
        match std::env::var(ENV_VAR) {
            Ok(text) => Config::parse(&text),
            Err(std::env::VarError::NotPresent) => Ok(Config::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::NotUnicode),
        }
    }

    /// The cap in bytes given a device memory size, or why it cannot be computed.
    ///
    /// The cap is the smaller of `memory_limit_mb` and `per_process_memory_fraction` times
    /// `device_memory`. A fraction with an unknown device size and no `memory_limit_mb` is an
    /// error, because the cap would otherwise silently not apply.
    pub fn memory_cap(&self, device_memory: Option<u64>) -> Result<Option<u64>, String> {
        let from_fraction = match (self.per_process_memory_fraction, device_memory) {
            (Some(fraction), Some(total)) => Some((fraction * total as f64) as u64),
            (Some(fraction), None) if self.memory_limit.is_none() => {
                return Err(format!(
                    "per_process_memory_fraction:{fraction} needs the device memory size, \
                     which is unknown here; set memory_limit_mb to give the cap in MiB"
                ));
            }
            _ => None,
        };
        Ok(match (from_fraction, self.memory_limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Writes the configuration back in `WGPOOL_CONF` syntax, listing only non-default
    /// options. `Config::parse(&c.to_conf_string()) == Ok(c)` for any parsed `c`.
    pub fn to_conf_string(&self) -> String {
        let defaults = Config::default();
        OPTIONS
            .iter()
            .filter_map(|option| {
                let value = (option.render)(self);
                (value != (option.render)(&defaults)).then(|| format!("{}:{}", option.key, value))
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

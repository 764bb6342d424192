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

pub use error::{CapError, ConfigError};
pub(crate) use options::MAX_SIZE_MB;
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

/// Whether the engine maps pages into growing address ranges (`expandable_segments`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpandableSegments {
    /// Pages where the segment source can map them, fixed segments where it cannot.
    Auto,
    /// Pages; a source that cannot map them is an error.
    True,
    /// Fixed segments, one device allocation each.
    False,
}

impl ExpandableSegments {
    /// The name used in `WGPOOL_CONF`.
    pub fn name(self) -> &'static str {
        match self {
            ExpandableSegments::Auto => "auto",
            ExpandableSegments::True => "True",
            ExpandableSegments::False => "False",
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
///
/// Build one by parsing (`Config::parse`, `str::parse`, [`Config::from_env`]) or from the
/// defaults with the `with_*` builders; the engine checks the values either way
/// ([`Config::validate`]).
///
/// ```
/// use wgpool::config::{Config, Policy};
/// let parsed: Config = "policy:pytorch,max_split_size_mb:128".parse().unwrap();
/// let built = Config::default()
///     .with_policy(Policy::Pytorch)
///     .with_max_split_size(Some(128 << 20));
/// assert_eq!(parsed, built);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
    /// Segment size for requests of the large kind under 10 MiB (`large_segment_size_mb`).
    pub large_segment_size: u64,
    /// Page mapping (`expandable_segments`); `None` is the policy's default: `auto` for
    /// `policy:compact`, `False` for `policy:pytorch` (PyTorch's default). See
    /// [`Config::expandable`].
    pub expandable_segments: Option<ExpandableSegments>,
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
    /// `policy:compact` in segments mode: most bytes released over the pool's life, as a
    /// multiple of the allocated peak, before `compact_recycle_rate`'s share is added
    /// (`compact_release_budget`).
    pub compact_release_budget: f64,
    /// `policy:compact`: bytes of memory that may be recycled (idle pages remapped, or idle
    /// segments released and created again), as a share of the bytes requested over the
    /// pool's life, on top of a fixed budget (`compact_recycle_rate`).
    pub compact_recycle_rate: f64,
    /// `policy:compact` in pages mode: how far physical memory may exceed the peak of live
    /// memory before idle pages are recycled, reached once the bytes mapped over the pool's
    /// life are `1 + compact_slack_ramp` times that peak, and in proportion before
    /// (`compact_page_slack`).
    pub compact_page_slack: f64,
    /// `policy:compact` in pages mode: over how many peaks of live memory mapped beyond the
    /// first the slack of `compact_page_slack` grows from none to all of it
    /// (`compact_slack_ramp`).
    pub compact_slack_ramp: f64,
    /// `policy:compact` in pages mode: whether a workload whose requests keep growing a
    /// little at a time (a KV cache concatenated one token per step) earns the slack of
    /// `compact_page_slack` as soon as that shows, instead of over the ramp
    /// (`compact_slack_on_growth`).
    pub compact_slack_on_growth: bool,
    /// `policy:compact` in pages mode: how much a miss of the small kind maps, its own pages
    /// included, in KiB, at most 1/512 of the peak of live memory (`compact_small_map_kb`;
    /// 0: exactly its own pages).
    pub compact_small_map_kb: u32,
    /// `policy:compact` in segments mode: whether a request that `compact_min_share` keeps
    /// out of every idle segment shares one rather than release one to make room for its
    /// own (`compact_share_idle`).
    pub compact_share_idle: bool,
    /// Pages mode: preferred chunks of device memory a pool keeps allocated ahead of demand
    /// on a thread of its own, so that growing normally binds without waiting for the
    /// driver's allocation (`page_reserve_chunks`; 0: none).
    pub page_reserve_chunks: u32,
    /// Pages mode: maps and unmaps a pool lets wait on the device for one
    /// `vkQueueBindSparse` together, where binds are ordered on the GPU (`page_bind_batch`;
    /// 1: a call per map or unmap).
    pub page_bind_batch: u32,
    /// Whether a GPU pool hands a dropped block straight to the next request of the same
    /// size (`reuse_cache`); `None` (`auto`): on for `policy:compact` in pages mode, off in
    /// fixed segments and for `policy:pytorch`. See [`Config::reuses_blocks`].
    pub reuse_cache: Option<bool>,
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
            expandable_segments: None,
            backend: Caching::default(),
            overflow: Overflow::default(),
            compact_min_share: 0.0625,
            compact_reserved_slack: 0.04,
            compact_release_budget: 0.25,
            compact_recycle_rate: 0.1,
            compact_page_slack: 0.008,
            compact_slack_ramp: 0.3,
            compact_slack_on_growth: true,
            compact_small_map_kb: 2048,
            compact_share_idle: true,
            page_reserve_chunks: 0,
            page_bind_batch: 16,
            reuse_cache: None,
        }
    }
}

/// `with_*` builders, one per field: each returns the configuration with that field set.
macro_rules! builders {
    ($($(#[$doc:meta])* $name:ident: $field:ident: $ty:ty;)*) => {
        impl Config {
            $(
                $(#[$doc])*
                pub fn $name(mut self, value: $ty) -> Config {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

builders! {
    /// Sets `policy`.
    with_policy: policy: Policy;
    /// Sets `max_split_size` in bytes (`None`: unlimited).
    with_max_split_size: max_split_size: Option<u64>;
    /// Sets `max_non_split_rounding` in bytes.
    with_max_non_split_rounding: max_non_split_rounding: u64;
    /// Sets `roundup_power2_divisions`.
    with_roundup_power2_divisions: roundup_power2_divisions: RoundupDivisions;
    /// Sets `roundup_bypass_threshold` in bytes.
    with_roundup_bypass_threshold: roundup_bypass_threshold: Option<u64>;
    /// Sets `garbage_collection_threshold`.
    with_garbage_collection_threshold: garbage_collection_threshold: Option<f64>;
    /// Sets `per_process_memory_fraction`.
    with_per_process_memory_fraction: per_process_memory_fraction: Option<f64>;
    /// Sets `memory_limit` in bytes.
    with_memory_limit: memory_limit: Option<u64>;
    /// Sets `large_segment_size` in bytes.
    with_large_segment_size: large_segment_size: u64;
    /// Sets `expandable_segments` (`None`: the policy's default).
    with_expandable_segments: expandable_segments: Option<ExpandableSegments>;
    /// Sets `backend`.
    with_backend: backend: Caching;
    /// Sets `overflow`.
    with_overflow: overflow: Overflow;
    /// Sets `compact_min_share`.
    with_compact_min_share: compact_min_share: f64;
    /// Sets `compact_reserved_slack`.
    with_compact_reserved_slack: compact_reserved_slack: f64;
    /// Sets `compact_release_budget`.
    with_compact_release_budget: compact_release_budget: f64;
    /// Sets `compact_recycle_rate`.
    with_compact_recycle_rate: compact_recycle_rate: f64;
    /// Sets `compact_page_slack`.
    with_compact_page_slack: compact_page_slack: f64;
    /// Sets `compact_slack_ramp`.
    with_compact_slack_ramp: compact_slack_ramp: f64;
    /// Sets `compact_slack_on_growth`.
    with_compact_slack_on_growth: compact_slack_on_growth: bool;
    /// Sets `compact_small_map_kb`.
    with_compact_small_map_kb: compact_small_map_kb: u32;
    /// Sets `compact_share_idle`.
    with_compact_share_idle: compact_share_idle: bool;
    /// Sets `page_reserve_chunks`.
    with_page_reserve_chunks: page_reserve_chunks: u32;
    /// Sets `page_bind_batch`.
    with_page_bind_batch: page_bind_batch: u32;
    /// Sets `reuse_cache` (`None`: the policy's default).
    with_reuse_cache: reuse_cache: Option<bool>;
}

impl std::str::FromStr for Config {
    type Err = ConfigError;

    /// [`Config::parse`].
    fn from_str(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text)
    }
}

impl Config {
    /// Parses a configuration string in `PYTORCH_CUDA_ALLOC_CONF` syntax.
    ///
    /// # Errors
    ///
    /// Unknown keys, malformed or out-of-range values, repeated keys and syntax errors are
    /// all [`ConfigError`]s that name what was wrong and what is allowed.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        parse::parse(text)
    }

    /// Whether pages are mapped: `expandable_segments` as set, or the policy's default
    /// (`auto` for `policy:compact`, `False` for `policy:pytorch`, as in PyTorch).
    ///
    /// ```
    /// use wgpool::config::{Config, ExpandableSegments};
    /// assert_eq!(Config::default().expandable(), ExpandableSegments::Auto);
    /// let pytorch = Config::parse("policy:pytorch").unwrap();
    /// assert_eq!(pytorch.expandable(), ExpandableSegments::False);
    /// ```
    pub fn expandable(&self) -> ExpandableSegments {
        self.expandable_segments.unwrap_or(match self.policy {
            Policy::Compact => ExpandableSegments::Auto,
            Policy::Pytorch => ExpandableSegments::False,
        })
    }

    /// Whether a GPU pool in pages mode (`pages`) or in fixed segments serves a request from
    /// the block dropped just before it when their requested sizes are equal, without the
    /// engine: `reuse_cache` as set, or by default (`auto`) only for `policy:compact` in
    /// pages mode, where it saves the hot path most and changes least (in fixed segments the
    /// policy's placement is what a device without page mapping has to hold its memory down;
    /// under `policy:pytorch` every block is placed as PyTorch would place it). With it off,
    /// the pool places every block exactly as its engine alone does (`wgpool replay`).
    ///
    /// ```
    /// use wgpool::config::Config;
    /// assert!(Config::default().reuses_blocks(true));
    /// assert!(!Config::default().reuses_blocks(false));
    /// assert!(!Config::parse("policy:pytorch").unwrap().reuses_blocks(true));
    /// assert!(Config::parse("reuse_cache:True").unwrap().reuses_blocks(false));
    /// assert!(!Config::parse("reuse_cache:False").unwrap().reuses_blocks(true));
    /// ```
    pub fn reuses_blocks(&self, pages: bool) -> bool {
        self.reuse_cache
            .unwrap_or(pages && matches!(self.policy, Policy::Compact))
    }

    /// Checks that every value is one the parser could have produced: within the bounds of
    /// the option table, so that the engine can represent it. The engine calls this.
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidValue`] naming the first field out of range and its limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        options::validate(self)
    }

    /// Reads `WGPOOL_CONF` from the environment; an unset or empty variable gives the
    /// defaults.
    ///
    /// # Errors
    ///
    /// As [`Config::parse`], and [`ConfigError::NotUnicode`] for a value that is not UTF-8.
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
    ///
    /// # Errors
    ///
    /// [`CapError::FractionNeedsDeviceMemory`] for a fraction with no device size and no
    /// `memory_limit_mb`.
    pub fn memory_cap(&self, device_memory: Option<u64>) -> Result<Option<u64>, CapError> {
        let from_fraction = match (self.per_process_memory_fraction, device_memory) {
            (Some(fraction), Some(total)) => Some((fraction * total as f64) as u64),
            (Some(fraction), None) if self.memory_limit.is_none() => {
                return Err(CapError::FractionNeedsDeviceMemory { fraction });
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

//! The option table: the one place that says what each `WGPOOL_CONF` key means.

use super::roundup::MAX_DIVISIONS;
use super::{Caching, Config, ConfigError, ExpandableSegments, Overflow, Policy, RoundupDivisions};

/// A value as written after `key:`: a scalar, or a bracketed list of `key:value` entries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RawValue {
    Scalar(String),
    List(Vec<(String, String)>),
}

impl RawValue {
    /// The value as the user wrote it, for error messages.
    pub(crate) fn as_written(&self) -> String {
        match self {
            RawValue::Scalar(s) => s.clone(),
            RawValue::List(entries) => {
                let parts: Vec<String> = entries.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("[{}]", parts.join(","))
            }
        }
    }

    fn scalar(&self) -> Result<&str, String> {
        match self {
            RawValue::Scalar(s) => Ok(s),
            RawValue::List(_) => Err("a list is not accepted here".into()),
        }
    }
}

/// One configuration option.
pub struct OptionSpec {
    /// The key in `WGPOOL_CONF`.
    pub key: &'static str,
    /// The default, as it would be written.
    pub default: &'static str,
    /// The values accepted, in words; quoted verbatim by error messages.
    pub allowed: &'static str,
    /// What the option does.
    pub meaning: &'static str,
    /// Stores a value into a config, or says why it is refused.
    pub(crate) apply: fn(&mut Config, &RawValue) -> Result<(), String>,
    /// The option's current value in `WGPOOL_CONF` syntax.
    pub(crate) render: fn(&Config) -> String,
}

const MIB: u64 = 1 << 20;
/// Largest `roundup_power2_divisions` list key: 2^36 MiB = 64 PiB, above any block (the
/// engine bounds segments to 2 TiB), so that no key in use is refused.
const MAX_INTERVAL_KEY_MB: u64 = 1 << 36;

fn parse_u64(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .map_err(|_| "not a non-negative integer".to_string())
}

fn parse_f64(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err("not a number".to_string()),
    }
}

fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "True" | "true" | "1" => Ok(true),
        "False" | "false" | "0" => Ok(false),
        _ => Err("not a boolean".to_string()),
    }
}

/// How a boolean option is written: as PyTorch writes them (`True`, `False`).
fn render_bool(value: bool) -> String {
    if value { "True" } else { "False" }.to_string()
}

/// The largest size option in MiB: the engine's largest segment (2 TiB less 512 B, sizes in
/// 512 B granules of 32 bits), in whole MiB. Larger sizes could not be represented in a
/// block. The configuration sits below the engine, so it states the size itself; the engine
/// checks at compile time that its `MAX_SEGMENT_SIZE` gives the same figure.
pub(crate) const MAX_SIZE_MB: u64 = ((u32::MAX as u64) << 9) / MIB;
/// The largest cap in MiB: what fits 64 bits in bytes.
pub(crate) const MAX_CAP_MB: u64 = u64::MAX / MIB;

/// A size in MiB from `min` to `max`, returned in bytes.
fn parse_mib_in(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let mb = parse_u64(text)?;
    if mb < min {
        return Err(format!("{mb} is below the minimum of {min}"));
    }
    if mb > max {
        return Err(format!("{mb} is above the maximum of {max}"));
    }
    Ok(mb * MIB)
}

fn parse_divisions(text: &str) -> Result<u32, String> {
    let n = parse_u64(text)?;
    if n == 0 || !n.is_power_of_two() || n > MAX_DIVISIONS as u64 {
        return Err(format!(
            "{n} divisions is not a power of two from 1 to {MAX_DIVISIONS}"
        ));
    }
    Ok(n as u32)
}

fn apply_roundup(config: &mut Config, value: &RawValue) -> Result<(), String> {
    config.roundup_power2_divisions = match value {
        RawValue::Scalar(text) => RoundupDivisions::uniform(parse_divisions(text)?),
        RawValue::List(entries) => {
            if entries.is_empty() {
                return Err("the list is empty".into());
            }
            let mut bounds: Vec<(u64, u32)> = Vec::new();
            let mut rest = None;
            for (index, (key, divisions)) in entries.iter().enumerate() {
                let divisions = parse_divisions(divisions)?;
                if key == ">" {
                    if index + 1 != entries.len() {
                        return Err("`>` must be the last entry".into());
                    }
                    rest = Some(divisions);
                    continue;
                }
                let mb = parse_u64(key).map_err(|_| {
                    format!(
                        "interval key `{}` is not an integer",
                        crate::format::visible(key)
                    )
                })?;
                if mb == 0 || !mb.is_power_of_two() {
                    return Err(format!("interval key {mb} MiB is not a power of two"));
                }
                if mb > MAX_INTERVAL_KEY_MB {
                    return Err(format!(
                        "interval key {mb} MiB is above the largest, {MAX_INTERVAL_KEY_MB} MiB"
                    ));
                }
                if bounds.last().is_some_and(|&(prev, _)| prev >= mb) {
                    return Err(format!(
                        "interval key {mb} MiB is not larger than the one before it"
                    ));
                }
                bounds.push((mb, divisions));
            }
            RoundupDivisions::from_list(bounds, rest)
        }
    };
    Ok(())
}

fn render_mib(bytes: Option<u64>) -> String {
    bytes
        .map(|b| (b / MIB).to_string())
        .unwrap_or_else(|| "none".to_string())
}

fn render_f64(value: Option<f64>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "none".to_string())
}

/// Every option `WGPOOL_CONF` accepts. The parser, the README table and the tests read this.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        key: "policy",
        default: "compact",
        allowed: "`pytorch` or `compact`",
        meaning: "Placement policy. `pytorch` reproduces PyTorch's native CUDA caching allocator \
                  rule for rule; `compact` is wgpool's own policy, which keeps reserved memory \
                  closer to live memory at little extra segment churn.",
        apply: |c, v| {
            c.policy = match v.scalar()? {
                "pytorch" => Policy::Pytorch,
                "compact" => Policy::Compact,
                _ => return Err("unknown policy".into()),
            };
            Ok(())
        },
        render: |c| c.policy.name().to_string(),
    },
    OptionSpec {
        key: "max_split_size_mb",
        default: "none (unlimited)",
        allowed: "an integer number of MiB, from 20 to 2097151 (2 TiB, the largest segment)",
        meaning: "Cached blocks this large or larger are never split. A request below it never \
                  takes such a block; a request at or above it takes a cached block only when \
                  the block is less than `max_non_split_rounding_mb` larger.",
        apply: |c, v| {
            c.max_split_size = Some(parse_mib_in(v.scalar()?, 20, MAX_SIZE_MB)?);
            Ok(())
        },
        render: |c| render_mib(c.max_split_size),
    },
    OptionSpec {
        key: "max_non_split_rounding_mb",
        default: "20",
        allowed: "an integer number of MiB, from 1 to 2097151 (2 TiB, the largest segment)",
        meaning: "How much larger than a request at or above `max_split_size_mb` a cached \
                  block may be and still be handed out whole.",
        apply: |c, v| {
            c.max_non_split_rounding = parse_mib_in(v.scalar()?, 1, MAX_SIZE_MB)?;
            Ok(())
        },
        render: |c| render_mib(Some(c.max_non_split_rounding)),
    },
    OptionSpec {
        key: "roundup_power2_divisions",
        default: "none (512 B rounding only)",
        allowed: "a power of two from 1 to 1024, or a list such as `[256:1,512:2,>:8]` whose keys \
                  are increasing powers of two in MiB (up to 2^36), whose values are such powers of two, and \
                  whose optional last entry `>:N` covers larger sizes",
        meaning: "Round sizes up to the next of N equal steps between two powers of two \
                  (2500 KiB with 4 divisions becomes 2560 KiB). Sizes of at most 512 B times N \
                  keep plain 512 B rounding, so every size stays a multiple of 512 B. The list \
                  form means what PyTorch 2.11's parser makes of it: `K:N` covers sizes from K \
                  up to 2K MiB, the first entry also every size below K, `>:N` every size above \
                  the previous entry's interval, and sizes no entry covers get 512 B rounding \
                  only (so `[256:1,512:2,>:8]` gives 2 divisions to 512 MiB up to 1 GiB and 8 \
                  from 1 GiB up).",
        apply: apply_roundup,
        render: |c| {
            if c.roundup_power2_divisions == RoundupDivisions::none() {
                "none".to_string()
            } else {
                c.roundup_power2_divisions.render()
            }
        },
    },
    OptionSpec {
        key: "roundup_bypass_threshold_mb",
        default: "none",
        allowed: "an integer number of MiB, from 1 to 2097151 (2 TiB, the largest segment)",
        meaning: "Requests above this size skip `roundup_power2_divisions` and are rounded to \
                  512 B only (PyTorch 1.13 to 2.0).",
        apply: |c, v| {
            c.roundup_bypass_threshold = Some(parse_mib_in(v.scalar()?, 1, MAX_SIZE_MB)?);
            Ok(())
        },
        render: |c| render_mib(c.roundup_bypass_threshold),
    },
    OptionSpec {
        key: "garbage_collection_threshold",
        default: "none (off)",
        allowed: "a number strictly between 0 and 1",
        meaning: "Under a memory cap, when a request misses the cache and reserved memory is \
                  above this fraction of the cap, release cached unsplit large blocks, oldest \
                  first, until reserved falls below it.",
        apply: |c, v| {
            let t = parse_f64(v.scalar()?)?;
            if !(t > 0.0 && t < 1.0) {
                return Err(format!("{t} is not strictly between 0 and 1"));
            }
            c.garbage_collection_threshold = Some(t);
            Ok(())
        },
        render: |c| render_f64(c.garbage_collection_threshold),
    },
    OptionSpec {
        key: "per_process_memory_fraction",
        default: "none (no cap)",
        allowed: "a number from 0 to 1",
        meaning: "Cap reserved memory at this fraction of the device's memory. Reaching the cap \
                  behaves like a device out-of-memory. Needs the device memory size; where the \
                  adapter does not report it, set `memory_limit_mb`.",
        apply: |c, v| {
            let f = parse_f64(v.scalar()?)?;
            if !(0.0..=1.0).contains(&f) {
                return Err(format!("{f} is outside 0 to 1"));
            }
            c.per_process_memory_fraction = Some(f);
            Ok(())
        },
        render: |c| render_f64(c.per_process_memory_fraction),
    },
    OptionSpec {
        key: "memory_limit_mb",
        default: "none (no cap)",
        allowed: "an integer number of MiB, from 1 to 17592186044415 (16 EiB)",
        meaning: "Cap reserved memory at this many MiB. With `per_process_memory_fraction` too, \
                  the smaller cap applies.",
        apply: |c, v| {
            c.memory_limit = Some(parse_mib_in(v.scalar()?, 1, MAX_CAP_MB)?);
            Ok(())
        },
        render: |c| render_mib(c.memory_limit),
    },
    OptionSpec {
        key: "large_segment_size_mb",
        default: "20",
        allowed: "an integer number of MiB, from 10 to 2097151 (2 TiB, the largest segment)",
        meaning: "Size of a new segment for a request of the large kind under 10 MiB (PyTorch's \
                  kLargeBuffer). Segments of the small kind are 2 MiB; requests of 10 MiB or more get \
                  a segment of their own size rounded up to 2 MiB. With `policy:pytorch` in \
                  pages mode it is also the large kind's page. A segment or page above the \
                  device's largest (its `max_buffer_size`, or its largest address range) \
                  is clamped to that.",
        apply: |c, v| {
            c.large_segment_size = parse_mib_in(v.scalar()?, 10, MAX_SIZE_MB)?;
            Ok(())
        },
        render: |c| render_mib(Some(c.large_segment_size)),
    },
    OptionSpec {
        key: "expandable_segments",
        default: "`auto` with `policy:compact`, `False` with `policy:pytorch`",
        allowed: "`auto`, `True` or `False` (also `true`, `false`, `1`, `0`)",
        meaning: "Map memory in pages into growing address ranges (pages mode; virtual memory: \
                  Vulkan sparse binding on a GPU) instead of fixed segments. `True` requires a device \
                  that can map pages; `auto` maps pages where the device can and uses fixed \
                  segments elsewhere; `False` always uses fixed segments. With \
                  `policy:pytorch`, pages follow PyTorch's expandable segments (one range per \
                  stream and segment kind, 2 MiB pages for the small kind and 20 MiB for the large, \
                  unmapped when cached blocks are released); with `policy:compact`, idle pages \
                  are recycled to keep physical memory near the peak of live memory. \
                  `backend:passthrough` needs `False` or `auto`.",
        apply: |c, v| {
            let text = v.scalar()?;
            c.expandable_segments = Some(if text == "auto" {
                ExpandableSegments::Auto
            } else if parse_bool(text).map_err(|_| "not `auto` or a boolean".to_string())? {
                ExpandableSegments::True
            } else {
                ExpandableSegments::False
            });
            Ok(())
        },
        render: |c| {
            c.expandable_segments
                .map_or("default", ExpandableSegments::name)
                .to_string()
        },
    },
    OptionSpec {
        key: "backend",
        default: "native",
        allowed: "`native` or `passthrough`",
        meaning: "`native` is the caching pool. `passthrough` creates one segment per request \
                  and releases it at free, with no caching: for debugging and comparison, like \
                  PYTORCH_NO_CUDA_MEMORY_CACHING=1.",
        apply: |c, v| {
            c.backend = match v.scalar()? {
                "native" => Caching::Native,
                "passthrough" => Caching::Passthrough,
                _ => return Err("unknown backend".into()),
            };
            Ok(())
        },
        render: |c| c.backend.name().to_string(),
    },
    OptionSpec {
        key: "overflow",
        default: "none",
        allowed: "`none` or `host`",
        meaning: "What happens when the device cap is reached and releasing cached memory did \
                  not help: `none` fails with an out-of-memory error, `host` serves the block \
                  from host-resident memory that kernels can still bind.",
        apply: |c, v| {
            c.overflow = match v.scalar()? {
                "none" => Overflow::None,
                "host" => Overflow::Host,
                _ => return Err("unknown overflow mode".into()),
            };
            Ok(())
        },
        render: |c| c.overflow.name().to_string(),
    },
    OptionSpec {
        key: "compact_min_share",
        default: "0.0625",
        allowed: "a number from 0 to 1",
        meaning: "`policy:compact` only. A request takes a cached free block that spans a whole \
                  segment only if it fills at least this share of it (or leaves at most 64 MiB \
                  unused), so that small requests do not pin segments made for large ones. 0 \
                  gives PyTorch's plain best fit.",
        apply: |c, v| {
            c.compact_min_share = parse_fraction(v.scalar()?)?;
            Ok(())
        },
        render: |c| c.compact_min_share.to_string(),
    },
    OptionSpec {
        key: "compact_reserved_slack",
        default: "0.04",
        allowed: "a number from 0 to 10",
        meaning: "`policy:compact` only. Before a new segment would take reserved memory more \
                  than this fraction above the peak of allocated memory, idle cached segments \
                  are released, least recently freed first (in segments mode, unless \
                  `compact_share_idle` lets the request share one).",
        apply: |c, v| {
            c.compact_reserved_slack = parse_f64_within(v.scalar()?, 0.0..=10.0)?;
            Ok(())
        },
        render: |c| c.compact_reserved_slack.to_string(),
    },
    OptionSpec {
        key: "compact_release_budget",
        default: "0.25",
        allowed: "a number from 0 to 1000",
        meaning: "`policy:compact` in segments mode only. The most bytes released to stay \
                  under the slack, over the pool's life, as a multiple of the allocated peak, \
                  plus `compact_recycle_rate` times every byte requested so far; bounds the \
                  cost of re-creating segments. 0 (with `compact_recycle_rate:0`) never \
                  releases.",
        apply: |c, v| {
            c.compact_release_budget = parse_f64_within(v.scalar()?, 0.0..=1000.0)?;
            Ok(())
        },
        render: |c| c.compact_release_budget.to_string(),
    },
    OptionSpec {
        key: "compact_recycle_rate",
        default: "0.1",
        allowed: "a number from 0 to 100",
        meaning: "`policy:compact`. The share of every byte requested so far that may be \
                  spent recycling memory, on top of a fixed budget. In pages mode idle pages \
                  are unmapped and their memory mapped where a request goes, instead of new \
                  memory, while the bytes mapped over the pool's life stay under 2.5 times the \
                  peak of live memory plus this share; past that, new memory is mapped. In \
                  segments mode idle segments are released to stay under \
                  `compact_reserved_slack` while the bytes released stay under \
                  `compact_release_budget` times the allocated peak plus this share. 0 keeps \
                  the fixed budgets alone. Higher values hold less memory on workloads whose \
                  live set keeps changing shape, at more binds or more segments created.",
        apply: |c, v| {
            c.compact_recycle_rate = parse_f64_within(v.scalar()?, 0.0..=100.0)?;
            Ok(())
        },
        render: |c| c.compact_recycle_rate.to_string(),
    },
    OptionSpec {
        key: "compact_page_slack",
        default: "0.008",
        allowed: "a number from 0 to 1",
        meaning: "`policy:compact` in pages mode only. How far physical memory may exceed the \
                  peak of live memory before idle pages are unmapped and their memory mapped \
                  where a request goes: this fraction of the peak once the bytes mapped over \
                  the pool's life reach 1 + `compact_slack_ramp` times it (1.3 by default), \
                  and in proportion before (none while nothing has been mapped twice). Lower \
                  values hold less memory and remap more: 0 keeps physical memory at the \
                  peak of live memory and on a KV-cache decode maps 1.7 times peak live over \
                  the run instead of 1.4.",
        apply: |c, v| {
            c.compact_page_slack = parse_f64_within(v.scalar()?, 0.0..=1.0)?;
            Ok(())
        },
        render: |c| c.compact_page_slack.to_string(),
    },
    OptionSpec {
        key: "compact_slack_ramp",
        default: "0.3",
        allowed: "a number from 0 to 10",
        meaning: "`policy:compact` in pages mode only. How soon a workload that remaps earns \
                  the slack of `compact_page_slack`: the slack grows from none to all of it \
                  while the bytes mapped over the pool's life go from 1 to 1 + this many \
                  times the peak of live memory. The default keeps workloads that hardly \
                  remap (training, whose layout settles in its first steps) near their peak. \
                  Smaller values trade memory for binds: with 0 (the slack from the first \
                  byte mapped twice) and `compact_slack_on_growth:False` a KV-cache decode \
                  binds 486 times instead of 1,179 and \
                  ResNet training 293 instead of 684 (engine replays of the synthetic \
                  traces), and with 0.02 a decode's first run on an H100 made 150 binds \
                  instead of 628 and took 0.254 s instead of 0.357 for the same device \
                  memory; training traces that remap a little then hold up to the whole \
                  slack over peak live instead of 0.05% to 0.5%.",
        apply: |c, v| {
            c.compact_slack_ramp = parse_f64_within(v.scalar()?, 0.0..=10.0)?;
            Ok(())
        },
        render: |c| c.compact_slack_ramp.to_string(),
    },
    OptionSpec {
        key: "compact_small_map_kb",
        default: "2048",
        allowed: "an integer from 0 to 65536",
        meaning: "`policy:compact` in pages mode only. How much a miss of the small kind \
                  (blocks up to 1 MiB) maps, its own pages included, in KiB: this much or \
                  1/512 of the peak of live memory, whichever is less, where the unmapped \
                  space has room and the cap allows it, so that the small requests after it \
                  find mapped memory instead of missing one by one. Over the 103 \
                  traces of docs/BENCHMARKS.md the default maps 24% fewer times than 0 \
                  (ResNet training 450 to 236, a KV-cache decode 437 to 211, a serving trace \
                  1,911 to 657) and holds the same memory on average (at most 0.13% more of \
                  peak live on a workload trace; up to 3 points more, and up to 2 less, on \
                  random mixes recorded under a cap). 0 maps exactly the pages a request \
                  needs.",
        apply: |c, v| {
            c.compact_small_map_kb = parse_u32_at_most(v.scalar()?, MAX_SMALL_MAP_KB)?;
            Ok(())
        },
        render: |c| c.compact_small_map_kb.to_string(),
    },
    OptionSpec {
        key: "compact_slack_on_growth",
        default: "True",
        allowed: "a boolean (`True`/`False`, `true`/`false`, `1`/`0`)",
        meaning: "`policy:compact` in pages mode only. Whether a workload whose requests \
                  keep growing a little at a time earns the slack of `compact_page_slack` as \
                  soon as that shows instead of over `compact_slack_ramp`: a request that \
                  misses the free blocks and is at most 1/64 larger than one of the 8 misses \
                  before it counts as growth, and the slack is earned in proportion to the \
                  growth misses beyond an eighth of all misses and 2 more, in full 8 misses \
                  further on; earned slack is kept. A KV-cache decode whose caches are \
                  concatenated one token per step shows it in its first steps, and on the \
                  synthetic decode binds fall from 1,179 to 517 and the bytes mapped over \
                  the run from 1.42x to 1.03x peak live, for the same peak of reserved \
                  memory (1.008x live). On the 48 traces of docs/POLICY.md every other one \
                  is placed exactly as with `False`: training and serving traces show at \
                  most a tenth of their misses as growth, and random mixes, where up to 41% \
                  are, remap enough to have earned the slack by the ramp already. `False` \
                  earns the slack over the ramp alone.",
        apply: |c, v| {
            c.compact_slack_on_growth = parse_bool(v.scalar()?)?;
            Ok(())
        },
        render: |c| render_bool(c.compact_slack_on_growth),
    },
    OptionSpec {
        key: "compact_share_idle",
        default: "True",
        allowed: "a boolean (`True`/`False`, `true`/`false`, `1`/`0`)",
        meaning: "`policy:compact` in segments mode only. Whether a request that \
                  `compact_min_share` keeps out of every idle segment, and whose own segment \
                  would need a release to fit under `compact_reserved_slack`, shares an idle \
                  segment instead: the smallest with room beside it for the block it last \
                  served, while another idle segment as large stays whole. A decode loop \
                  otherwise releases a segment every step and creates it again the next: on \
                  the synthetic KV-cache decode segments created fall from 167 to 114 (bytes \
                  created 2.68x to 1.36x peak live) and peak reserved from 1.066x to 1.040x \
                  live. Over 105 traces (docs/POLICY.md) it creates 11% fewer segments and \
                  holds 0.85% less on average on workloads, but 0.8% more on random mixes \
                  (from 10% less to 12% more on single ones). `False` releases and creates \
                  instead.",
        apply: |c, v| {
            c.compact_share_idle = parse_bool(v.scalar()?)?;
            Ok(())
        },
        render: |c| render_bool(c.compact_share_idle),
    },
    OptionSpec {
        key: "reuse_cache",
        default: "`auto` (on with `policy:compact` in pages mode; off in fixed segments and \
                  with `policy:pytorch`)",
        allowed: "`auto`, `True` or `False` (also `true`, `false`, `1`, `0`)",
        meaning: "GPU pools only (`wgpool replay` without `--gpu` has no cache). Whether a \
                  dropped block is handed straight to the next request of exactly its \
                  requested size without the engine (up to 32 blocks wait there until a \
                  request misses them). Statistics stay exact either way, and the hot path of \
                  a training loop, where most requests repeat a size just freed, costs far \
                  less with it; but the block comes back where it was, where the engine \
                  would first merge it with its free neighbours and place the request by its \
                  policy, so the pool can hold more or less memory than `wgpool replay` \
                  predicts (fixed segments, 46 full-size replays on lavapipe: more on 10, up \
                  to 7.3%, less on 11, up to 1%; in pages mode at 1/32 size, equal on 14 of \
                  18). `False` places every block as the engine alone does. `auto` keeps the \
                  cache where it pays and changes least, pages mode under `policy:compact` \
                  (there it saves about 5% of the pool's instructions an operation on ResNet and \
                  BERT training); fixed segments get the policy's own placement (the cache \
                  saved 1-3% there on ResNet and BERT, 17% on GPT-2), and `policy:pytorch` \
                  PyTorch's, allocation by allocation.",
        apply: |c, v| {
            let text = v.scalar()?;
            c.reuse_cache = if text == "auto" {
                None
            } else {
                Some(parse_bool(text).map_err(|_| "not `auto` or a boolean".to_string())?)
            };
            Ok(())
        },
        render: |c| c.reuse_cache.map_or("auto".to_string(), render_bool),
    },
    OptionSpec {
        key: "page_reserve_chunks",
        default: "0",
        allowed: "an integer from 0 to 8",
        meaning: "Pages mode only. After each request that needed new device memory, a \
                  thread of the pool's own allocates memory ahead of demand, so that the next \
                  request that needs memory binds a ready chunk instead of waiting for the \
                  driver's allocation: the memory held but unused (free pages and this \
                  reserve) is filled up to the chunk the pool may leave unused anyway plus \
                  this many chunks of 1/128 of the memory the pool holds (a power of two from \
                  2 MiB to 256 MiB). Each costs up to 0.8% of the pool's device memory (2 MiB \
                  below 256 MiB). The reserve counts as the pool's device memory and within \
                  its cap, is freed by `empty_cache`, and stops after an allocation of its \
                  own fails until memory is released. 0 (the default: on an H100 the reserve \
                  did not pay for itself on replays) allocates on the requesting thread \
                  only.",
        apply: |c, v| {
            c.page_reserve_chunks = parse_u32_at_most(v.scalar()?, MAX_RESERVE_CHUNKS)?;
            Ok(())
        },
        render: |c| c.page_reserve_chunks.to_string(),
    },
    OptionSpec {
        key: "page_bind_batch",
        default: "16",
        allowed: "an integer from 1 to 256",
        meaning: "Pages mode only, where binds are ordered on the GPU (Vulkan timeline \
                  semaphores). Maps and unmaps wait on the device until this many have \
                  gathered, and reach the driver in one `vkQueueBindSparse`; a wgpu \
                  submission on the device, a wait for binds (memory freed) or an unmap \
                  that needs a new signal of the GPU's work sends them earlier, so work \
                  submitted after an allocation always finds its pages bound (it waits for \
                  them on the GPU) and an unmap still waits for the work before it. It \
                  saves calls where a workload maps and unmaps a little at a time: on an \
                  H100, queueing maps alone took a KV-cache decode's first run from 265 \
                  calls to 148 and about 10% less time, while training, whose driver work \
                  goes by pages rather than calls, gained nothing. Memory is unaffected. \
                  1 binds every map and unmap in a call of its own.",
        apply: |c, v| {
            let n = parse_u64(v.scalar()?)?;
            if !(1..=MAX_BIND_BATCH).contains(&n) {
                return Err(format!("{n} is outside 1 to {MAX_BIND_BATCH}"));
            }
            c.page_bind_batch = n as u32;
            Ok(())
        },
        render: |c| c.page_bind_batch.to_string(),
    },
];

/// The most binds `page_bind_batch` lets wait for one call.
const MAX_BIND_BATCH: u64 = 256;
/// The largest `compact_small_map_kb`: 64 MiB.
const MAX_SMALL_MAP_KB: u64 = 65536;

/// The most chunks `page_reserve_chunks` accepts: each holds up to about 0.8% of the
/// memory in chunks, so 8 may hold 6% beyond it.
const MAX_RESERVE_CHUNKS: u64 = 8;

/// A non-negative integer of at most `max` (which fits a `u32`), or why not.
fn parse_u32_at_most(text: &str, max: u64) -> Result<u32, String> {
    let n = parse_u64(text)?;
    if n > max {
        return Err(format!("{n} is above the maximum of {max}"));
    }
    Ok(n as u32)
}

/// A number within `range`, or why not.
fn parse_f64_within(text: &str, range: std::ops::RangeInclusive<f64>) -> Result<f64, String> {
    let value = parse_f64(text)?;
    if !range.contains(&value) {
        return Err(format!(
            "{value} is outside {} to {}",
            range.start(),
            range.end()
        ));
    }
    Ok(value)
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    parse_f64_within(text, 0.0..=1.0)
}

/// The option table as Markdown, exactly as the README carries it.
pub fn options_markdown_table() -> String {
    let mut out = String::from(
        "| option | default | allowed values | meaning |\n| --- | --- | --- | --- |\n",
    );
    for option in OPTIONS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            option.key,
            option.default,
            option.allowed,
            squash_spaces(option.meaning)
        ));
    }
    out
}

fn squash_spaces(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The refusal of `key`'s value, with the option table's allowed values.
fn out_of_range(key: &'static str, value: String, reason: String) -> ConfigError {
    let allowed = OPTIONS
        .iter()
        .find(|o| o.key == key)
        .map_or("", |o| o.allowed);
    ConfigError::InvalidValue {
        key,
        value,
        reason,
        allowed,
    }
}

/// A size in bytes from `min_mb` MiB to `max` bytes.
fn check_bytes(key: &'static str, bytes: u64, min_mb: u64, max: u64) -> Result<(), ConfigError> {
    if bytes < min_mb * MIB || bytes > max {
        return Err(out_of_range(
            key,
            format!("{bytes} bytes"),
            format!("outside {min_mb} MiB to {max} bytes"),
        ));
    }
    Ok(())
}

/// A number within `range` (and finite).
fn check_number(
    key: &'static str,
    value: f64,
    range: std::ops::RangeInclusive<f64>,
) -> Result<(), ConfigError> {
    if !range.contains(&value) {
        return Err(out_of_range(
            key,
            value.to_string(),
            format!("outside {} to {}", range.start(), range.end()),
        ));
    }
    Ok(())
}

/// [`Config::validate`]: every field within what the parser accepts.
pub(crate) fn validate(c: &Config) -> Result<(), ConfigError> {
    const MAX_SIZE: u64 = MAX_SIZE_MB * MIB;
    if let Some(bytes) = c.max_split_size {
        check_bytes("max_split_size_mb", bytes, 20, MAX_SIZE)?;
    }
    check_bytes(
        "max_non_split_rounding_mb",
        c.max_non_split_rounding,
        1,
        MAX_SIZE,
    )?;
    if let Some(bytes) = c.roundup_bypass_threshold {
        check_bytes("roundup_bypass_threshold_mb", bytes, 1, MAX_SIZE)?;
    }
    if let Some(bytes) = c.memory_limit {
        check_bytes("memory_limit_mb", bytes, 1, u64::MAX)?;
    }
    check_bytes("large_segment_size_mb", c.large_segment_size, 10, MAX_SIZE)?;
    if let Some(t) = c.garbage_collection_threshold
        && !(t > 0.0 && t < 1.0)
    {
        return Err(out_of_range(
            "garbage_collection_threshold",
            t.to_string(),
            "not strictly between 0 and 1".into(),
        ));
    }
    if let Some(f) = c.per_process_memory_fraction {
        check_number("per_process_memory_fraction", f, 0.0..=1.0)?;
    }
    if c.backend == Caching::Passthrough && c.expandable() == ExpandableSegments::True {
        return Err(ConfigError::Conflict {
            option: "expandable_segments:True",
            other: "backend:passthrough",
            reason: "passthrough gives every request a segment of its own and maps no pages".into(),
        });
    }
    check_number("compact_min_share", c.compact_min_share, 0.0..=1.0)?;
    check_number(
        "compact_reserved_slack",
        c.compact_reserved_slack,
        0.0..=10.0,
    )?;
    check_number(
        "compact_release_budget",
        c.compact_release_budget,
        0.0..=1000.0,
    )?;
    check_number("compact_recycle_rate", c.compact_recycle_rate, 0.0..=100.0)?;
    check_number("compact_page_slack", c.compact_page_slack, 0.0..=1.0)?;
    check_number("compact_slack_ramp", c.compact_slack_ramp, 0.0..=10.0)?;
    check_at_most(
        "compact_small_map_kb",
        c.compact_small_map_kb,
        MAX_SMALL_MAP_KB,
    )?;
    check_at_most(
        "page_reserve_chunks",
        c.page_reserve_chunks,
        MAX_RESERVE_CHUNKS,
    )?;
    if !(1..=MAX_BIND_BATCH).contains(&u64::from(c.page_bind_batch)) {
        return Err(out_of_range(
            "page_bind_batch",
            c.page_bind_batch.to_string(),
            format!("outside 1 to {MAX_BIND_BATCH}"),
        ));
    }
    Ok(())
}

/// Refuses a builder-set integer `value` of option `key` above `max`.
fn check_at_most(key: &'static str, value: u32, max: u64) -> Result<(), ConfigError> {
    if u64::from(value) > max {
        return Err(out_of_range(
            key,
            value.to_string(),
            format!("above the maximum of {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option table states the size limits in words; they must be the engine's.
    #[test]
    fn stated_size_limits_are_the_engines() {
        assert_eq!(MAX_SIZE_MB, 2_097_151);
        assert_eq!(MAX_CAP_MB, 17_592_186_044_415);
        for key in [
            "max_split_size_mb",
            "max_non_split_rounding_mb",
            "roundup_bypass_threshold_mb",
            "large_segment_size_mb",
        ] {
            let option = OPTIONS.iter().find(|o| o.key == key).unwrap();
            assert!(option.allowed.contains(&MAX_SIZE_MB.to_string()), "{key}");
        }
        let cap = OPTIONS.iter().find(|o| o.key == "memory_limit_mb").unwrap();
        assert!(cap.allowed.contains(&MAX_CAP_MB.to_string()));
    }

    /// The table's default column (the README's, and `wgpool options`') is what the parser
    /// gives under each policy: one value, written first (words in brackets may follow), or
    /// where the policies differ, each value with its policy.
    #[test]
    fn stated_defaults_are_the_parsers() {
        for option in OPTIONS {
            let stated = option.default.replace('`', "");
            if option.key == "policy" {
                assert_eq!(stated, (option.render)(&Config::default()));
                continue;
            }
            let values: Vec<(Policy, String)> = [Policy::Compact, Policy::Pytorch]
                .into_iter()
                .map(|policy| {
                    let config = Config {
                        policy,
                        ..Config::default()
                    };
                    // Unset, `expandable_segments` is the policy's default.
                    let value = if option.key == "expandable_segments" {
                        config.expandable().name().to_string()
                    } else {
                        (option.render)(&config)
                    };
                    (policy, value)
                })
                .collect();
            if values[0].1 == values[1].1 {
                let value = &values[0].1;
                assert!(
                    stated == *value || stated.starts_with(&format!("{value} (")),
                    "{}: the table says `{}`, the parser gives {value}",
                    option.key,
                    option.default
                );
            } else {
                for (policy, value) in &values {
                    let part = format!("{value} with policy:{}", policy.name());
                    assert!(
                        stated.contains(&part),
                        "{}: the table says `{}`, the parser gives {value} under policy:{}",
                        option.key,
                        option.default,
                        policy.name()
                    );
                }
            }
        }
    }
}

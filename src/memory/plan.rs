//! The one decision of a pool's memory mode: [`plan`] reads the configuration and the
//! device once, and both the engine ([`Engine::with_mode`](crate::engine::Engine)) and the
//! [`Backing`](super::Backing) are built from the [`MemoryPlan`] it returns, so they never
//! disagree and nothing is rebuilt.

use crate::config::{Caching, Config, ExpandableSegments};
use crate::engine::{EngineError, MemoryMode, PageMapping, decide_memory_mode};
use crate::format::bytes;
use crate::gpu::sparse::{SparseDevice, sparse_device};

use super::paged::page_mapping_of;

/// How a pool holds device memory, decided once by [`plan`].
///
/// Guarantees: `mode` is [`MemoryMode::Pages`] exactly when `sparse` and `page_mapping` are
/// `Some`, and then the engine's own decision from the same configuration and page mapping
/// is `Pages` too.
#[derive(Clone)]
pub(crate) struct MemoryPlan {
    /// Fixed segments or address ranges.
    pub mode: MemoryMode,
    /// Why: the page size and bind queue for pages, or what kept the pool from mapping
    /// pages.
    pub reason: String,
    /// What the device offers for page mapping, in pages mode: the engine places blocks
    /// with it.
    pub page_mapping: Option<PageMapping>,
    /// The device's page mapping, in pages mode: the backing binds through it.
    pub sparse: Option<SparseDevice>,
    /// Chunks the backing keeps allocated ahead of demand in pages mode
    /// (`page_reserve_chunks`).
    pub reserve_chunks: u32,
    /// Maps the backing lets wait for one bind call in pages mode (`page_bind_batch`).
    pub bind_batch: u32,
}

/// Why no plan fits the configuration on this device.
#[derive(Debug)]
pub(crate) enum PlanError {
    /// `expandable_segments:True` on a device that cannot map pages; the reason in words.
    NoPageMapping(String),
    /// The engine's decision refused the configuration
    /// ([`EngineError::PagesUnavailable`]: the device's page mapping is unusable).
    Engine(EngineError),
}

/// Decides the memory mode of a pool with `config` on `device`: pages where
/// `expandable_segments` allows (`auto`, `True`), the device can map pages (Vulkan sparse
/// binding, from [`request_device`](crate::gpu::sparse::request_device)) and the engine
/// caches; fixed segments otherwise.
///
/// # Errors
///
/// [`PlanError::NoPageMapping`] for `expandable_segments:True` on a device that cannot map
/// pages, [`PlanError::Engine`] where its page mapping is unusable.
pub(crate) fn plan(config: &Config, device: &wgpu::Device) -> Result<MemoryPlan, PlanError> {
    let segments = |reason: String| MemoryPlan {
        mode: MemoryMode::Segments,
        reason,
        page_mapping: None,
        sparse: None,
        reserve_chunks: 0,
        bind_batch: 1,
    };
    let sparse = match (config.expandable(), sparse_device(device)) {
        (ExpandableSegments::False, _) => {
            return Ok(segments("expandable_segments:False".to_string()));
        }
        (ExpandableSegments::Auto, Err(why)) => {
            return Ok(segments(format!(
                "expandable_segments:auto, and the device cannot map pages: {}",
                why.reason
            )));
        }
        (_, Err(why)) => return Err(PlanError::NoPageMapping(why.reason)),
        (_, Ok(sparse)) => sparse,
    };
    let mapping = page_mapping_of(&sparse.facts(), device.limits().max_buffer_size);
    let mode = decide_memory_mode(config, Some(mapping)).map_err(PlanError::Engine)?;
    if mode == MemoryMode::Segments {
        let reason = if config.backend == Caching::Native {
            format!(
                "the device's page mapping is unusable: {} pages, ranges of at most {}",
                bytes(mapping.page),
                bytes(mapping.max_range)
            )
        } else {
            format!(
                "the engine keeps fixed segments under backend:{}",
                config.backend.name()
            )
        };
        return Ok(segments(reason));
    }
    let reason = format!(
        "Vulkan sparse binding, {} pages, binds on {}",
        bytes(sparse.page_size()),
        if sparse.facts().own_queue {
            "a queue of the pool's own"
        } else {
            "wgpu's queue (serialized with its submissions)"
        }
    );
    Ok(MemoryPlan {
        mode,
        reason,
        page_mapping: Some(mapping),
        sparse: Some(sparse),
        reserve_chunks: config.page_reserve_chunks,
        bind_batch: config.page_bind_batch,
    })
}

//! Which memory mode an engine runs, decided once from the configuration and what the
//! source offers; the engine and the memory behind it both take this one decision.

use super::error::EngineError;
use super::source::PageMapping;
use super::types::{MAX_SEGMENT_SIZE, MemoryMode};
use crate::config::{Caching, Config, ExpandableSegments};

/// The page mapping an engine can use from what a source offers: `None` where the source
/// cannot map pages or its largest range cannot hold one of its pages.
pub(crate) fn usable_page_mapping(offered: Option<PageMapping>) -> Option<PageMapping> {
    offered.filter(|m| m.max_range.min(MAX_SEGMENT_SIZE) >= m.page.max(1))
}

/// The memory mode `config` asks for on a source offering `page_mapping`.
///
/// Guarantees: [`MemoryMode::Pages`] only where the source offers a usable page mapping
/// (see [`usable_page_mapping`]), `expandable_segments` is `auto` or `True` and the engine
/// caches (`backend:native`); [`MemoryMode::Segments`] otherwise. The one error is
/// [`EngineError::PagesUnavailable`]: `expandable_segments:True` on a source with no usable
/// page mapping.
pub(crate) fn decide_memory_mode(
    config: &Config,
    page_mapping: Option<PageMapping>,
) -> Result<MemoryMode, EngineError> {
    let pages_mode = match (config.expandable(), usable_page_mapping(page_mapping)) {
        (ExpandableSegments::False, _) => false,
        (ExpandableSegments::True, None) => return Err(EngineError::PagesUnavailable),
        (_, None) => false,
        (_, Some(_)) => config.backend == Caching::Native,
    };
    Ok(if pages_mode {
        MemoryMode::Pages
    } else {
        MemoryMode::Segments
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(expandable: ExpandableSegments, backend: Caching) -> Config {
        Config {
            expandable_segments: Some(expandable),
            backend,
            ..Config::default()
        }
    }

    /// Pages only where the configuration allows, the engine caches and the source maps.
    #[test]
    fn pages_need_config_caching_and_a_usable_mapping() {
        let h200 = Some(PageMapping::new(64 << 10, 1 << 40));
        let broken = Some(PageMapping::new(1 << 20, 4096));
        let native = Caching::Native;
        let passthrough = Caching::Passthrough;
        use ExpandableSegments::{Auto, False, True};
        let cases = [
            (False, native, h200, Ok(MemoryMode::Segments)),
            (Auto, native, h200, Ok(MemoryMode::Pages)),
            (True, native, h200, Ok(MemoryMode::Pages)),
            (Auto, passthrough, h200, Ok(MemoryMode::Segments)),
            (True, passthrough, h200, Ok(MemoryMode::Segments)),
            (Auto, native, None, Ok(MemoryMode::Segments)),
            (Auto, native, broken, Ok(MemoryMode::Segments)),
            (True, native, None, Err(EngineError::PagesUnavailable)),
            (True, native, broken, Err(EngineError::PagesUnavailable)),
        ];
        for (expandable, backend, mapping, want) in cases {
            let got = decide_memory_mode(&config(expandable, backend), mapping);
            assert_eq!(got, want, "{expandable:?} {backend:?} {mapping:?}");
        }
    }
}

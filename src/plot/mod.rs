//! Pictures as SVG, drawn with `plotters`: memory over a replay, and benchmark rates by
//! placement.

mod bars;
mod memory;
mod units;

pub use bars::{Bar, BarGroup, BarPanel, render_bars_svg};
pub use memory::{MemoryCurves, render_memory_svg};

use thiserror::Error;

/// A picture that could not be drawn or written.
#[derive(Error)]
#[non_exhaustive]
pub enum PlotError {
    /// The drawing library refused (its message).
    #[error("cannot draw the plot: {0}")]
    Draw(String),
    /// Nothing to draw.
    #[error("nothing to plot: {0}")]
    Empty(&'static str),
    /// Writing the file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Writes an SVG picture to `path`.
pub fn write_svg(path: &std::path::Path, svg: &str) -> Result<(), PlotError> {
    std::fs::write(path, svg).map_err(|source| PlotError::Write {
        path: path.display().to_string(),
        source,
    })
}

fn draw_error<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

crate::error_debug::debug_as_message!(PlotError);

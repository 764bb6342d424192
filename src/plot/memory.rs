//! Memory over a replay: live, allocated and reserved bytes, the peak, and the device
//! allocations and frees (segments created and released, or pages mapped and unmapped).

use plotters::prelude::*;

use super::units::byte_unit;
use super::{PlotError, draw_error};
use crate::format::bytes;
use crate::history::MemorySample;

/// What [`render_memory_svg`] draws.
#[derive(Debug, Clone)]
pub struct MemoryCurves<'a> {
    /// The title (trace and configuration).
    pub title: String,
    /// Memory over the replay, in operation order.
    pub samples: &'a [MemorySample],
    /// What the x axis counts: `"operation"` for a replay, `"event"` for a pool's history.
    pub x_desc: &'a str,
    /// Operations (or events) in the replay.
    pub ops: u64,
    /// Highest reserved bytes, and the operation where it was first reached.
    pub peak_reserved: (u64, u64),
}

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 640;
const RESERVED: RGBColor = RGBColor(31, 119, 180);
const ALLOCATED: RGBColor = RGBColor(255, 127, 14);
const LIVE: RGBColor = RGBColor(44, 160, 44);
const MAPPED: RGBColor = RGBColor(148, 103, 189);
const CREATED: RGBColor = RGBColor(23, 190, 207);
const RELEASED: RGBColor = RGBColor(214, 39, 40);
const EVICTED: RGBColor = RGBColor(140, 86, 75);

/// Draws the curves as an SVG document.
///
/// The series are named in the legend (`reserved`, `mapped pages` for a pool in pages mode,
/// `allocated` where the samples have it, `live (requested)`, `evicted to host` where a pool
/// with residency evicted blocks, then `segments created` and `segments released` with
/// fixed segments or `maps` and `unmaps` with pages, each with its total, which is the
/// replay report's `segments_created` / `segments_released`), and the peak of reserved
/// memory is marked with its value, below the legend.
pub fn render_memory_svg(curves: &MemoryCurves) -> Result<String, PlotError> {
    if curves.samples.is_empty() {
        return Err(PlotError::Empty("the replay has no operations"));
    }
    let max = curves
        .samples
        .iter()
        .map(|s| {
            s.reserved
                .max(s.allocated)
                .max(s.live)
                .max(s.mapped)
                .max(s.evicted)
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let (unit, unit_name) = byte_unit(max);
    let y = |b: u64| b as f64 / unit;
    let x_end = curves.ops.max(1) as f64;
    // Headroom above the highest curve: the legend (up to six entries, about the top
    // quarter of the plot) and the peak label, which sits just above the peak, never meet.
    let y_end = y(max) * 1.6;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&curves.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(0f64..x_end, 0f64..y_end)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc(curves.x_desc)
            .y_desc(format!("memory ({unit_name})"))
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.2}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_error)?;

        let points = |f: fn(&MemorySample) -> u64| {
            curves
                .samples
                .iter()
                .map(move |s| (s.op as f64, y(f(s))))
                .collect::<Vec<_>>()
        };
        let pages_mode = curves.samples.iter().any(|s| s.mapped > 0);
        let mut series = vec![
            (
                "reserved",
                RESERVED,
                (|s| s.reserved) as fn(&MemorySample) -> u64,
                3,
            ),
            ("allocated", ALLOCATED, |s| s.allocated, 2),
            ("live (requested)", LIVE, |s| s.live, 2),
        ];
        if pages_mode {
            series.insert(1, ("mapped pages", MAPPED, |s| s.mapped, 2));
        }
        if curves.samples.iter().all(|s| s.allocated == 0) {
            series.retain(|(name, ..)| *name != "allocated");
        }
        if curves.samples.iter().any(|s| s.evicted > 0) {
            series.push(("evicted to host", EVICTED, |s| s.evicted, 2));
        }
        for (name, color, f, width) in series {
            chart
                .draw_series(LineSeries::new(points(f), color.stroke_width(width)))
                .map_err(draw_error)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
                });
        }

        // Device allocations and frees (segments, or in pages mode maps and unmaps, as
        // PyTorch counts them): ticks along the bottom, one per bucket with any.
        let tick = y_end * 0.035;
        let (created, released) = if pages_mode {
            ("maps", "unmaps")
        } else {
            ("segments created", "segments released")
        };
        for (name, color, base, count) in [
            (
                created,
                CREATED,
                0.0,
                (|s| s.device_allocs) as fn(&MemorySample) -> u32,
            ),
            (released, RELEASED, tick * 1.2, |s| s.device_frees),
        ] {
            let total: u64 = curves.samples.iter().map(|s| count(s) as u64).sum();
            chart
                .draw_series(curves.samples.iter().filter(|s| count(s) > 0).map(|s| {
                    let x = s.op as f64;
                    PathElement::new(vec![(x, base), (x, base + tick)], color.stroke_width(1))
                }))
                .map_err(draw_error)?
                .label(format!("{name} ({total}, ticks)"))
                .legend(move |(x, y)| {
                    PathElement::new(
                        vec![(x + 10, y - 6), (x + 10, y + 6)],
                        color.stroke_width(2),
                    )
                });
        }

        let (peak, peak_op) = curves.peak_reserved;
        let peak_point = (peak_op as f64, y(peak));
        chart
            .draw_series(std::iter::once(Circle::new(peak_point, 6, RED.filled())))
            .map_err(draw_error)?;
        let at = if curves.x_desc == "operation" {
            "op"
        } else {
            curves.x_desc
        };
        let label = format!("peak reserved {} at {at} {peak_op}", bytes(peak));
        // Keep the label inside the plot: left of the point in the right half.
        let anchor = if peak_point.0 > x_end * 0.6 {
            (peak_point.0 - x_end * 0.3, peak_point.1 + y_end * 0.04)
        } else {
            (peak_point.0 + x_end * 0.01, peak_point.1 + y_end * 0.04)
        };
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                anchor,
                ("sans-serif", 16).into_font().color(&RED),
            )))
            .map_err(draw_error)?;

        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(op: u64, live: u64, mapped: u64) -> MemorySample {
        MemorySample {
            op,
            live,
            allocated: live,
            reserved: mapped.max(live) + (4 << 20),
            mapped,
            evicted: 0,
            device_allocs: u32::from(op == 0),
            device_frees: 0,
        }
    }

    /// The number in `attribute="..."` of the first tag of `svg` that contains `marker`.
    fn attribute(svg: &str, marker: &str, attribute: &str) -> f64 {
        let at = svg.find(marker).expect("marker");
        let tag_start = svg[..at].rfind('<').expect("tag");
        let tag = &svg[tag_start..];
        let key = format!("{attribute}=\"");
        let value = &tag[tag.find(&key).expect("attribute") + key.len()..];
        value[..value.find('"').expect("quote")]
            .parse()
            .expect("number")
    }

    /// The peak label starts below the legend's box (SVG y grows downwards).
    fn assert_label_below_legend(svg: &str) {
        let border = "fill=\"none\" stroke=\"#000000\"";
        let legend_bottom = attribute(svg, border, "y") + attribute(svg, border, "height");
        let label_top = attribute(svg, ">\npeak reserved", "y");
        assert!(
            label_top >= legend_bottom,
            "label at {label_top} overlaps the legend ending at {legend_bottom}"
        );
    }

    #[test]
    fn the_peak_label_never_overlaps_the_legend() {
        // Peaks early, in the middle and late, where the label goes right or left of it.
        for peak_op in [1u64, 50, 99] {
            let samples: Vec<MemorySample> = (0..100)
                .map(|op| {
                    let live = if op == peak_op { 64 << 20 } else { 8 << 20 };
                    sample(op, live, live)
                })
                .collect();
            let curves = MemoryCurves {
                title: "peaks".into(),
                x_desc: "operation",
                samples: &samples,
                ops: 100,
                peak_reserved: (samples[peak_op as usize].reserved, peak_op),
            };
            assert_label_below_legend(&render_memory_svg(&curves).unwrap());
        }
    }

    #[test]
    fn mapped_pages_are_drawn_only_for_pools_in_pages_mode() {
        let pages_mode = [sample(0, 1 << 20, 2 << 20), sample(1, 3 << 20, 4 << 20)];
        let curves = MemoryCurves {
            title: "pages mode".into(),
            x_desc: "operation",
            samples: &pages_mode,
            ops: 2,
            peak_reserved: (8 << 20, 1),
        };
        let svg = render_memory_svg(&curves).unwrap();
        assert!(svg.contains("mapped pages"), "{svg}");
        assert!(svg.contains("\nallocated\n"), "{svg}");
        assert!(svg.contains("peak reserved 8.00 MiB at op 1"));
        assert!(svg.contains("maps (1, ticks)") && svg.contains("unmaps (0, ticks)"));
        assert!(!svg.contains("segments created"));
        assert_label_below_legend(&svg);
        let fixed = [sample(0, 1 << 20, 0), sample(1, 3 << 20, 0)];
        let curves = MemoryCurves {
            samples: &fixed,
            ..curves
        };
        let svg = render_memory_svg(&curves).unwrap();
        assert!(!svg.contains("mapped pages"));
        assert!(svg.contains("segments created (1, ticks)"));
        assert_label_below_legend(&svg);
        let empty = MemoryCurves {
            samples: &[],
            ..curves
        };
        assert!(render_memory_svg(&empty).is_err());
    }

    #[test]
    fn evicted_bytes_are_drawn_where_there_are_any() {
        let mut samples = [sample(0, 4 << 20, 8 << 20), sample(1, 4 << 20, 4 << 20)];
        samples[1].evicted = 4 << 20;
        for s in &mut samples {
            s.allocated = 0;
        }
        let curves = MemoryCurves {
            title: "residency".into(),
            x_desc: "event",
            samples: &samples,
            ops: 2,
            peak_reserved: (12 << 20, 0),
        };
        let svg = render_memory_svg(&curves).unwrap();
        assert!(svg.contains("evicted to host"), "{svg}");
        assert!(svg.contains("peak reserved 12.00 MiB at event 0"), "{svg}");
        assert!(!svg.contains("\nallocated\n"), "{svg}");
        let mut none = samples;
        none[1].evicted = 0;
        let svg = render_memory_svg(&MemoryCurves {
            samples: &none,
            ..curves
        })
        .unwrap();
        assert!(!svg.contains("evicted to host"));
    }
}

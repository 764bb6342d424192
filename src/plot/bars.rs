//! Horizontal bar charts: one panel per kind of measurement, one group of bars per row.

use plotters::prelude::*;

use super::{PlotError, draw_error};

/// One bar: a series name (the placement) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The series, shown in the legend and coloured alike across groups.
    pub series: String,
    /// The value.
    pub value: f64,
}

/// A row of bars.
#[derive(Debug, Clone, PartialEq)]
pub struct BarGroup {
    /// The row's name.
    pub label: String,
    /// Its bars.
    pub bars: Vec<Bar>,
}

/// A panel: a title, a value axis name and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct BarPanel {
    /// The panel's title.
    pub title: String,
    /// What the values are (`GB/s`).
    pub unit: String,
    /// The rows, top first.
    pub groups: Vec<BarGroup>,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

const WIDTH: u32 = 1200;
const ROW_HEIGHT: u32 = 34;
const PANEL_EXTRA: u32 = 110;

/// Draws the panels one above the other as an SVG document. Each bar carries its value.
pub fn render_bars_svg(panels: &[BarPanel]) -> Result<String, PlotError> {
    let panels: Vec<&BarPanel> = panels.iter().filter(|p| !p.groups.is_empty()).collect();
    if panels.is_empty() {
        return Err(PlotError::Empty("no measurements"));
    }
    let heights: Vec<u32> = panels
        .iter()
        .map(|p| p.groups.len() as u32 * ROW_HEIGHT + PANEL_EXTRA)
        .collect();
    let total: u32 = heights.iter().sum();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, total)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut rest = root;
        for (panel, &height) in panels.iter().zip(&heights) {
            let (area, below) = rest.split_vertically(height);
            draw_panel(&area, panel)?;
            rest = below;
        }
        rest.present().map_err(draw_error)?;
    }
    Ok(svg)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &BarPanel,
) -> Result<(), PlotError> {
    let mut series: Vec<&str> = Vec::new();
    for group in &panel.groups {
        for bar in &group.bars {
            if !series.contains(&bar.series.as_str()) {
                series.push(&bar.series);
            }
        }
    }
    let max = panel
        .groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| b.value))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let rows = panel.groups.len();
    let labels: Vec<String> = panel.groups.iter().map(|g| g.label.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(220)
        .build_cartesian_2d(0f64..max * 1.18, -0.5f64..rows as f64 - 0.5)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(WHITE.mix(0.0))
        .y_labels(rows)
        .y_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < rows {
                // Row 0 at the top.
                labels[rows - 1 - i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc(&panel.unit)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(draw_error)?;
    let band = 0.8;
    for (s, name) in series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        let height = band / series.len() as f64;
        let mut rects = Vec::new();
        let mut texts = Vec::new();
        for (row, group) in panel.groups.iter().enumerate() {
            let Some(bar) = group.bars.iter().find(|b| b.series == *name) else {
                continue;
            };
            let center = (rows - 1 - row) as f64;
            let top = center + band / 2.0 - s as f64 * height;
            let bottom = top - height * 0.9;
            rects.push(Rectangle::new(
                [(0.0, bottom), (bar.value, top)],
                color.filled(),
            ));
            let decimals = if max < 10.0 { 2 } else { 1 };
            texts.push(Text::new(
                format!("{:.*}", decimals, bar.value),
                (bar.value + max * 0.01, (top + bottom) / 2.0 + height * 0.25),
                ("sans-serif", 12),
            ));
        }
        chart
            .draw_series(rects)
            .map_err(draw_error)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        chart.draw_series(texts).map_err(draw_error)?;
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(draw_error)?;
    }
    Ok(())
}

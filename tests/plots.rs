//! Pictures: `wgpool replay --plot` and the bar charts of `wgpool bench --plot` are
//! well-formed SVG (checked with Python's XML parser) holding the expected series.

use std::process::Command;

use wgpool::plot::{Bar, BarGroup, BarPanel, render_bars_svg};

fn well_formed(svg: &str) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; r = E.fromstring(sys.stdin.read()); \
             print(r.tag, len(list(r.iter())))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(svg.as_bytes())?;
            child.wait_with_output()
        })
        .expect("python3 runs (CI installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "not well-formed XML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("{http://www.w3.org/2000/svg}svg"),
        "{stdout}"
    );
}

/// The SVG with each text element's content on the line of its tags.
fn texts_inline(svg: &str) -> String {
    svg.replace(">\n", ">").replace("\n<", "<")
}

#[test]
fn replay_plot_draws_every_series_and_the_peak() {
    let dir = std::env::temp_dir();
    let trace = dir.join(format!("wgpool-plot-{}.csv", std::process::id()));
    let svg_path = dir.join(format!("wgpool-plot-{}.svg", std::process::id()));
    // Two 30 MiB blocks, the first freed and its segment released by a passthrough backend.
    std::fs::write(
        &trace,
        "action,id,size,stream\nalloc,1,31457280,0\nalloc,2,31457280,0\nfree,1,0,0\nalloc,3,1000,0\nfree,2,0,0\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args([
            "replay",
            trace.to_str().unwrap(),
            "--conf",
            "backend:passthrough",
            "--plot",
        ])
        .arg(&svg_path)
        .env_remove("WGPOOL_CONF")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = texts_inline(&std::fs::read_to_string(&svg_path).unwrap());
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(&svg_path);
    well_formed(&svg);
    for text in [
        ">reserved<",
        ">allocated<",
        ">live (requested)<",
        ">segments created (3, ticks)<",
        ">segments released (2, ticks)<",
        "peak reserved 60.00 MiB at op 1",
        "memory (MiB)",
    ] {
        assert!(svg.contains(text), "the SVG lacks {text}");
    }
    // Three curves.
    assert!(svg.matches("<polyline").count() >= 3, "{svg}");
}

#[test]
fn bar_charts_draw_every_placement_and_value() {
    let group = |label: &str, bars: &[(&str, f64)]| BarGroup {
        label: label.to_string(),
        bars: bars
            .iter()
            .map(|(s, v)| Bar {
                series: s.to_string(),
                value: *v,
            })
            .collect(),
    };
    let panels = vec![
        BarPanel {
            title: "kernels".into(),
            unit: "GB/s".into(),
            groups: vec![
                group(
                    "copy_f32",
                    &[("raw", 1500.5), ("pool", 1490.0), ("host", 25.25)],
                ),
                group("triad_f32", &[("raw", 1700.0), ("pool", 1690.0)]),
            ],
        },
        BarPanel {
            title: "moves".into(),
            unit: "GB/s".into(),
            groups: vec![group("copy_buffer_to_buffer", &[("GB/s", 900.0)])],
        },
        BarPanel {
            title: "empty panels are left out".into(),
            unit: "GB/s".into(),
            groups: vec![],
        },
    ];
    let svg = texts_inline(&render_bars_svg(&panels).unwrap());
    well_formed(&svg);
    for text in [
        ">kernels<",
        ">moves<",
        ">raw<",
        ">pool<",
        ">host<",
        ">1500.5<",
        ">25.2<",
        ">900.0<",
        ">copy_f32<",
        ">triad_f32<",
    ] {
        assert!(svg.contains(text), "the SVG lacks {text}");
    }
    assert!(!svg.contains("empty panels"));
    // 5 kernel bars, 1 move bar, and the legend's 3 swatches.
    assert!(svg.matches("<rect").count() >= 9, "{svg}");
    assert!(render_bars_svg(&[]).is_err());
}

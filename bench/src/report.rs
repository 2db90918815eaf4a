//! Output: the db_bench-style header and result lines, JSON, and the comparison chart.

use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::flags::Flags;
use crate::runner::Outcome;

/// What the header describes, also written to the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    pub tool: String,
    pub version: String,
    pub date: String,
    pub cpu_model: String,
    pub cpu_count: usize,
    pub cpu_cache: String,
    pub key_size: usize,
    pub value_size: usize,
    pub entries: u64,
    pub raw_size_mb: f64,
    pub allocator: String,
    pub compression: String,
    pub compression_ratio: f64,
}

impl Header {
    /// The header for a run with `flags`.
    pub fn new(flags: &Flags) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_else(|| "unknown".into())
        };
        Header {
            tool: "shale db_bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            date: utc_now(),
            cpu_model: field("model name"),
            cpu_count: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_cache: field("cache size"),
            key_size: flags.key_size,
            value_size: flags.value_size,
            entries: flags.num,
            raw_size_mb: (flags.key_size + flags.value_size) as f64 * flags.num as f64 / 1048576.0,
            allocator: if cfg!(feature = "jemalloc") { "jemalloc" } else { "system" }.into(),
            compression: flags.compression.clone(),
            compression_ratio: flags.compression_ratio,
        }
    }

    /// Prints the header as db_bench does.
    pub fn print(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out, "{} {} (lsm engine)", self.tool, self.version)?;
        writeln!(out, "Date:        {}", self.date)?;
        writeln!(out, "CPU:         {} * {}", self.cpu_count, self.cpu_model)?;
        writeln!(out, "CPUCache:    {}", self.cpu_cache)?;
        writeln!(out, "Keys:        {} bytes each", self.key_size)?;
        writeln!(
            out,
            "Values:      {} bytes each ({} bytes after compression)",
            self.value_size,
            (self.value_size as f64 * self.compression_ratio) as usize
        )?;
        writeln!(out, "Entries:     {}", self.entries)?;
        writeln!(out, "RawSize:     {:.1} MB (estimated)", self.raw_size_mb)?;
        writeln!(out, "Allocator:   {}", self.allocator)?;
        writeln!(out, "Compression: {}", self.compression)?;
        writeln!(out, "------------------------------------------------")
    }
}

/// Prints one result line (and percentiles and notes).
pub fn print_outcome(out: &mut impl Write, o: &Outcome) -> std::io::Result<()> {
    if o.name == "stats" {
        if let Some(n) = &o.note {
            write!(out, "{n}")?;
        }
        return Ok(());
    }
    write!(
        out,
        "{:<20} : {:>11.3} micros/op {:>9.0} ops/sec; {:>7.1} MB/s",
        o.name,
        o.micros_per_op(),
        o.ops_per_sec(),
        o.mb_per_sec()
    )?;
    if o.file_size > 0 {
        write!(out, " | file size: {}", o.file_size)?;
    }
    match o.found {
        Some(found) if o.writes > 0 && o.writes == o.ops => write!(out, " ( updates:{} found:{found})", o.ops)?,
        Some(found) if o.writes > 0 => write!(out, " ( reads:{} writes:{} found:{found})", o.ops - o.writes, o.writes)?,
        Some(found) => write!(out, " ({found} of {} found)", o.ops)?,
        None => {}
    }
    if let Some(n) = &o.note {
        write!(out, " [{n}]")?;
    }
    writeln!(out)?;
    if let Some(m) = &o.memory {
        writeln!(out, "{:<20}   memory: {}", "", m.summary())?;
    }
    if let Some(p) = &o.percentiles {
        writeln!(
            out,
            "{:<20}   micros: p50 {:.2} p95 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}",
            "", p.p50, p.p95, p.p99, p.p999, p.max
        )?;
    }
    Ok(())
}

/// The JSON this tool writes with --json.
#[derive(Debug, Serialize)]
pub struct RunJson<'a> {
    pub header: &'a Header,
    pub results: &'a [Outcome],
}

/// A side-by-side comparison, as `compare-rocksdb.sh` writes it.
#[derive(Debug, Deserialize)]
pub struct Comparison {
    pub benchmarks: Vec<ComparedBenchmark>,
    /// Entries per benchmark.
    #[serde(default)]
    pub num: Option<u64>,
    /// Runs per engine the medians are taken over.
    #[serde(default)]
    pub runs: Option<u32>,
    /// Block compression.
    #[serde(default)]
    pub compression: Option<String>,
}

impl Comparison {
    /// What was compared, for the chart's caption.
    fn setting(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.num {
            parts.push(format!("{n} entries"));
        }
        if let Some(c) = &self.compression {
            parts.push(c.clone());
        }
        if let Some(r) = self.runs {
            parts.push(format!("median of {r} runs"));
        }
        if parts.is_empty() {
            "throughput relative to RocksDB".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A single run's results, as this tool writes them with --json.
#[derive(Debug, Deserialize)]
struct SingleRun {
    header: SingleHeader,
    results: Vec<SingleResult>,
}

#[derive(Debug, Deserialize)]
struct SingleHeader {
    entries: u64,
    compression: String,
}

#[derive(Debug, Deserialize)]
struct SingleResult {
    name: String,
    ops: u64,
    thread_seconds: f64,
}

/// One benchmark measured by both tools (medians, micros per op).
#[derive(Debug, Deserialize)]
pub struct ComparedBenchmark {
    pub name: String,
    pub rocksdb_micros_per_op: f64,
    pub shale_micros_per_op: f64,
}

/// Draws a results file as an SVG bar chart: a comparison (from `compare-rocksdb.sh`) as each
/// benchmark's throughput relative to RocksDB, or a single run (`--json`) as each benchmark's
/// micros/op.
pub fn svg_chart(results: &Path, svg: &Path) -> Result<()> {
    let text = std::fs::read_to_string(results)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Other(format!("{}: {e}", results.display())))?;
    let bad = |e: serde_json::Error| Error::Other(format!("{}: {e}", results.display()));
    if value.get("header").is_some() {
        let run: SingleRun = serde_json::from_value(value).map_err(bad)?;
        single_run_chart(&run, results, svg)
    } else {
        let cmp: Comparison = serde_json::from_value(value).map_err(bad)?;
        comparison_chart(&cmp, results, svg)
    }
}

/// One bar per benchmark: its micros/op in one run (lower is better).
fn single_run_chart(run: &SingleRun, results: &Path, svg: &Path) -> Result<()> {
    use plotters::prelude::*;

    let bars: Vec<(&str, f64)> = run
        .results
        .iter()
        .filter(|r| r.ops > 0)
        .map(|r| (r.name.as_str(), r.thread_seconds * 1e6 / r.ops as f64))
        .collect();
    if bars.is_empty() {
        return Err(Error::Other(format!("{}: no benchmarks to draw", results.display())));
    }
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(f64::MIN_POSITIVE);
    let n = bars.len();
    let root = SVGBackend::new(svg, (150 * n as u32 + 160, 480)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| Error::Other(format!("drawing {}: {e}", svg.display()));
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let caption = format!("Shale lsm db_bench: {} entries, {}", run.header.entries, run.header.compression);
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..(n as f64 * 2.0), 0f64..max * 1.3)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("micros/op (lower is better)")
        .draw()
        .map_err(|e| draw(&e))?;
    let shale = RGBColor(60, 110, 190);
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64 * 2.0 + 0.5;
            Rectangle::new([(x, 0.0), (x + 1.0, b.1)], shale.filled())
        }))
        .map_err(|e| draw(&e))?;
    for (i, (name, micros)) in bars.iter().enumerate() {
        let label = format!("{name} {micros:.2} us/op");
        let at = (i as f64 * 2.0 + 0.3, micros + max * 0.08);
        chart.draw_series(std::iter::once(Text::new(label, at, ("sans-serif", 13)))).map_err(|e| draw(&e))?;
    }
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}

/// Each benchmark's throughput relative to RocksDB (RocksDB = 1.0, higher is better); the
/// labels carry the absolute micros/op of both.
fn comparison_chart(cmp: &Comparison, results: &Path, svg: &Path) -> Result<()> {
    use plotters::prelude::*;

    if cmp.benchmarks.is_empty() {
        return Err(Error::Other(format!("{}: no benchmarks to draw", results.display())));
    }
    let speedup = |b: &ComparedBenchmark| {
        if b.shale_micros_per_op > 0.0 {
            b.rocksdb_micros_per_op / b.shale_micros_per_op
        } else {
            0.0
        }
    };
    let max = cmp.benchmarks.iter().map(speedup).fold(1.0, f64::max);
    let n = cmp.benchmarks.len();
    let width = 170 * n as u32 + 160;
    let root = SVGBackend::new(svg, (width, 480)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| Error::Other(format!("drawing {}: {e}", svg.display()));
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let top = max * 1.45;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Shale lsm (blue) vs RocksDB (red) db_bench: {}", cmp.setting()), ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..(n as f64 * 3.0), 0f64..top)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("x RocksDB (higher is better)")
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()
        .map_err(|e| draw(&e))?;
    let rocks = RGBColor(200, 80, 60);
    let shale = RGBColor(60, 110, 190);
    let bar = |i: usize, offset: f64, height: f64, color: RGBColor| {
        let x = i as f64 * 3.0 + offset;
        Rectangle::new([(x, 0.0), (x + 0.9, height)], color.filled())
    };
    chart
        .draw_series(cmp.benchmarks.iter().enumerate().map(|(i, _)| bar(i, 0.5, 1.0, rocks)))
        .map_err(|e| draw(&e))?
        .label("RocksDB")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], rocks.filled()));
    chart
        .draw_series(cmp.benchmarks.iter().enumerate().map(|(i, b)| bar(i, 1.5, speedup(b), shale)))
        .map_err(|e| draw(&e))?
        .label("Shale")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], shale.filled()));
    // Name, speed-up and both micros/op above each pair.
    for (i, b) in cmp.benchmarks.iter().enumerate() {
        let x = i as f64 * 3.0 + 0.3;
        let y = speedup(b).max(1.0) + max * 0.12;
        let lines = [
            format!("{} {:.2}x", b.name, speedup(b)),
            format!("{:.2} vs {:.2} us/op", b.shale_micros_per_op, b.rocksdb_micros_per_op),
        ];
        for (j, line) in lines.into_iter().enumerate() {
            chart
                .draw_series(std::iter::once(Text::new(line, (x, y - j as f64 * max * 0.06), ("sans-serif", 13))))
                .map_err(|e| draw(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days; no calendar crate needed for one line).
fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_is_well_formed() {
        let d = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'), "{d}");
    }

    #[test]
    fn chart_is_drawn_from_a_comparison() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("cmp.json");
        std::fs::write(
            &json,
            r#"{"num":1000,"runs":3,"compression":"zstd",
                "benchmarks":[{"name":"fill_seq","rocksdb_micros_per_op":2.0,"shale_micros_per_op":1.0},
                {"name":"read_random","rocksdb_micros_per_op":3.0,"shale_micros_per_op":2.5}]}"#,
        )
        .unwrap();
        let svg = dir.path().join("chart.svg");
        svg_chart(&json, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("fill_seq") && text.contains("RocksDB"));
        assert!(text.contains("1000 entries, zstd, median of 3 runs"), "the caption says what was compared");
        std::fs::write(&json, "{\"benchmarks\":[]}").unwrap();
        assert!(svg_chart(&json, &svg).is_err());
    }

    #[test]
    fn chart_is_drawn_from_a_single_run() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("run.json");
        std::fs::write(
            &json,
            r#"{"header":{"entries":5000,"compression":"snappy","tool":"shale db_bench"},
                "results":[{"name":"fill_random","ops":5000,"thread_seconds":0.01},
                {"name":"read_random","ops":5000,"thread_seconds":0.005}]}"#,
        )
        .unwrap();
        let svg = dir.path().join("run.svg");
        svg_chart(&json, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("fill_random 2.00 us/op") && text.contains("read_random 1.00 us/op"), "{text}");
        assert!(text.contains("5000 entries, snappy"));
    }
}

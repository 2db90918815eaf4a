//! Runs every benchmark with a tiny --num and checks the output parses and the found counts
//! are what db_bench semantics predict.

use std::process::Command;

fn db_bench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_db_bench")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `name : X micros/op ... (F of T found)` → (micros, found, total).
fn parse_line(stdout: &str, name: &str) -> (f64, Option<(u64, u64)>) {
    let line = stdout
        .lines()
        .find(|l| l.split(':').next().is_some_and(|n| n.trim() == name))
        .unwrap_or_else(|| panic!("no line for {name} in:\n{stdout}"));
    let after = line.split_once(':').unwrap().1;
    let micros: f64 = after.split_whitespace().next().unwrap().parse().unwrap_or_else(|_| panic!("bad line {line}"));
    assert!(after.contains("micros/op") && after.contains("MB/s"), "{line}");
    let found = line.split_once('(').map(|(_, rest)| {
        let nums: Vec<u64> = rest.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        (nums[0], nums[1])
    });
    (micros, found)
}

#[test]
fn every_benchmark_runs_and_counts_right() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let db = dir.path().join("db");
    let all = "fillseq,read_random,read_missing,read_seq,read_reverse,seek_random,fill_random,read_random,overwrite,\
               fill_random_sync,delete_random,read_while_writing,compact,stats,table_read,table_read_and_build,\
               table_read_merged,table_random_read";
    let (ok, stdout, stderr) = db_bench(&[
        &format!("--benchmarks={all}"),
        "--num=20000",
        "--histogram=1",
        &format!("--db={}", db.display()),
        &format!("--json={}", json.display()),
    ]);
    assert!(ok, "db_bench failed: {stderr}\n{stdout}");
    assert!(stdout.contains("Keys:        16 bytes each") && stdout.contains("Compression: snappy"), "{stdout}");
    // fill_seq then read_random: every key is there.
    let (_, found) = parse_line(&stdout, "read_random");
    assert_eq!(found, Some((20000, 20000)));
    assert_eq!(parse_line(&stdout, "read_missing").1, Some((0, 20000)));
    assert_eq!(parse_line(&stdout, "seek_random").1, Some((20000, 20000)));
    for name in [
        "fill_seq",
        "read_seq",
        "read_reverse",
        "fill_random",
        "overwrite",
        "delete_random",
        "compact",
        "table_read",
        "table_random_read",
    ] {
        let (micros, _) = parse_line(&stdout, name);
        assert!(micros > 0.0, "{name}");
    }
    assert!(stdout.contains("micros: p50"), "--histogram prints percentiles");
    assert!(stdout.contains("Write amplification"), "stats prints the engine stats");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 18);
    // The second read_random ran after fill_random: uniform random keys with replacement
    // cover about 1 - 1/e = 63 % of the key space.
    let second = results.iter().filter(|r| r["name"] == "read_random").nth(1).unwrap();
    let frac = second["found"].as_u64().unwrap() as f64 / second["ops"].as_u64().unwrap() as f64;
    assert!((0.60..0.67).contains(&frac), "fill_random then read_random found {frac}");
    assert_eq!(v["header"]["key_size"], 16);
}

#[test]
fn bad_requests_are_clear_errors() {
    let (ok, _, stderr) = db_bench(&["--benchmarks=fill_seq,bogus", "--num=10"]);
    assert!(!ok && stderr.contains("unknown benchmark 'bogus'"), "{stderr}");
    let (ok, _, stderr) = db_bench(&["--benchmarks=fill_seq", "--num=10", "--compression=lz4"]);
    assert!(!ok && stderr.contains("unknown compression"), "{stderr}");
    let (ok, _, stderr) = db_bench(&["report", "/nonexistent.json", "--svg=/tmp/x.svg"]);
    assert!(!ok && stderr.contains("db_bench:"), "{stderr}");
}

#[test]
fn existing_db_skips_fills_and_reads_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let dbflag = format!("--db={}", db.display());
    let (ok, _, stderr) = db_bench(&["--benchmarks=fill_seq", "--num=5000", &dbflag]);
    assert!(ok, "{stderr}");
    let (ok, stdout, stderr) =
        db_bench(&["--benchmarks=fill_seq,read_random", "--num=5000", "--use_existing_db=1", &dbflag]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("skipped"), "{stdout}");
    assert_eq!(parse_line(&stdout, "read_random").1, Some((5000, 5000)));
}

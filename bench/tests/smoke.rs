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
               fill_random_sync,delete_random,read_while_writing,compact,wait_for_compaction,stats,table_read,table_read_and_build,\
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
        "wait_for_compaction",
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
    assert_eq!(results.len(), 19);
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

/// A run over an existing database draws its own random keys, not the fill's again: after a
/// random fill of N draws from N keys, about 63 % of the keys exist, and so of the reads find.
#[test]
fn a_run_over_an_existing_database_does_not_repeat_the_fills_keys() {
    let dir = tempfile::tempdir().unwrap();
    let dbflag = format!("--db={}", dir.path().join("db").display());
    let (ok, _, stderr) = db_bench(&["--benchmarks=fill_random", "--num=5000", &dbflag]);
    assert!(ok, "{stderr}");
    for bench in ["read_random", "seek_random"] {
        let (ok, stdout, stderr) =
            db_bench(&[&format!("--benchmarks={bench}"), "--num=5000", "--use_existing_db=1", &dbflag]);
        assert!(ok, "{stderr}");
        let (found, of) = parse_line(&stdout, bench).1.unwrap();
        assert_eq!(of, 5000);
        assert!((2900..=3400).contains(&found), "{bench} found {found} of 5000:\n{stdout}");
    }
}

/// The `key:value` counts in a result line, e.g. `( reads:8000 writes:2000 found:8000)`.
fn counts(stdout: &str, name: &str) -> std::collections::HashMap<String, u64> {
    let line = stdout
        .lines()
        .find(|l| l.split(':').next().is_some_and(|n| n.trim() == name))
        .unwrap_or_else(|| panic!("no line for {name} in:\n{stdout}"));
    let inside = line.split_once("( ").and_then(|(_, rest)| rest.split_once(')')).map_or("", |(c, _)| c);
    inside
        .split_whitespace()
        .filter_map(|w| w.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap_or_else(|_| panic!("bad count in {line}"))))
        .collect()
}

#[test]
fn mixed_workloads_count_their_reads_writes_and_updates() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let (ok, stdout, stderr) = db_bench(&[
        "--benchmarks=fillseq,readrandomwriterandom,updaterandom,multireadrandom,deleterandom,multireadrandom",
        "--num=10000",
        "--readwritepercent=80",
        "--batch_size=7",
        "--statistics",
        &format!("--json={}", json.display()),
    ]);
    assert!(ok, "db_bench failed: {stderr}\n{stdout}");
    // Every key exists after fill_seq, and the writes only overwrite: 80 % reads, all found.
    let mixed = counts(&stdout, "read_random_write_random");
    assert_eq!((mixed["reads"], mixed["writes"], mixed["found"]), (8000, 2000, 8000), "{stdout}");
    let updates = counts(&stdout, "update_random");
    assert_eq!((updates["updates"], updates["found"]), (10000, 10000), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = v["results"].as_array().unwrap();
    let multi: Vec<_> = results.iter().filter(|r| r["name"] == "multi_read_random").collect();
    assert_eq!((multi[0]["ops"].as_u64(), multi[0]["found"].as_u64()), (Some(10000), Some(10000)));
    // delete_random removes about 1 - 1/e of the keys; the batched reads see exactly that.
    let deleted_left = multi[1]["found"].as_u64().unwrap() as f64 / 10000.0;
    assert!((0.33..0.41).contains(&deleted_left), "after delete_random {deleted_left} found");
    // Memory is in every result, with the engine's own accounting.
    for r in results {
        let m = &r["memory"];
        assert!(m["rss_mb"].as_f64().unwrap() > 0.0 && m["peak_mb"].as_f64() >= m["rss_mb"].as_f64(), "{r}");
        assert!(m["memtables_mb"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(stdout.contains("memory: rss"), "{stdout}");
    assert!(stdout.contains("STATISTICS:") && stdout.contains("Write amplification"), "{stdout}");
}

#[test]
fn write_rate_limit_holds_writers_back() {
    // 3000 writes of 116 bytes at 1 MB/s take at least a third of a second, however fast the
    // machine (a lower bound only: the limiter must slow writers down).
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let (ok, stdout, stderr) = db_bench(&[
        "--benchmarks=fillrandom",
        "--num=3000",
        "--benchmark_write_rate_limit=1000000",
        &format!("--json={}", json.display()),
    ]);
    assert!(ok, "db_bench failed: {stderr}\n{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let wall = v["results"][0]["wall_seconds"].as_f64().unwrap();
    assert!(wall >= 0.33, "rate-limited fill took only {wall} s");
}

use super::*;

#[test]
fn defaults_run_out_of_the_box() {
    let c = Config::default();
    assert_eq!((c.bind.as_slice(), c.port, c.databases), (&["127.0.0.1".to_string()][..], 6379, 16));
    assert_eq!(c.dir, PathBuf::from("./data"));
    assert_eq!(c.appendfsync, AppendFsync::EverySec);
    assert_eq!(Config::from_text("").unwrap(), c);
}

#[test]
fn a_config_file_sets_directives() {
    let text = "# comment\n\n  port 7001  \nbind 127.0.0.1 ::1\ndir \"/tmp/my data\"\nDATABASES 65536\n\
                requirepass 's3cr\\'t'\nappendfsync always\nloglevel warning\nproto-max-bulk-len 1gb\n\
                compression zstd\nwrite-buffer-size 32mb\n";
    let c = Config::from_text(text).unwrap();
    assert_eq!(c.port, 7001);
    assert_eq!(c.bind, ["127.0.0.1", "::1"]);
    assert_eq!(c.dir, PathBuf::from("/tmp/my data"));
    assert_eq!(c.databases, 65536);
    assert_eq!(c.requirepass.as_deref(), Some("s3cr't"));
    assert_eq!(c.appendfsync, AppendFsync::Always);
    assert_eq!(c.loglevel, LogLevel::Warning);
    assert_eq!(c.proto_max_bulk_len, 1 << 30);
    assert_eq!(c.compression, lsm::Compression::Zstd);
    assert_eq!(c.write_buffer_size, 32 << 20);
}

#[test]
fn bad_lines_are_reported_with_their_number() {
    let cases = [
        ("port 6379\nfrobnicate yes\n", 2, "Bad directive or wrong number of arguments"),
        ("port 70000", 1, "Invalid port"),
        ("\n\ndatabases 0", 3, "Invalid number of databases"),
        ("databases 65537", 1, "Invalid number of databases"),
        ("appendfsync sometimes", 1, "always, everysec, no"),
        ("port", 1, "wrong number of arguments"),
        ("dir \"unbalanced", 1, "Unbalanced quotes"),
        ("proto-max-bulk-len 12parsecs", 1, "memory value"),
        ("compression lz4", 1, "must be one of the following: none, snappy, zstd"),
        ("appendonly maybe", 1, "argument must be 'yes' or 'no'"),
        ("hz often", 1, "couldn't be parsed into an integer"),
    ];
    for (text, line, reason) in cases {
        let e = Config::from_text(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}");
        assert!(e.reason.contains(reason), "{text:?}: {}", e.reason);
    }
    let shown = Config::from_text("port 0 1").unwrap_err().to_string();
    assert!(
        shown.contains("*** FATAL CONFIG FILE ERROR")
            && shown.contains("at line 1")
            && shown.contains(">>> 'port 0 1'"),
        "{shown}"
    );
}

#[test]
fn command_line_options_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shale.conf");
    std::fs::write(&path, "port 7001\ndatabases 4\n").unwrap();
    let args: Vec<String> = [path.to_str().unwrap(), "--port", "7002", "--dir", "/tmp/a b", "--bind", "0.0.0.0", "::"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let c = Config::from_args(&args).unwrap();
    assert_eq!((c.port, c.databases), (7002, 4));
    assert_eq!(c.dir, PathBuf::from("/tmp/a b"));
    assert_eq!(c.bind, ["0.0.0.0", "::"]);
    let only_options: Vec<String> = ["--port", "7003"].iter().map(|s| s.to_string()).collect();
    assert_eq!(Config::from_args(&only_options).unwrap().port, 7003);
    assert!(Config::from_args(&["/nonexistent/shale.conf".to_string()]).is_err());
    let stray: Vec<String> = ["--port", "1", "--", "x"].iter().map(|s| s.to_string()).collect();
    assert!(Config::from_args(&stray).is_err());
}

#[test]
fn parameters_commands_read_are_kept_parsed_beside_their_text() {
    let mut c = Config::default();
    assert_eq!((c.stream_node_max_entries, c.stream_node_max_bytes, c.hll_sparse_max_bytes), (100, 4096, 3000));
    assert_eq!((c.busy_reply_threshold, c.tracking_table_max_keys), (5000, 1_000_000));
    for (name, value) in [
        ("stream-node-max-entries", "7"),
        ("stream-node-max-bytes", "1kb"),
        ("hll-sparse-max-bytes", "0"),
        ("lua-time-limit", "250"),
        ("tracking-table-max-keys", "12"),
    ] {
        c.apply(name, &[value.to_string()]).unwrap();
    }
    assert_eq!((c.stream_node_max_entries, c.stream_node_max_bytes, c.hll_sparse_max_bytes), (7, 1024, 0));
    assert_eq!((c.busy_reply_threshold, c.tracking_table_max_keys), (250, 12));
    assert_eq!(c.get("busy-reply-threshold"), Some("250"));
    assert_eq!(c.get("STREAM-node-max-bytes"), Some("1024"));
    assert_eq!(c.changed().map(|(n, _)| n).filter(|n| n.starts_with("stream")).count(), 2);
    // Out of Redis's range: refused, and neither copy changes.
    let e = c.apply("stream-node-max-entries", &["-1".to_string()]).unwrap_err();
    assert!(e.contains("between 0 and"), "{e}");
    assert_eq!((c.stream_node_max_entries, c.get("stream-node-max-entries")), (7, Some("7")));
}

use super::*;

fn write_log(records: &[Vec<u8>]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut w = LogWriter::create(&path, 1).unwrap();
    for r in records {
        w.add_record(r);
    }
    w.write_pending().unwrap();
    assert_eq!(w.size(), std::fs::metadata(&path).unwrap().len());
    std::fs::read(&path).unwrap()
}

fn read_all(data: &[u8]) -> (Vec<Vec<u8>>, Option<Damage>) {
    let mut r = LogReader::new(data);
    let mut out = Vec::new();
    while let Some(rec) = r.next_record() {
        out.push(rec.payload.into_owned());
    }
    (out, r.damage().cloned())
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn records_round_trip_across_block_boundaries() {
    // Sizes chosen to produce FULL, FIRST/MIDDLE/LAST and records ending right at block edges.
    let sizes =
        [0, 1, 100, BLOCK_SIZE - HEADER_SIZE, BLOCK_SIZE, 3 * BLOCK_SIZE + 5, 10, BLOCK_SIZE - 2 * HEADER_SIZE - 3, 7];
    let records: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| payload(i, n)).collect();
    let data = write_log(&records);
    let (got, damage) = read_all(&data);
    assert_eq!(damage, None);
    assert_eq!(got, records);
}

#[test]
fn header_never_starts_in_block_trailer() {
    // A first record leaving exactly 6 bytes in the block forces padding.
    let first = payload(0, BLOCK_SIZE - HEADER_SIZE - 6);
    let data = write_log(&[first.clone(), b"second".to_vec()]);
    assert_eq!(&data[BLOCK_SIZE - 6..BLOCK_SIZE], &[0; 6]);
    let (got, damage) = read_all(&data);
    assert_eq!(damage, None);
    assert_eq!(got, vec![first, b"second".to_vec()]);
}

#[test]
fn every_cut_keeps_exactly_the_complete_records_before_it() {
    let records: Vec<_> = (0..40).map(|i| payload(i, (i * 997) % 5000)).collect();
    let data = write_log(&records);
    let mut ends = Vec::new();
    let mut r = LogReader::new(&data);
    while let Some(rec) = r.next_record() {
        ends.push(rec.end as usize);
    }
    for cut in (0..data.len()).step_by(97).chain([data.len()]) {
        let (got, damage) = read_all(&data[..cut]);
        let complete = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(got.len(), complete, "cut at {cut}");
        assert_eq!(got, records[..complete].to_vec());
        if let Some(d) = damage {
            assert!(!d.valid_data_after, "a cut is a torn tail: {d:?}");
            assert_eq!(d.offset as usize, ends.get(complete.wrapping_sub(1)).copied().unwrap_or(0));
        }
    }
}

#[test]
fn damage_in_the_middle_is_told_apart_from_a_torn_tail() {
    let records: Vec<_> = (0..30).map(|i| payload(i, 3000)).collect();
    let mut data = write_log(&records);
    data[HEADER_SIZE + 10] ^= 0x55; // inside the first record's payload
    let (got, damage) = read_all(&data);
    assert!(got.is_empty());
    let d = damage.expect("damage reported");
    assert_eq!(d.offset, 0);
    assert!(d.reason.contains("checksum"), "{d:?}");
    assert!(d.valid_data_after, "later blocks hold good records");
}

#[test]
fn garbage_never_panics() {
    let mut seed = 0x1234_5678u64;
    for len in [0usize, 1, 6, 7, 8, 100, BLOCK_SIZE + 3] {
        let data: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let (got, _) = read_all(&data);
        assert!(got.len() <= 1);
    }
}

#[test]
fn reading_can_resume_at_any_record_boundary() {
    let records: Vec<_> = (0..30).map(|i| payload(i, (i * 1733) % 9000)).collect();
    let data = write_log(&records);
    let mut ends = vec![0u64];
    let mut r = LogReader::new(&data);
    while let Some(rec) = r.next_record() {
        ends.push(rec.end);
    }
    for (i, &start) in ends.iter().enumerate() {
        let (tail, _) = {
            let mut r = LogReader::with_base(&data[start as usize..], start);
            let mut out = Vec::new();
            let mut at = start;
            while let Some(rec) = r.next_record() {
                assert!(rec.offset >= at, "record offsets are file offsets");
                assert_eq!(rec.end, ends[i + out.len() + 1], "record end is a file offset");
                at = rec.end;
                out.push(rec.payload.into_owned());
            }
            assert_eq!(r.damage(), None);
            assert_eq!(r.good_end(), data.len() as u64);
            (out, ())
        };
        assert_eq!(tail, records[i..].to_vec(), "resume at record {i}");
    }
}

#[test]
fn mapped_writer_grows_and_leaves_exactly_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mapped.log");
    let records: Vec<_> = (0..200).map(|i| payload(i, (i * 613) % 3000)).collect();
    {
        let mut w = LogWriter::create_mapped(&path, 1, 4096).unwrap();
        for (i, r) in records.iter().enumerate() {
            w.add_record(r);
            if i % 3 == 0 {
                w.write_pending().unwrap();
                // Readers of the file see the records at once, zero tail and all.
                let data = std::fs::read(&path).unwrap();
                assert!(data.len() as u64 >= w.size());
                let (got, damage) = read_all(&data);
                assert_eq!(damage, None, "the preallocated zeros read as the end of the log");
                assert_eq!(got, records[..=i].to_vec());
            }
        }
        w.write_pending().unwrap();
        w.sync().unwrap();
    }
    let data = std::fs::read(&path).unwrap();
    let (got, damage) = read_all(&data);
    assert_eq!(damage, None);
    assert_eq!(got, records);
    assert_eq!(LogReader::new(&data).good_end(), 0);
    let mut r = LogReader::new(&data);
    while r.next_record().is_some() {}
    assert_eq!(r.good_end(), data.len() as u64, "truncated to what was written");
}

#[test]
fn zeros_followed_by_records_are_damage() {
    let records: Vec<_> = (0..20).map(|i| payload(i, 4000)).collect();
    let mut data = write_log(&records);
    for b in &mut data[100..200] {
        *b = 0;
    }
    data[..HEADER_SIZE].fill(0);
    let (got, damage) = read_all(&data);
    assert!(got.is_empty());
    assert!(damage.unwrap().valid_data_after);
}

/// Resident kilobytes of this process's mappings of `path` (Linux's `/proc/self/smaps`).
#[cfg(target_os = "linux")]
fn resident_kb_of(path: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut in_mapping = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            in_mapping = line.ends_with(name);
        } else if in_mapping {
            if let Some(rest) = line.strip_prefix("Rss:") {
                kb += rest.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap();
            }
        }
    }
    kb
}

#[cfg(target_os = "linux")]
#[test]
fn mapped_writer_keeps_only_its_latest_pages_resident_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resident.log");
    let records: Vec<_> = (0..3000).map(|i| payload(i, 1000 + i % 2000)).collect();
    let mut w = LogWriter::create_mapped(&path, 1, 16 << 20).unwrap();
    for r in &records {
        w.add_record(r);
        w.write_pending().unwrap();
    }
    assert!(w.size() > 4 * writer::RELEASE_EVERY, "the test writes several release periods");
    // Written pages were resident as they were written; all but the latest were released.
    let resident = resident_kb_of(&path);
    assert!(resident * 1024 <= 2 * writer::RELEASE_EVERY, "{resident} kB of the log still resident");
    // Released pages lost nothing: the file (read before the writer finishes, as after a
    // crash) holds every record.
    let (got, damage) = read_all(&std::fs::read(&path).unwrap());
    assert_eq!((got.len(), damage), (records.len(), None));
    assert_eq!(got, records);
    w.sync().unwrap();
    drop(w);
    let (got, _) = read_all(&std::fs::read(&path).unwrap());
    assert_eq!(got, records);
}

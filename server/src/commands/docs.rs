//! `COMMAND DOCS`: each command's documentation (summary, since, group, complexity, history,
//! arguments, subcommands) as redis-server 7.0.15 gives it — redis-cli 7 builds its hints and
//! `HELP` from it.
//!
//! The text is Redis's (BSD-3-Clause, like the test suite under `server/tests/conformance/`):
//! `docs/redis-7.0.15.resp` is redis-server 7.0.15's own RESP3 reply to `COMMAND DOCS`, written
//! by `docs/refresh.py`, parsed once on first use. Shale answers for the commands it has (not
//! streams, CLUSTER or MODULE), and documents its own LOCK and UNLOCK the same way.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::resp::Reply;

static REDIS_DOCS: &[u8] = include_bytes!("docs/redis-7.0.15.resp");

/// Documentation by lower-case command name.
fn table() -> &'static HashMap<String, Reply> {
    static TABLE: OnceLock<HashMap<String, Reply>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut pos = 0;
        let mut table = HashMap::new();
        match parse(REDIS_DOCS, &mut pos) {
            Some(Reply::Map(entries)) => {
                for (name, doc) in entries {
                    if let Reply::Bulk(name) = name {
                        table.insert(String::from_utf8_lossy(&name).to_ascii_lowercase(), doc);
                    }
                }
            }
            _ => tracing::error!(target: "shale::commands", "the bundled COMMAND DOCS data does not parse"),
        }
        for (name, doc) in shale_docs() {
            table.insert(name.to_string(), doc);
        }
        table
    })
}

/// `COMMAND DOCS [name …]`: every command's documentation, or the named ones Shale has (in
/// the order asked, unknown names left out, as in Redis).
pub fn command_docs(names: &[Bytes]) -> Reply {
    let table = table();
    let entry =
        |name: &str| table.get(name).map(|doc| (Reply::Bulk(Bytes::copy_from_slice(name.as_bytes())), doc.clone()));
    let entries: Vec<(Reply, Reply)> = if names.is_empty() {
        super::all().into_iter().filter_map(|spec| entry(spec.name)).collect()
    } else {
        names
            .iter()
            .filter_map(|n| {
                let name = String::from_utf8_lossy(n).to_ascii_lowercase();
                super::lookup(n)?;
                entry(&name)
            })
            .collect()
    };
    Reply::Map(entries)
}

/// Documentation of the commands Shale adds to Redis's set.
fn shale_docs() -> Vec<(&'static str, Reply)> {
    let field = |k: &str, v: Reply| (Reply::Bulk(Bytes::copy_from_slice(k.as_bytes())), v);
    let text = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let arg = |name: &str, kind: &str, extra: Vec<(Reply, Reply)>| {
        let mut fields = vec![field("name", text(name)), field("type", text(kind))];
        fields.extend(extra);
        Reply::Map(fields)
    };
    let name_arg = || arg("name", "string", vec![]);
    // Both are O(1) generic commands, in Shale since its first release.
    let doc = |summary: &str, arguments: Vec<Reply>| {
        Reply::Map(vec![
            field("summary", text(summary)),
            field("since", text("0.1.0")),
            field("group", text("generic")),
            field("complexity", text("O(1)")),
            field("arguments", Reply::Array(arguments)),
        ])
    };
    let optional = vec![field("flags", Reply::Set(vec![Reply::Simple("optional".into())]))];
    vec![
        (
            "lock",
            doc(
                "Acquire a named lock, waiting up to timeout-ms milliseconds for it (Shale)",
                vec![name_arg(), arg("timeout-ms", "integer", optional)],
            ),
        ),
        ("unlock", doc("Release a named lock held by this connection (Shale)", vec![name_arg()])),
    ]
}

/// One RESP3 value (of the kinds `COMMAND DOCS` uses) from `b[*pos..]`.
fn parse(b: &[u8], pos: &mut usize) -> Option<Reply> {
    let nl = b.get(*pos..)?.windows(2).position(|w| w == b"\r\n")? + *pos;
    let kind = b[*pos];
    let line = std::str::from_utf8(&b[*pos + 1..nl]).ok()?;
    *pos = nl + 2;
    let count = || line.parse::<usize>().ok();
    let items = |n: usize, pos: &mut usize| (0..n).map(|_| parse(b, pos)).collect::<Option<Vec<Reply>>>();
    Some(match kind {
        b'+' => Reply::Simple(line.to_string()),
        b':' => Reply::Integer(line.parse().ok()?),
        b'_' => Reply::Null,
        b'$' => {
            let n = count()?;
            let s = Bytes::copy_from_slice(b.get(*pos..*pos + n)?);
            *pos += n + 2;
            Reply::Bulk(s)
        }
        b'*' => Reply::Array(items(count()?, pos)?),
        b'~' => Reply::Set(items(count()?, pos)?),
        b'%' => {
            let flat = items(2 * count()?, pos)?;
            let mut it = flat.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            Reply::Map(pairs)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_docs_parse_and_cover_every_command_shale_has() {
        let table = table();
        assert!(table.len() > 200, "{} entries", table.len());
        for spec in super::super::all() {
            assert!(table.contains_key(spec.name), "no documentation for {}", spec.name);
        }
        let Some(Reply::Map(get)) = table.get("get") else { panic!("GET's entry is a map") };
        assert_eq!(get[0], (Reply::bulk(&b"summary"[..]), Reply::bulk(&b"Get the value of a key"[..])));
    }

    #[test]
    fn named_docs_skip_unknown_and_absent_commands() {
        let Reply::Map(entries) = command_docs(&[Bytes::from("GET"), Bytes::from("nosuch"), Bytes::from("module")])
        else {
            panic!()
        };
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, Reply::bulk(&b"get"[..]));
    }
}

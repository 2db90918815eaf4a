//! Geo commands on sorted sets: GEOADD, GEOPOS, GEOHASH, GEODIST, GEORADIUS,
//! GEORADIUSBYMEMBER (and `_RO`), GEOSEARCH, GEOSEARCHSTORE. A member's score is Redis's 52-bit
//! geohash of its position (`crate::geohash`); a search reads the score ranges of the nine
//! cells around the centre from the score index, as Redis does.

use bytes::Bytes;

use super::range::store_zset;
use super::{score_of, zadd, zset};
use crate::commands::{engine_error, parse_i64, spec, CommandSpec, Session, ONE_KEY};
use crate::geohash::{self, Search, Shape};
use crate::resp::Reply;
use crate::storage::Meta;

pub(in crate::commands) static COMMANDS: &[CommandSpec] = &[
    spec("geoadd", -5, &["write", "denyoom"], ONE_KEY, geoadd),
    spec("geopos", -2, &["readonly"], ONE_KEY, geopos),
    spec("geohash", -2, &["readonly"], ONE_KEY, geohash_cmd),
    spec("geodist", -4, &["readonly"], ONE_KEY, geodist),
    spec("georadius", -6, &["write", "denyoom"], ONE_KEY, georadius),
    spec("georadius_ro", -6, &["readonly"], ONE_KEY, georadius_ro),
    spec("georadiusbymember", -5, &["write", "denyoom"], ONE_KEY, georadiusbymember),
    spec("georadiusbymember_ro", -5, &["readonly"], ONE_KEY, georadiusbymember_ro),
    spec("geosearch", -7, &["readonly"], ONE_KEY, geosearch),
    spec("geosearchstore", -8, &["write", "denyoom"], (1, 2, 1), geosearchstore),
];

const SYNTAX: &str = "ERR syntax error";
const NOT_FLOAT: &str = "ERR value is not a valid float";

fn parse_f64(arg: &[u8], err: &str) -> Result<f64, Reply> {
    crate::num::parse_float(arg).ok_or_else(|| Reply::error(err))
}

/// A `longitude latitude` pair inside Redis's valid area.
fn long_lat(args: &[Bytes]) -> Result<(f64, f64), Reply> {
    let long = parse_f64(&args[0], NOT_FLOAT)?;
    let lat = parse_f64(&args[1], NOT_FLOAT)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&long) || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat)
    {
        return Err(Reply::error(format!("ERR invalid longitude,latitude pair {long:.6},{lat:.6}")));
    }
    Ok((long, lat))
}

/// Metres per unit.
fn unit(arg: &[u8]) -> Result<f64, Reply> {
    match arg.to_ascii_lowercase().as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err(Reply::error("ERR unsupported unit provided. please use M, KM, FT, MI")),
    }
}

/// `radius unit`.
fn radius(args: &[Bytes]) -> Result<(f64, f64), Reply> {
    let r = parse_f64(&args[0], "ERR need numeric radius")?;
    if r < 0.0 {
        return Err(Reply::error("ERR radius cannot be negative"));
    }
    Ok((r, unit(&args[1])?))
}

/// `width height unit`.
fn dimensions(args: &[Bytes]) -> Result<(f64, f64, f64), Reply> {
    let w = parse_f64(&args[0], "ERR need numeric width")?;
    let h = parse_f64(&args[1], "ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err(Reply::error("ERR height or width cannot be negative"));
    }
    Ok((w, h, unit(&args[2])?))
}

fn geoadd(s: &mut Session, args: &[Bytes]) -> Reply {
    let (mut nx, mut xx) = (false, false);
    let mut first = 2;
    while first < args.len() {
        match args[first].to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"ch" => {}
            _ => break,
        }
        first += 1;
    }
    if !(args.len() - first).is_multiple_of(3) || (xx && nx) {
        return Reply::error(SYNTAX);
    }
    // The same command as ZADD with each position turned into its score.
    let mut zargs: Vec<Bytes> = Vec::with_capacity(first + (args.len() - first) / 3 * 2);
    zargs.push(Bytes::from_static(b"zadd"));
    zargs.extend_from_slice(&args[1..first]);
    for triple in args[first..].chunks_exact(3) {
        let (long, lat) = match long_lat(triple) {
            Ok(p) => p,
            Err(e) => return e,
        };
        let score = geohash::score(long, lat).unwrap_or(0);
        zargs.push(Bytes::from(score.to_string()));
        zargs.push(triple[2].clone());
    }
    zadd(s, &zargs)
}

/// The zset at `key` (`None` if absent) and the score of each member.
fn scores(s: &Session, key: &[u8], members: &[Bytes]) -> Result<Vec<Option<f64>>, Reply> {
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = zset(&view, key)?;
    members.iter().map(|m| score_of(&view, &meta, m)).collect()
}

fn geopos(s: &mut Session, args: &[Bytes]) -> Reply {
    match scores(s, &args[1], &args[2..]) {
        Ok(scores) => Reply::Array(
            scores
                .into_iter()
                .map(|sc| match sc.and_then(geohash::position) {
                    Some((long, lat)) => Reply::Array(vec![Reply::HumanDouble(long), Reply::HumanDouble(lat)]),
                    None => Reply::NullArray,
                })
                .collect(),
        ),
        Err(e) => e,
    }
}

fn geohash_cmd(s: &mut Session, args: &[Bytes]) -> Reply {
    match scores(s, &args[1], &args[2..]) {
        Ok(scores) => Reply::Array(
            scores
                .into_iter()
                .map(|sc| sc.and_then(geohash::geohash_string).map_or(Reply::Null, |h| Reply::bulk(Bytes::from(h))))
                .collect(),
        ),
        Err(e) => e,
    }
}

fn geodist(s: &mut Session, args: &[Bytes]) -> Reply {
    let to_meter = match args.len() {
        4 => 1.0,
        5 => match unit(&args[4]) {
            Ok(u) => u,
            Err(e) => return e,
        },
        _ => return Reply::error(SYNTAX),
    };
    match scores(s, &args[1], &args[2..4]) {
        Ok(sc) => match (sc[0].and_then(geohash::position), sc[1].and_then(geohash::position)) {
            (Some(a), Some(b)) => {
                Reply::bulk(Bytes::from(geohash::format_distance(geohash::distance(a.0, a.1, b.0, b.1) / to_meter)))
            }
            _ => Reply::Null,
        },
        Err(e) => e,
    }
}

/// How a search command takes its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS key long lat radius unit …
    Coords { store: bool },
    /// GEORADIUSBYMEMBER key member radius unit …
    Member { store: bool },
    /// GEOSEARCH key FROM… BY… …
    Search,
    /// GEOSEARCHSTORE dest key FROM… BY… …
    SearchStore,
}

/// The parsed options of a search.
#[derive(Debug, Default)]
struct Options {
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    any: bool,
    /// `Some(true)`: ascending.
    sort: Option<bool>,
    count: i64,
    store: Option<(Bytes, bool)>,
}

/// Everything between the key and the end of a search command, with Redis's checks in
/// Redis's order; `Ok(None)` for the centre when it is a member of a missing key.
fn parse(s: &Session, args: &[Bytes], form: Form, meta: &Option<Meta>) -> Result<(Option<Search>, Options), Reply> {
    let view = s.state.storage.view(&s.exec, s.db);
    let member_position = |m: &[u8]| -> Result<(f64, f64), Reply> {
        score_of(&view, meta, m)?
            .and_then(geohash::position)
            .ok_or_else(|| Reply::error("ERR could not decode requested zset member"))
    };
    let (mut centre, mut shape, mut conversion) = (None, None, 1.0);
    let base = match form {
        Form::Coords { .. } => {
            centre = Some(long_lat(&args[2..4])?);
            let (r, c) = radius(&args[4..6])?;
            (shape, conversion) = (Some(Shape::Circle { radius: r }), c);
            6
        }
        Form::Member { .. } if meta.is_none() => 5,
        Form::Member { .. } => {
            centre = Some(member_position(&args[2])?);
            let (r, c) = radius(&args[3..5])?;
            (shape, conversion) = (Some(Shape::Circle { radius: r }), c);
            5
        }
        Form::Search => 2,
        Form::SearchStore => 3,
    };
    let search = matches!(form, Form::Search | Form::SearchStore);
    let no_store = matches!(form, Form::Coords { store: false } | Form::Member { store: false });
    let mut o = Options::default();
    if form == Form::SearchStore {
        o.store = Some((args[1].clone(), false));
    }
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let rest = &args[base..];
    let mut i = 0;
    while i < rest.len() {
        let left = rest.len() - i - 1;
        match rest[i].to_ascii_lowercase().as_slice() {
            b"withdist" => o.withdist = true,
            b"withhash" => o.withhash = true,
            b"withcoord" => o.withcoord = true,
            b"any" => o.any = true,
            b"asc" => o.sort = Some(true),
            b"desc" => o.sort = Some(false),
            b"count" if left >= 1 => {
                o.count = parse_i64(&rest[i + 1])
                    .ok_or_else(|| Reply::error("ERR value is not an integer or out of range"))?;
                if o.count <= 0 {
                    return Err(Reply::error("ERR COUNT must be > 0"));
                }
                i += 1;
            }
            opt @ (b"store" | b"storedist") if left >= 1 && !no_store && !search => {
                o.store = Some((rest[i + 1].clone(), opt == b"storedist"));
                i += 1;
            }
            b"storedist" if form == Form::SearchStore => o.store = Some((args[1].clone(), true)),
            b"frommember" if left >= 1 && search && !fromloc => {
                if meta.is_some() {
                    centre = Some(member_position(&rest[i + 1])?);
                }
                frommember = true;
                i += 1;
            }
            b"fromlonlat" if left >= 2 && search && !frommember => {
                centre = Some(long_lat(&rest[i + 1..i + 3])?);
                fromloc = true;
                i += 2;
            }
            b"byradius" if left >= 2 && search && !bybox => {
                let (r, c) = radius(&rest[i + 1..i + 3])?;
                (shape, conversion) = (Some(Shape::Circle { radius: r }), c);
                byradius = true;
                i += 2;
            }
            b"bybox" if left >= 3 && search && !byradius => {
                let (w, h, c) = dimensions(&rest[i + 1..i + 4])?;
                (shape, conversion) = (Some(Shape::Box { width: w, height: h }), c);
                bybox = true;
                i += 3;
            }
            _ => return Err(Reply::error(SYNTAX)),
        }
        i += 1;
    }
    if o.store.is_some() && (o.withdist || o.withhash || o.withcoord) {
        let what = if form == Form::SearchStore { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(Reply::error(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(&args[0]);
    if search && !(frommember || fromloc) {
        return Err(Reply::error(format!("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")));
    }
    if search && !(byradius || bybox) {
        return Err(Reply::error(format!("ERR exactly one of BYRADIUS and BYBOX can be specified for {name}")));
    }
    if o.any && o.count == 0 {
        return Err(Reply::error("ERR the ANY argument requires COUNT argument"));
    }
    let search = match (centre, shape) {
        (Some((long, lat)), Some(shape)) => Some(Search { long, lat, shape, conversion }),
        _ => None,
    };
    Ok((search, o))
}

/// A member found by a search.
struct Found {
    member: Bytes,
    dist: f64,
    score: f64,
    long: f64,
    lat: f64,
    /// Which of the search's cells (in Redis's order) holds it.
    cell: usize,
}

/// The members of `meta` inside `search` (stopping at `limit` found, 0: no limit), in
/// Redis's order: cell by cell (centre, north, south, east, west, then the corners), each in
/// score order.
///
/// Without a limit, the cells are read in key order — one cursor moving forward, each seek
/// starting where the last range ended — and the members put back in cell order. Redis
/// stops a `COUNT … ANY` search at the first `count` members in cell order, so one with a
/// limit reads the cells in that order, as Redis does.
fn find(s: &Session, meta: &Meta, search: &Search, limit: usize) -> Result<Vec<Found>, Reply> {
    let view = s.state.storage.view(&s.exec, s.db);
    let cells: Vec<(f64, f64)> = search.cells().into_iter().map(geohash::score_range).collect();
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by(|&a, &b| cells[a].0.total_cmp(&cells[b].0));
    // Cells of one step never overlap unless one repeats (Redis skips only a repeat of the
    // cell just before it, and reads any other twice): such a search keeps the cell order.
    let in_key_order = limit == 0 && order.windows(2).all(|w| cells[w[0]].1 <= cells[w[1]].0);
    if !in_key_order {
        order = (0..cells.len()).collect();
    }
    let ranges: Vec<(f64, f64)> = order.iter().map(|&i| cells[i]).collect();
    let mut found = Vec::new();
    let mut at = 0;
    view.scores_in(meta, &ranges, |score, member| {
        while in_key_order && at + 1 < ranges.len() && score >= ranges[at].1 {
            at += 1;
        }
        if let Some((long, lat)) = geohash::position(score) {
            if let Some(dist) = search.contains(long, lat) {
                found.push(Found { member: Bytes::copy_from_slice(member), dist, score, long, lat, cell: order[at] });
            }
        }
        limit == 0 || found.len() < limit
    })
    .map_err(engine_error)?;
    if in_key_order {
        // Stable: each cell's members stay in score order.
        found.sort_by_key(|f| f.cell);
    }
    Ok(found)
}

fn run(s: &mut Session, args: &[Bytes], form: Form) -> Reply {
    let key = if form == Form::SearchStore { &args[2] } else { &args[1] };
    let view = s.state.storage.view(&s.exec, s.db);
    let meta = match s.exec.as_read(|| zset(&view, key)) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let (search, mut o) = match parse(s, args, form, &meta) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let (Some(meta), Some(search)) = (meta, search) else {
        return match o.store {
            Some((dest, _)) => store_zset(s, &dest, &[], "del"),
            None => Reply::Array(Vec::new()),
        };
    };
    if o.count != 0 && o.sort.is_none() && !o.any {
        o.sort = Some(true);
    }
    let mut found = match find(s, &meta, &search, if o.any { o.count as usize } else { 0 }) {
        Ok(f) => f,
        Err(e) => return e,
    };
    match o.sort {
        Some(true) => found.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Some(false) => found.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        None => {}
    }
    if o.count != 0 {
        found.truncate(o.count as usize);
    }
    for f in &mut found {
        f.dist /= search.conversion;
    }
    if let Some((dest, storedist)) = o.store {
        let items: Vec<(Bytes, f64)> =
            found.into_iter().map(|f| (f.member, if storedist { f.dist } else { f.score })).collect();
        let event = if matches!(form, Form::SearchStore) { "geosearchstore" } else { "georadiusstore" };
        return store_zset(s, &dest, &items, event);
    }
    let options = o.withdist || o.withhash || o.withcoord;
    Reply::Array(
        found
            .into_iter()
            .map(|f| {
                if !options {
                    return Reply::Bulk(f.member);
                }
                let mut item = vec![Reply::Bulk(f.member)];
                if o.withdist {
                    item.push(Reply::bulk(Bytes::from(geohash::format_distance(f.dist))));
                }
                if o.withhash {
                    item.push(Reply::Integer(f.score as i64));
                }
                if o.withcoord {
                    item.push(Reply::Array(vec![Reply::HumanDouble(f.long), Reply::HumanDouble(f.lat)]));
                }
                Reply::Array(item)
            })
            .collect(),
    )
}

/// The store forms write: the keys they touch are locked first.
fn run_locked(s: &mut Session, args: &[Bytes], form: Form) -> Reply {
    let store_at = args.iter().rposition(|a| a.eq_ignore_ascii_case(b"store") || a.eq_ignore_ascii_case(b"storedist"));
    let dest = match form {
        Form::SearchStore => Some(&args[1]),
        _ => store_at.filter(|&i| i > 1 && i + 1 < args.len()).map(|i| &args[i + 1]),
    };
    let source = if form == Form::SearchStore { &args[2] } else { &args[1] };
    let mut keys: Vec<&[u8]> = vec![&source[..]];
    keys.extend(dest.map(|d| &d[..]));
    let state = std::sync::Arc::clone(&s.state);
    let guard = state.storage.lock(&s.exec, s.db, keys);
    let reply = run(s, args, form);
    drop(guard);
    if let Some(dest) = dest {
        // Clients blocked on the destination (BZPOPMIN…) get their chance.
        s.signal(dest);
    }
    reply
}

fn georadius(s: &mut Session, args: &[Bytes]) -> Reply {
    run_locked(s, args, Form::Coords { store: true })
}

fn georadius_ro(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, Form::Coords { store: false })
}

fn georadiusbymember(s: &mut Session, args: &[Bytes]) -> Reply {
    run_locked(s, args, Form::Member { store: true })
}

fn georadiusbymember_ro(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, Form::Member { store: false })
}

fn geosearch(s: &mut Session, args: &[Bytes]) -> Reply {
    run(s, args, Form::Search)
}

fn geosearchstore(s: &mut Session, args: &[Bytes]) -> Reply {
    run_locked(s, args, Form::SearchStore)
}

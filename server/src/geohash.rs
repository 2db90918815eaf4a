//! Redis's geohash arithmetic: 52-bit interleaved scores, the 3x3 cell cover of a search
//! area, and haversine distances on a sphere of radius 6372797.560856 m. Every constant and
//! step follows Redis 7.0 (`geohash.c`, `geohash_helper.c`), so scores, positions and
//! distances print exactly as Redis prints them.

/// Bits per coordinate of a stored score (26 + 26 = 52, exact in an f64).
pub const STEP_MAX: u8 = 26;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

/// A cell: `step` bits per coordinate, interleaved (latitude in the even bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cell {
    pub bits: u64,
    pub step: u8,
}

impl Cell {
    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

/// The bounds of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Area {
    pub long_min: f64,
    pub long_max: f64,
    pub lat_min: f64,
    pub lat_max: f64,
}

fn interleave(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] =
        [0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (u64::from(xlo), u64::from(ylo));
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// The cell of `step` bits containing a point, within the given coordinate ranges; `None`
/// outside Redis's valid area.
pub fn encode_in(long_range: (f64, f64), lat_range: (f64, f64), long: f64, lat: f64, step: u8) -> Option<Cell> {
    if step == 0 || step > 32 || !(LONG_MIN..=LONG_MAX).contains(&long) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_range.0 || lat > lat_range.1 || long < long_range.0 || long > long_range.1 {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (lat - lat_range.0) / (lat_range.1 - lat_range.0) * scale;
    let long_offset = (long - long_range.0) / (long_range.1 - long_range.0) * scale;
    // C converts the doubles to uint32_t: truncation (2^32 itself wraps to 0).
    Some(Cell { bits: interleave(lat_offset as u64 as u32, long_offset as u64 as u32), step })
}

/// The cell in Redis's coordinate ranges.
pub fn encode(long: f64, lat: f64, step: u8) -> Option<Cell> {
    encode_in((LONG_MIN, LONG_MAX), (LAT_MIN, LAT_MAX), long, lat, step)
}

/// The 52-bit score of a point (GEOADD); `None` outside the valid area.
pub fn score(long: f64, lat: f64) -> Option<u64> {
    encode(long, lat, STEP_MAX).map(align52)
}

fn align52(cell: Cell) -> u64 {
    cell.bits << (52 - u32::from(cell.step) * 2)
}

/// The bounds of a cell.
pub fn decode(cell: Cell) -> Option<Area> {
    if cell.is_zero() {
        return None;
    }
    let sep = deinterleave(cell.bits);
    let (ilat, ilong) = (sep as u32, (sep >> 32) as u32);
    let scale = (1u64 << cell.step) as f64;
    let (lat_scale, long_scale) = (LAT_MAX - LAT_MIN, LONG_MAX - LONG_MIN);
    Some(Area {
        lat_min: LAT_MIN + (f64::from(ilat) / scale) * lat_scale,
        lat_max: LAT_MIN + ((f64::from(ilat) + 1.0) / scale) * lat_scale,
        long_min: LONG_MIN + (f64::from(ilong) / scale) * long_scale,
        long_max: LONG_MIN + ((f64::from(ilong) + 1.0) / scale) * long_scale,
    })
}

/// The point a stored score stands for (the centre of its cell), as GEOPOS reports it.
pub fn position(score: f64) -> Option<(f64, f64)> {
    let area = decode(Cell { bits: score as u64, step: STEP_MAX })?;
    let long = ((area.long_min + area.long_max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.lat_min + area.lat_max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((long, lat))
}

/// The 11-character base-32 geohash GEOHASH reports (standard ±90° latitude range).
pub fn geohash_string(score: f64) -> Option<String> {
    const ALPHABET: &[u8] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (long, lat) = position(score)?;
    let cell = encode_in((-180.0, 180.0), (-90.0, 90.0), long, lat, 26)?;
    Some(
        (0..11)
            .map(|i| {
                let idx = if i == 10 { 0 } else { (cell.bits >> (52 - (i + 1) * 5)) & 0x1f };
                ALPHABET[idx as usize] as char
            })
            .collect(),
    )
}

/// Moves a cell `d` cells (-1, 0, 1) along one axis: `axis` masks that coordinate's bits
/// (odd bits: longitude, even bits: latitude), whose carries skip over the other's.
fn move_along(cell: &mut Cell, d: i8, axis: u64) {
    if d == 0 {
        return;
    }
    let shift = 64 - u32::from(cell.step) * 2;
    let mut v = cell.bits & axis;
    let other = cell.bits & !axis;
    let zz = !axis >> shift;
    if d > 0 {
        v = v.wrapping_add(zz + 1);
    } else {
        v |= zz;
        v = v.wrapping_sub(zz + 1);
    }
    v &= axis >> shift;
    cell.bits = v | other;
}

fn neighbour(cell: Cell, dx: i8, dy: i8) -> Cell {
    let mut c = cell;
    move_along(&mut c, dx, 0xaaaaaaaaaaaaaaaa);
    move_along(&mut c, dy, 0x5555555555555555);
    c
}

/// What a search covers: a circle of `radius`, or a `width` x `height` box, in metres once
/// multiplied by `conversion`; centred on `(long, lat)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    Circle { radius: f64 },
    Box { width: f64, height: f64 },
}

/// A search area: where, what, and the unit's metres.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    pub long: f64,
    pub lat: f64,
    pub shape: Shape,
    pub conversion: f64,
}

fn deg_rad(a: f64) -> f64 {
    a * D_R
}

fn rad_deg(a: f64) -> f64 {
    a / D_R
}

fn steps_by_radius(mut range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

impl Search {
    /// (min long, min lat, max long, max lat) of the area searched.
    fn bounding_box(&self) -> [f64; 4] {
        let (h, w) = match self.shape {
            Shape::Circle { radius } => (radius, radius),
            Shape::Box { width, height } => (height / 2.0, width / 2.0),
        };
        let (height, width) = (self.conversion * h, self.conversion * w);
        let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
        let long_delta_top = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(self.lat + lat_delta).cos());
        let long_delta_bottom = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(self.lat - lat_delta).cos());
        let delta = if self.lat < 0.0 { long_delta_bottom } else { long_delta_top };
        [self.long - delta, self.lat - lat_delta, self.long + delta, self.lat + lat_delta]
    }

    /// The cells to scan, in Redis's order (centre, N, S, E, W, NE, NW, SE, SW), cells found
    /// useless left out and a cell equal to the one scanned before it skipped.
    pub fn cells(&self) -> Vec<Cell> {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounding_box();
        let radius_meters = match self.shape {
            Shape::Circle { radius } => radius,
            Shape::Box { width, height } => ((width / 2.0).powi(2) + (height / 2.0).powi(2)).sqrt(),
        } * self.conversion;
        let mut steps = steps_by_radius(radius_meters, self.lat);
        let mut centre = encode(self.long, self.lat, steps).unwrap_or_default();
        let decoded = |c: Cell| decode(c).unwrap_or_default();
        let too_coarse = |c: Cell| {
            decoded(neighbour(c, 0, 1)).lat_max < max_lat
                || decoded(neighbour(c, 0, -1)).lat_min > min_lat
                || decoded(neighbour(c, 1, 0)).long_max < max_lon
                || decoded(neighbour(c, -1, 0)).long_min > min_lon
        };
        if steps > 1 && too_coarse(centre) {
            steps -= 1;
            centre = encode(self.long, self.lat, steps).unwrap_or_default();
        }
        let area = decoded(centre);
        let n = |dx, dy| neighbour(centre, dx, dy);
        // centre, north, south, east, west, north-east, north-west, south-east, south-west
        let mut cells = [centre, n(0, 1), n(0, -1), n(1, 0), n(-1, 0), n(1, 1), n(-1, 1), n(1, -1), n(-1, -1)];
        if steps >= 2 {
            let mut zero = |idx: [usize; 3]| idx.iter().for_each(|&i| cells[i] = Cell::default());
            if area.lat_min < min_lat {
                zero([2, 8, 7]);
            }
            if area.lat_max > max_lat {
                zero([1, 5, 6]);
            }
            if area.long_min < min_lon {
                zero([4, 8, 6]);
            }
            if area.long_max > max_lon {
                zero([3, 7, 5]);
            }
        }
        let mut out: Vec<Cell> = Vec::with_capacity(9);
        let mut last: Option<usize> = None;
        for (i, c) in cells.iter().enumerate() {
            if c.is_zero() {
                continue;
            }
            if let Some(l) = last {
                if l != 0 && cells[l] == *c {
                    continue;
                }
            }
            out.push(*c);
            last = Some(i);
        }
        out
    }

    /// The distance to a point (metres) if it lies in the area.
    pub fn contains(&self, long: f64, lat: f64) -> Option<f64> {
        match self.shape {
            Shape::Circle { radius } => {
                let d = distance(self.long, self.lat, long, lat);
                (d <= radius * self.conversion).then_some(d)
            }
            Shape::Box { width, height } => {
                let (w, h) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.lat) > h / 2.0 || distance(long, lat, self.long, lat) > w / 2.0 {
                    return None;
                }
                Some(distance(self.long, self.lat, long, lat))
            }
        }
    }
}

/// The score range `[min, max)` of a cell.
pub fn score_range(cell: Cell) -> (f64, f64) {
    let min = align52(cell);
    let max = align52(Cell { bits: cell.bits + 1, step: cell.step });
    (min as f64, max as f64)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Haversine distance in metres.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (deg_rad(lon1), deg_rad(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// A distance with four decimals (`llrint` rounding, as Redis's `fixedpoint_d2string`).
pub fn format_distance(d: f64) -> String {
    let v = (d * 10000.0).round_ties_even() as i64;
    let sign = if v < 0 { "-" } else { "" };
    let v = v.unsigned_abs();
    format!("{sign}{}.{:04}", v / 10000, v % 10000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_round_trips() {
        for (x, y) in [(0u32, 0u32), (1, 0), (0, 1), (0xdead_beef, 0x1234_5678), (u32::MAX, 7)] {
            let sep = deinterleave(interleave(x, y));
            assert_eq!((sep as u32, (sep >> 32) as u32), (x, y));
        }
    }

    #[test]
    fn palermo_as_redis_stores_and_prints_it() {
        // GEOADD Sicily 13.361389 38.115556 "Palermo"; ZSCORE → 3479099956230698;
        // GEOPOS → 13.36138933897018433 38.11555639549629859; GEOHASH → sqc8b49rny0.
        let sc = score(13.361389, 38.115556).unwrap();
        assert_eq!(sc, 3479099956230698);
        let (long, lat) = position(sc as f64).unwrap();
        assert_eq!(crate::num::human_double(long), "13.36138933897018433");
        assert_eq!(crate::num::human_double(lat), "38.11555639549629859");
        assert_eq!(geohash_string(sc as f64).unwrap(), "sqc8b49rny0");
        // GEODIST Sicily Palermo Catania → 166274.1516 (m).
        let catania = position(score(15.087269, 37.502669).unwrap() as f64).unwrap();
        assert_eq!(format_distance(distance(long, lat, catania.0, catania.1)), "166274.1516");
        assert!(score(200.0, 0.0).is_none() && score(0.0, 86.0).is_none());
    }

    #[test]
    fn distances_print_with_four_decimals() {
        assert_eq!(format_distance(0.0), "0.0000");
        assert_eq!(format_distance(0.77505), "0.7750");
        assert_eq!(format_distance(12.5), "12.5000");
    }

    #[test]
    fn the_cover_contains_the_centre_cell() {
        let s = Search { long: 15.0, lat: 37.0, shape: Shape::Circle { radius: 200.0 }, conversion: 1000.0 };
        let cells = s.cells();
        let (lo, hi) = score_range(cells[0]);
        let own = score(15.0, 37.0).unwrap() as f64;
        assert!(lo <= own && own < hi);
        assert!(cells.len() <= 9);
    }
}

//! HyperLogLog exactly as Redis stores it, so a PF key's string value is interchangeable with
//! Redis's (GET from one, SET into the other, same PFCOUNT).
//!
//! ```text
//! header  "HYLL" | encoding u8 (0 dense, 1 sparse) | 3 zero bytes | cached cardinality u64 LE
//!         (its top bit set: the cache is stale)
//! dense   16384 registers of 6 bits, register i at bit 6i, least significant bits first
//! sparse  opcodes covering the 16384 registers in order:
//!         00xxxxxx            ZERO:  x+1 registers (1..64) set to 0
//!         01xxxxxx yyyyyyyy   XZERO: xy+1 registers (1..16384) set to 0
//!         1vvvvvxx            VAL:   x+1 registers (1..4) set to v+1 (1..32)
//! ```
//! An element is hashed with MurmurHash64A (seed 0xadc83b19): the low 14 bits pick the
//! register, the position of the first set bit in the remaining 50 (1-based, at most 51) is
//! the value kept if larger. A sparse HLL turns dense when a register needs a value above 32
//! or the sparse form would exceed `hll-sparse-max-bytes`. Cardinality comes from the register
//! histogram with Ertl's estimator ("New cardinality estimation algorithms for HyperLogLog
//! sketches", arXiv:1702.01284), as in Redis 7.0: standard error 0.81 %.
//! Every update follows Redis's own steps (including how runs are split and merged), so the
//! same PFADDs produce the same bytes.

/// Register index bits.
const P: u32 = 14;
/// Hash bits left for the run of zeros.
const Q: u32 = 64 - P;
/// Registers per HLL.
pub const REGISTERS: usize = 1 << P;
const REGISTER_MAX: u8 = 63;
/// Header bytes.
pub const HEADER: usize = 16;
/// Length of a dense HLL.
pub const DENSE_SIZE: usize = HEADER + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
const SPARSE_VAL_MAX_VALUE: u8 = 32;
const SPARSE_VAL_MAX_LEN: usize = 4;
const SPARSE_ZERO_MAX_LEN: usize = 64;

/// The value is not an HLL at all (Redis: `WRONGTYPE Key is not a valid HyperLogLog string
/// value.`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotHll;

/// The value is an HLL whose sparse opcodes do not add up (Redis: `INVALIDOBJ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// One sparse opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opcode {
    Zero(usize),
    XZero(usize),
    Val(u8, usize),
}

impl Opcode {
    fn at(bytes: &[u8], i: usize) -> Opcode {
        let b = bytes[i];
        if b & 0xc0 == 0 {
            Opcode::Zero(usize::from(b & 0x3f) + 1)
        } else if b & 0xc0 == 0x40 {
            let low = bytes.get(i + 1).copied().unwrap_or(0);
            Opcode::XZero(((usize::from(b & 0x3f) << 8) | usize::from(low)) + 1)
        } else {
            Opcode::Val(((b >> 2) & 0x1f) + 1, usize::from(b & 0x3) + 1)
        }
    }

    fn span(self) -> usize {
        match self {
            Opcode::Zero(n) | Opcode::XZero(n) | Opcode::Val(_, n) => n,
        }
    }

    fn width(self) -> usize {
        if matches!(self, Opcode::XZero(_)) {
            2
        } else {
            1
        }
    }

    fn push(self, out: &mut Vec<u8>) {
        match self {
            Opcode::Zero(n) => out.push((n - 1) as u8),
            Opcode::XZero(n) => {
                let l = n - 1;
                out.push((l >> 8) as u8 | 0x40);
                out.push((l & 0xff) as u8);
            }
            Opcode::Val(v, n) => out.push(((v - 1) << 2) | (n - 1) as u8 | 0x80),
        }
    }

    /// A run of zero registers as the shortest opcode.
    fn zeros(n: usize) -> Opcode {
        if n > SPARSE_ZERO_MAX_LEN {
            Opcode::XZero(n)
        } else {
            Opcode::Zero(n)
        }
    }
}

/// Redis's MurmurHash64A (endian-neutral: 8-byte blocks read little-endian).
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4a7935bd1e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut blocks = key.chunks_exact(8);
    for block in blocks.by_ref() {
        let mut k = u64::from_le_bytes(block.try_into().unwrap_or_default());
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element lands in and its run length (1..=51).
pub fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, 0xadc83b19);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// Where dense register `i` lies in a dense HLL's bytes (header included): the byte its bits
/// start in, and their first bit there. Its 6 bits end in that byte or the next.
pub fn dense_position(i: usize) -> (usize, usize) {
    (HEADER + i * 6 / 8, (i * 6) & 7)
}

/// The register whose bits start at bit `fb` of `window[0]` (and go on into `window[1]`).
pub fn window_get(window: [u8; 2], fb: usize) -> u8 {
    let (b0, b1) = (u16::from(window[0]), u16::from(window[1]));
    (((b0 >> fb) | (b1 << (8 - fb))) & u16::from(REGISTER_MAX)) as u8
}

/// Sets the register whose bits start at bit `fb` of `window[0]` to `v`.
pub fn window_set(window: &mut [u8; 2], fb: usize, v: u8) {
    let v = u16::from(v);
    window[0] &= !((u16::from(REGISTER_MAX) << fb) as u8);
    window[0] |= (v << fb) as u8;
    window[1] &= !((u16::from(REGISTER_MAX) >> (8 - fb)) as u8);
    window[1] |= (v >> (8 - fb)) as u8;
}

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let (byte, fb) = (i * 6 / 8, (i * 6) & 7);
    window_get([regs[byte], regs.get(byte + 1).copied().unwrap_or(0)], fb)
}

fn dense_set(regs: &mut [u8], i: usize, v: u8) {
    let (byte, fb) = (i * 6 / 8, (i * 6) & 7);
    let mut window = [regs[byte], regs.get(byte + 1).copied().unwrap_or(0)];
    window_set(&mut window, fb, v);
    regs[byte] = window[0];
    if let Some(next) = regs.get_mut(byte + 1) {
        *next = window[1];
    }
}

/// Whether `header` (a value's first [`HEADER`] bytes) starts a dense HLL.
pub fn is_dense_header(header: &[u8]) -> bool {
    header.len() >= HEADER && &header[..4] == b"HYLL" && header[4] == DENSE
}

/// The cardinality cached in `header` (a value's first [`HEADER`] bytes, `len` the value's
/// length) if the value is an HLL as far as its header tells (Redis's `isHLLObjectOrReply`
/// checks: magic, encoding, a dense one's exact length) and the cache is valid.
pub fn cached_in_header(header: &[u8], len: usize) -> Option<u64> {
    let valid = header.len() >= HEADER
        && &header[..4] == b"HYLL"
        && (header[4] == SPARSE || (header[4] == DENSE && len == DENSE_SIZE));
    (valid && header[STALE_BYTE] & 0x80 == 0).then(|| u64::from_le_bytes(header[8..16].try_into().unwrap_or_default()))
}

/// The header byte whose top bit marks the cached cardinality stale (see [`Hll::invalidate`]).
pub const STALE_BYTE: usize = 15;

/// Ertl's sigma.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

/// Ertl's tau.
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// The cardinality estimate from a register histogram.
fn estimate(histogram: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histogram[Q as usize + 1])) / m);
    for j in (1..=Q as usize).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (0.721_347_520_444_481_7 * m * m / z).round() as u64
}

/// The cardinality of registers held one per byte (a merge of several HLLs).
pub fn count_registers(registers: &[u8; REGISTERS]) -> u64 {
    let mut histogram = [0u32; 64];
    for &r in registers {
        histogram[usize::from(r & 63)] += 1;
    }
    estimate(&histogram)
}

/// An HLL value: Redis's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hll(Vec<u8>);

impl Default for Hll {
    fn default() -> Self {
        Hll::new()
    }
}

impl Hll {
    /// An empty HLL, sparse (one XZERO opcode).
    pub fn new() -> Hll {
        let mut v = b"HYLL".to_vec();
        v.extend_from_slice(&[SPARSE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        Opcode::XZero(REGISTERS).push(&mut v);
        Hll(v)
    }

    /// Checks that `bytes` is an HLL as Redis would (magic, encoding, dense length).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Hll, NotHll> {
        if bytes.len() < HEADER || &bytes[..4] != b"HYLL" || bytes[4] > SPARSE {
            return Err(NotHll);
        }
        if bytes[4] == DENSE && bytes.len() != DENSE_SIZE {
            return Err(NotHll);
        }
        Ok(Hll(bytes))
    }

    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The stored bytes, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// Whether the registers are sparse-encoded.
    pub fn is_sparse(&self) -> bool {
        self.0[4] == SPARSE
    }

    /// The cached cardinality, if still valid.
    pub fn cached(&self) -> Option<u64> {
        let card = u64::from_le_bytes(self.0[8..16].try_into().unwrap_or_default());
        (self.0[STALE_BYTE] & 0x80 == 0).then_some(card)
    }

    /// Marks the cached cardinality stale (after any change to the registers).
    pub fn invalidate(&mut self) {
        self.0[STALE_BYTE] |= 0x80;
    }

    /// Counts the elements (estimated), from the cache when valid; the bool says whether the
    /// cache was refreshed (the value changed).
    pub fn count(&mut self) -> Result<(u64, bool), Corrupt> {
        if let Some(card) = self.cached() {
            return Ok((card, false));
        }
        let card = estimate(&self.histogram()?);
        self.0[8..16].copy_from_slice(&card.to_le_bytes());
        Ok((card, true))
    }

    fn histogram(&self) -> Result<[u32; 64], Corrupt> {
        let mut h = [0u32; 64];
        if !self.is_sparse() {
            let regs = &self.0[HEADER..];
            for i in 0..REGISTERS {
                h[usize::from(dense_get(regs, i))] += 1;
            }
            return Ok(h);
        }
        let mut idx = 0;
        self.walk_sparse(|op| {
            match op {
                Opcode::Zero(n) | Opcode::XZero(n) => h[0] += n as u32,
                Opcode::Val(v, n) => h[usize::from(v)] += n as u32,
            }
            idx += op.span();
        });
        if idx != REGISTERS {
            return Err(Corrupt);
        }
        Ok(h)
    }

    fn walk_sparse(&self, mut f: impl FnMut(Opcode)) {
        let mut i = HEADER;
        while i < self.0.len() {
            let op = Opcode::at(&self.0, i);
            f(op);
            i += op.width();
        }
    }

    /// Adds an element; true if a register changed.
    pub fn add(&mut self, element: &[u8], sparse_max: usize) -> Result<bool, Corrupt> {
        let (index, count) = pattern(element);
        self.set_max(index, count, sparse_max)
    }

    /// Raises register `index` to `count` if lower; true if it changed.
    pub fn set_max(&mut self, index: usize, count: u8, sparse_max: usize) -> Result<bool, Corrupt> {
        if !self.is_sparse() {
            let regs = &mut self.0[HEADER..];
            if count > dense_get(regs, index) {
                dense_set(regs, index, count);
                self.invalidate();
                return Ok(true);
            }
            return Ok(false);
        }
        if count > SPARSE_VAL_MAX_VALUE {
            return self.promote(index, count);
        }
        // Step 1: find the opcode covering `index`.
        let end = self.0.len();
        let (mut p, mut first, mut prev) = (HEADER, 0usize, None);
        let mut found = None;
        while p < end {
            let op = Opcode::at(&self.0, p);
            if index < first + op.span() {
                found = Some(op);
                break;
            }
            prev = Some(p);
            p += op.width();
            first += op.span();
        }
        let Some(op) = found else { return Err(Corrupt) };
        let last = first + op.span() - 1;
        // Step 2: the trivial cases.
        match op {
            Opcode::Val(old, _) if old >= count => return Ok(false),
            Opcode::Val(_, 1) | Opcode::Zero(1) => {
                let mut one = Vec::with_capacity(1);
                Opcode::Val(count, 1).push(&mut one);
                self.0[p] = one[0];
            }
            _ => {
                // Step 3: split the opcode around `index`.
                let mut seq = Vec::with_capacity(5);
                match op {
                    Opcode::Zero(_) | Opcode::XZero(_) => {
                        if index != first {
                            Opcode::zeros(index - first).push(&mut seq);
                        }
                        Opcode::Val(count, 1).push(&mut seq);
                        if index != last {
                            Opcode::zeros(last - index).push(&mut seq);
                        }
                    }
                    Opcode::Val(cur, _) => {
                        if index != first {
                            Opcode::Val(cur, index - first).push(&mut seq);
                        }
                        Opcode::Val(count, 1).push(&mut seq);
                        if index != last {
                            Opcode::Val(cur, last - index).push(&mut seq);
                        }
                    }
                }
                let grows = seq.len() > op.width();
                if grows && self.0.len() + seq.len() - op.width() > sparse_max {
                    return self.promote(index, count);
                }
                self.0.splice(p..p + op.width(), seq);
            }
        }
        // Step 4: merge adjacent VAL opcodes of equal value, scanning up to five opcodes
        // from the one before the change.
        let mut q = prev.unwrap_or(HEADER);
        let mut scan = 5;
        while q < self.0.len() && scan > 0 {
            scan -= 1;
            let op = Opcode::at(&self.0, q);
            let Opcode::Val(v1, l1) = op else {
                q += op.width();
                continue;
            };
            if q + 1 < self.0.len() {
                if let Opcode::Val(v2, l2) = Opcode::at(&self.0, q + 1) {
                    if v1 == v2 && l1 + l2 <= SPARSE_VAL_MAX_LEN {
                        let mut merged = Vec::with_capacity(1);
                        Opcode::Val(v1, l1 + l2).push(&mut merged);
                        self.0[q + 1] = merged[0];
                        self.0.remove(q);
                        continue;
                    }
                }
            }
            q += 1;
        }
        self.invalidate();
        Ok(true)
    }

    fn promote(&mut self, index: usize, count: u8) -> Result<bool, Corrupt> {
        self.to_dense()?;
        let regs = &mut self.0[HEADER..];
        dense_set(regs, index, count);
        self.invalidate();
        Ok(true)
    }

    /// Converts a sparse HLL to dense; false if it already was.
    pub fn to_dense(&mut self) -> Result<bool, Corrupt> {
        if !self.is_sparse() {
            return Ok(false);
        }
        let mut dense = vec![0u8; DENSE_SIZE];
        dense[..HEADER].copy_from_slice(&self.0[..HEADER]);
        dense[4] = DENSE;
        let mut idx = 0;
        let mut overflow = false;
        self.walk_sparse(|op| match op {
            Opcode::Val(v, n) if !overflow => {
                if idx + n > REGISTERS {
                    overflow = true;
                    return;
                }
                for _ in 0..n {
                    dense_set(&mut dense[HEADER..], idx, v);
                    idx += 1;
                }
            }
            Opcode::Val(..) => {}
            op if !overflow => idx += op.span(),
            _ => {}
        });
        if overflow || idx != REGISTERS {
            return Err(Corrupt);
        }
        self.0 = dense;
        Ok(true)
    }

    /// Raises each of `max` to this HLL's register where higher (PFMERGE, PFCOUNT of several).
    pub fn merge_into(&self, max: &mut [u8; REGISTERS]) -> Result<(), Corrupt> {
        if !self.is_sparse() {
            let regs = &self.0[HEADER..];
            for (i, m) in max.iter_mut().enumerate() {
                *m = (*m).max(dense_get(regs, i));
            }
            return Ok(());
        }
        let mut idx = 0;
        let mut overflow = false;
        self.walk_sparse(|op| {
            if overflow {
                return;
            }
            match op {
                Opcode::Val(v, n) => {
                    if idx + n > REGISTERS {
                        overflow = true;
                        return;
                    }
                    for m in &mut max[idx..idx + n] {
                        *m = (*m).max(v);
                    }
                    idx += n;
                }
                op => idx += op.span(),
            }
        });
        if overflow || idx != REGISTERS {
            return Err(Corrupt);
        }
        Ok(())
    }

    /// Every register's value (PFDEBUG GETREG; the caller turns a sparse HLL dense first).
    pub fn registers(&self) -> Vec<u8> {
        let mut max = [0u8; REGISTERS];
        let _ = self.merge_into(&mut max);
        max.to_vec()
    }

    /// The sparse opcodes as PFDEBUG DECODE prints them (`z:n`, `Z:n`, `v:value,n`).
    pub fn decode_sparse(&self) -> String {
        let mut parts = Vec::new();
        self.walk_sparse(|op| {
            parts.push(match op {
                Opcode::Zero(n) => format!("z:{n}"),
                Opcode::XZero(n) => format!("Z:{n}"),
                Opcode::Val(v, n) => format!("v:{v},{n}"),
            })
        });
        parts.join(" ")
    }
}

/// The element of `j` in PFSELFTEST's error check: 8 little-endian bytes, as Redis hashes them.
fn selftest_element(j: u64, seed: u64) -> [u8; 8] {
    (j ^ seed).to_le_bytes()
}

/// PFSELFTEST: register access round trips, and the estimate of dense and sparse HLLs agreeing
/// and within six standard errors at cardinalities 1, 10, …, 10^6. `Err` names the failure.
pub fn self_test(sparse_max: usize) -> Result<(), String> {
    let mut regs = vec![0u8; DENSE_SIZE - HEADER];
    let mut bytes = vec![0u8; REGISTERS];
    for _ in 0..100 {
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = rand::random::<u8>() & REGISTER_MAX;
            dense_set(&mut regs, i, *b);
        }
        for (i, &b) in bytes.iter().enumerate() {
            let got = dense_get(&regs, i);
            if got != b {
                return Err(format!("TESTFAILED Register {i} should be {b} but is {got}"));
            }
        }
    }
    let mut dense = Hll::new();
    dense.to_dense().map_err(|_| "TESTFAILED dense conversion".to_string())?;
    let mut sparse = Hll::new();
    let seed: u64 = rand::random();
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint = 1u64;
    for j in 1..=1_000_000u64 {
        let e = selftest_element(j, seed);
        let _ = dense.add(&e, sparse_max);
        let _ = sparse.add(&e, sparse_max);
        if j != checkpoint {
            continue;
        }
        if (j as usize) < sparse_max / 2 && !sparse.is_sparse() {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let fresh = |h: &Hll| estimate(&h.histogram().unwrap_or([0; 64]));
        if fresh(&dense) != fresh(&sparse) {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        let abserr = (checkpoint as i64 - fresh(&dense) as i64).unsigned_abs();
        let maxerr = if j == 10 { 1 } else { (relerr * 6.0 * checkpoint as f64).ceil() as u64 };
        if abserr > maxerr {
            return Err(format!("TESTFAILED Too big error. card:{checkpoint} abserr:{abserr}"));
        }
        checkpoint *= 10;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

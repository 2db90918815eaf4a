//! Redis's glob patterns (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, and `\x` for a
//! literal `x`. Used by KEYS, SCAN MATCH, CONFIG GET and pattern subscriptions.
//!
//! Every pattern element except `*` matches exactly one byte, so a greedy match that backtracks
//! only to the most recent `*` is complete and runs in O(pattern × subject) time with no recursion,
//! whatever the pattern (Redis needs a recursion limit for the same job).

/// True if `subject` matches `pattern`. `nocase` folds ASCII case (CONFIG GET does).
pub fn matches(pattern: &[u8], subject: &[u8], nocase: bool) -> bool {
    let (mut p, mut s) = (0, 0);
    // Where to resume after the last `*`: the pattern after it, and the subject position it absorbed to.
    let mut star: Option<(usize, usize)> = None;
    while s < subject.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, s));
            continue;
        }
        if p < pattern.len() {
            if let Some(next) = match_one(pattern, p, subject[s], nocase) {
                p = next;
                s += 1;
                continue;
            }
        }
        match star {
            Some((sp, ss)) => {
                p = sp;
                s = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches one subject byte against the element at `pattern[p]` (not `*`); returns where the next
/// element starts, or `None` on a mismatch.
fn match_one(pattern: &[u8], p: usize, c: u8, nocase: bool) -> Option<usize> {
    let eq = |a: u8, b: u8| if nocase { a.eq_ignore_ascii_case(&b) } else { a == b };
    match pattern[p] {
        b'?' => Some(p + 1),
        b'\\' if p + 1 < pattern.len() => eq(pattern[p + 1], c).then_some(p + 2),
        b'[' => {
            let mut i = p + 1;
            let negate = pattern.get(i) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut hit = false;
            // An unterminated class ends at the end of the pattern, as in Redis.
            while i < pattern.len() && pattern[i] != b']' {
                if pattern[i] == b'\\' && i + 1 < pattern.len() {
                    i += 1;
                    hit |= eq(pattern[i], c);
                } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' {
                    let (mut lo, mut hi) = (pattern[i], pattern[i + 2]);
                    if lo > hi {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                    let folded = [c, c.to_ascii_lowercase(), c.to_ascii_uppercase()];
                    let candidates = if nocase { &folded[..] } else { &folded[..1] };
                    hit |= candidates.iter().any(|x| (lo..=hi).contains(x));
                    i += 2;
                } else {
                    hit |= eq(pattern[i], c);
                }
                i += 1;
            }
            (hit != negate).then_some((i + 1).min(pattern.len()))
        }
        other => eq(other, c).then_some(p + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    fn m(p: &str, s: &str) -> bool {
        matches(p.as_bytes(), s.as_bytes(), false)
    }

    #[test]
    fn redis_glob_rules() {
        assert!(m("*", "") && m("*", "anything") && m("", ""));
        assert!(!m("", "x") && !m("a", "") && !m("a", "ab"));
        assert!(m("h?llo", "hello") && m("h?llo", "hallo") && !m("h?llo", "hllo"));
        assert!(m("h*llo", "hllo") && m("h*llo", "heeeello") && !m("h*llo", "heeeellox"));
        assert!(m("h[ae]llo", "hello") && m("h[ae]llo", "hallo") && !m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo") && !m("h[a-b]llo", "hcllo") && m("h[b-a]llo", "hallo"));
        assert!(m(r"h\*llo", "h*llo") && !m(r"h\*llo", "hello") && m(r"[\]]", "]") && m(r"[\-]", "-"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx") && !m("*a*b*c*", "xxcxxbxxaxx"));
        assert!(m("a*", "a") && m("**a**", "a") && m("*?", "x") && !m("*?", ""));
        assert!(m("user:*:name", "user:42:name") && !m("user:*:name", "user:42:age"));
        assert!(m("[abc", "a") && !m("[abc", "d"), "an unterminated class ends with the pattern");
        assert!(!m("x[", "x["), "an empty unterminated class matches nothing");
        assert!(m("[^]", "q"), "an empty negated class matches any byte, as in Redis");
        assert!(m("a\\", "a\\"), "a trailing backslash is literal");
        assert!(!m("[]", "a") && !m("[^]", ""));
    }

    #[test]
    fn nocase_folds_ascii() {
        assert!(matches(b"MAXMEMORY*", b"maxmemory-policy", true));
        assert!(matches(b"[A-C]x", b"bX", true));
        assert!(!matches(b"MAXMEMORY*", b"maxmemory-policy", false));
    }

    #[test]
    fn pathological_patterns_finish() {
        let pattern = "a*".repeat(50) + "b";
        let subject = "a".repeat(200);
        assert!(!m(&pattern, &subject));
    }
}

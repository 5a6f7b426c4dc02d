//! Nucleotides as small codes, reverse complements and k-mer contexts.

/// The code of a letter: `A C G T` (either case) are `0 1 2 3`; everything else (`N`, IUPAC
/// ambiguity codes, gaps) is [`OTHER`], which matches no consensus and no k-mer.
pub fn code(letter: u8) -> u8 {
    match letter {
        b'A' | b'a' => 0,
        b'C' | b'c' => 1,
        b'G' | b'g' => 2,
        b'T' | b't' | b'U' | b'u' => 3,
        _ => OTHER,
    }
}

/// The code of any letter other than `ACGT`.
pub const OTHER: u8 = 4;

/// The letters of codes `0..=4`.
pub const LETTERS: [u8; 5] = *b"ACGTN";

/// Codes of a sequence of letters.
pub fn encode(letters: &[u8]) -> Vec<u8> {
    letters.iter().map(|&l| code(l)).collect()
}

/// The reverse complement of coded bases (`OTHER` stays `OTHER`).
pub fn reverse_complement(codes: &[u8]) -> Vec<u8> {
    codes
        .iter()
        .rev()
        .map(|&c| if c < 4 { 3 - c } else { OTHER })
        .collect()
}

/// Whether the three bases at `i` form a stop codon (`TAA`, `TAG`, `TGA`).
pub fn is_stop(x: &[u8], i: usize) -> bool {
    matches!(
        (x.get(i), x.get(i + 1), x.get(i + 2)),
        (Some(3), Some(0), Some(0)) | (Some(3), Some(0), Some(2)) | (Some(3), Some(2), Some(0))
    )
}

/// Whether `x[i..]` starts with `pattern` (codes).
pub fn has(x: &[u8], i: isize, pattern: &[u8]) -> bool {
    i >= 0
        && (i as usize)
            .checked_add(pattern.len())
            .is_some_and(|end| end <= x.len() && &x[i as usize..end] == pattern)
}

/// Index of the `k`-mer ending at `t` (bases `t+1-k ..= t`) in `0..4^k`, or `4^k` when it
/// runs off the start or holds a letter other than `ACGT`, for every position.
pub fn contexts(x: &[u8], k: usize) -> Vec<u32> {
    let other = 1u32 << (2 * k);
    let mask = other - 1;
    let mut out = Vec::with_capacity(x.len());
    let (mut h, mut valid) = (0u32, 0usize);
    for &c in x {
        if c < 4 {
            h = ((h << 2) | c as u32) & mask;
            valid += 1;
        } else {
            valid = 0;
        }
        out.push(if valid >= k { h } else { other });
    }
    out
}

/// The entry `t` of [`contexts`]`(x, k)`, from the `k` bases that end at `t` alone.
pub fn context_at(x: &[u8], t: usize, k: usize) -> u32 {
    let other = 1u32 << (2 * k);
    if t + 1 < k {
        return other;
    }
    let mut h = 0u32;
    for &c in &x[t + 1 - k..=t] {
        if c >= 4 {
            return other;
        }
        h = (h << 2) | c as u32;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_count_kmers_and_mark_the_unknown() {
        let x = encode(b"ACGTNAC");
        let c = contexts(&x, 2);
        assert_eq!(c, vec![16, 1, 6, 11, 16, 16, 1]);
        for k in [1, 2, 3] {
            let all = contexts(&x, k);
            for (t, &c) in all.iter().enumerate() {
                assert_eq!(context_at(&x, t, k), c, "k = {k}, t = {t}");
            }
        }
        assert_eq!(reverse_complement(&encode(b"AACGN")), encode(b"NCGTT"));
        assert!(is_stop(&encode(b"CTGA"), 1));
        assert!(!is_stop(&encode(b"CTGA"), 2));
        assert!(has(&encode(b"GGT"), 1, &[2, 3]));
        assert!(!has(&encode(b"GGT"), 2, &[3, 3]));
        assert!(!has(&encode(b"GGT"), -1, &[2]));
    }
}

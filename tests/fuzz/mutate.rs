//! The fuzz harness's mutations: byte-level edits, parser-breaking tokens, splices, long runs.

use crate::engine::Target;

/// Fragments that break parsers: escapes, separators, non-ASCII, numbers at the edges.
const TOKENS: &[&str] = &[
    "%",
    "%€",
    "€",
    "%e2%82",
    "%ff",
    "..",
    "../",
    "/",
    "\\",
    "\r\n",
    "\n",
    "\r",
    "\r\n\r\n",
    "\0",
    "\t",
    " ",
    "\"",
    "'",
    "`",
    "=",
    "&",
    "?",
    ":",
    ";",
    ",",
    "#",
    "{",
    "}",
    "[",
    "]",
    "[[",
    "]]",
    "{}",
    "[]",
    "null",
    "true",
    "false",
    "0",
    "-0",
    "-1",
    "1e20",
    "1e400",
    "-1e20",
    "1.5",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "0x10",
    "💥",
    "\u{feff}",
    "\u{202e}",
    "ÿ",
];

/// xorshift64*: small, seedable, good enough to pick mutations.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545f4914f6cdd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

pub fn mutate(input: &mut Vec<u8>, pool: &[Vec<u8>], target: &Target, rng: &mut Rng) {
    let len = input.len();
    let at = rng.below(len + 1);
    match rng.below(11) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.next() as u8;
        }
        2 => input.insert(at, rng.next() as u8),
        3 if len > 0 => {
            let n = 1 + rng.below((len - at.min(len - 1)).min(16));
            let start = at.min(len - 1);
            input.drain(start..(start + n).min(len));
        }
        4 | 5 => {
            let token = if rng.below(2) == 0 && !target.tokens.is_empty() {
                target.tokens[rng.below(target.tokens.len())]
            } else {
                TOKENS[rng.below(TOKENS.len())]
            };
            input.splice(at..at, token.bytes());
        }
        6 if !pool.is_empty() => {
            // Splice: this input's head with another's tail.
            let other = &pool[rng.below(pool.len())];
            let from = rng.below(other.len() + 1);
            input.truncate(at);
            input.extend_from_slice(&other[from..]);
        }
        7 => {
            // A long run: of one byte, or of a short piece of the input (nesting, repeats).
            let n = [16, 256, 4096, 65536][rng.below(4)];
            if len > 0 && rng.below(2) == 0 {
                let start = rng.below(len);
                let piece = input[start..(start + 1 + rng.below(8)).min(len)].to_vec();
                let run: Vec<u8> = piece.iter().cycle().take(n).copied().collect();
                input.splice(at..at, run);
            } else {
                let b = [b'a', b'[', b'{', b'0', b'9', b' ', b'\n', b'%', 0xff][rng.below(9)];
                input.splice(at..at, std::iter::repeat(b).take(n));
            }
        }
        8 => {
            // Swap a number for one at an edge.
            let nums = [
                "0",
                "-1",
                "1e20",
                "1e400",
                "NaN",
                "18446744073709551616",
                "-0.0",
                "inf",
            ];
            let start = input.iter().position(|b| b.is_ascii_digit());
            if let Some(s) = start {
                let end = input[s..]
                    .iter()
                    .position(|b| !b.is_ascii_digit() && *b != b'.')
                    .map_or(input.len(), |e| s + e);
                input.splice(s..end, nums[rng.below(nums.len())].bytes());
            }
        }
        9 if len > 1 => {
            // Copy a chunk of the input somewhere else in it.
            let s = rng.below(len);
            let piece = input[s..(s + 1 + rng.below(64)).min(len)].to_vec();
            let at = rng.below(input.len() + 1);
            input.splice(at..at, piece);
        }
        _ if len > 0 => {
            // Cut it short (truncated streams, unclosed brackets).
            input.truncate(rng.below(len));
        }
        _ => input.push(rng.next() as u8),
    }
}

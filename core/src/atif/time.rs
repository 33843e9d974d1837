//! ISO 8601 UTC timestamps to and from Unix seconds, without a date crate: ATIF only needs
//! `YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM)`.

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2026-12-02T17:36:24.123456Z` for Unix seconds `t`, to the microsecond exactly as NeMo Gym
/// writes it (`datetime.fromtimestamp(t, UTC).isoformat()` with `Z`).
pub fn to_iso(t: f64) -> String {
    // Split before scaling, rounding half to even, as Python's `datetime.fromtimestamp` does:
    // `t * 1e6` alone rounds differently in the last microsecond.
    let whole = t.floor();
    let micros = ((t - whole) * 1e6).round_ties_even() as i64;
    let secs = whole as i64 + micros / 1_000_000;
    let us = micros % 1_000_000;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    // Python's `isoformat` leaves out a zero fraction.
    let frac = if us == 0 {
        String::new()
    } else {
        format!(".{us:06}")
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Unix seconds of an ISO 8601 timestamp; `None` when it is not one (a naive time is UTC).
pub fn from_iso(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        frac = format!("0.{}", &r[..n]).parse().ok()?;
        rest = &r[n..];
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hm = rest[1..].replace(':', "");
            let (oh, om) = (
                hm.get(0..2)?.parse::<i64>().ok()?,
                hm.get(2..4)?.parse::<i64>().ok()?,
            );
            sign * (oh * 3600 + om * 60)
        }
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    Some(secs as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips_and_reads_offsets() {
        assert_eq!(to_iso(0.0), "1970-01-01T00:00:00Z");
        // What Python's datetime.fromtimestamp(t, UTC).isoformat() prints for these.
        assert_eq!(to_iso(1_796_233_111.775_333), "2026-12-02T17:38:31.775333Z");
        assert_eq!(
            to_iso(1_796_233_111.775_332_5),
            "2026-12-02T17:38:31.775332Z"
        );
        assert_eq!(to_iso(1_796_000_000.999_999_5), "2026-11-30T00:53:21Z");
        assert_eq!(to_iso(1_700_000_000.25), "2023-11-14T22:13:20.250000Z");
        let t = 1_796_232_984.123_456;
        assert!((from_iso(&to_iso(t)).unwrap() - t).abs() < 1e-6);
        assert_eq!(from_iso("2023-11-14T23:13:20+01:00"), Some(1_700_000_000.0));
        assert_eq!(from_iso("2024-02-29T00:00:00"), Some(1_709_164_800.0));
        assert_eq!(from_iso("yesterday"), None);
    }
}

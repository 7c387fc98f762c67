//! Human-friendly units in the config file: byte sizes ("4MiB") and durations ("15s").

use std::time::Duration;

/// Parses a byte size: a plain integer (bytes) or a number with a unit
/// `B`, `KiB`, `MiB`, `GiB` (also `K`, `M`, `G`, `KB`, `MB`, `GB`, all binary).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (examples: 65536, \"64KiB\", \"4MiB\")"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{text}` (use B, KiB, MiB, GiB)"
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Parses a duration: a number with a unit `ms`, `s`, `m`, `h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().map_err(|_| {
        format!("`{text}` is not a duration (examples: \"500ms\", \"15s\", \"2m\")")
    })?;
    let millis: u64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err(format!("`{text}` needs a unit (ms, s, m, h, d)")),
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{text}` (use ms, s, m, h, d)"
            ))
        }
    };
    number
        .checked_mul(millis)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert!(parse_size("4 parsecs").unwrap_err().contains("unit"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("15").unwrap_err().contains("unit"));
        assert!(parse_duration("15 fortnights").is_err());
    }
}

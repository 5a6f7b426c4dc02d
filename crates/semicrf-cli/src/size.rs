//! Sizes on the command line: `--memory-budget 2GiB`.

use bytesize::ByteSize;

/// The units a size may carry, as the errors list them.
const UNITS: &str = "B, KB, KiB, MB, MiB, GB, GiB, TB or TiB";

/// Parses a number of bytes, or a number with a unit: `B`, decimal `KB`/`MB`/`GB`/`TB`
/// (powers of 1000) or binary `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), in any case, with or
/// without a space (`2GiB`, `2 gib`, `1.5 GB`). A size that does not fit 64 bits is an error,
/// not a saturated value.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let invalid = || {
        format!(
            "invalid size `{text}`: expected a number of bytes, or a number with a unit \
             ({UNITS}), e.g. `512MiB` or `2 GB`"
        )
    };
    // Plain numbers are bytes; a leading sign or an empty number is not a size.
    if trimmed.is_empty() || !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(invalid());
    }
    let too_large = || format!("size `{text}` is too large: it does not fit in 64 bits");
    if trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed.parse::<u64>().map_err(|_| too_large());
    }
    let ByteSize(bytes) = trimmed.parse::<ByteSize>().map_err(|_| invalid())?;
    // The parser saturates: the largest value means the size did not fit.
    if bytes == u64::MAX {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1"), Ok(1));
        assert_eq!(parse_size("2147483648"), Ok(2 * GIB));
        assert_eq!(parse_size(" 17 "), Ok(17));
    }

    #[test]
    fn every_unit_is_accepted_with_or_without_a_space() {
        let cases = [
            ("B", 1),
            ("KB", 1_000),
            ("KiB", KIB),
            ("MB", 1_000_000),
            ("MiB", MIB),
            ("GB", 1_000_000_000),
            ("GiB", GIB),
            ("TB", 1_000_000_000_000),
            ("TiB", TIB),
        ];
        for (unit, factor) in cases {
            for text in [format!("3{unit}"), format!("3 {unit}")] {
                assert_eq!(parse_size(&text), Ok(3 * factor), "{text}");
            }
        }
    }

    #[test]
    fn units_are_case_insensitive() {
        for text in ["1GiB", "1gib", "1GIB", "1 gIb"] {
            assert_eq!(parse_size(text), Ok(GIB), "{text}");
        }
        for text in ["1GB", "1gb", "1 Gb"] {
            assert_eq!(parse_size(text), Ok(1_000_000_000), "{text}");
        }
        assert_eq!(parse_size("5b"), Ok(5));
    }

    #[test]
    fn the_default_as_the_help_writes_it_is_the_default() {
        assert_eq!(parse_size("2 GiB"), Ok(semicrf::DEFAULT_MEMORY_BUDGET));
    }

    #[test]
    fn fractions_of_a_unit_are_accepted() {
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("0.5 GiB"), Ok(GIB / 2));
    }

    #[test]
    fn malformed_sizes_are_errors_that_list_the_units() {
        for text in [
            "",
            " ",
            "GiB",
            "-1",
            "-1GiB",
            "+1",
            "1 GiBs",
            "1 gigabyte",
            "1 XB",
            "1.2.3 MB",
            "1,000",
            "two",
            "1 G iB",
        ] {
            let err = parse_size(text).expect_err(text);
            assert!(err.contains(&format!("`{text}`")), "{err}");
            assert!(err.contains("KiB") && err.contains("TiB"), "{err}");
        }
    }

    #[test]
    fn a_size_beyond_64_bits_is_an_error_not_a_saturated_value() {
        for text in [
            "18446744073709551616",
            "20000000 TiB",
            "99999999999999999999 GB",
        ] {
            let err = parse_size(text).expect_err(text);
            assert!(err.contains("too large"), "{err}");
        }
        assert_eq!(parse_size("16777215 TiB"), Ok(16_777_215 * TIB));
    }
}

//! The process's memory budget: the one configured, else the limit of the cgroup it runs in.
//! Read once at start for the metrics; never guessed (no limit found means no budget).
//!
//! Calls nothing in the crate.

/// cgroup v2's memory limit of the process's cgroup (as seen from inside a container).
const CGROUP_V2_MAX: &str = "/sys/fs/cgroup/memory.max";
/// cgroup v1's memory limit.
const CGROUP_V1_LIMIT: &str = "/sys/fs/cgroup/memory/memory.limit_in_bytes";
/// cgroup v1 says "no limit" with a number near `i64::MAX` (rounded down to a page); any limit
/// at or above this is taken for that.
const CGROUP_V1_UNLIMITED: u64 = 1 << 60;

/// The budget: `configured` if given, else the cgroup's memory limit if one is set.
pub fn budget(configured: Option<u64>) -> Option<u64> {
    configured.or_else(|| {
        let read = |path| std::fs::read_to_string(path).ok();
        cgroup_limit(
            read(CGROUP_V2_MAX).as_deref(),
            read(CGROUP_V1_LIMIT).as_deref(),
        )
    })
}

/// The memory limit the cgroup files say, given the texts of `memory.max` (v2) and
/// `memory.limit_in_bytes` (v1) where they exist. v2 wins when present; `max` means no limit.
pub fn cgroup_limit(v2_max: Option<&str>, v1_limit: Option<&str>) -> Option<u64> {
    if let Some(text) = v2_max {
        let text = text.trim();
        return if text == "max" {
            None
        } else {
            text.parse().ok().filter(|&n| n > 0)
        };
    }
    v1_limit?
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0 && n < CGROUP_V1_UNLIMITED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_v2_limit_is_the_budget() {
        assert_eq!(cgroup_limit(Some("536870912\n"), None), Some(536_870_912));
    }

    #[test]
    fn cgroup_v2_max_means_no_budget_even_with_a_v1_file() {
        assert_eq!(cgroup_limit(Some("max\n"), Some("1073741824\n")), None);
    }

    #[test]
    fn a_cgroup_v1_limit_below_2_pow_60_is_the_budget() {
        assert_eq!(cgroup_limit(None, Some("1073741824\n")), Some(1 << 30));
    }

    #[test]
    fn cgroup_v1_unlimited_means_no_budget() {
        assert_eq!(cgroup_limit(None, Some("9223372036854771712\n")), None);
        assert_eq!(cgroup_limit(None, Some("1152921504606846976")), None);
    }

    #[test]
    fn no_files_or_unreadable_texts_mean_no_budget() {
        assert_eq!(cgroup_limit(None, None), None);
        assert_eq!(cgroup_limit(Some("lots"), None), None);
        assert_eq!(cgroup_limit(None, Some("")), None);
        assert_eq!(cgroup_limit(Some("0"), None), None);
    }

    #[test]
    fn a_configured_budget_wins() {
        assert_eq!(budget(Some(123)), Some(123));
    }
}

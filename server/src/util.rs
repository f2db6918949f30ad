//! Small helpers with no place in any layer: deadlines that may be absent, private files,
//! reading cookies and query parameters, and client-supplied text made safe for a log line. Imports nothing from the crate; anything may use it.

use std::path::Path;

use tokio::time::Instant;

/// Sleeps until `deadline`, or forever when there is none (a `select!` arm that never fires).
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Creates `path` and any missing parents as directories only their owner may enter (mode
/// 0700). An existing directory keeps its mode.
pub(crate) fn create_private_dir(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

/// Creates `path` as an empty file only its owner may read (mode 0600) unless it exists, so
/// that a program creating it later (SQLite, and its `-wal` and `-shm` files, which take the
/// database file's mode) does not make it readable by others.
pub(crate) fn touch_private(path: &Path) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    match opts.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

/// Writes a new file readable only by its owner (mode 0600); an existing file is an error.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

/// Longest client-supplied text written into a log line, in characters.
pub(crate) const LOG_STR_MAX_CHARS: usize = 80;

/// Client-supplied text as a log field: control characters (CR and LF included) escaped, so
/// it cannot forge log lines, and cut after [`LOG_STR_MAX_CHARS`] characters, so it cannot
/// fill the disk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogStr<'a>(pub(crate) &'a str);

impl std::fmt::Display for LogStr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        let mut chars = self.0.chars();
        for c in chars.by_ref().take(LOG_STR_MAX_CHARS) {
            if c.is_control() || c == '\\' {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        let rest = chars.count();
        if rest > 0 {
            write!(f, "…(+{rest} chars)")?;
        }
        Ok(())
    }
}

/// The value of cookie `name`, if the request carries it.
pub(crate) fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The value of `name` in a query string, percent-decoded.
pub(crate) fn query_param(query: &str, name: &str) -> Option<String> {
    url_pairs(query).find(|(k, _)| k == name).map(|(_, v)| v)
}

fn url_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k), percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'%' if i + 2 < bytes.len() => hex(bytes[i + 1])
                .zip(hex(bytes[i + 2]))
                .map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match (decoded, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_strings_cannot_break_lines_or_run_long() {
        let forged = "ann\r\n2026-01-01T00:00:00Z INFO login ok user=root";
        let shown = LogStr(forged).to_string();
        assert!(!shown.contains('\n') && !shown.contains('\r'), "{shown}");
        assert!(shown.starts_with("ann\\r\\n2026"), "{shown}");
        let huge = "x".repeat(1 << 20);
        let shown = LogStr(&huge).to_string();
        assert!(shown.len() < 200, "{} bytes", shown.len());
        assert!(shown.ends_with(&format!("(+{} chars)", (1 << 20) - LOG_STR_MAX_CHARS)));
    }

    #[test]
    fn query_params_are_percent_decoded() {
        assert_eq!(
            query_param("a=1&access_token=ab%2Fc+d&x", "access_token").as_deref(),
            Some("ab/c d")
        );
        assert_eq!(query_param("t=%zz%", "t").as_deref(), Some("%zz%"));
        assert_eq!(query_param("", "t"), None);
    }
}

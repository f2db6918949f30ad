//! Small helpers with no place in any layer: deadlines that may be absent, private files, and
//! reading cookies and query parameters. Imports nothing from the crate; anything may use it.

use std::path::Path;

use tokio::time::Instant;

/// Sleeps until `deadline`, or forever when there is none (a `select!` arm that never fires).
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
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
    fn query_params_are_percent_decoded() {
        assert_eq!(
            query_param("a=1&access_token=ab%2Fc+d&x", "access_token").as_deref(),
            Some("ab/c d")
        );
        assert_eq!(query_param("t=%zz%", "t").as_deref(), Some("%zz%"));
        assert_eq!(query_param("", "t"), None);
    }
}

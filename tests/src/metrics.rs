//! Scraping `moord`'s `/metrics` and reading values out of the exposition.

use prometheus_parse::{Scrape, Value};

/// `GET {base}/metrics` with `token` (if any): the status and the body.
pub async fn get(base: &str, token: Option<&str>) -> (reqwest::StatusCode, String) {
    let mut req = reqwest::Client::new().get(format!("{base}/metrics"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("GET /metrics");
    let status = resp.status();
    (status, resp.text().await.unwrap_or_default())
}

/// Scrapes `{base}/metrics` with `token`; panics unless it answers 200 with an exposition a
/// Prometheus text-format parser reads.
pub async fn scrape(base: &str, token: &str) -> Scrape {
    let (status, text) = get(base, Some(token)).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{text}");
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a parseable exposition")
}

/// The value of sample `name` whose labels include `labels` (for a histogram: its count).
pub fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

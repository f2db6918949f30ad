//! Per-file diffs between two checkpoints of a session (the turn review): which files differ,
//! and each one's unified diff, from what the server holds. A file that only one checkpoint
//! changed against the common base is its section of that checkpoint's patch (reversed when it
//! is the earlier one's); a file both changed is a diff of the two stored contents.
//!
//! Bounded: patches are read line by line (each line cut to [`CHANGES_LINE_BYTES`]), contents
//! over [`CONTENT_MAX_BYTES`] are not diffed, and each file keeps only a window of its diff text
//! ([`Window`]) while its totals are counted. Pure apart from reading a patch through an
//! `AsyncBufRead`; no HTTP, no store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use moor_protocol::checkpoint::{
    ChangeStatus, CheckpointManifest, FileChange, FileDiffStatus, CHANGES_LINE_BYTES,
};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Largest content (either side) diffed here; larger files are listed with a note.
pub(crate) const CONTENT_MAX_BYTES: u64 = 1024 * 1024;
/// Longest a content diff may search for the shortest edit script; past it the diff is still
/// correct, only not minimal.
const CONTENT_DIFF_DEADLINE: Duration = Duration::from_secs(2);
/// Most header lines of one file's section kept while looking for its paths.
const HEADER_LINES_MAX: usize = 16;

/// Where a planned file's diff comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Its section of the later checkpoint's patch.
    ToPatch,
    /// Its section of the earlier checkpoint's patch, reversed (the later one is back to base).
    FromPatchReversed,
    /// A diff of the stored contents (`None`: the file is not there on that side).
    Contents {
        old: Option<String>,
        new: Option<String>,
    },
    /// No diff can be made; why.
    Nothing(&'static str),
}

/// One file that differs, before its diff is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    pub(crate) path: String,
    pub(crate) status: FileDiffStatus,
    pub(crate) source: Source,
}

fn status_of(s: ChangeStatus) -> FileDiffStatus {
    match s {
        ChangeStatus::Added => FileDiffStatus::Added,
        ChangeStatus::Modified => FileDiffStatus::Modified,
        ChangeStatus::Deleted => FileDiffStatus::Deleted,
        ChangeStatus::TypeChanged => FileDiffStatus::TypeChanged,
    }
}

/// A git mode's kind: `100` file, `120` symbolic link, `160` submodule.
fn mode_kind(m: &Option<String>) -> Option<&str> {
    m.as_deref().map(|m| &m[..m.len().min(3)])
}

fn reversed(s: ChangeStatus) -> FileDiffStatus {
    match s {
        ChangeStatus::Added => FileDiffStatus::Deleted,
        ChangeStatus::Deleted => FileDiffStatus::Added,
        other => status_of(other),
    }
}

/// The files that differ from `from` (its base, when `None`) to `to`, by path. Both must have
/// the same base commit: a path neither lists is as in the base on both sides.
pub(crate) fn plan(from: Option<&CheckpointManifest>, to: &CheckpointManifest) -> Vec<Planned> {
    let mut paths: BTreeMap<&str, (Option<&FileChange>, Option<&FileChange>)> = BTreeMap::new();
    for f in from.map(|m| m.files.as_slice()).unwrap_or_default() {
        paths.entry(&f.path).or_default().0 = Some(f);
    }
    for f in &to.files {
        paths.entry(&f.path).or_default().1 = Some(f);
    }
    let mut out = Vec::new();
    for (path, sides) in paths {
        let (status, source) = match sides {
            (None, Some(t)) => (status_of(t.status), Source::ToPatch),
            (Some(f), None) => (reversed(f.status), Source::FromPatchReversed),
            (Some(f), Some(t)) => {
                if f.status == t.status && f.oid == t.oid && f.mode == t.mode {
                    continue;
                }
                match (f.status, t.status) {
                    (_, ChangeStatus::Deleted) => (
                        FileDiffStatus::Deleted,
                        Source::Contents {
                            old: f.sha256.clone(),
                            new: None,
                        },
                    ),
                    (ChangeStatus::Deleted, _) => (
                        FileDiffStatus::Added,
                        Source::Contents {
                            old: None,
                            new: t.sha256.clone(),
                        },
                    ),
                    _ if f.sha256.is_none() || t.sha256.is_none() => (
                        FileDiffStatus::Modified,
                        Source::Nothing("no content stored (a submodule)"),
                    ),
                    _ => {
                        let status = if mode_kind(&f.mode) == mode_kind(&t.mode) {
                            FileDiffStatus::Modified
                        } else {
                            FileDiffStatus::TypeChanged
                        };
                        (
                            status,
                            Source::Contents {
                                old: f.sha256.clone(),
                                new: t.sha256.clone(),
                            },
                        )
                    }
                }
            }
            (None, None) => continue,
        };
        out.push(Planned {
            path: path.to_owned(),
            status,
            source,
        });
    }
    out
}

/// A window of one file's diff text: every line is counted, only whole lines from byte
/// `offset` up to `limit` bytes are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Window {
    offset: usize,
    limit: usize,
    reverse: bool,
    /// Bytes of diff text so far.
    pub(crate) total: usize,
    /// Where `text` starts.
    pub(crate) start: Option<usize>,
    pub(crate) text: String,
    /// A line at or past `offset` did not fit.
    pub(crate) truncated: bool,
    pub(crate) insertions: u64,
    pub(crate) deletions: u64,
}

impl Window {
    /// Keeps up to `limit` bytes from `offset`; `reverse` swaps added and removed lines.
    pub(crate) fn new(offset: usize, limit: usize, reverse: bool) -> Self {
        Self {
            offset,
            limit,
            reverse,
            ..Self::default()
        }
    }

    /// One line of a unified diff's hunks, without its newline.
    pub(crate) fn line(&mut self, line: &str) {
        let mut swapped = String::new();
        let line = if self.reverse {
            reverse_line(line, &mut swapped)
        } else {
            line
        };
        let mut text = String::with_capacity(line.len().min(CHANGES_LINE_BYTES) + 4);
        if line.len() > CHANGES_LINE_BYTES {
            let mut cut = CHANGES_LINE_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            text.push_str(&line[..cut]);
            text.push('…');
        } else {
            text.push_str(line);
        }
        text.push('\n');
        if line.starts_with('+') {
            self.insertions += 1;
        } else if line.starts_with('-') {
            self.deletions += 1;
        }
        let at = self.total;
        self.total += text.len();
        if at < self.offset || self.truncated {
            self.truncated |= at >= self.offset;
            return;
        }
        if self.text.len() + text.len() > self.limit {
            self.truncated = true;
            return;
        }
        self.start.get_or_insert(at);
        self.text.push_str(&text);
    }

    /// Where the kept text starts (the end, when nothing was kept).
    pub(crate) fn starts_at(&self) -> usize {
        self.start.unwrap_or(self.offset.min(self.total))
    }
}

/// `line` with `+` and `-` swapped, and a hunk header's ranges swapped; `buf` holds a rewrite.
fn reverse_line<'a>(line: &'a str, buf: &'a mut String) -> &'a str {
    if let Some(rest) = line.strip_prefix('+') {
        buf.push('-');
        buf.push_str(rest);
        return buf;
    }
    if let Some(rest) = line.strip_prefix('-') {
        buf.push('+');
        buf.push_str(rest);
        return buf;
    }
    if let Some(rest) = line.strip_prefix("@@ -") {
        // `@@ -a,b +c,d @@ context`
        if let Some((old, rest)) = rest.split_once(" +") {
            if let Some((new, tail)) = rest.split_once(" @@") {
                buf.push_str(&format!("@@ -{new} +{old} @@{tail}"));
                return buf;
            }
        }
    }
    line
}

/// What a patch says about one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Section {
    /// The path at the end (the old one for a deletion).
    pub(crate) path: String,
    /// The path at the start, for a rename.
    pub(crate) renamed_from: Option<String>,
    pub(crate) binary: bool,
    pub(crate) window: Window,
}

/// Unquotes a path git wrote in C style (`"a/\303\251 b"`), else returns it as it is.
fn unquote(s: &str) -> String {
    let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
        return s.to_owned();
    };
    let mut out = Vec::with_capacity(inner.len());
    let b = inner.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        match b[i] {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'r' => out.push(b'\r'),
            b'v' => out.push(11),
            b'0'..=b'7' if i + 2 < b.len() => {
                let oct = &inner[i..i + 3];
                out.push(u8::from_str_radix(oct, 8).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `p` without its `a/` or `b/` prefix, or `None` for `/dev/null`.
fn side(p: &str) -> Option<String> {
    let p = unquote(p.trim_end_matches('\t'));
    if p == "/dev/null" {
        return None;
    }
    Some(
        p.strip_prefix("a/")
            .or_else(|| p.strip_prefix("b/"))
            .unwrap_or(&p)
            .to_owned(),
    )
}

/// The path of a `diff --git a/P b/P` line without a rename (an unquoted path with spaces is
/// ambiguous only when the two sides differ, and then git writes `rename` lines).
fn git_line_path(rest: &str) -> String {
    if let Some(quoted) = rest.strip_prefix('"') {
        if let Some(end) = quoted.find("\" ") {
            return side(&rest[..end + 2]).unwrap_or_default();
        }
    }
    let p = rest.len().saturating_sub(5) / 2;
    rest.get(2..2 + p).unwrap_or(rest).to_owned()
}

/// The header lines of one section: its paths, and whether it is binary.
fn read_header(lines: &[String]) -> Section {
    let mut s = Section::default();
    let (mut minus, mut plus, mut from, mut to) = (None, None, None, None);
    for l in lines {
        if let Some(rest) = l.strip_prefix("diff --git ") {
            s.path = git_line_path(rest);
        } else if let Some(p) = l.strip_prefix("rename from ") {
            from = Some(unquote(p));
        } else if let Some(p) = l.strip_prefix("rename to ") {
            to = Some(unquote(p));
        } else if let Some(p) = l.strip_prefix("--- ") {
            minus = side(p);
        } else if let Some(p) = l.strip_prefix("+++ ") {
            plus = side(p);
        } else if l.starts_with("GIT binary patch") || l.starts_with("Binary files ") {
            s.binary = true;
        }
    }
    if let Some(p) = to.or(plus).or(minus) {
        s.path = p;
    }
    s.renamed_from = from;
    s
}

/// Reads a `git diff` patch and returns the sections of the paths in `wanted`, each with a
/// window from its offset of at most its limit, and the shared `budget`; each kept window's
/// bytes are taken from `budget`. A type change (two sections of one path) is one section.
pub(crate) async fn split_patch<R: AsyncBufRead + Unpin>(
    mut r: R,
    wanted: &HashMap<String, (usize, usize)>,
    reverse: bool,
    budget: &mut usize,
) -> std::io::Result<HashMap<String, Section>> {
    let mut out: HashMap<String, Section> = HashMap::new();
    let mut header: Vec<String> = Vec::new();
    // The section being read: its key, once its header ended and it is wanted.
    let mut current: Option<String> = None;
    let mut in_header = false;
    let mut line = Vec::new();
    let finish = |out: &mut HashMap<String, Section>, key: &Option<String>, budget: &mut usize| {
        if let Some(s) = key.as_ref().and_then(|k| out.get(k)) {
            *budget = budget.saturating_sub(s.window.text.len());
        }
    };
    loop {
        line.clear();
        let eof = !read_line(&mut r, &mut line).await?;
        if eof {
            break;
        }
        let l = String::from_utf8_lossy(&line);
        if l.starts_with("diff --git ") {
            if in_header {
                start(&mut out, &header, wanted, reverse, budget);
            }
            finish(&mut out, &current, budget);
            current = None;
            header.clear();
            header.push(l.into_owned());
            in_header = true;
            continue;
        }
        if in_header {
            let body = l.starts_with("@@");
            if header.len() < HEADER_LINES_MAX {
                header.push(l.clone().into_owned());
            }
            if body || l.starts_with("GIT binary patch") || l.starts_with("Binary files ") {
                in_header = false;
                current = start(&mut out, &header, wanted, reverse, budget);
                if body {
                    if let Some(s) = current.as_ref().and_then(|k| out.get_mut(k)) {
                        s.window.line(&l);
                    }
                }
            }
            continue;
        }
        if let Some(s) = current.as_ref().and_then(|k| out.get_mut(k)) {
            if !s.binary {
                s.window.line(&l);
            }
        }
    }
    if in_header {
        start(&mut out, &header, wanted, reverse, budget);
    }
    finish(&mut out, &current, budget);
    Ok(out)
}

/// Begins the section of `header` if it is wanted; returns its key.
fn start(
    out: &mut HashMap<String, Section>,
    header: &[String],
    wanted: &HashMap<String, (usize, usize)>,
    reverse: bool,
    budget: &usize,
) -> Option<String> {
    let mut s = read_header(header);
    let &(offset, limit) = wanted.get(&s.path)?;
    if let Some(prev) = out.get_mut(&s.path) {
        // The second half of a type change: one file, one diff.
        prev.binary |= s.binary;
        return Some(s.path);
    }
    s.window = Window::new(offset, limit.min(*budget), reverse);
    let key = s.path.clone();
    out.insert(key.clone(), s);
    Some(key)
}

/// Reads one line (without its `\n`) into `buf`, keeping at most a few times
/// [`CHANGES_LINE_BYTES`] of it; false at the end of input.
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let keep = CHANGES_LINE_BYTES * 4;
    let mut any = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any);
        }
        any = true;
        let (used, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = keep.saturating_sub(buf.len());
        let content = if done { used - 1 } else { used };
        buf.extend_from_slice(&chunk[..content.min(room)]);
        r.consume(used);
        if done {
            return Ok(true);
        }
    }
}

/// Whether `bytes` look binary (git's rule: a NUL in the first 8000 bytes).
pub(crate) fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8000).any(|&b| b == 0)
}

/// The unified diff (3 lines of context) from `old` to `new` into `window`.
pub(crate) fn content_diff(old: &str, new: &str, window: &mut Window) {
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .deadline(Instant::now() + CONTENT_DIFF_DEADLINE)
        .diff_lines(old, new);
    let unified = diff.unified_diff();
    for hunk in unified.iter_hunks() {
        window.line(&hunk.header().to_string());
        for change in hunk.iter_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Equal => ' ',
                similar::ChangeTag::Delete => '-',
                similar::ChangeTag::Insert => '+',
            };
            let value = change.value();
            window.line(&format!(
                "{sign}{}",
                value.strip_suffix('\n').unwrap_or(value)
            ));
            if change.missing_newline() {
                window.line("\\ No newline at end of file");
            }
        }
    }
}

/// The paths a rename section covers besides its own key: its old path.
pub(crate) fn consumed(sections: &HashMap<String, Section>) -> HashSet<String> {
    sections
        .values()
        .filter_map(|s| s.renamed_from.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use moor_protocol::checkpoint::{BlobRef, CheckpointReason, DiffStat};

    use super::*;

    const PATCH: &str = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\ndiff --git a/bin.png b/bin.png\nnew file mode 100644\nindex 0..3\nGIT binary patch\nliteral 4\nLcmZQzWMT#Y01f~L\n\nliteral 0\nHcmV?d00001\n\ndiff --git a/old name.txt b/new name.txt\nsimilarity index 90%\nrename from old name.txt\nrename to new name.txt\n--- a/old name.txt\n+++ b/new name.txt\n@@ -1 +1 @@\n-x\n+y\ndiff --git \"a/caf\\303\\251.txt\" \"b/caf\\303\\251.txt\"\ndeleted file mode 100644\n--- \"a/caf\\303\\251.txt\"\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n";

    fn all(paths: &[&str], limit: usize) -> HashMap<String, (usize, usize)> {
        paths
            .iter()
            .map(|p| ((*p).to_owned(), (0, limit)))
            .collect()
    }

    #[tokio::test]
    async fn a_patch_splits_into_files_with_their_paths_and_counts() {
        // arrange
        let wanted = all(&["a.txt", "bin.png", "new name.txt", "café.txt"], 1000);
        let mut budget = 10_000;
        // act
        let got = split_patch(PATCH.as_bytes(), &wanted, false, &mut budget)
            .await
            .unwrap();
        // assert
        assert_eq!(got.len(), 4);
        let a = &got["a.txt"];
        assert_eq!(a.window.text, "@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n");
        assert_eq!((a.window.insertions, a.window.deletions), (1, 1));
        assert!(got["bin.png"].binary);
        assert!(got["bin.png"].window.text.is_empty());
        assert_eq!(
            got["new name.txt"].renamed_from.as_deref(),
            Some("old name.txt")
        );
        assert_eq!(got["café.txt"].window.deletions, 1);
        assert_eq!(budget, 10_000 - (a.window.text.len() + 18 + 20));
    }

    #[tokio::test]
    async fn a_window_pages_by_whole_lines_and_a_reversed_section_swaps_sides() {
        let wanted = all(&["a.txt"], 21);
        let mut budget = 1000;
        let got = split_patch(PATCH.as_bytes(), &wanted, false, &mut budget)
            .await
            .unwrap();
        let w = &got["a.txt"].window;
        assert_eq!(w.text, "@@ -1,2 +1,2 @@\n one\n");
        assert!(w.truncated);
        assert_eq!(w.total, 31);
        // the next page starts where the first stopped
        let wanted: HashMap<_, _> = [("a.txt".to_owned(), (w.text.len(), 20))].into();
        let next = split_patch(PATCH.as_bytes(), &wanted, false, &mut budget)
            .await
            .unwrap();
        assert_eq!(next["a.txt"].window.text, "-two\n+TWO\n");
        assert_eq!(next["a.txt"].window.starts_at(), 21);
        assert!(!next["a.txt"].window.truncated);
        let back = split_patch(PATCH.as_bytes(), &all(&["a.txt"], 100), true, &mut budget)
            .await
            .unwrap();
        assert_eq!(
            back["a.txt"].window.text,
            "@@ -1,2 +1,2 @@\n one\n+two\n-TWO\n"
        );
    }

    #[test]
    fn contents_diff_into_unified_hunks() {
        let mut w = Window::new(0, 10_000, false);
        content_diff("a\nb\nc\n", "a\nB\nc\nd", &mut w);
        assert_eq!(
            w.text,
            "@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d\n\\ No newline at end of file\n"
        );
        assert_eq!((w.insertions, w.deletions), (2, 1));
    }

    fn change(path: &str, status: ChangeStatus, oid: &str) -> FileChange {
        FileChange {
            path: path.into(),
            status,
            old_mode: None,
            mode: (status != ChangeStatus::Deleted).then(|| "100644".into()),
            old_oid: None,
            oid: (status != ChangeStatus::Deleted).then(|| oid.into()),
            sha256: (status != ChangeStatus::Deleted).then(|| format!("sha-{oid}")),
            size: Some(1),
            insertions: None,
            deletions: None,
        }
    }

    fn manifest(files: Vec<FileChange>) -> CheckpointManifest {
        CheckpointManifest {
            id: "0123456789abcdef".into(),
            created_at: 1,
            reason: CheckpointReason::Tool,
            base: Some("base".into()),
            branch: None,
            tree: "t".into(),
            commit: "c".into(),
            commit_object: String::new(),
            object_format: "sha1".into(),
            repo_state: None,
            work_tree: "/w".into(),
            files,
            skipped: vec![],
            diffstat: DiffStat::default(),
            patch: BlobRef {
                sha256: "p".into(),
                size: 1,
            },
        }
    }

    #[test]
    fn a_plan_takes_each_file_from_where_it_changed() {
        use ChangeStatus::*;
        let from = manifest(vec![
            change("same", Modified, "1"),
            change("both", Modified, "1"),
            change("reverted", Added, "1"),
            change("removed", Modified, "1"),
        ]);
        let to = manifest(vec![
            change("same", Modified, "1"),
            change("both", Modified, "2"),
            change("new", Added, "1"),
            change("removed", Deleted, ""),
        ]);
        let got = plan(Some(&from), &to);
        let summary: Vec<_> = got
            .iter()
            .map(|p| (p.path.as_str(), p.status, p.source.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "both",
                    FileDiffStatus::Modified,
                    Source::Contents {
                        old: Some("sha-1".into()),
                        new: Some("sha-2".into())
                    }
                ),
                ("new", FileDiffStatus::Added, Source::ToPatch),
                (
                    "removed",
                    FileDiffStatus::Deleted,
                    Source::Contents {
                        old: Some("sha-1".into()),
                        new: None
                    }
                ),
                (
                    "reverted",
                    FileDiffStatus::Deleted,
                    Source::FromPatchReversed
                ),
            ]
        );
        assert_eq!(plan(None, &to).len(), 4);
    }
}

//! Checkpoints of real git repositories: what they capture, what they never touch, and
//! restores (in place, from a manifest into a fresh clone, refused when unsafe).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use moor_e2e::util::{fresh_clone, git, git_state};
use moor_protocol::checkpoint::{BlobRef, ChangeStatus, CheckpointReason};

use super::commit::list_ids;
use super::describe::{cat_blobs, describe, Described};
use super::git::{ProbeError, Repo};
use super::restore::{import, restore, Restored, Target};
use super::snapshot::{take, TakeOptions, Taken};
use super::CheckpointError;

fn write(dir: &Path, path: &str, content: impl AsRef<[u8]>) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, content).unwrap();
}

fn chmod(dir: &Path, path: &str, mode: u32) {
    std::fs::set_permissions(dir.join(path), std::fs::Permissions::from_mode(mode)).unwrap();
}

fn binary() -> Vec<u8> {
    (0..4096u32).map(|i| (i * 7 % 256) as u8).collect()
}

/// A repository with one commit of assorted files.
fn repo_with_history() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(d, ".gitignore", "*.log\ntarget/\n");
    write(d, "modified.txt", "one\ntwo\nthree\n");
    write(d, "deleted.txt", "bye\n");
    write(d, "old-name.txt", "moving house\n");
    write(d, "script.sh", "#!/bin/sh\necho hi\n");
    write(d, "image.bin", binary());
    write(d, "src/lib.rs", "pub fn f() {}\n");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "base"]);
    dir
}

/// Every change kind at once, plus ignored files.
fn change_everything(d: &Path) {
    write(d, "modified.txt", "one\n2\nthree\nfour\n");
    std::fs::remove_file(d.join("deleted.txt")).unwrap();
    std::fs::rename(d.join("old-name.txt"), d.join("new-name.txt")).unwrap();
    chmod(d, "script.sh", 0o755);
    let mut bin = binary();
    bin[100] ^= 0xff;
    write(d, "image.bin", bin);
    write(d, "added/deep/new.rs", "fn main() {}\n");
    symlink("src/lib.rs", d.join("link-to-lib")).unwrap();
    write(d, "debug.log", "ignored\n");
    write(d, "target/out.o", "ignored too\n");
}

fn opts(reason: CheckpointReason) -> TakeOptions {
    TakeOptions {
        reason,
        max_file_bytes: 1024 * 1024,
        session: "test".into(),
        only_if_changed: true,
        last_tree: None,
    }
}

/// Restore `id` over the work tree, as `moor checkpoint restore` does without `--force`.
fn restore_in_place(repo: &Repo, id: &str) -> Result<Restored, CheckpointError> {
    restore(
        repo,
        id,
        &Target::InPlace { force: false },
        opts(CheckpointReason::Manual),
    )
}

fn new_checkpoint(repo: &Repo, o: &TakeOptions) -> Described {
    match take(repo, o).unwrap() {
        Taken::New(d) => *d,
        Taken::Unchanged { .. } => panic!("expected a new checkpoint"),
    }
}

/// Path → (git mode, content) of the files in a work tree, without `.git` and `skip`.
fn work_files(root: &Path, skip: &[&str]) -> BTreeMap<String, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    walk(root, root, skip, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<String, (String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        if rel == ".git"
            || skip
                .iter()
                .any(|s| rel == *s || rel.starts_with(&format!("{s}/")))
        {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            out.insert(
                rel,
                ("120000".into(), target.display().to_string().into_bytes()),
            );
        } else if meta.is_dir() {
            walk(root, &path, skip, out);
        } else {
            let mode = if meta.permissions().mode() & 0o111 != 0 {
                "100755"
            } else {
                "100644"
            };
            out.insert(rel, (mode.into(), std::fs::read(&path).unwrap()));
        }
    }
}

/// Path → (mode, content) of a commit's tree.
fn tree_files(repo: &Repo, commit: &str) -> BTreeMap<String, (String, Vec<u8>)> {
    let listing = repo
        .git()
        .args(["ls-tree", "-r", "-z", commit])
        .run()
        .unwrap();
    let mut entries = Vec::new();
    for rec in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rec = String::from_utf8_lossy(rec);
        let (head, path) = rec.split_once('\t').unwrap();
        let f: Vec<&str> = head.split(' ').collect();
        entries.push((path.to_owned(), f[0].to_owned(), f[2].to_owned()));
    }
    let oids: Vec<String> = entries.iter().map(|e| e.2.clone()).collect();
    let mut content = HashMap::new();
    cat_blobs(repo, &oids, |oid, bytes| {
        content.insert(oid.to_owned(), bytes.to_vec());
        Ok(())
    })
    .unwrap();
    entries
        .into_iter()
        .map(|(p, m, o)| (p, (m, content[&o].clone())))
        .collect()
}

#[test]
fn a_checkpoint_captures_every_kind_of_change_and_skips_ignored_files() {
    // arrange
    let dir = repo_with_history();
    let d = dir.path();
    change_everything(d);
    let repo = Repo::probe(&d.join("src")).unwrap();
    // act
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    // assert: the tree is the work tree minus ignored files, modes and symlinks included
    let m = &cp.manifest;
    assert_eq!(
        tree_files(&repo, &m.commit),
        work_files(d, &["debug.log", "target"])
    );
    let status: BTreeMap<&str, ChangeStatus> = m
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status))
        .collect();
    assert_eq!(status["modified.txt"], ChangeStatus::Modified);
    assert_eq!(status["deleted.txt"], ChangeStatus::Deleted);
    assert_eq!(status["old-name.txt"], ChangeStatus::Deleted);
    assert_eq!(status["new-name.txt"], ChangeStatus::Added);
    assert_eq!(status["script.sh"], ChangeStatus::Modified);
    assert_eq!(status["image.bin"], ChangeStatus::Modified);
    assert_eq!(status["added/deep/new.rs"], ChangeStatus::Added);
    assert_eq!(status["link-to-lib"], ChangeStatus::Added);
    assert!(!status.contains_key("debug.log") && !status.contains_key("target/out.o"));
    let script = m.files.iter().find(|f| f.path == "script.sh").unwrap();
    assert_eq!(
        (script.old_mode.as_deref(), script.mode.as_deref()),
        (Some("100644"), Some("100755"))
    );
    let image = m.files.iter().find(|f| f.path == "image.bin").unwrap();
    assert_eq!(image.insertions, None, "binary files have no line counts");
    assert_eq!(
        m.base.as_deref(),
        Some(git(d, &["rev-parse", "HEAD"]).trim())
    );
    assert_eq!(m.branch.as_deref(), Some("main"));
    let patch = String::from_utf8_lossy(&cp.patch);
    assert!(patch.contains("rename from old-name.txt"), "{patch}");
    assert!(patch.contains("GIT binary patch"));
    assert_eq!(list_ids(&repo).unwrap(), vec![m.id.clone()]);
}

#[test]
fn a_checkpoint_leaves_index_head_branches_and_stash_byte_identical() {
    // arrange: a stash, a second branch, staged changes of the user's own, then more edits
    let dir = repo_with_history();
    let d = dir.path();
    write(d, "modified.txt", "stashed work\n");
    git(d, &["stash", "push", "-q", "-m", "keep me"]);
    git(d, &["branch", "feature"]);
    write(d, "modified.txt", "staged version\n");
    write(d, "staged-new.txt", "staged new file\n");
    git(d, &["add", "modified.txt", "staged-new.txt"]);
    change_everything(d);
    let before = git_state(d);
    let staged_before = git(d, &["diff", "--cached", "--name-status"]);
    let repo = Repo::probe(d).unwrap();
    // act: twice, so the second one starts from the first's state too
    let first = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    write(d, "later.txt", "later\n");
    let mut o = opts(CheckpointReason::Interval);
    o.last_tree = Some(first.manifest.tree.clone());
    let second = new_checkpoint(&repo, &o);
    // assert
    assert_eq!(git_state(d), before, "the user's git state changed");
    assert_eq!(
        git(d, &["diff", "--cached", "--name-status"]),
        staged_before
    );
    assert_eq!(git(d, &["stash", "list"]).lines().count(), 1);
    assert_eq!(
        tree_files(&repo, &second.manifest.commit),
        work_files(d, &["debug.log", "target"])
    );
    // The work tree's content wins over the staged version.
    let files = tree_files(&repo, &first.manifest.commit);
    assert_eq!(files["modified.txt"].1, b"one\n2\nthree\nfour\n");
    assert!(files.contains_key("staged-new.txt"));
}

#[test]
fn nothing_changed_means_no_new_checkpoint() {
    let dir = repo_with_history();
    let repo = Repo::probe(dir.path()).unwrap();
    // A clean work tree equals its base: nothing to protect.
    assert!(matches!(
        take(&repo, &opts(CheckpointReason::Start)).unwrap(),
        Taken::Unchanged { .. }
    ));
    write(dir.path(), "a.txt", "a");
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    let mut o = opts(CheckpointReason::Interval);
    o.last_tree = Some(cp.manifest.tree);
    assert!(matches!(take(&repo, &o).unwrap(), Taken::Unchanged { .. }));
    assert_eq!(list_ids(&repo).unwrap().len(), 1);
}

#[test]
fn files_over_the_size_cap_are_listed_and_keep_their_base_version() {
    let dir = repo_with_history();
    let d = dir.path();
    write(d, "modified.txt", vec![b'x'; 5000]);
    write(d, "huge-new.dat", vec![b'y'; 5000]);
    write(d, "small.txt", "small\n");
    let repo = Repo::probe(d).unwrap();
    let mut o = opts(CheckpointReason::Tool);
    o.max_file_bytes = 1000;
    let cp = new_checkpoint(&repo, &o);
    let skipped: Vec<&str> = cp
        .manifest
        .skipped
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(skipped, ["huge-new.dat", "modified.txt"]);
    assert_eq!(cp.manifest.skipped[0].size, Some(5000));
    let files = tree_files(&repo, &cp.manifest.commit);
    assert_eq!(files["modified.txt"].1, b"one\ntwo\nthree\n");
    assert!(!files.contains_key("huge-new.dat"));
    assert!(files.contains_key("small.txt"));
    assert_eq!(cp.manifest.summary().skipped_total, 2);
}

#[test]
fn a_repository_without_commits_is_checkpointed_against_the_empty_tree() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    write(dir.path(), "first.txt", "first\n");
    let repo = Repo::probe(dir.path()).unwrap();
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    assert_eq!(cp.manifest.base, None);
    assert_eq!(cp.manifest.files.len(), 1);
    assert!(
        !dir.path().join(".git/index").exists(),
        "no index was created"
    );
}

#[test]
fn plain_directories_and_git_dirs_are_refused_clearly() {
    let plain = tempfile::tempdir().unwrap();
    let err = Repo::probe(plain.path()).unwrap_err();
    assert!(matches!(err, ProbeError::NotARepo(_)), "{err}");
    assert!(err.to_string().contains("is not in a git work tree"));
    let dir = repo_with_history();
    let err = Repo::probe(&dir.path().join(".git")).unwrap_err();
    assert!(matches!(err, ProbeError::NotAWorkTree(_)), "{err}");
}

#[test]
fn restoring_in_place_saves_the_current_state_first() {
    // arrange
    let dir = repo_with_history();
    let d = dir.path();
    change_everything(d);
    let repo = Repo::probe(d).unwrap();
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    let wanted = work_files(d, &[]);
    // later work that the restore must not lose
    write(d, "modified.txt", "later work\n");
    write(d, "deleted.txt", "back again\n");
    std::fs::remove_file(d.join("added/deep/new.rs")).unwrap();
    chmod(d, "script.sh", 0o644);
    let later = work_files(d, &[]);
    let before = git_state(d);
    // act
    let done = restore_in_place(&repo, &cp.manifest.id).unwrap();
    // assert
    assert_eq!(work_files(d, &[]), wanted);
    assert_eq!(git_state(d), before);
    let safety = done.safety.unwrap();
    let saved = tree_files(&repo, &describe(&repo, &safety).unwrap().manifest.commit);
    let later_tracked: BTreeMap<_, _> = later
        .into_iter()
        .filter(|(p, _)| p != "debug.log" && !p.starts_with("target/"))
        .collect();
    assert_eq!(
        saved, later_tracked,
        "the safety checkpoint holds the state before the restore"
    );
}

#[test]
fn restoring_refuses_to_overwrite_an_ignored_file() {
    let dir = repo_with_history();
    let d = dir.path();
    write(d, "notes.txt", "checkpointed\n");
    let repo = Repo::probe(d).unwrap();
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    std::fs::remove_file(d.join("notes.txt")).unwrap();
    write(d, ".gitignore", "*.log\ntarget/\nnotes.txt\n");
    write(d, "notes.txt", "precious, ignored\n");
    let err = restore_in_place(&repo, &cp.manifest.id).unwrap_err();
    assert!(matches!(err, CheckpointError::Unsafe(_)), "{err}");
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "precious, ignored\n"
    );
}

#[test]
fn an_unknown_checkpoint_id_is_a_clear_error() {
    let dir = repo_with_history();
    let repo = Repo::probe(dir.path()).unwrap();
    let err = restore_in_place(&repo, "0123456789abcdef").unwrap_err();
    assert_eq!(err.to_string(), "no checkpoint 0123456789abcdef");
    assert!(matches!(
        describe(&repo, "0123456789abcdef"),
        Err(CheckpointError::NotFound(_))
    ));
}

#[test]
fn mid_merge_a_checkpoint_is_taken_without_touching_the_merge_and_a_restore_is_refused() {
    // arrange: a conflicted merge
    let dir = repo_with_history();
    let d = dir.path();
    git(d, &["checkout", "-q", "-b", "other"]);
    write(d, "modified.txt", "theirs\n");
    git(d, &["commit", "-q", "-am", "theirs"]);
    git(d, &["checkout", "-q", "main"]);
    write(d, "modified.txt", "ours\n");
    git(d, &["commit", "-q", "-am", "ours"]);
    let merge = Command::new("git")
        .args(["merge", "other"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!merge.status.success(), "the merge conflicts");
    let repo = Repo::probe(d).unwrap();
    let before = git_state(d);
    assert!(before.contains_key("MERGE_HEAD"));
    // act
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    // assert: the conflicted file is captured as it is on disk; the merge is untouched
    assert_eq!(cp.manifest.repo_state.as_deref(), Some("merge"));
    let files = tree_files(&repo, &cp.manifest.commit);
    assert!(String::from_utf8_lossy(&files["modified.txt"].1).contains("<<<<<<<"));
    assert_eq!(git_state(d), before);
    let on_disk = work_files(d, &[]);
    let err = restore_in_place(&repo, &cp.manifest.id).unwrap_err();
    assert!(matches!(err, CheckpointError::Busy { .. }), "{err}");
    assert!(err.to_string().contains("a merge is in progress"), "{err}");
    assert_eq!(work_files(d, &[]), on_disk, "nothing was overwritten");
    assert_eq!(git_state(d), before);
    // Onto a new branch is still possible.
    restore(
        &repo,
        &cp.manifest.id,
        &Target::Branch("rescued".into()),
        opts(CheckpointReason::Manual),
    )
    .unwrap();
    assert_eq!(git(d, &["rev-parse", "rescued"]).trim(), cp.manifest.commit);
}

/// The blobs a server would hold for `d`.
fn blobs_of(repo: &Repo, d: &Described) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    out.insert(d.manifest.patch.sha256.clone(), d.patch.clone());
    let oids: Vec<String> = d
        .manifest
        .files
        .iter()
        .filter_map(|f| f.oid.clone())
        .collect();
    let by_oid: HashMap<String, String> = d
        .manifest
        .files
        .iter()
        .filter_map(|f| Some((f.oid.clone()?, f.sha256.clone()?)))
        .collect();
    cat_blobs(repo, &oids, |oid, bytes| {
        out.insert(by_oid[oid].clone(), bytes.to_vec());
        Ok(())
    })
    .unwrap();
    out
}

/// A repository with every kind of change, its checkpoint, and the blobs a server holds for it.
fn checkpoint_with_blobs() -> (tempfile::TempDir, Described, HashMap<String, Vec<u8>>) {
    let origin = repo_with_history();
    change_everything(origin.path());
    let repo = Repo::probe(origin.path()).unwrap();
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    let blobs = blobs_of(&repo, &cp);
    (origin, cp, blobs)
}

#[test]
fn a_fresh_clone_rebuilds_the_checkpoint_from_its_manifest_and_blobs_alone() {
    // arrange
    let (origin, cp, blobs) = checkpoint_with_blobs();
    let (_keep, clone) = fresh_clone(origin.path());
    let there = Repo::probe(&clone).unwrap();
    assert!(
        !there.has_object(&cp.manifest.commit).unwrap(),
        "the clone starts without it"
    );
    // act
    let commit = import(&there, &cp.manifest, |b: &BlobRef| {
        Ok(blobs[&b.sha256].clone())
    })
    .unwrap();
    restore_in_place(&there, &cp.manifest.id).unwrap();
    // assert
    assert!(!there.has_object(&cp.manifest.commit).unwrap() || commit == cp.manifest.commit);
    assert_eq!(commit, cp.manifest.commit, "the same commit, byte for byte");
    assert_eq!(
        work_files(&clone, &[]),
        work_files(origin.path(), &["debug.log", "target"])
    );
}

#[test]
fn a_corrupted_blob_is_refused_and_nothing_is_written() {
    let (origin, cp, mut blobs) = checkpoint_with_blobs();
    let victim = cp
        .manifest
        .files
        .iter()
        .find(|f| f.path == "modified.txt")
        .unwrap();
    blobs
        .get_mut(victim.sha256.as_ref().unwrap())
        .unwrap()
        .push(b'!');
    let (_keep, clone) = fresh_clone(origin.path());
    let there = Repo::probe(&clone).unwrap();
    let on_disk = work_files(&clone, &[]);
    let err = import(&there, &cp.manifest, |b: &BlobRef| {
        Ok(blobs[&b.sha256].clone())
    })
    .unwrap_err();
    assert!(matches!(err, CheckpointError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("modified.txt"), "{err}");
    assert!(
        list_ids(&there).unwrap().is_empty(),
        "no ref for a corrupt checkpoint"
    );
    assert_eq!(work_files(&clone, &[]), on_disk);
}

#[test]
fn a_clone_without_the_base_commit_is_told_to_fetch_it() {
    let origin = repo_with_history();
    let (_keep, clone) = fresh_clone(origin.path());
    write(origin.path(), "x.txt", "x");
    git(origin.path(), &["add", "x.txt"]);
    git(origin.path(), &["commit", "-q", "-m", "unpushed"]);
    write(origin.path(), "y.txt", "y");
    let repo = Repo::probe(origin.path()).unwrap();
    let cp = new_checkpoint(&repo, &opts(CheckpointReason::Tool));
    let blobs = blobs_of(&repo, &cp);
    let there = Repo::probe(&clone).unwrap();
    let err = import(&there, &cp.manifest, |b: &BlobRef| {
        Ok(blobs[&b.sha256].clone())
    })
    .unwrap_err();
    assert!(matches!(err, CheckpointError::BaseMissing(_)), "{err}");
}

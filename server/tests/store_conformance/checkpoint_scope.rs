//! Stories of checkpoints and blobs scoped by access: a checkpoint id belongs to its session,
//! and a blob is known to whoever uploaded it and to the members of sessions whose checkpoints
//! name it.

use moor_server::store::{CheckpointRow, Role, StoreError, Stores};

use super::Db;

fn row(id: &str, session: moor_protocol::SessionId, manifest: &str) -> CheckpointRow {
    CheckpointRow {
        id: id.into(),
        session,
        created_at: 1,
        summary: "{}".into(),
        manifest: manifest.into(),
        blobs: vec![format!("blob of {manifest}")],
    }
}

pub async fn checkpoint_ids_are_scoped_by_session(db: Db) {
    // arrange
    let Stores {
        log, checkpoints, ..
    } = db.open("a").await;
    let mine = log.open_session("mine", None).await.unwrap().id;
    let theirs = log.open_session("theirs", None).await.unwrap().id;
    let id = "00000000000000aa";

    // act: they take the id first, with their own manifest; then mine arrives.
    let taken = checkpoints
        .save_checkpoint(&row(id, theirs, "theirs"))
        .await
        .unwrap();
    let stored = checkpoints
        .save_checkpoint(&row(id, mine, "mine"))
        .await
        .unwrap();
    let retried = checkpoints
        .save_checkpoint(&row(id, mine, "mine"))
        .await
        .unwrap();
    let changed = checkpoints.save_checkpoint(&row(id, mine, "other")).await;

    // assert
    assert!(
        taken && stored,
        "the same id in two sessions is two checkpoints"
    );
    assert!(!retried);
    assert!(
        matches!(changed, Err(StoreError::Conflict(_))),
        "{changed:?}"
    );
    assert_eq!(
        checkpoints.checkpoint(mine, id).await.unwrap().manifest,
        "mine"
    );
    assert_eq!(
        checkpoints.checkpoint(theirs, id).await.unwrap().manifest,
        "theirs"
    );
    let mut both = vec![mine, theirs];
    both.sort();
    let mut holding = checkpoints.checkpoint_sessions(id).await.unwrap();
    holding.sort();
    assert_eq!(holding, both);
    assert!(checkpoints
        .checkpoint_sessions("00000000000000bb")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        checkpoints.blob_sessions("blob of mine").await.unwrap(),
        [mine],
        "each checkpoint's blobs are recorded under its own session"
    );
    assert_eq!(
        checkpoints.blob_sessions("blob of theirs").await.unwrap(),
        [theirs]
    );
}

pub async fn blobs_are_known_to_their_uploaders_and_to_members(db: Db) {
    // arrange
    let Stores {
        log,
        checkpoints,
        access,
        ..
    } = db.open("a").await;
    let s = log.open_session("shared", None).await.unwrap().id;
    access.set_member(s, "viv", Role::Viewer).await.unwrap();
    checkpoints
        .save_checkpoint(&row("00000000000000cc", s, "named"))
        .await
        .unwrap();
    let asked: Vec<String> = ["sent by ann", "blob of named", "nobody's"]
        .map(String::from)
        .to_vec();

    // act
    checkpoints
        .record_blob_upload("sent by ann", "ann", 100, 1)
        .await
        .unwrap();
    checkpoints
        .record_blob_upload("sent by ann", "ann", 999, 2)
        .await
        .unwrap();
    checkpoints
        .record_blob_upload("also by ann", "ann", 20, 3)
        .await
        .unwrap();
    let known = |who: &'static str| {
        let checkpoints = checkpoints.clone();
        let asked = asked.clone();
        async move {
            let mut k = checkpoints.blobs_known_to(who, &asked).await.unwrap();
            k.sort();
            k
        }
    };

    // assert
    assert_eq!(known("ann").await, ["sent by ann"], "what ann uploaded");
    assert_eq!(
        known("viv").await,
        ["blob of named"],
        "what a checkpoint of viv's session names"
    );
    assert!(known("eve").await.is_empty(), "a stranger knows nothing");
    assert_eq!(
        checkpoints.uploaded_blob_bytes("ann").await.unwrap(),
        120,
        "each blob once, at its first recorded size"
    );
    assert_eq!(checkpoints.uploaded_blob_bytes("eve").await.unwrap(), 0);
}

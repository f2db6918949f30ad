//! Group appends: several sessions' batches in one transaction, each part with the same
//! outcomes a single append would give it, and other nodes told of each session's range.

use moor_protocol::{ProducerId, Seq, SessionId};
use moor_server::store::{Appended, IdemKey, Notice, StoreError};

use super::stories::{all, next, output, produced, stored_seq};
use super::Db;

/// Sessions in the group.
const SESSIONS: usize = 40;

pub async fn a_group_append_commits_many_sessions_in_one_transaction(db: Db) {
    // arrange: 40 sessions with a producer each (one already holding 2 entries), an ended
    // session, and another node listening when there are nodes
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let mut sessions = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        let s = a
            .log
            .open_session(&format!("group-{i}"), None)
            .await
            .unwrap()
            .id;
        sessions.push((s, ProducerId::new()));
    }
    let (s0, p0) = sessions[0];
    a.log
        .append(s0, vec![produced(p0, 1, "a"), produced(p0, 2, "b")])
        .await
        .unwrap();
    let ended = a.log.open_session("group-ended", None).await.unwrap().id;
    a.log.end_session(ended, 1).await.unwrap();
    let mut feed = b.cluster.as_deref().map(|c| c.feed());
    if let Some(feed) = feed.as_mut() {
        assert_eq!(next(feed).await, Notice::Resync);
    }
    let before = a.log.append_transactions();

    // act: one group: every session's next two entries (session 0 replays its 2nd entry
    // first), an unknown session, the ended session's new work, and session 1 named twice
    let mut group: Vec<_> = sessions
        .iter()
        .map(|&(s, p)| {
            let mark = if s == s0 { 2 } else { 0 };
            let mut batch = vec![produced(p, mark + 1, "x"), produced(p, mark + 2, "y")];
            if s == s0 {
                batch.insert(0, produced(p, 2, "b"));
            }
            (s, batch)
        })
        .collect();
    let unknown = SessionId::new();
    group.push((unknown, vec![output("u", IdemKey::None)]));
    group.push((ended, vec![produced(ProducerId::new(), 1, "late")]));
    let (s1, p1) = sessions[1];
    group.push((s1, vec![produced(p1, 3, "z"), produced(p1, 5, "gap")]));
    let results = a.log.append_group(group).await.unwrap();

    // assert: one transaction; every known session's part as a single append would be
    assert_eq!(
        a.log.append_transactions(),
        before + 1,
        "one transaction for the group"
    );
    assert_eq!(results.len(), SESSIONS + 3);
    for (i, &(s, _)) in sessions.iter().enumerate() {
        let outcomes = results[i].as_ref().unwrap();
        let seqs: Vec<Seq> = outcomes
            .iter()
            .filter(|o| matches!(o, Appended::Stored(_)))
            .map(stored_seq)
            .collect();
        let expected = if s == s0 {
            vec![Seq(3), Seq(4)]
        } else {
            vec![Seq(1), Seq(2)]
        };
        assert_eq!(seqs, expected, "session {i}");
        if s == s0 {
            assert_eq!(outcomes[0], Appended::Duplicate(Seq(2)));
        }
    }
    assert!(matches!(results[SESSIONS], Err(StoreError::NotFound)));
    assert!(matches!(
        results[SESSIONS + 1],
        Err(StoreError::SessionEnded)
    ));
    let again = results[SESSIONS + 2].as_ref().unwrap();
    assert_eq!(
        stored_seq(&again[0]),
        Seq(3),
        "a session named twice continues"
    );
    assert_eq!(
        again[1],
        Appended::Gap {
            expected: 4,
            got: 5
        }
    );

    // assert: read back contiguous, marks saved, nothing for the refused parts
    for (i, &(s, p)) in sessions.iter().enumerate() {
        let seqs: Vec<u64> = all(&*a.log, s).await.iter().map(|e| e.seq.0).collect();
        let n = if s == s0 {
            4
        } else if s == s1 {
            3
        } else {
            2
        };
        assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "session {i}");
        let mark = a.log.producer_mark(s, p).await.unwrap();
        assert_eq!(
            mark,
            if s == s0 {
                4
            } else if s == s1 {
                3
            } else {
                2
            }
        );
    }
    assert!(all(&*a.log, ended).await.is_empty());

    // assert: another node hears one range per session that got entries
    if let Some(feed) = feed.as_mut() {
        let mut heard = Vec::with_capacity(SESSIONS);
        for _ in 0..SESSIONS {
            match next(feed).await {
                Notice::Entries {
                    session,
                    first,
                    last,
                } => heard.push((session, first, last)),
                other => panic!("expected a range, got {other:?}"),
            }
        }
        heard.sort_by_key(|h| h.0);
        let mut expected: Vec<_> = sessions
            .iter()
            .map(|&(s, _)| match s {
                s if s == s0 => (s, Seq(3), Seq(4)),
                s if s == s1 => (s, Seq(1), Seq(3)),
                s => (s, Seq(1), Seq(2)),
            })
            .collect();
        expected.sort_by_key(|h| h.0);
        assert_eq!(heard, expected);
    }
}

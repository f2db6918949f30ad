//! Stories about what one query may cost: session lists by membership and bounded in count,
//! pages of a log bounded in bytes.

use moor_protocol::bridge::AgentInfo;
use moor_protocol::{kinds, now_ms, Seq};
use moor_server::store::{
    read_page, Append, IdemKey, PageFit, PageLimit, Range, Role, ENTRY_OVERHEAD_BYTES,
    MAX_LISTED_AGENT_BYTES,
};
use serde_json::json;

use super::Db;

pub async fn session_lists_hold_the_members_sessions_only_newest_first_and_bounded(db: Db) {
    let store = db.open("a").await;
    let (log, access) = (&store.log, &store.access);
    let small = AgentInfo {
        command: vec!["agent".into()],
        ..Default::default()
    };
    // Stored before the handshake bounded it: left out of lists rather than read for each.
    let huge = AgentInfo {
        command: vec!["x".repeat(MAX_LISTED_AGENT_BYTES + 1)],
        ..Default::default()
    };
    let mut ids = Vec::new();
    for (i, name) in ["one", "two", "three", "theirs"].into_iter().enumerate() {
        let agent = if name == "two" { &huge } else { &small };
        let s = log.open_session(name, Some(agent)).await.unwrap();
        // Activity one second apart, so the newest is the last.
        let out = Append {
            ts: now_ms() + 1000 * i as i64,
            kind: kinds::AGENT_OUTPUT.into(),
            author: kinds::AUTHOR_BRIDGE.into(),
            payload: json!({"text": name}).into(),
            key: IdemKey::None,
        };
        log.append(s.id, vec![out]).await.unwrap();
        ids.push(s.id);
    }
    access.set_member(ids[0], "ann", Role::Owner).await.unwrap();
    access
        .set_member(ids[1], "ann", Role::Viewer)
        .await
        .unwrap();
    access
        .set_member(ids[2], "ann", Role::Controller)
        .await
        .unwrap();
    access.set_member(ids[3], "bob", Role::Owner).await.unwrap();

    let anns = log.list_sessions(Some("ann"), 10).await.unwrap();
    let named: Vec<(&str, Role)> = anns.iter().map(|(s, r)| (s.name.as_str(), *r)).collect();
    assert_eq!(
        named,
        [
            ("three", Role::Controller),
            ("two", Role::Viewer),
            ("one", Role::Owner)
        ],
        "ann's sessions only, newest activity first, with her role"
    );
    assert_eq!(anns[2].0.agent.as_ref(), Some(&small));
    assert_eq!(
        anns[1].0.agent, None,
        "an oversized stored agent is left out"
    );
    let first: Vec<String> = log
        .list_sessions(Some("ann"), 2)
        .await
        .unwrap()
        .into_iter()
        .map(|(s, _)| s.name)
        .collect();
    assert_eq!(first, ["three", "two"], "the limit keeps the newest");
    assert!(log
        .list_sessions(Some("carl"), 10)
        .await
        .unwrap()
        .is_empty());
    let all = log.list_sessions(None, 10).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.iter().all(|(_, r)| *r == Role::Owner));
}

pub async fn pages_stop_at_their_byte_bound_but_always_hold_one_entry(db: Db) {
    let store = db.open("a").await;
    let log = &store.log;
    let s = log.open_session("big", None).await.unwrap().id;
    // Payloads of about 10 KB, then one of 100 KB, then small ones.
    let text = |n: usize, i: usize| format!("{i:04}{}", "x".repeat(n));
    let batch: Vec<Append> = (0..10)
        .map(|i| text(10_000, i))
        .chain([text(100_000, 10)])
        .chain((11..15).map(|i| text(10, i)))
        .map(|t| Append {
            ts: now_ms(),
            kind: kinds::AGENT_OUTPUT.into(),
            author: kinds::AUTHOR_BRIDGE.into(),
            payload: json!({"text": t}).into(),
            key: IdemKey::None,
        })
        .collect();
    let sizes: Vec<u64> = batch
        .iter()
        .map(|a| a.payload.text().len() as u64)
        .collect();
    log.append(s, batch).await.unwrap();

    // The page is sized from the stored payload lengths: each entry costs its payload's bytes
    // plus the overhead, and the page is the prefix within both bounds, at least one entry.
    let each = sizes[0] + ENTRY_OVERHEAD_BYTES;
    let fit = |range, count, bytes| log.fit_page(s, range, PageLimit { count, bytes });
    let fits = |take, more| PageFit {
        take,
        more,
        compacted_through: Seq::ZERO,
    };
    let all = Range::After(Seq::ZERO);
    assert_eq!(
        fit(all, 100, 3 * each).await.unwrap(),
        fits(3, true),
        "exactly three fit"
    );
    assert_eq!(
        fit(all, 100, 3 * each - 1).await.unwrap(),
        fits(2, true),
        "a byte short"
    );
    assert_eq!(fit(all, 100, 1).await.unwrap(), fits(1, true), "always one");
    assert_eq!(
        fit(all, 15, u64::MAX).await.unwrap(),
        fits(15, false),
        "the whole log"
    );
    assert_eq!(
        fit(all, 14, u64::MAX).await.unwrap(),
        fits(14, true),
        "the count"
    );
    assert_eq!(
        fit(Range::After(Seq(15)), 10, 1 << 20).await.unwrap(),
        fits(0, false),
        "past the end"
    );
    let newest = Range::Before(Seq(16));
    let small: u64 = sizes[13..].iter().map(|b| b + ENTRY_OVERHEAD_BYTES).sum();
    assert_eq!(
        fit(newest, 100, small).await.unwrap(),
        fits(2, true),
        "before walks back from the newest"
    );

    let limit = |count, bytes| PageLimit { count, bytes };
    let seqs = |p: &moor_server::store::Page| p.entries.iter().map(|e| e.seq.0).collect::<Vec<_>>();
    let page = read_page(&**log, s, Range::After(Seq::ZERO), limit(100, 3 * each))
        .await
        .unwrap();
    assert_eq!(seqs(&page), [1, 2, 3], "stops at the byte bound");
    assert!(page.more);
    let page = read_page(&**log, s, Range::After(Seq(3)), limit(2, 1 << 30))
        .await
        .unwrap();
    assert_eq!(seqs(&page), [4, 5], "stops at the count");
    assert!(page.more);
    let page = read_page(&**log, s, Range::After(Seq(10)), limit(100, 1000))
        .await
        .unwrap();
    assert_eq!(
        seqs(&page),
        [11],
        "one entry over the bound is still a page"
    );
    assert!(page.more);
    let page = read_page(&**log, s, Range::After(Seq(11)), limit(100, 1 << 20))
        .await
        .unwrap();
    assert_eq!(seqs(&page), [12, 13, 14, 15]);
    assert!(!page.more, "the end of the log");
    let page = read_page(&**log, s, Range::Before(Seq(12)), limit(100, 1000))
        .await
        .unwrap();
    assert_eq!(
        seqs(&page),
        [11],
        "before: the newest entry, even over the bound"
    );
    let page = read_page(&**log, s, Range::Before(Seq(11)), limit(100, 2 * each))
        .await
        .unwrap();
    assert_eq!(
        seqs(&page),
        [9, 10],
        "before: the newest that fit, ascending"
    );
    assert!(page.more);
}

pub async fn a_batch_larger_than_one_insert_statement_is_stored_whole_and_in_order(db: Db) {
    let store = db.open("a").await;
    let log = &store.log;
    let s = log.open_session("wide", None).await.unwrap().id;
    // More rows than one multi-row insert holds.
    let n = 2_500u64;
    let batch: Vec<Append> = (1..=n)
        .map(|i| Append {
            ts: i as i64,
            kind: kinds::AGENT_OUTPUT.into(),
            author: kinds::AUTHOR_BRIDGE.into(),
            payload:
                json!({"text": format!("line {i} \"quoted\" \\ {}", "é".repeat(i as usize % 7))})
                    .into(),
            key: IdemKey::None,
        })
        .collect();
    let want: Vec<_> = batch.iter().map(|a| a.payload.value().unwrap()).collect();
    log.append(s, batch).await.unwrap();
    let all = PageLimit {
        count: 10_000,
        bytes: u64::MAX,
    };
    let page = read_page(&**log, s, Range::After(Seq::ZERO), all)
        .await
        .unwrap();
    let seqs: Vec<u64> = page.entries.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "every entry, at its seq");
    let got: Vec<_> = page.entries.into_iter().map(|e| e.payload).collect();
    assert!(got == want, "every payload as given");
    assert_eq!(log.find_session("wide").await.unwrap().head_seq, Seq(n));
}

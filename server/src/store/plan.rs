//! Dialect-independent bookkeeping for one append transaction: producer marks as they advance
//! within the batch, and idempotency keys already claimed earlier in the same batch (which the
//! database cannot see yet because they are not inserted).

use std::collections::HashMap;

use moor_protocol::{ProducerId, Seq};

use super::IdemKey;

/// What to do with one producer entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// `mark + 1`: store it.
    Next,
    /// At or below the mark: compare with what is stored.
    Replay,
    /// Above `mark + 1`, or after an earlier gap of the same producer in this batch.
    Gap {
        /// The seq that would have been next.
        expected: u64,
    },
}

#[derive(Debug, Default)]
pub(crate) struct Plan {
    marks: HashMap<ProducerId, Mark>,
    client_msgs: HashMap<String, Seq>,
    receipts: HashMap<(String, Seq), Seq>,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    stored: u64,
    current: u64,
    gapped: bool,
}

impl Plan {
    /// The producer's mark as of this point in the batch, if already loaded.
    pub(crate) fn mark(&self, producer: ProducerId) -> Option<u64> {
        self.marks.get(&producer).map(|m| m.current)
    }

    /// Records the stored mark loaded from the database.
    pub(crate) fn set_mark(&mut self, producer: ProducerId, stored: u64) {
        self.marks.insert(
            producer,
            Mark {
                stored,
                current: stored,
                gapped: false,
            },
        );
    }

    /// Classifies a producer seq against the mark; once a producer gaps, the rest of its
    /// entries in the batch are refused too (they would leave a hole).
    pub(crate) fn check_producer(&mut self, producer: ProducerId, seq: u64, mark: u64) -> Check {
        let m = self.marks.entry(producer).or_insert(Mark {
            stored: mark,
            current: mark,
            gapped: false,
        });
        if m.gapped {
            return Check::Gap {
                expected: m.current + 1,
            };
        }
        if seq <= m.current {
            Check::Replay
        } else if seq == m.current + 1 {
            Check::Next
        } else {
            m.gapped = true;
            Check::Gap {
                expected: m.current + 1,
            }
        }
    }

    /// Refuses the rest of `producer`'s entries in this batch (after a content mismatch: what
    /// follows a diverging entry must not be stored either).
    pub(crate) fn poison(&mut self, producer: ProducerId) {
        if let Some(m) = self.marks.get_mut(&producer) {
            m.gapped = true;
        }
    }

    pub(crate) fn seen_client_msg(&self, id: &str) -> Option<Seq> {
        self.client_msgs.get(id).copied()
    }

    pub(crate) fn seen_receipt(&self, kind: &str, input: Seq) -> Option<Seq> {
        self.receipts.get(&(kind.to_owned(), input)).copied()
    }

    /// Notes that an entry with `key` is stored at `seq` in this batch.
    pub(crate) fn record(&mut self, key: &IdemKey, kind: &str, seq: Seq) {
        match key {
            IdemKey::Producer {
                producer,
                seq: pseq,
            } => {
                if let Some(m) = self.marks.get_mut(producer) {
                    m.current = *pseq;
                }
            }
            IdemKey::ClientMsg(id) => {
                self.client_msgs.insert(id.clone(), seq);
            }
            IdemKey::Receipt(input) => {
                self.receipts.insert((kind.to_owned(), *input), seq);
            }
            IdemKey::End { .. } | IdemKey::None => {}
        }
    }

    /// Producers whose mark moved in this batch, with their new mark.
    pub(crate) fn advanced_marks(&self) -> impl Iterator<Item = (ProducerId, u64)> + '_ {
        self.marks
            .iter()
            .filter(|(_, m)| m.current > m.stored)
            .map(|(p, m)| (*p, m.current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_seqs_must_follow_the_mark() {
        let p = ProducerId::new();
        let mut plan = Plan::default();
        plan.set_mark(p, 5);
        assert_eq!(plan.check_producer(p, 4, 5), Check::Replay);
        assert_eq!(plan.check_producer(p, 6, 5), Check::Next);
        plan.record(
            &IdemKey::Producer {
                producer: p,
                seq: 6,
            },
            "agent.output",
            Seq(1),
        );
        assert_eq!(plan.check_producer(p, 6, 5), Check::Replay);
        assert_eq!(plan.check_producer(p, 9, 5), Check::Gap { expected: 7 });
        // After a gap nothing else of this producer is taken, not even the expected seq.
        assert_eq!(plan.check_producer(p, 7, 5), Check::Gap { expected: 7 });
        assert_eq!(plan.advanced_marks().collect::<Vec<_>>(), vec![(p, 6)]);
    }
}

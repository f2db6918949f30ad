//! Permission requests: a person's [`Decision`], remote or local, answers one, nothing answers
//! it by default, and an agent that goes away withdraws what it asked. The decision and its
//! entries are the JSON-RPC adapters' too.

use moor_protocol::payload::{
    AgentPermissionResolved, InputPermission, PermissionDecision, Resolution,
};
use moor_protocol::Seq;

use super::process::Process;
use super::{control, Run};
use crate::adapter::AdapterError;
use crate::spool::Draft;

impl Run {
    pub(super) async fn permission_input(
        &mut self,
        process: &mut Process,
        input: InputPermission,
        by: &str,
        input_seq: Option<u64>,
    ) -> Result<(), String> {
        let decision = Decision::remote(input, self.pending.keys(), by, input_seq)?;
        self.decide(process, &decision).await
    }

    /// Answer a pending permission request and record who decided.
    pub(super) async fn decide(
        &mut self,
        process: &mut Process,
        decision: &Decision,
    ) -> Result<(), String> {
        let request_id = decision.request_id.as_str();
        let Some(request) = self.pending.get(request_id) else {
            return Err(not_pending(request_id));
        };
        let by = decision.by.as_str();
        let who = by.strip_prefix("user:").unwrap_or(by);
        let answer = match decision.allow {
            true => control::allow(request_id, &request.input),
            false => {
                let default = format!("{who} denied this through moor");
                control::deny(request_id, decision.message.as_deref().unwrap_or(&default))
            }
        };
        process.send(&answer).await?;
        self.pending.remove(request_id);
        self.watchdog.permission_done(Self::now());
        self.record(vec![decision.entry()])
            .await
            .map_err(not_recorded)
    }

    pub(super) async fn cancel_pending(&mut self, why: &str) -> Result<(), AdapterError> {
        let drafts = withdrawn(std::mem::take(&mut self.pending).into_keys(), why);
        self.record(drafts).await
    }
}

/// A person's decision on a pending permission request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    /// The log's id of the request.
    pub(crate) request_id: String,
    /// Allowed, else denied.
    pub(crate) allow: bool,
    /// What the person said with it, for the agent.
    pub(crate) message: Option<String>,
    /// Who decided (`user:…`, or `local` at the terminal).
    pub(crate) by: String,
    /// The seq of the remote input that carried it.
    pub(crate) input_seq: Option<u64>,
}

impl Decision {
    /// A remote `input.permission` from `by` (input `input_seq`): for the request it names,
    /// else for the only one `pending`.
    pub(crate) fn remote<'a>(
        input: InputPermission,
        mut pending: impl Iterator<Item = &'a String>,
        by: &str,
        input_seq: Option<u64>,
    ) -> Result<Self, String> {
        let request_id = match (input.request_id, pending.next(), pending.next()) {
            (Some(id), _, _) => id,
            (None, Some(only), None) => only.clone(),
            _ => return Err("input.permission needs \"request_id\"".to_owned()),
        };
        Ok(Self {
            request_id,
            allow: input.decision == PermissionDecision::Allow,
            message: input.message,
            by: by.to_owned(),
            input_seq,
        })
    }

    /// A yes or no typed at the terminal for `request_id`.
    pub(crate) fn local(request_id: String, allow: bool) -> Self {
        Self {
            request_id,
            allow,
            message: None,
            by: "local".to_owned(),
            input_seq: None,
        }
    }

    /// Its `agent.permission.resolved` entry.
    pub(crate) fn entry(&self) -> Draft {
        let resolution = if self.allow {
            Resolution::Allow
        } else {
            Resolution::Deny
        };
        resolved(
            &self.request_id,
            resolution,
            Some(&self.by),
            self.input_seq,
            self.message.as_deref(),
        )
    }
}

/// Why a decision for `request_id` cannot be applied: nothing of that id waits.
pub(crate) fn not_pending(request_id: &str) -> String {
    format!(
        "no pending permission request {request_id} (already decided, withdrawn, or the agent restarted)"
    )
}

/// Why a decision answered to the agent is missing from the log.
pub(crate) fn not_recorded(e: AdapterError) -> String {
    format!("decided, but could not record it: {e}")
}

/// `agent.permission.resolved` "cancelled" for each of `ids`, saying `why`.
pub(crate) fn withdrawn(ids: impl IntoIterator<Item = String>, why: &str) -> Vec<Draft> {
    ids.into_iter()
        .map(|id| resolved(&id, Resolution::Cancelled, None, None, Some(why)))
        .collect()
}

/// An `agent.permission.resolved` entry.
pub(crate) fn resolved(
    request_id: &str,
    decision: Resolution,
    by: Option<&str>,
    input_seq: Option<u64>,
    reason: Option<&str>,
) -> Draft {
    Draft::new(AgentPermissionResolved {
        request_id: request_id.to_owned(),
        decision,
        by: by.map(str::to_owned),
        input_seq: input_seq.map(Seq),
        reason: reason.map(str::to_owned),
    })
}

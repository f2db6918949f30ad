//! Permission requests: a remote or local decision answers one, nothing answers it by default,
//! and an agent that goes away withdraws what it asked.

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
        let request_id = match input.request_id {
            Some(id) => id,
            None if self.pending.len() == 1 => {
                self.pending.keys().next().cloned().unwrap_or_default()
            }
            None => return Err("input.permission needs \"request_id\"".into()),
        };
        let allow = input.decision == PermissionDecision::Allow;
        let message = input.message.as_deref();
        self.decide(process, &request_id, allow, message, by, input_seq)
            .await
    }

    /// Answer a pending permission request and record who decided.
    pub(super) async fn decide(
        &mut self,
        process: &mut Process,
        request_id: &str,
        allow: bool,
        message: Option<&str>,
        by: &str,
        input_seq: Option<u64>,
    ) -> Result<(), String> {
        let Some(request) = self.pending.get(request_id) else {
            return Err(format!(
                "no pending permission request {request_id} (already decided, withdrawn, or the agent restarted)"
            ));
        };
        let who = by.strip_prefix("user:").unwrap_or(by);
        let answer = match allow {
            true => control::allow(request_id, &request.input),
            false => {
                let default = format!("{who} denied this through moor");
                control::deny(request_id, message.unwrap_or(&default))
            }
        };
        process.send(&answer).await?;
        self.pending.remove(request_id);
        self.watchdog.permission_done(Self::now());
        let decision = if allow {
            Resolution::Allow
        } else {
            Resolution::Deny
        };
        let entry = resolved(request_id, decision, Some(by), input_seq, message);
        self.record(vec![entry])
            .await
            .map_err(|e| format!("decided, but could not record it: {e}"))
    }

    pub(super) async fn cancel_pending(&mut self, why: &str) -> Result<(), AdapterError> {
        let drafts: Vec<Draft> = std::mem::take(&mut self.pending)
            .into_keys()
            .map(|id| resolved(&id, Resolution::Cancelled, None, None, Some(why)))
            .collect();
        self.record(drafts).await
    }
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

//! `moor recover` and `moor resume`: read the server's recovery brief for a session, settle what
//! only this machine can know (did an interrupted write land? look at the file now), print it,
//! and restart Claude Code on its own agent session with the brief as its first prompt.
//!
//! The resume prompt goes in as an ordinary remote input, so it is accounted like any other
//! (queued, delivered, applied) and every viewer sees it.

use std::path::Path;
use std::time::Duration;

use moor_protocol::api::{InputAccepted, InputRequest, SessionInfo, SessionStatus};
use moor_protocol::payload::InputText;
use moor_protocol::recovery::{mutation_advice, resume_prompt, RecoveryBrief, RetryPolicy};
use moor_protocol::state::{Phase, ToolClass};
use moor_protocol::SessionId;
use serde::de::DeserializeOwned;

use crate::adapter::claude::intent::Intent;
use crate::adapter::Continuation;
use crate::config::{Token, BRIDGE_PATH};
use crate::error::BridgeError;

/// A small client for moord's HTTP API.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// Maps a `moord` URL (`http(s)://`, `ws(s)://`, with or without the bridge path) to its HTTP
/// base URL.
pub fn http_base(server: &str) -> Result<String, BridgeError> {
    let ws = crate::config::bridge_ws_url(server)?;
    let (scheme, rest) = ws.split_once("://").unwrap_or(("ws", ws.as_str()));
    let scheme = if scheme == "wss" { "https" } else { "http" };
    Ok(format!("{scheme}://{}", rest.trim_end_matches(BRIDGE_PATH)))
}

impl Api {
    /// A client for `server` with `token`.
    pub fn new(server: &str, token: &str) -> Result<Self, BridgeError> {
        let http = crate::tls::http_client()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| BridgeError::Config(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            base: http_base(server)?,
            token: token.to_owned(),
            http,
        })
    }

    async fn send_get(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        Ok(self.http.get(url).bearer_auth(&self.token).send().await?)
    }

    /// The body of a successful answer, or an error naming the path, status and body.
    async fn json<T: DeserializeOwned>(path: &str, resp: reqwest::Response) -> anyhow::Result<T> {
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            anyhow::bail!("GET {path}: {status}: {body}");
        }
        Ok(resp.json().await?)
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Self::json(path, self.send_get(path).await?).await
    }

    /// The session with this id or name, with its state.
    pub async fn session(&self, key: &str) -> anyhow::Result<SessionInfo> {
        self.get(&format!("/api/v1/sessions/{key}")).await
    }

    /// The session with this id or name, or `None` when the server has no such session.
    pub async fn find_session(&self, key: &str) -> anyhow::Result<Option<SessionInfo>> {
        let path = format!("/api/v1/sessions/{key}");
        let resp = self.send_get(&path).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(Self::json(&path, resp).await?))
    }

    /// `GET /sessions/{key}/export?format=…`, checked for success; the body is the caller's to
    /// stream. No overall timeout but `max`: an export of a long log takes as long as it takes.
    pub async fn export(
        &self,
        key: &str,
        format: &str,
        max: Duration,
    ) -> anyhow::Result<reqwest::Response> {
        let path = format!("/api/v1/sessions/{key}/export?format={format}");
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(max)
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            anyhow::bail!("GET {path}: {status}: {body}");
        }
        Ok(resp)
    }

    /// The server's recovery brief.
    pub async fn brief(&self, key: &str) -> anyhow::Result<RecoveryBrief> {
        self.get(&format!("/api/v1/sessions/{key}/recovery")).await
    }

    /// Registers this machine (`moor host`): its id and the name of its log session.
    pub async fn register_machine(
        &self,
        req: &moor_protocol::host::MachineRegistration,
    ) -> anyhow::Result<moor_protocol::host::MachineRegistered> {
        self.post("/api/v1/machines", Some(req)).await
    }

    /// The credential machine `id` runs with (`moor host`), minted for it by `moord` with
    /// this API's credential: the owner's, or the machine's current one to renew it.
    pub async fn host_credential(
        &self,
        id: &str,
    ) -> anyhow::Result<moor_protocol::host::HostCredential> {
        self.post::<(), _>(&format!("/api/v1/machines/{id}/credential"), None)
            .await
    }

    /// POSTs `body` (if any) as JSON to `path` and decodes the answer; an error status is
    /// [`Refused`], with what the server said.
    async fn post<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<T> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(Refused {
                what: format!("POST {path}"),
                status: status.as_u16(),
                body,
            }
            .into());
        }
        Ok(resp.json().await?)
    }

    /// Posts a text input (idempotent by `client_msg_id`).
    pub async fn post_text(
        &self,
        key: &str,
        client_msg_id: &str,
        text: &str,
    ) -> anyhow::Result<InputAccepted> {
        let text = InputText {
            text: text.to_owned(),
        };
        let req = InputRequest::typed(client_msg_id, text);
        let resp = self
            .http
            .post(format!("{}/api/v1/sessions/{key}/inputs", self.base))
            .bearer_auth(&self.token)
            .json(&req)
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            anyhow::bail!(
                "posting the resume prompt: {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        Ok(resp.json().await?)
    }
}

/// An HTTP answer that was not a success.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {status}: {body}")]
pub struct Refused {
    /// The request.
    pub what: String,
    /// Its status.
    pub status: u16,
    /// The answer's body.
    pub body: String,
}

/// Runs `call` with an API client for `server`, once more with a renewed token after a failure
/// when the token can be renewed (the access token of `moor login` may have expired).
pub async fn with_api<T, F, Fut>(server: &str, token: &Token, call: F) -> anyhow::Result<T>
where
    F: Fn(Api) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    match call(Api::new(server, &token.expose())?).await {
        Err(_) if token.refresh().await => call(Api::new(server, &token.expose())?).await,
        result => result,
    }
}

/// Re-checks, against the files in `cwd` now, every interrupted file mutation whose intent was
/// recorded, and rewrites the brief's advice and resume prompt accordingly.
pub fn check_locally(brief: &mut RecoveryBrief, cwd: &Path, policy: RetryPolicy) {
    for t in brief
        .uncertain
        .iter_mut()
        .filter(|t| t.class == ToolClass::FileMutation)
    {
        let Some(target) = &t.target else { continue };
        if t.intent_before.is_none() && !t.input.is_object() {
            continue;
        }
        let intent = Intent {
            path: cwd.join(target),
            before: t.intent_before.clone(),
            tool: t.tool.clone(),
            input: t.input.clone(),
        };
        let (_, verdict) = intent.check();
        let (note, advice, auto_retry) = mutation_advice(Some(verdict.name()), policy);
        t.note = format!("{note} (checked on this machine)");
        t.advice = advice;
        t.auto_retry = auto_retry;
    }
    brief.resume_prompt = resume_prompt(brief);
}

/// What `moor resume` will do.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePlan {
    /// Session the resumed agent feeds (the same one, or a new one if it had ended).
    pub session: String,
    /// Working directory to run in.
    pub cwd: String,
    /// The command: `claude --resume <agent session id>`.
    pub command: Vec<String>,
    /// The first prompt.
    pub prompt: String,
    /// Idempotency key of that prompt.
    pub prompt_id: String,
    /// The ended session a new session continues (`None` when it resumes on the same one).
    pub continues: Option<SessionId>,
}

/// Plans a resume of `key`: same directory, same agent session, the brief as first prompt.
pub async fn plan_resume(
    api: &Api,
    key: &str,
    policy: RetryPolicy,
) -> anyhow::Result<(ResumePlan, RecoveryBrief)> {
    let info = api.session(key).await?;
    let agent = info.agent.clone().unwrap_or_default();
    let agent_session = info
        .state
        .as_ref()
        .and_then(|s| s.agent.agent_session_id.clone())
        .ok_or_else(|| anyhow::anyhow!("session {key} has no Claude Code session id to resume (was it run with --mode claude?)"))?;
    let cwd = info
        .state
        .as_ref()
        .and_then(|s| s.agent.cwd.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or(agent.cwd);
    // The same Claude Code binary the session ran, if it was one.
    let program = agent
        .command
        .first()
        .filter(|c| Path::new(c).file_name().is_some_and(|n| n == "claude"))
        .cloned()
        .unwrap_or_else(|| "claude".to_owned());
    let mut brief = api.brief(key).await?;
    check_locally(&mut brief, Path::new(&cwd), policy);
    let (session, continues) = match info.status {
        SessionStatus::Live => (info.name.clone(), None),
        // An ended log is complete; the resumed run gets a session of its own, linked to it.
        SessionStatus::Ended => (
            format!("{}-resumed-{}", info.name, info.head_seq),
            Some(info.id),
        ),
    };
    let plan = ResumePlan {
        prompt_id: format!("resume-{}-{}", info.id, info.head_seq),
        session,
        cwd,
        command: vec![program, "--resume".into(), agent_session],
        prompt: brief.resume_prompt.clone(),
        continues,
    };
    Ok((plan, brief))
}

/// What `moor run --session KEY` continues: for a live session whose last agent was Claude Code
/// with a known conversation, that conversation, and the brief (checked against the files in
/// `cwd`) as the first prompt when work was cut off. `None` for a new session, an ended one, or
/// an agent that cannot be resumed.
pub async fn continuation(
    api: &Api,
    key: &str,
    cwd: &Path,
) -> anyhow::Result<Option<Continuation>> {
    let Some(info) = api.find_session(key).await? else {
        return Ok(None);
    };
    if info.status != SessionStatus::Live {
        return Ok(None);
    }
    agent_continuation(api, key, info, cwd).await
}

/// The conversation of session `info` (`key`) when its last agent was a structured one with a
/// known conversation, with the brief (checked against `cwd`) as the first prompt when work
/// was cut off.
async fn agent_continuation(
    api: &Api,
    key: &str,
    info: SessionInfo,
    cwd: &Path,
) -> anyhow::Result<Option<Continuation>> {
    let Some(state) = info.state else {
        return Ok(None);
    };
    let (Some("claude" | "acp" | "codex" | "gemini-headless" | "codex-exec"), Some(id)) =
        (state.agent.adapter.as_deref(), state.agent.agent_session_id)
    else {
        return Ok(None);
    };
    let mut brief = api.brief(key).await?;
    check_locally(&mut brief, cwd, RetryPolicy::default());
    let cut_off = brief.phase == Phase::Interrupted
        || !brief.uncertain.is_empty()
        || !brief.expired_permissions.is_empty()
        || brief.partial_answer.is_some();
    Ok(Some(Continuation {
        agent_session_id: id,
        prompt: cut_off.then_some(brief.resume_prompt),
    }))
}

/// What a new session continuing the ended session `key` takes from it: its id (the link) and,
/// when its last agent was a structured one with a known conversation, that conversation (the
/// brief as first prompt when work was cut off). An error when `key` is not found or has not
/// ended.
pub async fn continuation_of_ended(
    api: &Api,
    key: &str,
    cwd: &Path,
) -> anyhow::Result<(SessionId, Option<Continuation>)> {
    let info = api
        .find_session(key)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no session {key}"))?;
    anyhow::ensure!(
        info.status == SessionStatus::Ended,
        "session {key} has not ended: run it again with --session {key} instead"
    );
    let id = info.id;
    Ok((id, agent_continuation(api, key, info, cwd).await?))
}

/// Posts the resume prompt once the session exists on the server (the bridge creates it at its
/// first connection). Bounded: gives up after `patience`.
pub async fn post_prompt_when_ready(
    api: &Api,
    plan: &ResumePlan,
    patience: Duration,
) -> anyhow::Result<InputAccepted> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match api
            .post_text(&plan.session, &plan.prompt_id, &plan.prompt)
            .await
        {
            Ok(accepted) => return Ok(accepted),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "session not ready for the resume prompt yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_base_follows_the_server_url() {
        assert_eq!(http_base("http://h:7070").unwrap(), "http://h:7070");
        assert_eq!(http_base("wss://h/api/v1/bridge").unwrap(), "https://h");
        assert_eq!(http_base("h:1").unwrap(), "http://h:1");
    }

    #[test]
    fn a_local_check_settles_an_interrupted_write() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "new").unwrap();
        let mut brief: RecoveryBrief = serde_json::from_value(serde_json::json!({
            "phase": "interrupted", "goal": ["g"], "completed": [], "partial_answer": null, "todos": null,
            "files_changed": [], "pending_permissions": [], "agent_session_id": "s", "resume_prompt": "",
            "uncertain": [{"id": "t", "tool": "Write", "target": "a.txt", "class": "file_mutation", "note": "", "advice": "",
                "auto_retry": false, "input": {"file_path": "a.txt", "content": "new"}, "intent_before": null}]
        }))
        .unwrap();
        check_locally(&mut brief, dir.path(), RetryPolicy::default());
        assert!(
            brief.uncertain[0].advice.starts_with("applied"),
            "{:?}",
            brief.uncertain[0]
        );
        assert!(brief.resume_prompt.contains("a.txt"));
    }
}

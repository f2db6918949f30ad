//! What the adapters share about the agent process: how it is started (own process group, no
//! bridge credentials) and how its exit is awaited while signals are forwarded and the output
//! writer is watched, and its `agent.exit` spooled. It knows nothing of what the agent prints.

use std::io;
use std::process::{ExitStatus, Stdio};

use moor_protocol::payload::{self, StoppedProcess};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{signal_agent, AdapterDone, AdapterError, AgentExit, AgentSignal, AgentSpec};
use crate::inputs::Inputs;
use crate::spool::{Draft, Spool, SpoolError};

/// Why `spec`'s agent could not be started.
pub(super) fn spawn_error(spec: &AgentSpec, source: io::Error) -> AdapterError {
    AdapterError::Spawn {
        command: spec.command.join(" "),
        source,
    }
}

/// `argv` split into the program and its arguments.
pub(super) fn program_and_args<'a>(
    spec: &AgentSpec,
    argv: &'a [String],
) -> Result<(&'a String, &'a [String]), AdapterError> {
    argv.split_first()
        .ok_or_else(|| spawn_error(spec, io::Error::other("no command given")))
}

/// The pid of a child just spawned; a child without one has already been reaped.
pub(super) fn child_pid(spec: &AgentSpec, child: &Child) -> Result<u32, AdapterError> {
    child
        .id()
        .ok_or_else(|| spawn_error(spec, io::Error::other("exited at once")))
}

/// Spawn `argv` in `spec.cwd` with piped stdio, in its own process group, so a terminal's
/// Ctrl-C reaches only `moor`, which forwards it once (a doubled SIGINT means "quit now" to many
/// agents). `kill_on_drop` kills it if the [`Child`] is dropped before it exits.
pub(super) fn spawn_piped(
    spec: &AgentSpec,
    argv: &[String],
    kill_on_drop: bool,
) -> Result<(Child, u32), AdapterError> {
    let (program, args) = program_and_args(spec, argv)?;
    let child = Command::new(program)
        .args(args)
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The agent has no business with the bridge's credentials.
        .env_remove("MOOR_TOKEN")
        .process_group(0)
        .kill_on_drop(kill_on_drop)
        .spawn()
        .map_err(|e| spawn_error(spec, e))?;
    let pid = child_pid(spec, &child)?;
    Ok((child, pid))
}

/// How the wait for the agent's exit ended.
#[derive(Debug)]
pub(super) struct Exited {
    /// The agent's exit status.
    pub(super) status: ExitStatus,
    /// The output writer already finished, successfully or not.
    pub(super) writer_done: bool,
    /// Why output could no longer be spooled; the agent was then told to terminate.
    pub(super) spool_failure: Option<SpoolError>,
}

/// Wait for the agent to exit, passing `signals` on to it. If the output `writer` fails first,
/// the agent is terminated: an agent running unrecorded is worse than a stopped one. `output`
/// names what the writer spools, for the log.
pub(super) async fn wait_for_exit<T>(
    child: &mut Child,
    pid: u32,
    signals: &mut mpsc::UnboundedReceiver<AgentSignal>,
    writer: &mut JoinHandle<Result<T, SpoolError>>,
    output: &str,
) -> io::Result<Exited> {
    let mut spool_failure = None;
    let mut writer_done = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            Some(signal) = signals.recv() => {
                if let Err(e) = signal_agent(pid, signal) {
                    tracing::warn!(error = %e, ?signal, "could not signal the agent");
                }
            }
            result = &mut *writer, if !writer_done => {
                writer_done = true;
                let err = match result {
                    // The output ended before the exit status came in: all of it is spooled.
                    Ok(Ok(_)) => continue,
                    Ok(Err(e)) => e,
                    Err(e) => writer_failed(e),
                };
                tracing::error!(error = %err, "cannot spool {output}; stopping the agent");
                let _ = signal_agent(pid, AgentSignal::Terminate);
                spool_failure = Some(err);
            }
        }
    };
    Ok(Exited {
        status,
        writer_done,
        spool_failure,
    })
}

/// The output writer's own result once the agent has exited, unless [`wait_for_exit`] already
/// saw it finish.
pub(super) async fn join_writer<T>(
    writer: JoinHandle<Result<T, SpoolError>>,
    exited: &Exited,
) -> Result<(), SpoolError> {
    if !exited.writer_done {
        writer.await.map_err(writer_failed)??;
    }
    Ok(())
}

/// The agent exited and all it wrote is spooled: `agent.exit` (with the processes it left
/// running, `stopped` since) is spooled, and the input `feeder` hands back the input queue.
pub(super) async fn spool_exit(
    spool: &Spool,
    exited: &Exited,
    stopped: Vec<StoppedProcess>,
    feeder: JoinHandle<Inputs>,
) -> Result<AdapterDone, AdapterError> {
    let exit = AgentExit::from_status(exited.status);
    let payload = payload::AgentExit {
        stopped_processes: stopped,
        ..exit.payload()
    };
    spool.append(vec![Draft::new(payload)]).await?;
    let inputs = feeder
        .await
        .map_err(|e| io::Error::other(format!("input task failed: {e}")))?;
    Ok(AdapterDone { exit, inputs })
}

fn writer_failed(e: tokio::task::JoinError) -> SpoolError {
    SpoolError::Encode(format!("output writer failed: {e}"))
}

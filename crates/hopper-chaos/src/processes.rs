//! The child processes of a chaos run (the server and the workers): started, SIGKILLed,
//! started again, and watched for exits nobody asked for.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};

use anyhow::Context;
use tokio::process::{Child, Command};

/// One process the run keeps alive.
#[derive(Debug)]
pub struct Managed {
    /// Its name in the logs and the report.
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    /// Times started.
    pub starts: u32,
}

impl Managed {
    /// A process of `program args`, its stderr appended to `log`.
    pub fn new(name: &str, program: PathBuf, args: Vec<String>, log: PathBuf) -> Self {
        Managed {
            name: name.to_owned(),
            program,
            args,
            log,
            child: None,
            starts: 0,
        }
    }

    /// Starts it (again).
    pub fn start(&mut self) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .env("HOPPER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// SIGKILLs it and reaps it.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Err(e) = child.kill().await
        {
            tracing::warn!("killing {}: {e}", self.name);
        }
    }

    /// The exit status if it exited by itself since it was started.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// Whether it is not running (never started, killed, or exited).
    pub fn is_down(&self) -> bool {
        self.child.is_none()
    }
}

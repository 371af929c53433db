//! `hopper nodes`, a page at a time: `--limit` (default 20, as `hopper jobs list`) and
//! `--before` (the cursor a page printed), the next page's command printed after the table
//! and the cursor in `--json`; on the database and through `hopper serve`.

use std::process::{Command, Stdio};

use hopper::testing::TestDatabase;
use serde_json::Value;

use crate::cli::{Run, hopper, serve};

/// Runs `hopper args…` on the database or server at `url`.
fn at(url: &str, args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("HOPPER_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("the hopper binary runs");
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The names of a `--json` page, and its `next_before`.
fn names(page: &Value) -> (Vec<String>, Option<String>) {
    let names = page["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes: {page}"))
        .iter()
        .map(|n| n["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    (names, page["next_before"].as_str().map(str::to_owned))
}

/// Every node's name, walking `--json` pages of `limit` with `run`.
fn walk(run: impl Fn(&[&str]) -> Run, limit: &str) -> Vec<String> {
    let mut walked = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut args = vec!["--json", "nodes", "--limit", limit];
        if let Some(cursor) = &before {
            args.extend(["--before", cursor.as_str()]);
        }
        let (page, next) = names(&run(&args).json());
        walked.extend(page);
        match next {
            Some(cursor) => before = Some(cursor),
            None => return walked,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_paged_by_limit_and_before() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let all: Vec<String> = (0..23).map(|i| format!("node-{i:02}")).collect();
    db.register_nodes(all.clone()).await?;

    // 20 by default, and the cursor of the rest.
    let (first, next) = names(&hopper(&db, &["--json", "nodes"]).json());
    assert_eq!(first, all[..20]);
    let next = next.expect("a second page");
    let last = hopper(&db, &["--json", "nodes", "--before", &next]).json();
    assert_eq!(names(&last), (all[20..].to_vec(), None));
    assert_eq!(last["next_before"], Value::Null);

    // In text, the table ends with the command that prints the next page.
    let text = hopper(&db, &["nodes", "--limit", "10"]).ok();
    assert!(
        text.contains("node-09") && !text.contains("node-10"),
        "{text}"
    );
    let more = text.lines().last().unwrap_or_default();
    let command = more
        .strip_prefix("more nodes: hopper ")
        .unwrap_or_else(|| panic!("no next page's command: {text}"));
    let args: Vec<&str> = command.split(' ').collect();
    let second = hopper(&db, &args).ok();
    assert!(
        second.contains("node-10") && second.contains("node-19") && !second.contains("node-09"),
        "{second}"
    );
    let end = hopper(&db, &["nodes", "--limit", "23"]).ok();
    assert!(!end.contains("more nodes"), "{end}");

    assert_eq!(walk(|args| hopper(&db, args), "7"), all);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_paged_through_hopper_serve_as_on_the_database() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    db.register_nodes((0..23).map(|i| format!("node-{i:02}")))
        .await?;
    let dir = crate::common::TempDir::new("nodes")?;
    let (_server, url) = serve(&db, dir.path());

    // The server's node too: the same 24 either way.
    let direct = walk(|args| hopper(&db, args), "1000");
    assert_eq!(direct.len(), 24, "{direct:?}");
    assert_eq!(walk(|args| at(&url, args), "7"), direct);
    let (first, next) = names(&at(&url, &["--json", "nodes"]).json());
    assert_eq!((first, next.is_some()), (direct[..20].to_vec(), true));

    // The server's bounds are list_jobs's: at most 1,000.
    at(&url, &["nodes", "--limit", "1001"]).fails_with("limit must be from 1 to 1000");
    Ok(())
}

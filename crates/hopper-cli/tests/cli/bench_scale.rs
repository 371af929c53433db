//! `hopper bench` W3's cost per job, W5 (`claim-scale`) and W6 (`soak`), run small as
//! child processes against the real database in a schema of their own; their JSON carries
//! the documented figures.

use hopper::testing::TestDatabase;
use serde_json::Value;
use tokio::process::Command;

/// Runs `hopper --json bench ARGS` on the test's schema; returns its JSON lines.
async fn bench(db: &TestDatabase, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "--database-url",
            db.url(),
            "--schema",
            db.schema(),
            "--json",
        ])
        .arg("bench")
        .args(args)
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "{args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout)?;
    stdout
        .lines()
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

fn number(v: &Value, path: &[&str]) -> anyhow::Result<f64> {
    let mut v = v;
    for key in path {
        v = v
            .get(*key)
            .ok_or_else(|| anyhow::anyhow!("{key} missing in {v}"))?;
    }
    v.as_f64()
        .ok_or_else(|| anyhow::anyhow!("{path:?} is not a number: {v}"))
}

#[tokio::test]
async fn the_drain_reports_its_cost_per_job() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    bench(&db, &["--workload", "enqueue", "--jobs", "500"]).await?;
    let lines = bench(&db, &["--workload", "drain", "--concurrency", "8"]).await?;
    let drain = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
    assert_eq!(number(drain, &["jobs"])?, 500.0);
    // Claims and completions commit and write WAL; other sessions can only add to it.
    assert!(number(drain, &["cost", "commits"])? >= 2.0, "{drain}");
    assert!(
        number(drain, &["cost", "wal_bytes_per_job"])? > 0.0,
        "{drain}"
    );
    assert!(number(drain, &["cost", "wal_records"])? > 0.0, "{drain}");
    Ok(())
}

#[tokio::test]
async fn claim_scale_measures_both_backlogs() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let args = [
        "--workload",
        "claim-scale",
        "--jobs",
        "400",
        "--backlog",
        "3000",
    ];
    let lines = bench(&db, &args).await?;
    let w5 = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
    assert_eq!(number(w5, &["small", "backlog"])?, 1000.0);
    assert_eq!(number(w5, &["large", "backlog"])?, 3000.0);
    assert_eq!(number(w5, &["large", "jobs"])?, 400.0);
    let (small, large) = (
        number(w5, &["small", "jobs_per_sec"])?,
        number(w5, &["large", "jobs_per_sec"])?,
    );
    assert!(small > 0.0 && large > 0.0, "{w5}");
    assert!(
        (number(w5, &["ratio"])? - large / small).abs() < 1e-6,
        "{w5}"
    );
    // Nothing of the bench queue is left behind.
    assert_eq!(db.queue_stats("bench").await?.available, 0);
    Ok(())
}

#[tokio::test]
async fn a_short_soak_reports_both_halves() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let args = ["--workload", "soak", "--duration", "3s", "--rate", "200"];
    let lines = bench(&db, &args).await?;
    let w6 = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
    assert_eq!(number(w6, &["rate"])?, 200.0);
    // A paced enqueuer that fell behind in one half catches up in the other, so a half may
    // pass the rate; both together hold to it.
    let mut enqueued = 0.0;
    for half in ["first", "last"] {
        let per_sec = number(w6, &[half, "enqueued_per_sec"])?;
        assert!(per_sec > 0.0 && per_sec <= 400.0, "{half}: {w6}");
        enqueued += per_sec / 2.0;
        assert!(
            number(w6, &[half, "started_per_sec"])? > 0.0,
            "{half}: {w6}"
        );
        assert!(number(w6, &[half, "p50_ms"])? >= 0.0, "{half}: {w6}");
    }
    assert!((100.0..=210.0).contains(&enqueued), "both halves: {w6}");
    assert!(number(w6, &["drift"])?.is_finite(), "{w6}");
    Ok(())
}

#[tokio::test]
async fn a_drain_runs_with_the_prefetch_and_claims_in_flight_it_was_given() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    bench(&db, &["--workload", "enqueue", "--jobs", "2000"]).await?;
    let lines = bench(
        &db,
        &[
            "--workload",
            "drain",
            "--concurrency",
            "8",
            "--prefetch",
            "300",
            "--claims-in-flight",
            "1",
        ],
    )
    .await?;
    let drain = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
    assert_eq!(number(drain, &["jobs"])?, 2000.0);
    // The report states the runtime settings the drain actually ran with.
    assert_eq!(number(drain, &["prefetch"])?, 300.0, "{drain}");
    assert_eq!(number(drain, &["claims_in_flight"])?, 1.0, "{drain}");
    // Without the flags: the default claims in flight, and no prefetch override.
    bench(&db, &["--workload", "enqueue", "--jobs", "100"]).await?;
    let lines = bench(&db, &["--workload", "drain", "--concurrency", "8"]).await?;
    let drain = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
    assert_eq!(number(drain, &["claims_in_flight"])?, 4.0, "{drain}");
    assert!(drain.get("prefetch").is_none(), "{drain}");
    Ok(())
}

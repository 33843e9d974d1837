//! `nenyax integrations`: every provider, hub, telemetry sink, exporter, sandbox backend,
//! learner and judge, ready or what each needs.

use nenyax::integrations::{self, Integration};
use nenyax::Error;

/// Print the list as a table, or as one JSON array with `--json`.
pub fn run(json: bool) -> Result<(), Error> {
    let rows = integrations::list();
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialises")
        );
    }
    outln!("model providers (use: --policy endpoint --provider NAME --model M)")?;
    for r in rows
        .iter()
        .filter(|r| r.kind == "hosted" || r.kind == "local")
    {
        outln!(
            "  {:<11} {:<6} {:<7} {}",
            r.name,
            r.kind,
            status(r),
            r.base_url.as_deref().unwrap_or_default()
        )?;
        if let Some(n) = r.needs.as_deref().filter(|_| !r.ready) {
            outln!("  {:<11} {:<6} {:<7} needs: {n}", "", "", "")?;
        }
    }
    for (title, kind) in [
        (
            "hubs (use: nenyax search HUB [QUERY]; nenyax fetch HUB NAME)",
            "hub",
        ),
        ("telemetry sinks (use: --telemetry NAME,...)", "telemetry"),
        (
            "exporters (use: nenyax export IN.jsonl --to NAME)",
            "exporter",
        ),
        ("sandbox backends (use: nenyax sandboxes)", "sandbox"),
        ("learners (use: nenyax train URI --learner NAME)", "learner"),
        ("judges (use: [judge] type = NAME)", "judge"),
    ] {
        outln!("\n{title}")?;
        for r in rows.iter().filter(|r| r.kind == kind) {
            outln!("  {:<13} {:<6} {}", r.name, status(r), r.title)?;
            if let Some(url) = &r.base_url {
                outln!("  {:<13} {:<6} at: {url}", "", "")?;
            }
            if let Some(n) = &r.needs {
                let label = if r.ready { "uses" } else { "needs" };
                outln!("  {:<13} {:<6} {label}: {n}", "", "")?;
            }
        }
    }
    Ok(())
}

fn status(r: &Integration) -> &'static str {
    if r.ready {
        "ready"
    } else {
        "-"
    }
}

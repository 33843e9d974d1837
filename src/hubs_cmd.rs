//! `nenyax search` and `nenyax fetch`: find environments on a hub and make one loadable.

use nenyax::hubs;
use nenyax::Error;

/// List what `hub` has for `query`: a table, or a JSON array with `--json`.
pub fn search(hub: &str, query: &[String], limit: usize, json: bool) -> Result<(), Error> {
    let found = hubs::search(hub, &query.join(" "), limit)?;
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(&found).expect("serialises")
        );
    }
    if found.is_empty() {
        eprintln!("nothing on {hub} matches {:?}", query.join(" "));
        return Ok(());
    }
    for l in &found {
        outln!("{:<40} {}", l.name, l.uri)?;
        if !l.description.is_empty() {
            let d: String = l.description.chars().take(100).collect();
            outln!("{:<40} {d}", "")?;
        }
    }
    eprintln!(
        "{} from {hub}; make one loadable with: nenyax fetch {hub} NAME",
        found.len()
    );
    Ok(())
}

/// Fetch `name` from `hub` and print the URI to load.
pub fn fetch(hub: &str, name: &str) -> Result<(), Error> {
    let uri = hubs::fetch(hub, name)?;
    outln!("{uri}")
}

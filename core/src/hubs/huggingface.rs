//! The Hugging Face Hub: Spaces tagged `openenv` (the Spaces API `GET /api/spaces`, as
//! `huggingface_hub.list_spaces` calls it), each served at `https://<subdomain>.hf.space`.

use serde_json::{json, Map, Value};

use super::common::{get_json, text, var, Listing};
use crate::error::{Error, Result};

const DEFAULT: &str = "https://huggingface.co";
const FIX: &str = "set HF_ENDPOINT to a reachable Hub (as huggingface_hub reads it)";

/// The Hub in force: `HF_ENDPOINT`, else huggingface.co.
pub fn endpoint() -> String {
    var("HF_ENDPOINT")
        .unwrap_or_else(|| DEFAULT.into())
        .trim_end_matches('/')
        .to_string()
}

/// What the list asks the Hub to include for each Space.
const EXPAND: &[&str] = &["subdomain", "cardData", "likes", "tags", "sdk", "runtime"];

/// Spaces tagged openenv, matching `query`, most liked first.
pub fn search(query: &str, limit: usize) -> Result<Vec<Listing>> {
    let mut q = vec![
        ("filter", "openenv".to_string()),
        ("sort", "likes".to_string()),
        ("direction", "-1".to_string()),
        ("limit", limit.to_string()),
    ];
    if !query.trim().is_empty() {
        q.push(("search", query.trim().to_string()));
    }
    q.extend(EXPAND.iter().map(|e| ("expand", e.to_string())));
    let url = format!("{}/api/spaces", endpoint());
    let reply = get_json(&url, &q, var("HF_TOKEN"), FIX)?;
    let spaces = reply.as_array().ok_or_else(|| Error::Endpoint {
        url: url.clone(),
        message: "the Spaces list is not a JSON array".into(),
    })?;
    Ok(spaces.iter().take(limit).filter_map(listing).collect())
}

/// The URI of the Space `owner/name` after checking that it is an OpenEnv Space.
pub fn fetch(name: &str) -> Result<String> {
    let id = name.trim().trim_start_matches("spaces/");
    if id.split('/').count() != 2 || id.split('/').any(str::is_empty) {
        return Err(Error::Config(format!(
            "{name:?} is not a Space id; give owner/name as `nenyax search huggingface` lists it"
        )));
    }
    let url = format!("{}/api/spaces/{id}", endpoint());
    let q: Vec<(&str, String)> = EXPAND.iter().map(|e| ("expand", e.to_string())).collect();
    let space = get_json(&url, &q, var("HF_TOKEN"), FIX)?;
    if !tags(&space).iter().any(|t| t == "openenv") {
        return Err(Error::Config(format!(
            "the Space {id} is not tagged openenv, so it serves no OpenEnv environment"
        )));
    }
    listing(&space)
        .map(|l| l.uri)
        .ok_or_else(|| Error::Endpoint {
            url,
            message: "the Space's reply has no id".into(),
        })
}

fn tags(space: &Value) -> Vec<String> {
    space
        .get("tags")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The host the Hub gives a Space: its `subdomain`, else the Hub's rule (`owner-name`,
/// lower-cased, `_` and `.` as `-`).
fn subdomain(space: &Value, id: &str) -> String {
    let given = text(space, "subdomain");
    if !given.is_empty() {
        return given;
    }
    id.to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn listing(space: &Value) -> Option<Listing> {
    let id = text(space, "id");
    if id.is_empty() {
        return None;
    }
    let card = space.get("cardData").cloned().unwrap_or(Value::Null);
    let description = [text(&card, "short_description"), text(&card, "title")]
        .into_iter()
        .find(|d| !d.is_empty())
        .unwrap_or_default();
    let mut meta = Map::new();
    for key in ["likes", "sdk"] {
        if let Some(v) = space.get(key) {
            meta.insert(key.into(), v.clone());
        }
    }
    if let Some(stage) = space.pointer("/runtime/stage") {
        meta.insert("stage".into(), stage.clone());
    }
    meta.insert("tags".into(), json!(tags(space)));
    Some(Listing {
        hub: "huggingface".into(),
        uri: format!("openenv:https://{}.hf.space", subdomain(space, &id)),
        name: id,
        description,
        meta,
    })
}
